//===- OutlineTasks.cpp - each task loop a function of its own ------------===//
//
// A kernel on one thread is one function, which the host compiler compiles
// as a whole: the backward's adjoint recurrences (one task loop each) then
// take one clang its whole time (Gated DeltaNet's: 6.4 s), while a threaded
// kernel's OpenMP regions are functions that compile in parallel. Outlining
// each outermost scf.forall of a function that has several gives a
// one-thread kernel the same parts. Compiled whole, LLVM inlines them back
// (each is internal with one call). Upstream's outlineSingleBlockRegion
// (SCF utils) outlines a region's body and rebuilds only index constants;
// here the whole loop moves and every constant is rebuilt, so a task's
// vector constants still fold.
//
//===----------------------------------------------------------------------===//

#include "la/Codegen/CPU/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/RegionUtils.h"

namespace mlir::la {
#define GEN_PASS_DEF_LAOUTLINETASKSPASS
#include "la/Codegen/CPU/Passes.h.inc"
} // namespace mlir::la

using namespace mlir;

namespace {
/// Whether `value` is defined by a constant that the outlined function
/// rebuilds instead of taking as an argument (so LLVM still folds it).
bool isRebuiltConstant(Value value) {
  Operation *def = value.getDefiningOp();
  return def && def->getNumOperands() == 0 &&
         def->hasTrait<OpTrait::ConstantLike>();
}

/// Moves `loop` (no results) into a new private function `name` before
/// `func`, taking the values it uses from above as arguments, and calls
/// it in the loop's place.
void outline(scf::ForallOp loop, func::FuncOp func, StringRef name,
             SymbolTable &symbols) {
  SetVector<Value> used;
  getUsedValuesDefinedAbove(loop->getRegions(), used);
  used.insert(loop->getOperands().begin(), loop->getOperands().end());
  SmallVector<Value> arguments, constants;
  for (Value value : used)
    (isRebuiltConstant(value) ? constants : arguments).push_back(value);

  OpBuilder b(func);
  Location loc = loop.getLoc();
  auto type = b.getFunctionType(ValueRange(arguments).getTypes(), {});
  auto task = func::FuncOp::create(b, loc, name, type);
  task.setPrivate();
  // internal linkage: inlined back when the module is compiled whole.
  task->setAttr("llvm.linkage", LLVM::LinkageAttr::get(
                                    b.getContext(), LLVM::Linkage::Internal));
  symbols.insert(task);
  Block *entry = task.addEntryBlock();
  b.setInsertionPointToStart(entry);
  IRMapping mapping;
  for (auto [value, argument] : llvm::zip(arguments, entry->getArguments()))
    mapping.map(value, argument);
  for (Value value : constants)
    b.clone(*value.getDefiningOp(), mapping);
  b.clone(*loop, mapping);
  func::ReturnOp::create(b, loc);

  b.setInsertionPoint(loop);
  func::CallOp::create(b, loc, task, arguments);
  loop.erase();
}

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
        outline(loop, func, (func.getSymName() + "_task" + Twine(index)).str(),
                symbols);
    }
  }
};
} // namespace
