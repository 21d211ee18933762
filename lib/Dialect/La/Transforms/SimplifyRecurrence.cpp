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
    Value gate = broadcastLogDecay(rewriter, loc, *op.getLogDecay(), op.getK());

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

/// `x` in f32 (an element-wise extension where it is not).
static Value toF32(OpBuilder &b, Location loc, Value x) {
  auto type = cast<RankedTensorType>(x.getType());
  if (type.getElementType().isF32())
    return x;
  Value init = emptyTensor(b, loc, mixedSizes(b, loc, x), b.getF32Type());
  AffineMap id = b.getMultiDimIdentityMap(type.getRank());
  return buildGeneric(b, loc, ValueRange{x}, init, {id, id}, type.getRank(), 0,
                      [](OpBuilder &nb, Location l, ValueRange args) {
                        return extendToF32(nb, l, args[0]);
                      });
}

/// The output of the recurrence on `[v, 1]` split into the numerator (its
/// first V columns, `[B,T,HV,V]`, the shape of `v`: the output's, with
/// grouped query heads `[B,T,HQ,V]`) and the raw denominator `z_t . q'_t`
/// (its last column, `[B,T,HV,1]`), both f32.
static std::pair<Value, Value> splitNormalized(OpBuilder &b, Location loc,
                                               Value augmented, Value v) {
  OpFoldResult valueDim = tensor::getMixedSize(b, loc, v, 3);
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, v);
  SmallVector<OpFoldResult> zeros(4, b.getIndexAttr(0));
  SmallVector<OpFoldResult> ones(4, b.getIndexAttr(1));
  Type f32 = b.getF32Type();
  auto vType = cast<RankedTensorType>(v.getType());
  Value numerator = tensor::ExtractSliceOp::create(
      b, loc, RankedTensorType::get(vType.getShape(), f32), augmented, zeros,
      sizes, ones);
  SmallVector<OpFoldResult> denOffsets = zeros;
  denOffsets.back() = valueDim;
  SmallVector<OpFoldResult> denSizes = sizes;
  denSizes.back() = b.getIndexAttr(1);
  SmallVector<int64_t> denShape(vType.getShape());
  denShape.back() = 1;
  Value denominator = tensor::ExtractSliceOp::create(
      b, loc, RankedTensorType::get(denShape, f32), augmented, denOffsets,
      denSizes, ones);
  return {numerator, denominator};
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

    // v in f32 with a column of ones.
    Value vF32 = toF32(rewriter, loc, op.getV());
    RecurrenceParts parts = RecurrenceParts::of(op);
    parts.v = padLastDim(rewriter, loc, vF32, 1.0f);
    // The state's extra column is z, which starts at zero.
    parts.initialState =
        op.getNonZeroInitialState()
            ? padLastDim(rewriter, loc, op.getInitialState(), 0.0f)
            : zeroState(rewriter, loc, op.getQ(), parts.v, op.getCuSeqlens());
    // One output per query head (HQ of them with grouped query heads).
    SmallVector<OpFoldResult> augmentedSizes =
        mixedSizes(rewriter, loc, parts.v);
    augmentedSizes[2] = tensor::getMixedSize(rewriter, loc, op.getOInit(), 2);
    parts.oInit = emptyTensor(rewriter, loc, augmentedSizes, f32);
    parts.normalizer = false;
    parts.eps.reset();
    RecurrenceOp inner = parts.build(rewriter, loc);
    Type finalType = op.getFinalState().getType();

    // o = num / (den + eps): num the first V columns, den the last one.
    RankedTensorType oType = op.getO().getType();
    OpFoldResult valueDim = tensor::getMixedSize(rewriter, loc, op.getV(), 3);
    SmallVector<OpFoldResult> oSizes = mixedSizes(rewriter, loc, op.getOInit());
    SmallVector<OpFoldResult> zeros(4, rewriter.getIndexAttr(0));
    SmallVector<OpFoldResult> ones(4, rewriter.getIndexAttr(1));
    auto [numerator, denominator] =
        splitNormalized(rewriter, loc, inner.getO(), op.getOInit());
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

