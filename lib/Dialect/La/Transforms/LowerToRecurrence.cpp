//===- LowerToRecurrence.cpp - la.attention to la.recurrence --------------===//
//
// Every level-0 variant becomes the canonical level-1 recurrence: the named
// variant turns into a gate kind plus a low-rank structure, defaults become
// explicit, and in-kernel L2 normalisation becomes linalg ops on tensors.
//
//===----------------------------------------------------------------------===//

#include "la/Dialect/La/LaPasses.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir {
namespace la {
#define GEN_PASS_DEF_LALOWERTORECURRENCEPASS
#include "la/Dialect/La/LaPasses.h.inc"
} // namespace la
} // namespace mlir

using namespace mlir;
using namespace mlir::la;

/// Returns `x / sqrt(sum_K(x^2) + eps)` for `x : [B,T,H,K]` as an f32 tensor;
/// the sum runs over the last dimension, in f32.
static Value buildL2Normalize(OpBuilder &b, Location loc, Value x, double eps) {
  auto type = cast<RankedTensorType>(x.getType());
  MLIRContext *ctx = b.getContext();
  Type f32 = b.getF32Type();
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, x);
  SmallVector<OpFoldResult> rowSizes(sizes.begin(), sizes.end() - 1);

  AffineMap identity = b.getMultiDimIdentityMap(4);
  AffineMap dropLast =
      AffineMap::get(4, 0,
                     {getAffineDimExpr(0, ctx), getAffineDimExpr(1, ctx),
                      getAffineDimExpr(2, ctx)},
                     ctx);

  Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.0f));
  Value emptyRows = tensor::EmptyOp::create(b, loc, rowSizes, f32);
  Value sumInit = linalg::FillOp::create(b, loc, zero, emptyRows).getResult(0);
  SmallVector<utils::IteratorType> reduceIterators(
      3, utils::IteratorType::parallel);
  reduceIterators.push_back(utils::IteratorType::reduction);
  Value sumOfSquares =
      linalg::GenericOp::create(
          b, loc, sumInit.getType(), ValueRange{x}, ValueRange{sumInit},
          ArrayRef<AffineMap>{identity, dropLast}, reduceIterators,
          [](OpBuilder &nb, Location nloc, ValueRange args) {
            Value elem = extendToF32(nb, nloc, args[0]);
            Value square = arith::MulFOp::create(nb, nloc, elem, elem);
            Value sum = arith::AddFOp::create(nb, nloc, args[1], square);
            linalg::YieldOp::create(nb, nloc, sum);
          })
          .getResult(0);

  Value emptyOut = tensor::EmptyOp::create(b, loc, sizes, f32);
  Value epsValue = arith::ConstantOp::create(
      b, loc, b.getF32FloatAttr(static_cast<float>(eps)));
  SmallVector<utils::IteratorType> parallel(4, utils::IteratorType::parallel);
  (void)type;
  return linalg::GenericOp::create(
             b, loc, emptyOut.getType(), ValueRange{x, sumOfSquares},
             ValueRange{emptyOut},
             ArrayRef<AffineMap>{identity, dropLast, identity}, parallel,
             [&](OpBuilder &nb, Location nloc, ValueRange args) {
               Value elem = extendToF32(nb, nloc, args[0]);
               Value shifted =
                   arith::AddFOp::create(nb, nloc, args[1], epsValue);
               Value inverse = math::RsqrtOp::create(nb, nloc, shifted);
               Value scaled = arith::MulFOp::create(nb, nloc, elem, inverse);
               linalg::YieldOp::create(nb, nloc, scaled);
             })
      .getResult(0);
}

/// Returns `2 * beta` in f32 (allow_neg_eigval: beta in (0, 2)).
static Value buildDoubled(OpBuilder &b, Location loc, Value beta) {
  auto type = cast<RankedTensorType>(beta.getType());
  Value init = tensor::EmptyOp::create(
      b, loc, tensor::getMixedSizes(b, loc, beta), b.getF32Type());
  AffineMap id = b.getMultiDimIdentityMap(type.getRank());
  Value two = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(2.0f));
  return linalg::GenericOp::create(
             b, loc, init.getType(), ValueRange{beta}, ValueRange{init},
             ArrayRef<AffineMap>{id, id},
             SmallVector<utils::IteratorType>(type.getRank(),
                                              utils::IteratorType::parallel),
             [&](OpBuilder &nb, Location nloc, ValueRange args) {
               Value doubled = arith::MulFOp::create(
                   nb, nloc, extendToF32(nb, nloc, args[0]), two);
               linalg::YieldOp::create(nb, nloc, doubled);
             })
      .getResult(0);
}

