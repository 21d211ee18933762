//===- FuseRecurrence.cpp - the chunked program fused per head ------------===//
//
// la-chunk builds one program over whole tensors: every level-2 op runs over
// all batches, chunks and heads, and the state entering every chunk is
// materialised ([B,NC,HV,K,V]) between the scan and the output. Here the same
// level-2 ops run on one (batch, value head) and one chunk at a time, inside
// an scf.forall over (batch, value head) and an scf.for over chunks that
// carries the state: each chunk's output is computed from the state while it
// is in cache, no per-chunk state is written, and the forall's iterations are
// the threads' tasks. That is the better schedule when there are enough
// (batch, head) tasks for the threads; otherwise the materialised program
// also runs chunks in parallel (in its intra-chunk and output ops).
//
//===----------------------------------------------------------------------===//

#include "ChunkedProgram.h"
#include "la/Dialect/La/LaPasses.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include "llvm/Support/Threading.h"

namespace mlir {
namespace la {
#define GEN_PASS_DEF_LAFUSERECURRENCEPASS
#include "la/Dialect/La/LaPasses.h.inc"
} // namespace la
} // namespace mlir

using namespace mlir;
using namespace mlir::la;

FailureOr<FusionMode> mlir::la::parseFusionMode(StringRef name) {
  if (name == "auto")
    return FusionMode::Auto;
  if (name == "fused")
    return FusionMode::Fused;
  if (name == "materialized")
    return FusionMode::Materialized;
  return failure();
}

bool mlir::la::shouldFuse(RecurrenceOp op, FusionMode mode, int64_t threads) {
  if (mode == FusionMode::Materialized || op.getCuSeqlens())
    return false;
  if (mode == FusionMode::Fused)
    return true;
  // One task per (batch, value head); a dynamic batch counts as one.
  int64_t batch = op.getV().getType().getDimSize(0);
  int64_t valueHeads = op.getV().getType().getDimSize(2);
  if (ShapedType::isDynamic(valueHeads))
    return false;
  int64_t tasks = valueHeads * (ShapedType::isDynamic(batch) ? 1 : batch);
  return tasks >= threads;
}

namespace {
struct FuseRecurrence : OpRewritePattern<RecurrenceOp> {
  FuseRecurrence(MLIRContext *ctx, int64_t chunkSize, FusionMode mode,
                 int64_t threads)
      : OpRewritePattern(ctx), chunkSize(chunkSize), mode(mode),
        threads(threads) {}

  LogicalResult matchAndRewrite(RecurrenceOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getGate() == GateKind::Fixed || op.getNormalizer())
      return rewriter.notifyMatchFailure(op, "simplify the recurrence first");
    if (!shouldFuse(op, mode, threads))
      return rewriter.notifyMatchFailure(op, "left to la-chunk");
    auto kType = op.getK().getType();
    auto vType = op.getV().getType();
    int64_t heads = kType.getDimSize(2), valueHeads = vType.getDimSize(2);
    if (ShapedType::isDynamic(heads) || ShapedType::isDynamic(valueHeads))
      return rewriter.notifyMatchFailure(op, "needs static H and HV");
    int64_t group = valueHeads / heads;
    Location loc = op.getLoc();
    Type outputType = op.getO().getType().getElementType();
    float scale = op.getScale().convertToFloat();
    Type f32 = rewriter.getF32Type();

    ChunkedProgramBuilder whole(rewriter, loc, chunkSize);
    whole.prepare(tensor::getMixedSize(rewriter, loc, op.getQ(), 1));
    Value q = whole.chunkify(op.getQ()), k = whole.chunkify(op.getK()),
          v = whole.chunkify(op.getV()), g = whole.chunkify(op.getG()),
          beta = whole.chunkify(op.getBeta()), a = whole.chunkify(op.getA()),
          bb = whole.chunkify(op.getB());
    SmallVector<OpFoldResult> vSizes = mixedSizes(rewriter, loc, v);
    SmallVector<OpFoldResult> kSizes = mixedSizes(rewriter, loc, k);
    Value outputInit = emptyTensor(rewriter, loc, vSizes, outputType);
    Value finalInit = emptyTensor(
        rewriter, loc, {vSizes[0], vSizes[3], kSizes[4], vSizes[4]}, f32);

    auto forall = scf::ForallOp::create(
        rewriter, loc, ArrayRef<OpFoldResult>{vSizes[0], vSizes[3]},
        ValueRange{outputInit, finalInit}, /*mapping=*/std::nullopt);
    OpBuilder::InsertionGuard guard(rewriter);
    rewriter.setInsertionPointToStart(forall.getBody());
    Value batch = forall.getInductionVar(0);
    Value valueHead = forall.getInductionVar(1);
    Value keyHead = valueHead;
    if (group != 1)
      keyHead = arith::DivUIOp::create(
          rewriter, loc, valueHead,
          arith::ConstantIndexOp::create(rewriter, loc, group));
    Value outputs = forall.getRegionIterArgs()[0];
    Value finals = forall.getRegionIterArgs()[1];
    SmallVector<OpFoldResult> stateSizes = {rewriter.getIndexAttr(1),
                                            rewriter.getIndexAttr(1), kSizes[4],
                                            vSizes[4]};
    SmallVector<OpFoldResult> stateOffsets = {
        batch, valueHead, rewriter.getIndexAttr(0), rewriter.getIndexAttr(0)};
    Value initialState =
        op.getInitialState()
            ? tensor::ExtractSliceOp::create(
                  rewriter, loc, op.getInitialState(), stateOffsets, stateSizes,
                  SmallVector<OpFoldResult>(4, rewriter.getIndexAttr(1)))
                  .getResult()
            : filledTensor(rewriter, loc, stateSizes, f32, 0.0);
    initialState = tensor::CastOp::create(
        rewriter, loc, RankedTensorType::get(staticShape(stateSizes), f32),
        initialState);