/// The normaliser's gradient: recompute the forward on [v, 1] for the
/// numerator and the denominator, form their cotangents, and take the
/// gradient of the recurrence on [v, 1] (the extra column dropped).
struct NormalizerGradToValueColumn : OpRewritePattern<RecurrenceGradOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RecurrenceGradOp op,
                                PatternRewriter &rewriter) const override {
    if (!op.getNormalizer())
      return failure();
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    Type f32 = rewriter.getF32Type();
    Value values =
        padLastDim(rewriter, loc, toF32(rewriter, loc, op.getV()), 1.0f);
    // z, the state's extra column, starts at zero.
    Value state = padLastDim(rewriter, loc, op.getInitialState(), 0.0f);
    Value oInit =
        emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, values), f32);
    auto forward = RecurrenceOp::create(
        rewriter, loc, oInit.getType(), state.getType(),
        /*transposed_o=*/Type(), op.getQ(), op.getK(), values, op.getG(),
        /*gv=*/Value(),
        /*beta=*/Value(), /*a=*/Value(), /*b=*/Value(), op.getCuSeqlens(),
        /*state_indices=*/Value(), /*transposed_query=*/Value(),
        ValueRange{oInit, state}, op.getGateAttr(), op.getLogDecayAttr(),
        op.getLowRankAttr(), op.getScaleAttr(),
        /*normalizer=*/nullptr, /*eps=*/nullptr);
    auto [numerator, denominator] =
        splitNormalized(rewriter, loc, forward.getO(), op.getV());

    // o = num / (den + eps): d_num = d_o / (den + eps) and
    // d_den = -sum_V(d_o * num) / (den + eps)^2.
    Value eps = constantF32(rewriter, loc, op.getEffectiveEps());
    AffineMap id = rewriter.getMultiDimIdentityMap(4);
    AffineMap row = dimMap(ctx, 4, {0, 1, 2});
    AffineMap lastColumn = AffineMap::get(
        4, 0,
        {getAffineDimExpr(0, ctx), getAffineDimExpr(1, ctx),
         getAffineDimExpr(2, ctx), getAffineConstantExpr(0, ctx)},
        ctx);
    SmallVector<OpFoldResult> oSizes = mixedSizes(rewriter, loc, op.getV());
    SmallVector<OpFoldResult> rowSizes(oSizes.begin(), oSizes.end() - 1);
    Value rowDot = buildGeneric(
        rewriter, loc, ValueRange{op.getDO(), numerator},
        zeroTensor(rewriter, loc, rowSizes), {id, id, row}, 3, 1,
        [](OpBuilder &b, Location l, ValueRange args) {
          return addF(b, l, args[2], mulExtended(b, l, args[0], args[1]));
        });
    Value dNumerator = buildGeneric(
        rewriter, loc, ValueRange{op.getDO(), denominator},
        emptyTensor(rewriter, loc, oSizes, f32), {id, lastColumn, id}, 4, 0,
        [&](OpBuilder &b, Location l, ValueRange args) {
          Value shifted = addF(b, l, args[1], eps);
          return arith::DivFOp::create(b, l, extendToF32(b, l, args[0]),
                                       shifted)
              .getResult();
        });
    SmallVector<OpFoldResult> denSizes = oSizes;
    denSizes.back() = rewriter.getIndexAttr(1);
    Value dDenominator =
        buildGeneric(rewriter, loc, ValueRange{rowDot, denominator},
                     emptyTensor(rewriter, loc, denSizes, f32), {row, id, id},
                     4, 0, [&](OpBuilder &b, Location l, ValueRange args) {
                       Value shifted = addF(b, l, args[1], eps);
                       Value square = mulF(b, l, shifted, shifted);
                       Value quotient =
                           arith::DivFOp::create(b, l, args[0], square);
                       return arith::NegFOp::create(b, l, quotient).getResult();
                     });
    SmallVector<OpFoldResult> zeros(4, rewriter.getIndexAttr(0));
    SmallVector<OpFoldResult> ones(4, rewriter.getIndexAttr(1));
    SmallVector<OpFoldResult> denOffsets = zeros;
    denOffsets.back() = oSizes.back();
    Value dOutput = tensor::InsertSliceOp::create(
        rewriter, loc, dDenominator,
        padLastDim(rewriter, loc, dNumerator, 0.0f), denOffsets, denSizes,
        ones);
    Value dFinal = op.getDFinalState()
                       ? padLastDim(rewriter, loc, op.getDFinalState(), 0.0f)
                       : Value();

    SmallVector<Type> resultTypes;
    for (Value result : op.getResults())
      resultTypes.push_back(result.getType());
    resultTypes[2] = values.getType();
    resultTypes[3] = state.getType();
    auto grad = RecurrenceGradOp::create(
        rewriter, loc, resultTypes, op.getQ(), op.getK(), values, op.getG(),
        /*gv=*/Value(), op.getBeta(), op.getA(), op.getB(), op.getCuSeqlens(),
        state, dOutput, dFinal, op.getGateAttr(), op.getLogDecayAttr(),
        op.getLowRankAttr(), op.getScaleAttr(), /*normalizer=*/nullptr,
        /*eps=*/nullptr, op.getCheckpointAttr());

    // The gradients of v and of the initial state without the extra column.
    auto dropLastColumn = [&](Value x, Value like) {
      return tensor::ExtractSliceOp::create(
                 rewriter, loc, x, zeros, mixedSizes(rewriter, loc, like), ones)
          .getResult();
    };
    SmallVector<Value> results(grad.getResults());
    results[2] = dropLastColumn(grad.getDv(), op.getV());
    results[3] = dropLastColumn(grad.getDInitialState(), op.getInitialState());
    replaceWithCasts(rewriter, op, results);
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
  patterns.add<FixedDecayToScalarGate, NormalizerToValueColumn,
               NormalizerGradToValueColumn>(patterns.getContext(),
                                            /*benefit=*/2);
}
