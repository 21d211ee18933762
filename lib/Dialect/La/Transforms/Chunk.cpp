//===- Chunk.cpp - la.recurrence to its chunkwise-parallel form -----------===//
//
// Time is padded to a multiple of the chunk size and split into chunks; the
// recurrence becomes la.chunk_cumsum, la.chunk_intra, la.chunk_state_scan and
// la.chunk_inter. Packed variable-length sequences run the same program once
// per sequence inside an scf.for.
//
//===----------------------------------------------------------------------===//

#include "ChunkedProgram.h"
#include "la/Dialect/La/LaPasses.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir {
namespace la {
#define GEN_PASS_DEF_LACHUNKPASS
#include "la/Dialect/La/LaPasses.h.inc"
} // namespace la
} // namespace mlir

using namespace mlir;
using namespace mlir::la;

namespace {
struct ChunkRecurrence : OpRewritePattern<RecurrenceOp> {
  ChunkRecurrence(MLIRContext *ctx, int64_t chunkSize)
      : OpRewritePattern(ctx), requestedChunkSize(chunkSize) {}

  LogicalResult matchAndRewrite(RecurrenceOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getGate() == GateKind::Fixed || op.getNormalizer())
      return rewriter.notifyMatchFailure(op, "simplify the recurrence first");
    if (op.getStateIndices())
      return rewriter.notifyMatchFailure(op, "decompose the state pool first");
    int64_t chunkSize = chunkSizeFor(requestedChunkSize, op.getQ());
    Location loc = op.getLoc();
    float scale = op.getScale().convertToFloat();
    Type outputElementType = op.getO().getType().getElementType();

    // A reverse recurrence is the forward one on its tokens flipped.
    bool reverse = op.getReverse();
    auto flip = [&](OpBuilder &b, Location l, Value x) -> Value {
      return x && reverse ? flipTime(b, l, x) : x;
    };
    Value transposedInit = op.getTransposedOInit();
    Type transposedElementType =
        transposedInit
            ? cast<RankedTensorType>(transposedInit.getType()).getElementType()
            : Type();
    if (!op.getCuSeqlens()) {
      ChunkedProgramBuilder program(rewriter, loc, chunkSize);
      ChunkedProgramBuilder::Result result = program.build(
          {flip(rewriter, loc, op.getQ()), flip(rewriter, loc, op.getK()),
           flip(rewriter, loc, op.getV()), flip(rewriter, loc, op.getG()),
           flip(rewriter, loc, op.getGv()), flip(rewriter, loc, op.getBeta()),
           flip(rewriter, loc, op.getA()), flip(rewriter, loc, op.getB()),
           op.getNonZeroInitialState(),
           flip(rewriter, loc, op.getTransposedQuery()), transposedElementType},
          scale, outputElementType);
      SmallVector<Value> results = {flip(rewriter, loc, result.output),
                                    result.finalState};
      if (transposedInit)
        results.push_back(flip(rewriter, loc, result.transposedOutput));
      replaceWithCasts(rewriter, op, results);
      return success();
    }

    // Packed sequences: one chunked program per sequence.
    Value cuSeqlens = op.getCuSeqlens();
    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    Value numOffsets = tensor::DimOp::create(rewriter, loc, cuSeqlens, 0);
    Value numSequences = arith::SubIOp::create(rewriter, loc, numOffsets, one);
    Value tokens = tensor::DimOp::create(rewriter, loc, op.getQ(), 1);

    SmallVector<OpFoldResult> valueSizes = mixedSizes(rewriter, loc, op.getV());
    // Tokens outside every sequence stay zero.
    Value outputInit =
        filledTensor(rewriter, loc, mixedSizes(rewriter, loc, op.getOInit()),
                     outputElementType, 0.0);
    SmallVector<OpFoldResult> stateSizes = {
        numSequences, valueSizes[2],
        tensor::getMixedSize(rewriter, loc, op.getK(), 3), valueSizes[3]};
    Value finalInit =
        emptyTensor(rewriter, loc, stateSizes, rewriter.getF32Type());
    finalInit = tensor::CastOp::create(rewriter, loc,
                                       op.getFinalState().getType(), finalInit);

    SmallVector<Value> inits = {outputInit, finalInit};
    if (transposedInit)
      inits.push_back(filledTensor(rewriter, loc,
                                   mixedSizes(rewriter, loc, transposedInit),
                                   transposedElementType, 0.0));
    auto loop = scf::ForOp::create(
        rewriter, loc, zero, numSequences, one, inits,
        [&](OpBuilder &b, Location l, Value n, ValueRange iterArgs) {
          // Not a structured binding: the lambda below captures them.
          std::pair<Value, Value> bounds =
              extractSequenceBounds(b, l, cuSeqlens, n, tokens);
          Value start = bounds.first, end = bounds.second;
          Value length = arith::SubIOp::create(b, l, end, start);
          auto slice = [&](Value x) -> Value {
            return x ? flip(b, l, sliceDim(b, l, x, 1, start, length))
                     : Value();
          };
          Value initialState;
          if (Value state = op.getNonZeroInitialState())
            initialState = sliceDim(b, l, state, 0, n, b.getIndexAttr(1));
          ChunkedProgramBuilder program(b, l, chunkSize);
          ChunkedProgramBuilder::Result result = program.build(
              {slice(op.getQ()), slice(op.getK()), slice(op.getV()),
               slice(op.getG()), slice(op.getGv()), slice(op.getBeta()),
               slice(op.getA()), slice(op.getB()), initialState,
               slice(op.getTransposedQuery()), transposedElementType},
              scale, outputElementType);
          SmallVector<Value> yields = {
              insertAt(b, l, flip(b, l, result.output), iterArgs[0],
                       /*dim=*/1, start),
              insertAt(b, l, result.finalState, iterArgs[1], /*dim=*/0, n)};
          if (transposedInit)
            yields.push_back(insertAt(b, l, flip(b, l, result.transposedOutput),
                                      iterArgs[2], /*dim=*/1, start));
          scf::YieldOp::create(b, l, yields);
        });
    replaceWithCasts(rewriter, op, SmallVector<Value>(loop.getResults()));
    return success();
  }

  int64_t requestedChunkSize;
};

struct LaChunkPass : la::impl::LaChunkPassBase<LaChunkPass> {
  using Base::Base;

  void runOnOperation() override {
    if (chunkSize <= 0 || chunkSize > kMaxChunkSize) {
      getOperation()->emitError()
          << "la-chunk: 'chunk-size' must be in [1, " << kMaxChunkSize
          << "], got " << static_cast<int64_t>(chunkSize);
      return signalPassFailure();
    }
    RewritePatternSet patterns(&getContext());
    populateSimplifyRecurrencePatterns(patterns);
    populateChunkPatterns(patterns, chunkSize);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace

void mlir::la::populateChunkPatterns(RewritePatternSet &patterns,
                                     int64_t chunkSize) {
  patterns.add<ChunkRecurrence>(patterns.getContext(), chunkSize);
  populateDecomposeStateIndicesPatterns(patterns);
}
