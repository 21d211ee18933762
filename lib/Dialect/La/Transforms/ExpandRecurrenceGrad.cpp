//===- ExpandRecurrenceGrad.cpp - the adjoint as la.recurrence ops --------===//
//
// The adjoint of a recurrence with a diagonal decay is three recurrences of
// the same kind, two of them run backward in time, so the forward's
// chunking, fusion and tiling apply to the backward unchanged. For
// `S_t = Diag(alpha_t) S_{t-1} + k_t v_t^T`, `o_t = S_t^T (s q_t)` and
// `G_t = dL/dS_t = Diag(alpha_{t+1}) G_{t+1} + s q_t do_t^T`:
//
//   dq_t = s S_t do_t      S^T in forward time: keys v, values k, query do
//   dv_t = G_t^T k_t       G in reverse time:  keys s q, values do, query k
//   dk_t = G_t v_t         G^T in reverse time: keys do, values s q, query v
//   dg_t = sum_{u >= t} (q_u * dq_u - k_u * dk_u) + rowsum(S_T * dS_T)
//   dS_0 = Diag(alpha_0) G_0
//
// (the gate sum follows from o and S_T depending on the gates only through
// exp(c_u - c_t) with c the cumulative log-gates; for a scalar gate the
// products are summed over K). A channel-wise gate decays the K side of S,
// which is the value side of the transposed recurrences: their gate is
// la.recurrence's `gv`. The delta rule's adjoint needs the K-side products
// `S^T k` and `G v`, which no la.recurrence computes, so it keeps the token
// loops of convert-la-to-linalg.
//
//===----------------------------------------------------------------------===//

#include "la/Dialect/La/LaPasses.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir {
namespace la {
#define GEN_PASS_DEF_LAEXPANDRECURRENCEGRADPASS
#include "la/Dialect/La/LaPasses.h.inc"
} // namespace la
} // namespace mlir

using namespace mlir;
using namespace mlir::la;

namespace {
/// Builds the re-indexed inputs of the adjoint recurrences; T, H and HV are
/// static (the pattern checks).
struct AdjointBuilder {
  OpBuilder &b;
  Location loc;
  MLIRContext *ctx;
  int64_t time, heads, group;
  /// Packed sequences (B = 1), or null.
  Value cuSeqlens;

  /// `x` : [B,T,H,...] (rank 3 or 4) as an f32 tensor whose head axis is
  /// widened to the value heads (`widen`: head hv reads hv floordiv group),
  /// scaled by `scale`; `x` itself when that changes nothing.
  Value remap(Value x, bool widen, float scale = 1.0f) {
    auto type = cast<RankedTensorType>(x.getType());
    if (type.getElementType().isF32() && (!widen || group == 1) &&
        scale == 1.0f)
      return x;
    unsigned rank = type.getRank();
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
    if (widen)
      sizes[2] = b.getIndexAttr(heads * group);
    SmallVector<AffineExpr> exprs;
    for (unsigned d = 0; d < rank; ++d)
      exprs.push_back(getAffineDimExpr(d, ctx));
    if (widen)
      exprs[2] = exprs[2].floorDiv(group);
    AffineMap input = AffineMap::get(rank, 0, exprs, ctx);
    AffineMap id = b.getMultiDimIdentityMap(rank);
    Value scaleValue = constantF32(b, loc, scale);
    return buildGeneric(
        b, loc, ValueRange{x}, emptyTensor(b, loc, sizes, b.getF32Type()),
        {input, id}, rank, 0, [&](OpBuilder &nb, Location l, ValueRange args) {
          Value value = extendToF32(nb, l, args[0]);
          return scale == 1.0f ? value : mulF(nb, l, value, scaleValue);
        });
  }

  /// A state [N,HV,K,V] with its last two axes swapped.
  Value transpose(Value state) {
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, state);
    std::swap(sizes[2], sizes[3]);
    return buildGeneric(
        b, loc, ValueRange{state}, emptyTensor(b, loc, sizes, b.getF32Type()),
        {dimMap(ctx, 4, {0, 1, 3, 2}), b.getMultiDimIdentityMap(4)}, 4, 0,
        [](OpBuilder &, Location, ValueRange args) { return args[0]; });
  }

  /// Sums `x` over the value heads of each key head along `headDim`.
  Value sumGroups(Value x, unsigned headDim) {
    return la::sumGroups(b, loc, x, headDim, b.getIndexAttr(heads), group);
  }

