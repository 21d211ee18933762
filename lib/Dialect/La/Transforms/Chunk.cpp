//===- Chunk.cpp - la.recurrence to its chunkwise-parallel form -----------===//
//
// Time is padded to a multiple of the chunk size and split into chunks; the
// recurrence becomes la.chunk_cumsum, la.chunk_intra, la.chunk_state_scan and
// la.chunk_inter. Packed variable-length sequences run the same program once
// per sequence inside an scf.for.
//
//===----------------------------------------------------------------------===//

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
/// Builds the chunked program for one batch of equally long sequences.
class ChunkedProgramBuilder {
public:
  ChunkedProgramBuilder(OpBuilder &b, Location loc, int64_t chunkSize)
      : b(b), loc(loc), chunkSize(chunkSize) {}

  struct Result {
    Value output;     // [B,T,HV,V], the output element type
    Value finalState; // [B,HV,K,V] f32
  };

  /// The inputs of one chunked program, [B,T,...] with T possibly dynamic:
  /// q, k : [B,T,H,K], v : [B,T,HV,V], g : [B,T,H(,K)] or null, beta :
  /// [B,T,H] (the delta rule) or a, b : [B,T,H,K] (the general low-rank
  /// form) or neither, initialState : [B,HV,K,V] or null.
  struct Inputs {
    Value q, k, v, g, beta, a, b, initialState;
  };

  Result build(const Inputs &in, float scale, Type outputElementType) {
    time = tensor::getMixedSize(b, loc, in.q, 1);
    AffineExpr t = getAffineSymbolExpr(0, b.getContext());
    numChunks = affine::makeComposedFoldedAffineApply(
        b, loc, t.ceilDiv(chunkSize), {time});
    padding = affine::makeComposedFoldedAffineApply(
        b, loc, t.ceilDiv(chunkSize) * chunkSize - t, {time});

    Value qc = chunkify(in.q), kc = chunkify(in.k), vc = chunkify(in.v);
    Value gates, prevGates;
    if (in.g) {
      Value gc = chunkify(in.g);
      auto gType = RankedTensorType::get(
          cast<RankedTensorType>(gc.getType()).getShape(), b.getF32Type());
      gates = ChunkCumsumOp::create(b, loc, gType, gc, /*exclusive=*/false);
      if (in.a)
        prevGates = ChunkCumsumOp::create(b, loc, gType, gc,
                                          /*exclusive=*/true);
    }
    FloatAttr scaleAttr = b.getF32FloatAttr(scale);

    ArrayRef<int64_t> vShape = cast<RankedTensorType>(vc.getType()).getShape();
    ArrayRef<int64_t> kShape = cast<RankedTensorType>(kc.getType()).getShape();
    Type f32 = b.getF32Type();
    auto keyType = RankedTensorType::get(kShape, f32);
    auto intraType = RankedTensorType::get(vShape, f32);
    auto statesType = RankedTensorType::get(
        {vShape[0], vShape[1], vShape[3], kShape[4], vShape[4]}, f32);
    auto finalType = RankedTensorType::get(
        {vShape[0], vShape[3], kShape[4], vShape[4]}, f32);
    IntegerAttr blockSize =
        b.getI64IntegerAttr(chunkSize % 16 == 0 ? 16 : chunkSize);

    // A low-rank part: the UT transform gives W and U, and the scan forms the
    // corrected values V' = U - W S_n. The delta rule pairs them with k in
    // place of v; the general form pairs them with b and keeps (k, v) as an
    // extra, uncorrected pair.
    Value keys = kc, values = vc, correction, extraKeys, extraValues;
    if (in.beta) {
      auto wy = ChunkWYOp::create(b, loc, keyType, intraType, kc, vc,
                                  chunkify(in.beta), Value(), Value(), gates,
                                  Value(), blockSize);
      values = wy.getU();
      correction = wy.getW();
    } else if (in.a) {
      Value bc = chunkify(in.b);
      auto wy =
          ChunkWYOp::create(b, loc, keyType, intraType, kc, vc, Value(),
                            chunkify(in.a), bc, gates, prevGates, blockSize);
      keys = bc;
      values = wy.getU();
      correction = wy.getW();
      extraKeys = kc;
      extraValues = vc;
    }
    SmallVector<Type> scanTypes = {statesType, finalType};
    if (correction)
      scanTypes.push_back(intraType);
    auto scan = ChunkStateScanOp::create(b, loc, scanTypes, keys, values, gates,
                                         in.initialState, correction, extraKeys,
                                         extraValues);
    if (correction)
      values = scan.getCorrected();
    Value intra =
        ChunkIntraOp::create(b, loc, intraType, qc, keys, values, gates,
                             extraKeys, extraValues, scaleAttr);
    Value outputChunks = ChunkInterOp::create(
        b, loc, RankedTensorType::get(vShape, outputElementType), qc,
        scan.getStates(), intra, gates, scaleAttr);
    return {unchunkify(outputChunks), scan.getFinalState()};
  }

private:
  /// [B,T,...] -> [B,NC,C,...], zero-padded in time.
  Value chunkify(Value x) {
    auto type = cast<RankedTensorType>(x.getType());
    int64_t rank = type.getRank();
    if (!isZeroInteger(padding)) {
      SmallVector<OpFoldResult> low(rank, b.getIndexAttr(0));
      SmallVector<OpFoldResult> high(rank, b.getIndexAttr(0));
      high[1] = padding;
      Value zero = arith::ConstantOp::create(
          b, loc, b.getZeroAttr(type.getElementType()));
      x = tensor::PadOp::create(b, loc, Type(), x, low, high, zero);
    }
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
    SmallVector<OpFoldResult> chunkedSizes = {sizes[0], numChunks,
                                              b.getIndexAttr(chunkSize)};
    chunkedSizes.append(sizes.begin() + 2, sizes.end());
    SmallVector<ReassociationIndices> reassociation = {{0}, {1, 2}};
    for (int64_t d = 2; d < rank; ++d)
      reassociation.push_back({d + 1});
    auto chunkedType =
        RankedTensorType::get(staticShape(chunkedSizes), type.getElementType());
    return tensor::ExpandShapeOp::create(b, loc, chunkedType, x, reassociation,
                                         chunkedSizes);
  }

