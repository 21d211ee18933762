//===- SimplifyRecurrence.cpp - fewer forms of la.recurrence --------------===//
//
// Fixed decays become scalar gate tensors and the normaliser becomes a value
// column of ones, so that the chunked and sequential lowerings handle only
// gates in {none, scalar, channel} and no normaliser.
//
//===----------------------------------------------------------------------===//

#include "la/Dialect/La/LaPasses.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir {
namespace la {
#define GEN_PASS_DEF_LASIMPLIFYRECURRENCEPASS
#include "la/Dialect/La/LaPasses.h.inc"
} // namespace la
} // namespace mlir

using namespace mlir;
using namespace mlir::la;

namespace {
/// gate(fixed) {log_decay = [d_h]} -> gate(scalar) g = broadcast(d) : [B,T,H].
struct FixedDecayToScalarGate : OpRewritePattern<RecurrenceOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RecurrenceOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getGate() != GateKind::Fixed)
      return failure();
    Location loc = op.getLoc();
    ArrayRef<float> decay = *op.getLogDecay();
    auto decayType = RankedTensorType::get({static_cast<int64_t>(decay.size())},
                                           rewriter.getF32Type());
    Value decayConst = arith::ConstantOp::create(
        rewriter, loc, DenseElementsAttr::get(decayType, decay));
    SmallVector<OpFoldResult> sizes = mixedSizes(rewriter, loc, op.getQ());
    sizes.pop_back();
    Value init = emptyTensor(rewriter, loc, sizes, rewriter.getF32Type());
    MLIRContext *ctx = op.getContext();
    Value gate =
        linalg::GenericOp::create(
            rewriter, loc, init.getType(), ValueRange{decayConst},
            ValueRange{init},
            ArrayRef<AffineMap>{dimMap(ctx, 3, {2}), dimMap(ctx, 3, {0, 1, 2})},
            iteratorTypes(3),
            [](OpBuilder &b, Location l, ValueRange args) {
              linalg::YieldOp::create(b, l, args[0]);
            })
            .getResult(0);

    RecurrenceParts parts = RecurrenceParts::of(op);
    parts.gate = GateKind::Scalar;
    parts.g = gate;
    parts.logDecay.reset();
    rewriter.replaceOp(op, parts.build(rewriter, loc)->getResults());
    return success();
  }
};

/// Pads the last dim of `value` by one element of `padValue`.
static Value padLastDim(OpBuilder &b, Location loc, Value value,
                        float padValue) {
  auto type = cast<RankedTensorType>(value.getType());
  int64_t rank = type.getRank();
  SmallVector<OpFoldResult> low(rank, b.getIndexAttr(0));
  SmallVector<OpFoldResult> high(rank, b.getIndexAttr(0));
  high.back() = b.getIndexAttr(1);
  return tensor::PadOp::create(b, loc, Type(), value, low, high,
                               constantF32(b, loc, padValue));
}