  /// `la.recurrence` with a key-side gate `gate` (scalar [B,T,H] or channel
  /// [B,T,H,K]) and a value-side gate `valueGate`, each optional, from
  /// `state`; its inits are an f32 output and the state.
  RecurrenceOp recurrence(Value q, Value k, Value v, Value gate,
                          Value valueGate, Value state, float scale,
                          bool reverse) {
    SmallVector<OpFoldResult> oSizes = mixedSizes(b, loc, v);
    oSizes[3] = mixedSizes(b, loc, state)[3];
    Value oInit = emptyTensor(b, loc, oSizes, b.getF32Type());
    GateKind kind = GateKind::None;
    if (gate)
      kind = cast<RankedTensorType>(gate.getType()).getRank() == 4
                 ? GateKind::Channel
                 : GateKind::Scalar;
    return RecurrenceOp::create(
        b, loc, oInit.getType(), state.getType(), q, k, v, gate, valueGate,
        Value(), Value(), Value(), cuSeqlens, ValueRange{oInit, state},
        GateKindAttr::get(ctx, kind), DenseF32ArrayAttr(),
        LowRankAttr::get(ctx, LowRank::None), b.getF32FloatAttr(scale),
        UnitAttr(), FloatAttr(), reverse ? b.getUnitAttr() : UnitAttr());
  }

  /// `sum_{u >= t} x_u` along T of x : [B,T,H] or [B,T,H,K] (a loop over
  /// tokens).
  Value reverseCumsum(Value x) {
    Value zero = arith::ConstantIndexOp::create(b, loc, 0);
    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    Value count = arith::ConstantIndexOp::create(b, loc, time);
    SmallVector<OpFoldResult> rowSizes = mixedSizes(b, loc, x);
    rowSizes.erase(rowSizes.begin() + 1);
    Value output = emptyTensor(b, loc, mixedSizes(b, loc, x), b.getF32Type());
    unsigned rowRank = rowSizes.size();
    AffineMap id = b.getMultiDimIdentityMap(rowRank);
    auto loop = scf::ForOp::create(
        b, loc, zero, count, one,
        ValueRange{zeroTensor(b, loc, rowSizes), output},
        [&](OpBuilder &nb, Location l, Value r, ValueRange args) {
          Value last = arith::ConstantIndexOp::create(nb, l, time - 1);
          Value t = arith::SubIOp::create(nb, l, last, r);
          Value row = extractUnitSlice(nb, l, x, 1, t);
          Value sum =
              buildGeneric(nb, l, ValueRange{row}, args[0], {id, id}, rowRank,
                           0, [](OpBuilder &ib, Location il, ValueRange a) {
                             return addF(ib, il, a[1], a[0]);
                           });
          Value written = insertAt(nb, l, sum, args[1], 1, t);
          scf::YieldOp::create(nb, l, ValueRange{sum, written});
        });
    return loop.getResult(1);
  }

  /// An scf.for over the packed sequences with `inits`; `body` gets the
  /// sequence's bounds (clamped to [0, T]) and index, and the loop values.
  scf::ForOp
  forEachSequence(ValueRange inits,
                  function_ref<SmallVector<Value>(OpBuilder &, Location, Value,
                                                  Value, Value, ValueRange)>
                      body) {
    Value zero = arith::ConstantIndexOp::create(b, loc, 0);
    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    Value offsets = tensor::DimOp::create(b, loc, cuSeqlens, 0);
    Value count = arith::SubIOp::create(b, loc, offsets, one);
    return scf::ForOp::create(
        b, loc, zero, count, one, inits,
        [&](OpBuilder &nb, Location l, Value n, ValueRange args) {
          Value tokens = arith::ConstantIndexOp::create(nb, l, time);
          std::pair<Value, Value> bounds =
              extractSequenceBounds(nb, l, cuSeqlens, n, tokens);
          scf::YieldOp::create(
              nb, l, body(nb, l, bounds.first, bounds.second, n, args));
        });
  }

  /// `x` [1,T,...] with `then(start, end, acc)` applied to non-empty
  /// sequences only (an scf.if in the sequence loop).
  Value forNonEmptySequences(
      Value x,
      function_ref<Value(OpBuilder &, Location, Value, Value, Value, Value)>
          then) {
    return forEachSequence(
               ValueRange{x},
               [&](OpBuilder &nb, Location l, Value start, Value end, Value n,
                   ValueRange args) -> SmallVector<Value> {
                 Value nonEmpty = arith::CmpIOp::create(
                     nb, l, arith::CmpIPredicate::ult, start, end);
                 auto choice = scf::IfOp::create(
                     nb, l, TypeRange{args[0].getType()}, nonEmpty,
                     /*withElseRegion=*/true);
                 OpBuilder::InsertionGuard guard(nb);
                 nb.setInsertionPointToStart(choice.thenBlock());
                 scf::YieldOp::create(nb, l,
                                      then(nb, l, start, end, n, args[0]));
                 nb.setInsertionPointToStart(choice.elseBlock());
                 scf::YieldOp::create(nb, l, args[0]);
                 return {choice.getResult(0)};
               })
        .getResult(0);
  }

