//===- StateIndices.cpp - a pool of states as a gather and a scatter ------===//
//
// An la.recurrence with `state_indices` starts each sequence from a row of a
// state pool and writes its final state back there. la-fuse-recurrence's
// tasks slice the pool's rows directly (TilingInterface); every other
// lowering (la-chunk's whole-tensor program, the token loops, packed
// sequences) takes this decomposition: the rows gathered into an [N,...]
// state, the recurrence without indices, and its final states scattered
// into the pool, whose other rows pass through.
//
//===----------------------------------------------------------------------===//

#include "la/Dialect/La/LaPasses.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace mlir::la;

namespace {
struct DecomposeStateIndices : OpRewritePattern<RecurrenceOp> {
  DecomposeStateIndices(MLIRContext *ctx, bool packedSequencesOnly)
      : OpRewritePattern(ctx), packedSequencesOnly(packedSequencesOnly) {}

  LogicalResult matchAndRewrite(RecurrenceOp op,
                                PatternRewriter &rewriter) const override {
    Value indices = op.getStateIndices();
    if (!indices)
      return rewriter.notifyMatchFailure(op, "no state indices");
    if (packedSequencesOnly && !op.getCuSeqlens())
      return rewriter.notifyMatchFailure(op, "left to the tasks");
    Location loc = op.getLoc();
    Value pool = op.getInitialState();
    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    Value count = tensor::DimOp::create(rewriter, loc, indices, 0);
    auto rowOf = [&](OpBuilder &b, Location l, Value n) -> Value {
      Value row = tensor::ExtractOp::create(b, l, indices, n);
      return arith::IndexCastOp::create(b, l, b.getIndexType(), row);
    };

    // The sequences' initial states, in sequence order.
    SmallVector<OpFoldResult> sizes = mixedSizes(rewriter, loc, pool);
    sizes[0] = tensor::getMixedSize(rewriter, loc, indices, 0);
    Value gatherInit = emptyTensor(rewriter, loc, sizes, rewriter.getF32Type());
    auto gather = scf::ForOp::create(
        rewriter, loc, zero, count, one, ValueRange{gatherInit},
        [&](OpBuilder &b, Location l, Value n, ValueRange iterArgs) {
          Value row =
              sliceDim(b, l, pool, 0, rowOf(b, l, n), b.getIndexAttr(1));
          scf::YieldOp::create(b, l, insertAt(b, l, row, iterArgs[0], 0, n));
        });

    RecurrenceParts parts = RecurrenceParts::of(op);
    parts.stateIndices = Value();
    parts.initialState = gather.getResult(0);
    RecurrenceOp recurrence = parts.build(rewriter, loc);

    // Each final state into its row of the pool.
    Value finals = recurrence.getFinalState();
    auto scatter = scf::ForOp::create(
        rewriter, loc, zero, count, one, ValueRange{pool},
        [&](OpBuilder &b, Location l, Value n, ValueRange iterArgs) {
          Value state = sliceDim(b, l, finals, 0, n, b.getIndexAttr(1));
          scf::YieldOp::create(
              b, l, insertAt(b, l, state, iterArgs[0], 0, rowOf(b, l, n)));
        });
    SmallVector<Value> results = {recurrence.getO(), scatter.getResult(0)};
    if (Value transposed = recurrence.getTransposedO())
      results.push_back(transposed);
    replaceWithCasts(rewriter, op, results);
    return success();
  }

  bool packedSequencesOnly;
};
} // namespace

void mlir::la::populateDecomposeStateIndicesPatterns(
    RewritePatternSet &patterns, bool packedSequencesOnly) {
  patterns.add<DecomposeStateIndices>(patterns.getContext(),
                                      packedSequencesOnly);
}