/// normalizer: run on [v, 1] and divide by the last output column.
struct NormalizerToValueColumn : OpRewritePattern<RecurrenceOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RecurrenceOp op,
                                PatternRewriter &rewriter) const override {
    if (!op.getNormalizer())
      return failure();
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    Type f32 = rewriter.getF32Type();
    RankedTensorType vType = op.getV().getType();

    // v in f32 with a column of ones.
    Value vF32 = op.getV();
    if (!vType.getElementType().isF32()) {
      Value init =
          emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, op.getV()), f32);
      AffineMap id = rewriter.getMultiDimIdentityMap(4);
      vF32 =
          linalg::GenericOp::create(
              rewriter, loc, init.getType(), ValueRange{op.getV()},
              ValueRange{init}, ArrayRef<AffineMap>{id, id}, iteratorTypes(4),
              [](OpBuilder &b, Location l, ValueRange args) {
                linalg::YieldOp::create(b, l, extendToF32(b, l, args[0]));
              })
              .getResult(0);
    }
    RecurrenceParts parts = RecurrenceParts::of(op);
    parts.v = padLastDim(rewriter, loc, vF32, 1.0f);
    // The state's extra column is z, which starts at zero.
    parts.initialState =
        op.getNonZeroInitialState()
            ? padLastDim(rewriter, loc, op.getInitialState(), 0.0f)
            : zeroState(rewriter, loc, op.getQ(), parts.v, op.getCuSeqlens());
    parts.oInit =
        emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, parts.v), f32);
    parts.normalizer = false;
    parts.eps.reset();
    RecurrenceOp inner = parts.build(rewriter, loc);
    Type finalType = op.getFinalState().getType();

    // o = num / (den + eps): num the first V columns, den the last one.
    RankedTensorType oType = op.getO().getType();
    OpFoldResult valueDim = tensor::getMixedSize(rewriter, loc, op.getV(), 3);
    SmallVector<OpFoldResult> oSizes = mixedSizes(rewriter, loc, op.getV());
    SmallVector<OpFoldResult> zeros(4, rewriter.getIndexAttr(0));
    SmallVector<OpFoldResult> ones(4, rewriter.getIndexAttr(1));
    Value numerator = tensor::ExtractSliceOp::create(
        rewriter, loc, RankedTensorType::get(oType.getShape(), f32),
        inner.getO(), zeros, oSizes, ones);
    SmallVector<OpFoldResult> denOffsets = zeros;
    denOffsets.back() = valueDim;
    SmallVector<OpFoldResult> denSizes = oSizes;
    denSizes.back() = rewriter.getIndexAttr(1);
    SmallVector<int64_t> denShape(oType.getShape());
    denShape.back() = 1;
    Value denominator = tensor::ExtractSliceOp::create(
        rewriter, loc, RankedTensorType::get(denShape, f32), inner.getO(),
        denOffsets, denSizes, ones);
    Value oInit = emptyTensor(rewriter, loc, oSizes, oType.getElementType());
    Value eps = constantF32(rewriter, loc, op.getEffectiveEps());
    AffineMap id = rewriter.getMultiDimIdentityMap(4);
    AffineMap lastColumn = AffineMap::get(
        4, 0,
        {getAffineDimExpr(0, ctx), getAffineDimExpr(1, ctx),
         getAffineDimExpr(2, ctx), getAffineConstantExpr(0, ctx)},
        ctx);
    Value output =
        linalg::GenericOp::create(
            rewriter, loc, oInit.getType(), ValueRange{numerator, denominator},
            ValueRange{oInit}, ArrayRef<AffineMap>{id, lastColumn, id},
            iteratorTypes(4),
            [&](OpBuilder &b, Location l, ValueRange args) {
              Value shifted = arith::AddFOp::create(b, l, args[1], eps);
              Value quotient = arith::DivFOp::create(b, l, args[0], shifted);
              linalg::YieldOp::create(
                  b, l, castFloat(b, l, quotient, oType.getElementType()));
            })
            .getResult(0);

    // The final state without z.
    SmallVector<OpFoldResult> stateSizes =
        mixedSizes(rewriter, loc, inner.getFinalState());
    stateSizes.back() = valueDim;
    Value finalState = tensor::ExtractSliceOp::create(
        rewriter, loc, cast<RankedTensorType>(finalType), inner.getFinalState(),
        zeros, stateSizes, ones);
    rewriter.replaceOp(op, ValueRange{output, finalState});
    return success();
  }
};

struct LaSimplifyRecurrencePass
    : la::impl::LaSimplifyRecurrencePassBase<LaSimplifyRecurrencePass> {
  using Base::Base;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateSimplifyRecurrencePatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace

void mlir::la::populateSimplifyRecurrencePatterns(RewritePatternSet &patterns) {
  patterns.add<FixedDecayToScalarGate, NormalizerToValueColumn>(
      patterns.getContext(), /*benefit=*/2);
}