  /// The gates [1,T,H(,K)] with the last token of every sequence set to 0:
  /// G_t of a sequence's last token is its final state's cotangent, not
  /// decayed by the next sequence's first gate.
  Value zeroLastTokens(Value gates) {
    SmallVector<OpFoldResult> rowSizes = mixedSizes(b, loc, gates);
    rowSizes[1] = b.getIndexAttr(1);
    return forNonEmptySequences(gates, [&](OpBuilder &nb, Location l, Value,
                                           Value end, Value, Value acc) {
      Value one = arith::ConstantIndexOp::create(nb, l, 1);
      Value last = arith::SubIOp::create(nb, l, end, one);
      Value row = zeroTensor(nb, l, rowSizes);
      return insertAt(nb, l, row, acc, 1, last);
    });
  }

  /// The gates [1,T,H(,K)] at every sequence's first token, [N,H(,K)]
  /// (0 for an empty sequence, whose state no token decays).
  Value firstGates(Value gates, OpFoldResult numSequences) {
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, gates);
    sizes.erase(sizes.begin());
    sizes[0] = numSequences;
    return forNonEmptySequences(
        zeroTensor(b, loc, sizes),
        [&](OpBuilder &nb, Location l, Value start, Value, Value n, Value acc) {
          Value row = sliceDim(nb, l, gates, 1, start, nb.getIndexAttr(1));
          Value first = extractUnitSlice(nb, l, row, 0, nb.getIndexAttr(0));
          return insertAt(nb, l, first, acc, 0, n);
        });
  }

  /// Per sequence, `init[n] + sum_{u >= t} x_u` over its tokens t, for x
  /// [1,T,H(,K)] and init [N,H(,K)]; 0 outside every sequence.
  Value reverseCumsumPerSequence(Value x, Value init) {
    SmallVector<OpFoldResult> rowSizes = mixedSizes(b, loc, x);
    rowSizes.erase(rowSizes.begin() + 1);
    unsigned rowRank = rowSizes.size();
    AffineMap id = b.getMultiDimIdentityMap(rowRank);
    Value output = zeroTensor(b, loc, mixedSizes(b, loc, x));
    return forNonEmptySequences(output, [&](OpBuilder &nb, Location l,
                                            Value start, Value end, Value n,
                                            Value acc) {
      Value zero = arith::ConstantIndexOp::create(nb, l, 0);
      Value one = arith::ConstantIndexOp::create(nb, l, 1);
      Value length = arith::SubIOp::create(nb, l, end, start);
      Value last = arith::SubIOp::create(nb, l, end, one);
      // init[n] as a row [1,H(,K)].
      Value initRow = sliceDim(nb, l, init, 0, n, nb.getIndexAttr(1));
      auto loop = scf::ForOp::create(
          nb, l, zero, length, one, ValueRange{initRow, acc},
          [&](OpBuilder &ib, Location il, Value r, ValueRange args) {
            Value t = arith::SubIOp::create(ib, il, last, r);
            Value row = extractUnitSlice(ib, il, x, 1, t);
            Value sum = buildGeneric(
                ib, il, ValueRange{row}, args[0], {id, id}, rowRank, 0,
                [](OpBuilder &sb, Location sl, ValueRange a) {
                  return addF(sb, sl, a[1], a[0]);
                });
            Value written = insertAt(ib, il, sum, args[1], 1, t);
            scf::YieldOp::create(ib, il, ValueRange{sum, written});
          });
      return loop.getResult(1);
    });
  }
};

