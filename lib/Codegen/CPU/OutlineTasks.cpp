//===- OutlineTasks.cpp - each task loop a function of its own ------------===//
//
// A kernel on one thread is one function, which the host compiler compiles
// as a whole: the backward's adjoint recurrences (one task loop each) then
// take one clang its whole time (Gated DeltaNet's: 6.4 s), while a threaded
// kernel's OpenMP regions are functions that compile in parallel. Outlining
// each outermost scf.forall of a function that has several gives a
// one-thread kernel the same parts. Each is external and noinline
// (Outlining.h), so that llvm-split can give it a part of its own while the
// chunk parts it calls (la-outline-chunk-parts) stay with it.
//
//===----------------------------------------------------------------------===//

#include "la/Codegen/CPU/Outlining.h"
#include "la/Codegen/CPU/Passes.h"

namespace mlir::la {
#define GEN_PASS_DEF_LAOUTLINETASKSPASS
#include "la/Codegen/CPU/Passes.h.inc"
} // namespace mlir::la

using namespace mlir;
using namespace mlir::la;

namespace {
struct LaOutlineTasksPass
    : la::impl::LaOutlineTasksPassBase<LaOutlineTasksPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
    for (func::FuncOp func : funcs) {
      if (func.isExternal())
        continue;
      SmallVector<scf::ForallOp> tasks;
      func.walk([&](scf::ForallOp loop) {
        if (!loop->getParentOfType<scf::ForallOp>())
          tasks.push_back(loop);
      });
      // One task (a forward) would only gain a call; results would need
      // out-parameters (buffers have none after bufferization).
      if (tasks.size() < 2 || llvm::any_of(tasks, [](scf::ForallOp loop) {
            return loop->getNumResults() != 0;
          }))
        continue;
      for (auto [index, loop] : llvm::enumerate(tasks))
        outlineIntoFunction(loop, func,
                            (func.getSymName() + "_task" + Twine(index)).str(),
                            /*internal=*/false, symbols);
    }
  }
};
} // namespace
