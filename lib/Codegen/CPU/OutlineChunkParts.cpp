//===- OutlineChunkParts.cpp - a chunk's large loop nests as functions ----===//
//
// A chunk loop's body is a sequence of loop nests (the chunk's products,
// its gate scans, the run-time choice between a product's fast and blocked
// forms). Inlined into one function, clang compiles them more slowly than as
// functions of their own (GLA's forward: 0.62 s against 0.47 s); internal,
// each is still specialised to its call's constant sizes, and a call per
// chunk and part costs nothing next to a chunk's work.
//
//===----------------------------------------------------------------------===//

#include "la/Codegen/CPU/Outlining.h"
#include "la/Codegen/CPU/Passes.h"
#include "la/Dialect/La/LaDialect.h"

#include "mlir/Transforms/RegionUtils.h"

namespace mlir::la {
#define GEN_PASS_DEF_LAOUTLINECHUNKPARTSPASS
#include "la/Codegen/CPU/Passes.h.inc"
} // namespace mlir::la

using namespace mlir;
using namespace mlir::la;

/// Whether `op` may move into a function of its own: no stack allocation
/// (it would die with the call), no thread loop (it would nest a parallel
/// region in a task), and no vector among the values it uses from above or
/// returns (large vectors passed through the stack crashed on misaligned
/// stores: Gated DeltaNet's backward at K = 16).
static bool isOutlinable(Operation *op) {
  SetVector<Value> used;
  getUsedValuesDefinedAbove(op->getRegions(), used);
  used.insert(op->getOperands().begin(), op->getOperands().end());
  auto isVector = [](Type type) { return isa<VectorType>(type); };
  if (llvm::any_of(used,
                   [&](Value value) {
                     return isVector(value.getType()) &&
                            !isRebuiltConstant(value);
                   }) ||
      llvm::any_of(op->getResultTypes(), isVector))
    return false;
  WalkResult result = op->walk([](Operation *nested) {
    if (isa<memref::AllocaOp, LLVM::AllocaOp, scf::ForallOp, scf::ParallelOp>(
            nested))
      return WalkResult::interrupt();
    return WalkResult::advance();
  });
  return !result.wasInterrupted();
}

/// The size of `op` in the LLVM IR it becomes, roughly: one per op, a
/// vector op once per 8 elements of its largest vector (vector ops are
/// unrolled into rows of machine vectors).
static int64_t estimateSize(Operation *op) {
  int64_t size = 0;
  op->walk([&](Operation *nested) {
    int64_t elements = 8;
    for (Type type : llvm::concat<const Type>(nested->getOperandTypes(),
                                              nested->getResultTypes()))
      if (auto vector = dyn_cast<VectorType>(type))
        elements = std::max(elements, vector.getNumElements());
    size += elements / 8;
  });
  return size;
}

/// The ops of `block` with regions and a size of at least `minSize` to
/// outline; a large scf.if stays, its branches' large ops are outlined
/// (only the branch taken is called).
static void collectParts(Block &block, int64_t minSize,
                         SmallVectorImpl<Operation *> &parts) {
  for (Operation &op : block) {
    if (op.getNumRegions() == 0 || estimateSize(&op) < minSize)
      continue;
    if (isa<scf::IfOp>(op)) {
      for (Region &region : op.getRegions())
        if (!region.empty())
          collectParts(region.front(), minSize, parts);
      continue;
    }
    if (isOutlinable(&op))
      parts.push_back(&op);
  }
}

namespace {
struct LaOutlineChunkPartsPass
    : la::impl::LaOutlineChunkPartsPassBase<LaOutlineChunkPartsPass> {
  using Base::Base;

  void runOnOperation() override {
    if (minSize < 2) {
      getOperation()->emitError()
          << "la-outline-chunk-parts: 'min-size' must be >= 2, got "
          << static_cast<int64_t>(minSize);
      return signalPassFailure();
    }
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
    for (func::FuncOp func : funcs) {
      SmallVector<Operation *> parts;
      func.walk([&](scf::ForOp loop) {
        if (getLaDialect(loop).getFusedChunkLoopAttrHelper().isAttrPresent(
                loop))
          collectParts(*loop.getBody(), minSize, parts);
      });
      for (auto [index, op] : llvm::enumerate(parts))
        outlineIntoFunction(op, func,
                            (func.getSymName() + "_part" + Twine(index)).str(),
                            /*internal=*/true, symbols);
    }
  }
};
} // namespace