/// la.recurrence_grad with no, a scalar (or fixed) or a channel-wise decay,
/// no low-rank part and no normaliser (la-simplify-recurrence rewrites it
/// first), static T, H and HV (B = 1 with cu_seqlens) -> three
/// la.recurrence ops and element-wise products.
struct RecurrenceGradToRecurrences : OpRewritePattern<RecurrenceGradOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RecurrenceGradOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getLowRank() != LowRank::None || op.getNormalizer())
      return rewriter.notifyMatchFailure(
          op, "only a diagonal decay without low-rank part or normaliser");
    bool channel = op.getGate() == GateKind::Channel;
    RankedTensorType qType = op.getQ().getType();
    RankedTensorType vType = op.getV().getType();
    int64_t time = qType.getDimSize(1), heads = qType.getDimSize(2),
            valueHeads = vType.getDimSize(2);
    if (ShapedType::isDynamic(time) || ShapedType::isDynamic(heads) ||
        ShapedType::isDynamic(valueHeads) || time < 1)
      return rewriter.notifyMatchFailure(op, "needs static T, H and HV");
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    Value cuSeqlens = op.getCuSeqlens();
    if (cuSeqlens && qType.getDimSize(0) != 1)
      return rewriter.notifyMatchFailure(op, "needs B = 1 with cu_seqlens");
    AdjointBuilder a{rewriter,           loc,      ctx, time, heads,
                     valueHeads / heads, cuSeqlens};
    float scale = op.getScale().convertToFloat();
    Type f32 = rewriter.getF32Type();

    // The per-token log-decay [B,T,H] (a fixed decay broadcast), or none.
    Value gate = op.getG();
    if (op.getGate() == GateKind::Fixed)
      gate = broadcastLogDecay(rewriter, loc, *op.getLogDecay(), op.getQ());
    if (gate &&
        !cast<RankedTensorType>(gate.getType()).getElementType().isF32())
      gate = a.remap(gate, false);
    // G_t decays by alpha_{t+1}: the gates shifted one token earlier (none
    // after the last token), for the recurrences in reverse time.
    Value shiftedGate;
    if (gate && time == 1) {
      shiftedGate = zeroTensor(rewriter, loc, mixedSizes(rewriter, loc, gate));
    } else if (gate) {
      Value later = sliceDim(rewriter, loc, gate, 1, rewriter.getIndexAttr(1),
                             rewriter.getIndexAttr(time - 1));
      unsigned gateRank = cast<RankedTensorType>(gate.getType()).getRank();
      SmallVector<OpFoldResult> low(gateRank, rewriter.getIndexAttr(0));
      SmallVector<OpFoldResult> high(gateRank, rewriter.getIndexAttr(0));
      high[1] = rewriter.getIndexAttr(1);
      shiftedGate =
          tensor::PadOp::create(rewriter, loc, Type(), later, low, high,
                                constantF32(rewriter, loc, 0.0f));
      // Packed sequences: no decay across a sequence's end.
      if (cuSeqlens)
        shiftedGate = a.zeroLastTokens(shiftedGate);
    }
    Value dFinal = op.getDFinalState();
    if (!dFinal)
      dFinal = zeroTensor(rewriter, loc,
                          mixedSizes(rewriter, loc, op.getInitialState()));

    // dq: S^T in forward time. (Each operand is built in its own statement:
    // la's IR must not depend on the host compiler's argument order.)
    Value dO = a.remap(op.getDO(), false);
    Value values = a.remap(op.getV(), false);
    Value forwardValues = a.remap(op.getK(), /*widen=*/true);
    // A channel gate decays the K side: the values of this recurrence.
    Value forwardGate = gate ? a.remap(gate, true) : Value();
    Value forwardState = a.transpose(op.getInitialState());
    RecurrenceOp forward =
        a.recurrence(dO, values, forwardValues, channel ? Value() : forwardGate,
                     channel ? forwardGate : Value(), forwardState, scale,
                     /*reverse=*/false);
    Value dq = a.sumGroups(forward.getO(), 2);

    // dv and dS_0: G in reverse time (q and k share an element type).
    Value scaledDO = a.remap(op.getDO(), false, scale);
    RecurrenceOp adjoint =
        a.recurrence(op.getK(), op.getQ(), scaledDO, shiftedGate,
                     /*valueGate=*/Value(), dFinal, 1.0f, /*reverse=*/true);
    Value dv = adjoint.getO();
    Value dInitial = adjoint.getFinalState();
    if (gate) {
      // dS_0 = alpha_0 G_0 (per sequence: alpha at its first token).
      Value first = cuSeqlens
                        ? a.firstGates(gate, tensor::getMixedSize(rewriter, loc,
                                                                  dFinal, 0))
                        : extractUnitSlice(rewriter, loc, gate, 1,
                                           rewriter.getIndexAttr(0));
      dInitial = buildGeneric(
          rewriter, loc, ValueRange{first, dInitial},
          emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, dInitial), f32),
          {channel ? dimMap(ctx, 4, {0, -2, 2}, a.group)
                   : dimMap(ctx, 4, {0, -2}, a.group),
           rewriter.getMultiDimIdentityMap(4),
           rewriter.getMultiDimIdentityMap(4)},
          4, 0, [](OpBuilder &nb, Location l, ValueRange args) {
            Value alpha =
                math::ExpOp::create(nb, l, extendToF32(nb, l, args[0]));
            return mulF(nb, l, alpha, args[1]);
          });
    }

    // dk: G^T in reverse time.
    Value transposedValues = a.remap(op.getQ(), true, scale);
    Value transposedGate = shiftedGate ? a.remap(shiftedGate, true) : Value();
    Value transposedState = a.transpose(dFinal);
    RecurrenceOp transposed = a.recurrence(
        values, dO, transposedValues, channel ? Value() : transposedGate,
        channel ? transposedGate : Value(), transposedState, 1.0f,
        /*reverse=*/true);
    Value dk = a.sumGroups(transposed.getO(), 2);

    SmallVector<Value> results = {dq, dk, dv, dInitial};
    if (op.getG()) {
      // dc_t = q_t * dq_t - k_t * dk_t, and the final state's S_T * dS_T
      // summed over V (S_T^T is the forward's final state) on the last
      // token; both summed over K as well for a scalar gate.
      AffineMap id = rewriter.getMultiDimIdentityMap(4);
      AffineMap row = channel ? id : dimMap(ctx, 4, {0, 1, 2});
      SmallVector<OpFoldResult> rowSizes = mixedSizes(rewriter, loc, op.getQ());
      if (!channel)
        rowSizes.pop_back();
      unsigned rowRank = rowSizes.size();
      Value dc = buildGeneric(
          rewriter, loc, ValueRange{op.getQ(), dq, op.getK(), dk},
          zeroTensor(rewriter, loc, rowSizes), {id, id, id, id, row}, rowRank,
          4 - rowRank, [](OpBuilder &nb, Location l, ValueRange args) {
            Value fromQ = mulF(nb, l, extendToF32(nb, l, args[0]), args[1]);
            Value fromK = mulF(nb, l, extendToF32(nb, l, args[2]), args[3]);
            return addF(nb, l, args[4],
                        arith::SubFOp::create(nb, l, fromQ, fromK));
          });
      SmallVector<OpFoldResult> headSizes = mixedSizes(rewriter, loc, dFinal);
      headSizes.resize(channel ? 3 : 2);
      Value finalTerm = buildGeneric(
          rewriter, loc, ValueRange{forward.getFinalState(), dFinal},
          zeroTensor(rewriter, loc, headSizes),
          {dimMap(ctx, 4, {0, 1, 3, 2}), id,
           channel ? dimMap(ctx, 4, {0, 1, 2}) : dimMap(ctx, 4, {0, 1})},
          headSizes.size(), 4 - headSizes.size(),
          [](OpBuilder &nb, Location l, ValueRange args) {
            return addF(nb, l, args[2], mulF(nb, l, args[0], args[1]));
          });
      finalTerm = a.sumGroups(finalTerm, 1);
      if (cuSeqlens) {
        // Each sequence's own sum, from its final state's term.
        results.push_back(a.reverseCumsumPerSequence(dc, finalTerm));
        replaceWithCasts(rewriter, op, results);
        return success();
      }
      Value sums = a.reverseCumsum(dc);
      AffineMap rowId = rewriter.getMultiDimIdentityMap(rowRank);
      Value dg = buildGeneric(
          rewriter, loc, ValueRange{sums, finalTerm},
          emptyTensor(rewriter, loc, rowSizes, f32),
          {rowId, channel ? dimMap(ctx, 4, {0, 2, 3}) : dimMap(ctx, 3, {0, 2}),
           rowId},
          rowRank, 0, [](OpBuilder &nb, Location l, ValueRange args) {
            return addF(nb, l, args[0], args[1]);
          });
      results.push_back(dg);
    }
    replaceWithCasts(rewriter, op, results);
    return success();
  }
};

struct LaExpandRecurrenceGradPass
    : la::impl::LaExpandRecurrenceGradPassBase<LaExpandRecurrenceGradPass> {
  using Base::Base;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateSimplifyRecurrencePatterns(patterns);
    populateExpandRecurrenceGradPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace

void mlir::la::populateExpandRecurrenceGradPatterns(
    RewritePatternSet &patterns) {
  patterns.add<RecurrenceGradToRecurrences>(patterns.getContext());
}