  /// [B,NC,C,HV,V] -> [B,T,HV,V], dropping the padding.
  Value unchunkify(Value x) {
    SmallVector<ReassociationIndices> reassociation = {{0}, {1, 2}, {3}, {4}};
    Value collapsed = tensor::CollapseShapeOp::create(b, loc, x, reassociation);
    if (isZeroInteger(padding))
      return collapsed;
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, collapsed);
    sizes[1] = time;
    SmallVector<OpFoldResult> offsets(4, b.getIndexAttr(0));
    SmallVector<OpFoldResult> strides(4, b.getIndexAttr(1));
    auto type = RankedTensorType::get(
        staticShape(sizes),
        cast<RankedTensorType>(x.getType()).getElementType());
    return tensor::ExtractSliceOp::create(b, loc, type, collapsed, offsets,
                                          sizes, strides);
  }

  OpBuilder &b;
  Location loc;
  int64_t chunkSize;
  OpFoldResult time, numChunks, padding;
};

struct ChunkRecurrence : OpRewritePattern<RecurrenceOp> {
  ChunkRecurrence(MLIRContext *ctx, int64_t chunkSize)
      : OpRewritePattern(ctx), chunkSize(chunkSize) {}

  LogicalResult matchAndRewrite(RecurrenceOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getGate() == GateKind::Fixed || op.getNormalizer())
      return rewriter.notifyMatchFailure(op, "simplify the recurrence first");
    Location loc = op.getLoc();
    float scale = op.getScale().convertToFloat();
    Type outputElementType = op.getO().getType().getElementType();

    if (!op.getCuSeqlens()) {
      ChunkedProgramBuilder program(rewriter, loc, chunkSize);
      ChunkedProgramBuilder::Result result = program.build(
          {op.getQ(), op.getK(), op.getV(), op.getG(), op.getBeta(), op.getA(),
           op.getB(), op.getInitialState()},
          scale, outputElementType);
      replaceWithCasts(rewriter, op, {result.output, result.finalState});
      return success();
    }

    // Packed sequences: one chunked program per sequence.
    Value cuSeqlens = op.getCuSeqlens();
    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    Value numOffsets = tensor::DimOp::create(rewriter, loc, cuSeqlens, 0);
    Value numSequences = arith::SubIOp::create(rewriter, loc, numOffsets, one);

    SmallVector<OpFoldResult> outputSizes =
        mixedSizes(rewriter, loc, op.getV());
    // Tokens outside every sequence stay zero.
    Value outputInit =
        filledTensor(rewriter, loc, outputSizes, outputElementType, 0.0);
    SmallVector<OpFoldResult> stateSizes = {
        numSequences, outputSizes[2],
        tensor::getMixedSize(rewriter, loc, op.getK(), 3), outputSizes[3]};
    Value finalInit =
        emptyTensor(rewriter, loc, stateSizes, rewriter.getF32Type());
    if (auto finalState = op.getFinalState())
      finalInit = tensor::CastOp::create(rewriter, loc, finalState.getType(),
                                         finalInit);

    auto loop = scf::ForOp::create(
        rewriter, loc, zero, numSequences, one,
        ValueRange{outputInit, finalInit},
        [&](OpBuilder &b, Location l, Value n, ValueRange iterArgs) {
          Value next = arith::AddIOp::create(b, l, n, one);
          Value start = extractIndex(b, l, cuSeqlens, n);
          Value end = extractIndex(b, l, cuSeqlens, next);
          Value length = arith::SubIOp::create(b, l, end, start);
          auto slice = [&](Value x) -> Value {
            return x ? sliceDim(b, l, x, 1, start, length) : Value();
          };
          Value initialState;
          if (op.getInitialState())
            initialState =
                sliceDim(b, l, op.getInitialState(), 0, n, b.getIndexAttr(1));
          ChunkedProgramBuilder program(b, l, chunkSize);
          ChunkedProgramBuilder::Result result = program.build(
              {slice(op.getQ()), slice(op.getK()), slice(op.getV()),
               slice(op.getG()), slice(op.getBeta()), slice(op.getA()),
               slice(op.getB()), initialState},
              scale, outputElementType);
          Value output =
              insertAt(b, l, result.output, iterArgs[0], /*dim=*/1, start);
          Value finalState =
              insertAt(b, l, result.finalState, iterArgs[1], /*dim=*/0, n);
          scf::YieldOp::create(b, l, ValueRange{output, finalState});
        });
    replaceWithCasts(rewriter, op, {loop.getResult(0), loop.getResult(1)});
    return success();
  }

  int64_t chunkSize;
};

struct LaChunkPass : la::impl::LaChunkPassBase<LaChunkPass> {
  using Base::Base;

  void runOnOperation() override {
    if (chunkSize <= 0) {
      getOperation()->emitError() << "la-chunk: 'chunk-size' must be > 0, got "
                                  << static_cast<int64_t>(chunkSize);
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
}