    // This task's output: [1,NC,C,1,V] at (batch, valueHead).
    SmallVector<OpFoldResult> taskOffsets(5, rewriter.getIndexAttr(0));
    taskOffsets[0] = batch;
    taskOffsets[3] = valueHead;
    SmallVector<OpFoldResult> taskSizes = vSizes;
    taskSizes[0] = taskSizes[3] = rewriter.getIndexAttr(1);
    SmallVector<OpFoldResult> unitStrides(5, rewriter.getIndexAttr(1));
    Value taskOutput = tensor::ExtractSliceOp::create(
        rewriter, loc, outputs, taskOffsets, taskSizes, unitStrides);

    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    Value numChunks =
        getValueOrCreateConstantIndexOp(rewriter, loc, whole.getNumChunks());
    auto loop = scf::ForOp::create(
        rewriter, loc, zero, numChunks, one,
        ValueRange{initialState, taskOutput},
        [&](OpBuilder &b, Location l, Value n, ValueRange iterArgs) {
          // One chunk of one head: [B,NC,C,H,...] -> [1,1,C,1,...].
          auto slice = [&](Value x, Value head) -> Value {
            if (!x)
              return x;
            int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
            SmallVector<OpFoldResult> offsets(rank, b.getIndexAttr(0));
            offsets[0] = batch;
            offsets[1] = n;
            offsets[3] = head;
            SmallVector<OpFoldResult> sizes = mixedSizes(b, l, x);
            sizes[0] = sizes[1] = sizes[3] = b.getIndexAttr(1);
            return tensor::ExtractSliceOp::create(
                b, l, x, offsets, sizes,
                SmallVector<OpFoldResult>(rank, b.getIndexAttr(1)));
          };
          ChunkedProgramBuilder chunk(b, l, chunkSize);
          ChunkedProgramBuilder::Result result = chunk.buildChunked(
              {slice(q, keyHead), slice(k, keyHead), slice(v, valueHead),
               slice(g, keyHead), slice(beta, keyHead), slice(a, keyHead),
               slice(bb, keyHead), iterArgs[0]},
              scale, outputType);
          Value written = insertAt(b, l, result.output, iterArgs[1],
                                   /*dim=*/1, n);
          scf::YieldOp::create(b, l, ValueRange{result.finalState, written});
        });

    rewriter.setInsertionPointToStart(forall.getTerminator().getBody());
    tensor::ParallelInsertSliceOp::create(rewriter, loc, loop.getResult(1),
                                          outputs, taskOffsets, taskSizes,
                                          unitStrides);
    tensor::ParallelInsertSliceOp::create(
        rewriter, loc, loop.getResult(0), finals, stateOffsets, stateSizes,
        SmallVector<OpFoldResult>(4, rewriter.getIndexAttr(1)));

    rewriter.setInsertionPointAfter(forall);
    Value output = whole.unchunkify(forall.getResult(0));
    replaceWithCasts(rewriter, op, {output, forall.getResult(1)});
    return success();
  }

  int64_t chunkSize;
  FusionMode mode;
  int64_t threads;
};

struct LaFuseRecurrencePass
    : la::impl::LaFuseRecurrencePassBase<LaFuseRecurrencePass> {
  using Base::Base;

  void runOnOperation() override {
    if (chunkSize <= 0) {
      getOperation()->emitError()
          << "la-fuse-recurrence: 'chunk-size' must be > 0, got "
          << static_cast<int64_t>(chunkSize);
      return signalPassFailure();
    }
    FailureOr<FusionMode> fusionMode = parseFusionMode(mode);
    if (failed(fusionMode)) {
      getOperation()->emitError()
          << "la-fuse-recurrence: 'mode' must be auto, fused or "
             "materialized, got '"
          << mode << "'";
      return signalPassFailure();
    }
    int64_t threadCount =
        threads > 0 ? static_cast<int64_t>(threads)
                    : static_cast<int64_t>(
                          llvm::hardware_concurrency().compute_thread_count());
    RewritePatternSet patterns(&getContext());
    populateSimplifyRecurrencePatterns(patterns);
    populateFuseRecurrencePatterns(patterns, chunkSize, *fusionMode,
                                   threadCount);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace

void mlir::la::populateFuseRecurrencePatterns(RewritePatternSet &patterns,
                                              int64_t chunkSize,
                                              FusionMode mode,
                                              int64_t threads) {
  patterns.add<FuseRecurrence>(patterns.getContext(), chunkSize, mode, threads);
}