/// Gated DeltaNet-2 in the general form: a = alpha * k, b = erase * k and
/// values write * v, all in f32. Loops (b,t,h,kk) for a and b, (b,t,hv,vv)
/// for the values.
struct EraseWriteParts {
  Value a, b, values;
};
static EraseWriteParts buildEraseWrite(OpBuilder &b, Location loc,
                                       AttentionOp op, Value k) {
  MLIRContext *ctx = b.getContext();
  Type f32 = b.getF32Type();
  SmallVector<OpFoldResult> keySizes = mixedSizes(b, loc, k);
  AffineMap id = b.getMultiDimIdentityMap(4);

  // alpha: exp(g) per channel, per head, per fixed head decay, or 1.
  SmallVector<Value> inputs = {k};
  SmallVector<AffineMap> maps = {id};
  switch (op.getGate()) {
  case GateKind::None:
    break;
  case GateKind::Fixed: {
    ArrayRef<float> decay = *op.getLogDecay();
    auto type =
        RankedTensorType::get({static_cast<int64_t>(decay.size())}, f32);
    inputs.push_back(
        arith::ConstantOp::create(b, loc, DenseElementsAttr::get(type, decay)));
    maps.push_back(dimMap(ctx, 4, {2}));
    break;
  }
  case GateKind::Scalar:
    inputs.push_back(op.getG());
    maps.push_back(dimMap(ctx, 4, {0, 1, 2}));
    break;
  case GateKind::Channel:
    inputs.push_back(op.getG());
    maps.push_back(id);
    break;
  }
  maps.push_back(id);
  bool gated = inputs.size() > 1;
  Value a = buildGeneric(
      b, loc, inputs, emptyTensor(b, loc, keySizes, f32), maps, 4, 0,
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Value key = extendToF32(nb, l, args[0]);
        if (!gated)
          return key;
        return mulF(nb, l, key,
                    math::ExpOp::create(nb, l, extendToF32(nb, l, args[1])));
      });
  auto product = [&](Value x, Value y, ArrayRef<OpFoldResult> sizes) {
    return buildGeneric(b, loc, ValueRange{x, y},
                        emptyTensor(b, loc, sizes, f32), {id, id, id}, 4, 0,
                        [](OpBuilder &nb, Location l, ValueRange args) {
                          return mulExtended(nb, l, args[0], args[1]);
                        });
  };
  Value erase = product(op.getErase(), k, keySizes);
  Value values =
      product(op.getWrite(), op.getV(), mixedSizes(b, loc, op.getV()));
  return {a, erase, values};
}

namespace {
struct AttentionToRecurrence : OpRewritePattern<AttentionOp> {
  AttentionToRecurrence(MLIRContext *ctx, double l2normEps)
      : OpRewritePattern(ctx), l2normEps(l2normEps) {}

  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    Value q = op.getQ();
    Value k = op.getK();
    if (op.getQkL2norm()) {
      q = buildL2Normalize(rewriter, loc, q, l2normEps);
      k = buildL2Normalize(rewriter, loc, k, l2normEps);
    }
    LowRank lowRank =
        op.getUpdate() == UpdateRule::Delta ? LowRank::Delta : LowRank::None;
    Value beta = op.getBeta();
    if (op.getAllowNegEigval())
      beta = buildDoubled(rewriter, loc, beta);
    Value values = op.getV(), a, b;
    if (op.getUpdate() == UpdateRule::EraseWrite) {
      EraseWriteParts parts = buildEraseWrite(rewriter, loc, op, k);
      lowRank = LowRank::General;
      a = parts.a;
      b = parts.b;
      values = parts.values;
    }
    FloatAttr eps;
    if (op.getNormalizer())
      eps = rewriter.getF32FloatAttr(op.getEffectiveEps());
    Value oInit = emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, values),
                              op.getO().getType().getElementType());
    if (oInit.getType() != op.getO().getType())
      oInit = tensor::CastOp::create(rewriter, loc, op.getO().getType(), oInit);
    Value state = op.getInitialState();
    if (!state) {
      state = zeroState(rewriter, loc, q, values, op.getCuSeqlens());
      if (Value finalState = op.getFinalState())
        if (state.getType() != finalState.getType())
          state = tensor::CastOp::create(rewriter, loc, finalState.getType(),
                                         state);
    }
    auto recurrence = RecurrenceOp::create(
        rewriter, loc, oInit.getType(), state.getType(), q, k, values,
        op.getG(), beta, a, b, op.getCuSeqlens(), ValueRange{oInit, state},
        op.getGateAttr(), op.getLogDecayAttr(), LowRankAttr::get(ctx, lowRank),
        rewriter.getF32FloatAttr(op.getEffectiveScale()),
        op.getNormalizerAttr(), eps);
    SmallVector<Value> results = {recurrence.getO()};
    if (op.getFinalState())
      results.push_back(recurrence.getFinalState());
    replaceWithCasts(rewriter, op, results);
    return success();
  }

  double l2normEps;
};

struct LaLowerToRecurrencePass
    : la::impl::LaLowerToRecurrencePassBase<LaLowerToRecurrencePass> {
  using Base::Base;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateLowerToRecurrencePatterns(patterns, l2normEps);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace

void mlir::la::populateLowerToRecurrencePatterns(RewritePatternSet &patterns,
                                                 double l2normEps) {
  patterns.add<AttentionToRecurrence>(patterns.getContext(), l2normEps);
}
