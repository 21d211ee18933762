//===- ExpandRecurrenceGrad.cpp - the adjoint as la.recurrence ops --------===//
//
// The adjoint of a recurrence with a diagonal decay is three recurrences of
// the same kind (two with `transposed-reads`, below), two of them run
// backward in time, so the forward's
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
// la.recurrence's `gv`. A value-side gate `gv` (`S_t = Diag(alpha_t) S_{t-1}
// Diag(gamma_t) + k_t v_t^T`) is the same on the other side: the key-side
// gate of the transposed recurrences (a scalar decay folded into it), the
// value-side gate of G; and by the same argument over V,
//
//   dgv_t = sum_{u >= t} (o_u * do_u - v_u * dv_u) + colsum(S_T * dS_T)
//
// with o recomputed by a fourth recurrence (the forward's).
//
// With `transposed-reads` (the default) dk is G's read from its value side,
// la.recurrence's `transposed_query` v, and G^T is not run: G and G^T are
// one state, and the read shares G's chunk states.
//
// The delta rule (`S_t = D_t S_{t-1} - b_t a_t^T S_{t-1} + b_t v_t^T`,
// `b = beta k`, `a = alpha * k`) is a diagonal recurrence once its reads
// `p_t = a_t^T S_{t-1}` are known: `S_t = D_t S_{t-1} + b_t (v_t - p_t)^T`.
// Likewise its adjoint `G_{t-1} = A_t^T G_t + s q_{t-1} do_{t-1}^T`, with
// `A^T = D - a b^T`, is diagonal given `dv_t = G_t^T b_t`:
// `G_{t-1} = D_t G_t - a_t dv_t^T + s q_{t-1} do_{t-1}^T`. So:
//
//   p_t  = a_t^T S_{t-1}   the forward recurrence on the inputs one token
//                          later (S_{t-1} at token t), query a
//   dv_t = G_t^T b_t       G in reverse time, the general low-rank form with
//                          a' = b_{t+1}, b' = a_{t+1}: keys s q, values do
//   x_t  = v_t - p_t
//   dq_t = s S_t do_t      S^T in forward time: keys x, values b, query do
//   S_t dv_t               the same, query dv
//   y_t  = G_t x_t         G^T in reverse time, as two recurrences: keys do,
//                          values s q; keys dv_{t+1}, values -a_{t+1}
//   z_t  = alpha_t * da_t = b_t (x_t . dv_t) - S_t dv_t
//   dk = beta y + z, dbeta = k . y, dc_t = q_t * dq_t - k_t * (beta y - z)
//   dS_0 = D_0 G_0 - a_0 dv_0^T
//
// (`z` is `-(D_t S_{t-1}) dv_t`, formed from `S_t` without dividing by the
// gate). Six recurrences instead of token loops; four with `transposed-reads`,
// where y = G x is the adjoint's own value-side read.
//
// The general low-rank form (`S_t = D_t S_{t-1} - b_t a_t^T S_{t-1} + k_t
// v_t^T`, b != k) takes the same two general reads, p and `r_t = G_t^T b_t`;
// then S and G are diagonal but written twice per token, and each product
// reads a state twice, so the diagonal recurrences run over sub-steps (the
// inputs interleaved along T, `AdjointBuilder::interleave`):
//
//   S^T, forward, per token: (read r_t)         da_t = -S_{t-1} r_t
//                            (decay, write v k^T)
//                            (write -p b^T, read s do_t)   dq_t
//   G^T, reverse, per token: (read p_t)         db_t = -G_t p_t
//                            (write do (s q)^T, read v_t)   dk_t
//                            (decay D_{t+1}, write -r_{t+1} a_{t+1}^T)
//   G,   reverse, per token: (write (s q) do^T, read k_t)  dv_t
//                            (decay D_{t+1}, write -a_{t+1} r_{t+1}^T)
//   dg_t = sum_{u >= t} (q*dq - k*dk - b*db + a*da)_u - (a*da)_t
//          + rowsum(S_T * dS_T)
//
// (the read `a_u^T S_{u-1}` depends on the gates before u only).
//
//===----------------------------------------------------------------------===//

#include "la/Dialect/La/LaPasses.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace mlir {
namespace la {
#define GEN_PASS_DEF_LAEXPANDRECURRENCEGRADPASS
#include "la/Dialect/La/LaPasses.h.inc"
} // namespace la
} // namespace mlir

using namespace mlir;
using namespace mlir::la;

namespace {
/// A term `sign * x * dx` ([B,T,H,K] each, or [B,T,HV,V]; x of any float
/// type, dx f32) of a log-gate's gradient.
struct GateTerm {
  Value x, dx;
  float sign;
};

/// Builds the re-indexed inputs of the adjoint recurrences; H and HV are
/// static (the pattern checks), T static or dynamic.
struct AdjointBuilder {
  OpBuilder &b;
  Location loc;
  MLIRContext *ctx;
  OpFoldResult time;
  int64_t heads, group;
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

  /// A state [N,HV,K,V] with its last two axes swapped, times `factor`.
  Value transpose(Value state, float factor = 1.0f) {
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, state);
    std::swap(sizes[2], sizes[3]);
    Value factorValue = constantF32(b, loc, factor);
    return buildGeneric(
        b, loc, ValueRange{state}, emptyTensor(b, loc, sizes, b.getF32Type()),
        {dimMap(ctx, 4, {0, 1, 3, 2}), b.getMultiDimIdentityMap(4)}, 4, 0,
        [&](OpBuilder &nb, Location l, ValueRange args) {
          return factor == 1.0f ? args[0] : mulF(nb, l, args[0], factorValue);
        });
  }

  /// A state [N,HV,K,V] (f32) times `factor`.
  Value scaleState(Value state, float factor) {
    Value factorValue = constantF32(b, loc, factor);
    AffineMap id = b.getMultiDimIdentityMap(4);
    return buildGeneric(
        b, loc, ValueRange{state},
        emptyTensor(b, loc, mixedSizes(b, loc, state), b.getF32Type()),
        {id, id}, 4, 0, [&](OpBuilder &nb, Location l, ValueRange args) {
          return mulF(nb, l, args[0], factorValue);
        });
  }

  /// Sums `x` over the value heads of each key head along `headDim`.
  Value sumGroups(Value x, unsigned headDim) {
    return la::sumGroups(b, loc, x, headDim, b.getIndexAttr(heads), group);
  }

  /// `la.recurrence` with a key-side gate `gate` (scalar [B,T,H] or channel
  /// [B,T,H,K]) and a value-side gate `valueGate`, each optional, from
  /// `state`; its inits are an f32 output and the state. A `beta` makes it
  /// the delta rule, `lowA` and `lowB` the general low-rank form.
  RecurrenceOp recurrence(Value q, Value k, Value v, Value gate,
                          Value valueGate, Value state, float scale,
                          bool reverse, Value beta = Value(),
                          Value lowA = Value(), Value lowB = Value(),
                          Value transposedQuery = Value()) {
    SmallVector<OpFoldResult> oSizes = mixedSizes(b, loc, v);
    oSizes[3] = mixedSizes(b, loc, state)[3];
    Value oInit = emptyTensor(b, loc, oSizes, b.getF32Type());
    SmallVector<Value> inits = {oInit, state};
    if (transposedQuery) {
      oSizes[3] = mixedSizes(b, loc, state)[2];
      inits.push_back(emptyTensor(b, loc, oSizes, b.getF32Type()));
    }
    GateKind kind = GateKind::None;
    if (gate)
      kind = cast<RankedTensorType>(gate.getType()).getRank() == 4
                 ? GateKind::Channel
                 : GateKind::Scalar;
    LowRank lowRank = beta   ? LowRank::Delta
                      : lowA ? LowRank::General
                             : LowRank::None;
    return RecurrenceOp::create(
        b, loc, oInit.getType(), state.getType(),
        transposedQuery ? inits[2].getType() : Type(), q, k, v, gate, valueGate,
        beta, lowA, lowB, cuSeqlens, /*state_indices=*/Value(), transposedQuery,
        inits, GateKindAttr::get(ctx, kind), DenseF32ArrayAttr(),
        LowRankAttr::get(ctx, lowRank), b.getF32FloatAttr(scale), UnitAttr(),
        FloatAttr(), reverse ? b.getUnitAttr() : UnitAttr());
  }

  /// `acc + sum_i sign_i * x_i[t] * dx_i[t]` for one token t of the terms
  /// ([B,T,H,K] each), summed over the last axis too unless `perChannel`:
  /// acc is [B,H(,K)].
  Value addTermsAt(OpBuilder &nb, Location l, ArrayRef<GateTerm> terms, Value t,
                   Value acc, bool perChannel) {
    SmallVector<Value> rows;
    SmallVector<float> signs;
    for (const GateTerm &term : terms) {
      rows.push_back(extractUnitSlice(nb, l, term.x, 1, t));
      rows.push_back(extractUnitSlice(nb, l, term.dx, 1, t));
      signs.push_back(term.sign);
    }
    AffineMap id = nb.getMultiDimIdentityMap(3);
    SmallVector<AffineMap> maps(rows.size(), id);
    maps.push_back(perChannel ? id : dimMap(ctx, 3, {0, 1}));
    unsigned accRank = perChannel ? 3 : 2;
    return buildGeneric(
        nb, l, rows, acc, maps, accRank, 3 - accRank,
        [&](OpBuilder &ib, Location il, ValueRange args) {
          Value sum = args.back();
          for (auto [i, sign] : llvm::enumerate(signs)) {
            Value product =
                mulF(ib, il, extendToF32(ib, il, args[2 * i]), args[2 * i + 1]);
            sum = sign > 0
                      ? addF(ib, il, sum, product)
                      : arith::SubFOp::create(ib, il, sum, product).getResult();
          }
          return sum;
        });
  }

  /// The loop over tokens t from `last` down to `last - count + 1`
  /// carrying `init + sum_{u >= t} terms_u` (`addTermsAt`) and writing it,
  /// less the terms `excluded` of token t itself, at t of `output`.
  /// Returns the output and the last running sum.
  std::pair<Value, Value>
  reverseTermSums(OpBuilder &ob, Location ol, ArrayRef<GateTerm> terms,
                  ArrayRef<GateTerm> excluded, bool perChannel, Value init,
                  Value output, Value last, Value count) {
    Value zero = arith::ConstantIndexOp::create(ob, ol, 0);
    Value one = arith::ConstantIndexOp::create(ob, ol, 1);
    auto loop = scf::ForOp::create(
        ob, ol, zero, count, one, ValueRange{init, output},
        [&](OpBuilder &nb, Location l, Value r, ValueRange args) {
          Value t = arith::SubIOp::create(nb, l, last, r);
          Value sum = addTermsAt(nb, l, terms, t, args[0], perChannel);
          Value row = sum;
          if (!excluded.empty()) {
            // sum - excluded, as the excluded terms with their signs flipped,
            // accumulated in the output's row (no buffer of its own: the GPU
            // allocates nothing in a loop).
            SmallVector<GateTerm> flipped;
            for (const GateTerm &term : excluded)
              flipped.push_back({term.x, term.dx, -term.sign});
            Value slot = extractUnitSlice(nb, l, args[1], 1, t);
            row = addTermsAt(nb, l, flipped, t, copyInto(nb, l, sum, slot),
                             perChannel);
          }
          Value written = insertAt(nb, l, row, args[1], 1, t);
          scf::YieldOp::create(nb, l, ValueRange{sum, written});
        });
    return {loop.getResult(1), loop.getResult(0)};
  }

  /// `x` copied into `destination` (same shape): a linalg.copy, which
  /// canonicalization keeps (an identity generic would fold to `x`).
  Value copyInto(OpBuilder &nb, Location l, Value x, Value destination) {
    return linalg::CopyOp::create(nb, l, x, destination).getResult(0);
  }

  /// The sizes [B,T,H(,K)] of the terms' running sums.
  SmallVector<OpFoldResult> termSumSizes(ArrayRef<GateTerm> terms,
                                         bool perChannel) {
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, terms.front().x);
    if (!perChannel)
      sizes.pop_back();
    return sizes;
  }

  /// `init + sum_{u >= t} terms_u` along T (`addTermsAt`), less token t's
  /// own `excluded` terms, for init [B,H(,K)] (a loop over tokens).
  Value reverseCumsum(ArrayRef<GateTerm> terms, ArrayRef<GateTerm> excluded,
                      bool perChannel, Value init) {
    Value count = getValueOrCreateConstantIndexOp(b, loc, time);
    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    Value last = arith::SubIOp::create(b, loc, count, one);
    Value output =
        emptyTensor(b, loc, termSumSizes(terms, perChannel), b.getF32Type());
    return reverseTermSums(b, loc, terms, excluded, perChannel, init, output,
                           last, count)
        .first;
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
          Value tokens = getValueOrCreateConstantIndexOp(nb, l, time);
          std::pair<Value, Value> bounds =
              extractSequenceBounds(nb, l, cuSeqlens, n, tokens);
          scf::YieldOp::create(
              nb, l, body(nb, l, bounds.first, bounds.second, n, args));
        });
  }

  /// The loop over the packed sequences carrying `xs`, with `then(start,
  /// end, n, acc)` applied to non-empty sequences only (an scf.if in the
  /// loop); returns the loop.
  scf::ForOp forNonEmptySequences(
      ValueRange xs,
      function_ref<SmallVector<Value>(OpBuilder &, Location, Value, Value,
                                      Value, ValueRange)>
          then) {
    return forEachSequence(
        xs,
        [&](OpBuilder &nb, Location l, Value start, Value end, Value n,
            ValueRange args) -> SmallVector<Value> {
          Value nonEmpty = arith::CmpIOp::create(
              nb, l, arith::CmpIPredicate::ult, start, end);
          auto choice = scf::IfOp::create(nb, l, args.getTypes(), nonEmpty,
                                          /*withElseRegion=*/true);
          OpBuilder::InsertionGuard guard(nb);
          nb.setInsertionPointToStart(choice.thenBlock());
          scf::YieldOp::create(nb, l, then(nb, l, start, end, n, args));
          nb.setInsertionPointToStart(choice.elseBlock());
          scf::YieldOp::create(nb, l, args);
          return SmallVector<Value>(choice.getResults());
        });
  }

  /// `x` [1,T,...] with `then(start, end, n, acc)` applied to non-empty
  /// sequences only.
  Value forNonEmptySequences(
      Value x,
      function_ref<Value(OpBuilder &, Location, Value, Value, Value, Value)>
          then) {
    return forNonEmptySequences(ValueRange{x},
                                [&](OpBuilder &nb, Location l, Value start,
                                    Value end, Value n,
                                    ValueRange acc) -> SmallVector<Value> {
                                  return {then(nb, l, start, end, n, acc[0])};
                                })
        .getResult(0);
  }

  /// `x` [1,T,...] with the last (or first) token of every sequence set to
  /// 0: G_t of a sequence's last token is its final state's cotangent, not
  /// decayed by the next sequence's first gate, and S_{t-1} of a sequence's
  /// first token is its initial state.
  Value zeroEdgeTokens(Value x, bool last) {
    SmallVector<OpFoldResult> rowSizes = mixedSizes(b, loc, x);
    rowSizes[1] = b.getIndexAttr(1);
    return forNonEmptySequences(x, [&](OpBuilder &nb, Location l, Value start,
                                       Value end, Value, Value acc) {
      Value one = arith::ConstantIndexOp::create(nb, l, 1);
      Value token = last ? arith::SubIOp::create(nb, l, end, one) : start;
      // The row zeroed where it is (a zero row of its own would be a buffer
      // per sequence, which a GPU kernel cannot allocate).
      Value slot = extractUnitSlice(nb, l, acc, 1, token);
      Value zero = constantF32(nb, l, 0.0f);
      Value zeros = linalg::FillOp::create(nb, l, zero, slot).getResult(0);
      return insertAt(nb, l, zeros, acc, 1, token);
    });
  }

  /// `x` [B,T,...] (f32) one token earlier (`later` false: token t holds
  /// x_{t+1}) or later (token t holds x_{t-1}), with 0 where no token of
  /// the same sequence is there.
  Value shift(Value x, bool later) {
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
    if (isConstantIntValue(time, 1))
      return zeroTensor(b, loc, sizes);
    // T - 1 tokens kept (none for a run-time T of 1).
    OpFoldResult keptTokens = affine::makeComposedFoldedAffineApply(
        b, loc, getAffineSymbolExpr(0, ctx) - 1, {time});
    Value kept =
        sliceDim(b, loc, x, 1, b.getIndexAttr(later ? 0 : 1), keptTokens);
    unsigned rank = sizes.size();
    SmallVector<OpFoldResult> low(rank, b.getIndexAttr(0));
    SmallVector<OpFoldResult> high(rank, b.getIndexAttr(0));
    (later ? low : high)[1] = b.getIndexAttr(1);
    Value shifted = tensor::PadOp::create(b, loc, Type(), kept, low, high,
                                          constantF32(b, loc, 0.0f));
    return cuSeqlens ? zeroEdgeTokens(shifted, /*last=*/!later) : shifted;
  }

  /// Each sequence's first token of x [1,T,...], [N,...] (0 for an empty
  /// sequence, whose state no token decays); x[:, 0] without packing.
  Value firstTokens(Value x, OpFoldResult numSequences) {
    if (!cuSeqlens)
      return extractUnitSlice(b, loc, x, 1, b.getIndexAttr(0));
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
    sizes.erase(sizes.begin());
    sizes[0] = numSequences;
    return forNonEmptySequences(
        zeroTensor(b, loc, sizes),
        [&](OpBuilder &nb, Location l, Value start, Value, Value n, Value acc) {
          Value row = sliceDim(nb, l, x, 1, start, nb.getIndexAttr(1));
          Value first = extractUnitSlice(nb, l, row, 0, nb.getIndexAttr(0));
          return insertAt(nb, l, first, acc, 0, n);
        });
  }

  /// Per sequence, `init[n] + sum_{u >= t} terms_u` over its tokens t
  /// (`reverseCumsum`), for init [N,H(,K)]; 0 outside every sequence. The
  /// running sum lives in one row made before the loop over the sequences,
  /// into which each sequence copies its init (a slice of init carried by
  /// the token loop would be a buffer per sequence, which a GPU kernel
  /// cannot allocate).
  Value reverseCumsumPerSequence(ArrayRef<GateTerm> terms,
                                 ArrayRef<GateTerm> excluded, bool perChannel,
                                 Value init) {
    Value output = zeroTensor(b, loc, termSumSizes(terms, perChannel));
    SmallVector<OpFoldResult> rowSizes = mixedSizes(b, loc, init);
    rowSizes[0] = b.getIndexAttr(1);
    Value running = emptyTensor(b, loc, rowSizes, b.getF32Type());
    scf::ForOp loop = forNonEmptySequences(
        ValueRange{output, running},
        [&](OpBuilder &nb, Location l, Value start, Value end, Value n,
            ValueRange args) -> SmallVector<Value> {
          Value one = arith::ConstantIndexOp::create(nb, l, 1);
          Value length = arith::SubIOp::create(nb, l, end, start);
          Value last = arith::SubIOp::create(nb, l, end, one);
          Value initRow = sliceDim(nb, l, init, 0, n, nb.getIndexAttr(1));
          Value first = copyInto(nb, l, initRow, args[1]);
          auto [sums, runningSum] = reverseTermSums(
              nb, l, terms, excluded, perChannel, first, args[0], last, length);
          return {sums, runningSum};
        });
    return loop.getResult(0);
  }

  /// The parts [B,T,...] (any float type; null for zeros), all of shape
  /// `sizes`, interleaved along T as one f32 tensor [B,T*n,...]: token t's
  /// part i at t*n + i. A recurrence over it takes n steps per token, so
  /// one la.recurrence writes two terms per token or reads its state
  /// twice.
  Value interleave(ArrayRef<Value> parts, ArrayRef<OpFoldResult> sizes) {
    int64_t n = parts.size();
    unsigned rank = sizes.size();
    SmallVector<OpFoldResult> split(sizes);
    split.insert(split.begin() + 2, b.getIndexAttr(n));
    Value whole = zeroTensor(b, loc, split);
    AffineMap id = b.getMultiDimIdentityMap(rank);
    for (int64_t i = 0; i < n; ++i) {
      if (!parts[i])
        continue;
      Value slot = extractUnitSlice(b, loc, whole, 2, b.getIndexAttr(i));
      Value part =
          buildGeneric(b, loc, ValueRange{parts[i]}, slot, {id, id}, rank, 0,
                       [](OpBuilder &nb, Location l, ValueRange args) {
                         return extendToF32(nb, l, args[0]);
                       });
      whole = insertAt(b, loc, part, whole, 2, b.getIndexAttr(i));
    }
    return tensor::CollapseShapeOp::create(b, loc, whole,
                                           subStepReassociation(rank));
  }

  /// Part i of x [B,T*n,...] (f32): [B,T,...].
  Value subStep(Value x, int64_t n, int64_t i) {
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
    sizes[1] = time;
    sizes.insert(sizes.begin() + 2, b.getIndexAttr(n));
    Value split = tensor::ExpandShapeOp::create(
        b, loc, RankedTensorType::get(staticShape(sizes), b.getF32Type()), x,
        subStepReassociation(sizes.size() - 1), sizes);
    return extractUnitSlice(b, loc, split, 2, b.getIndexAttr(i));
  }

  /// [B,T,n,...] <-> [B,T*n,...] for a tensor of `rank` dims.
  static SmallVector<ReassociationIndices> subStepReassociation(unsigned rank) {
    SmallVector<ReassociationIndices> reassociation = {{0}, {1, 2}};
    for (unsigned d = 2; d < rank; ++d)
      reassociation.push_back({static_cast<int64_t>(d) + 1});
    return reassociation;
  }

  /// This builder for recurrences over n steps per token: the packed
  /// sequences' offsets times n.
  AdjointBuilder withSubSteps(int64_t n) {
    AdjointBuilder wide = *this;
    if (!cuSeqlens)
      return wide;
    Type element = getElementTypeOrSelf(cuSeqlens.getType());
    Value factor =
        arith::ConstantOp::create(b, loc, b.getIntegerAttr(element, n));
    AffineMap id = b.getMultiDimIdentityMap(1);
    wide.cuSeqlens = buildGeneric(
        b, loc, ValueRange{cuSeqlens},
        emptyTensor(b, loc, mixedSizes(b, loc, cuSeqlens), element), {id, id},
        1, 0, [&](OpBuilder &nb, Location l, ValueRange args) {
          return arith::MulIOp::create(nb, l, args[0], factor).getResult();
        });
    return wide;
  }
};

/// la.recurrence_grad with no, a scalar (or fixed) or a channel-wise decay,
/// no low-rank part or the delta rule, no normaliser (la-simplify-recurrence
/// rewrites it first), static H and HV (B = 1 with cu_seqlens) -> three
/// (six with the delta rule) la.recurrence ops and element-wise products.
struct RecurrenceGradToRecurrences : OpRewritePattern<RecurrenceGradOp> {
  RecurrenceGradToRecurrences(MLIRContext *ctx, bool transposedReads)
      : OpRewritePattern(ctx), transposedReads(transposedReads) {}

  /// Whether G is also read from its value side (dk = G v; the delta
  /// rule's y = G x) instead of running G^T as recurrences of its own.
  bool transposedReads;

  LogicalResult matchAndRewrite(RecurrenceGradOp op,
                                PatternRewriter &rewriter) const override {
    bool delta = op.getLowRank() == LowRank::Delta;
    bool general = op.getLowRank() == LowRank::General;
    if (op.getNormalizer() || (general && op.getGv()))
      return rewriter.notifyMatchFailure(
          op, "no normaliser, and no value-side gate with the general "
              "low-rank form");
    bool channel = op.getGate() == GateKind::Channel;
    RankedTensorType qType = op.getQ().getType();
    RankedTensorType vType = op.getV().getType();
    int64_t heads = qType.getDimSize(2), valueHeads = vType.getDimSize(2);
    if (ShapedType::isDynamic(heads) || ShapedType::isDynamic(valueHeads) ||
        qType.getDimSize(1) == 0)
      return rewriter.notifyMatchFailure(op, "needs static H and HV, T != 0");
    Location loc = op.getLoc();
    // T: static, or read from q (a run-time T must be at least 1).
    OpFoldResult time = mixedSizes(rewriter, loc, op.getQ())[1];
    MLIRContext *ctx = op.getContext();
    Value cuSeqlens = op.getCuSeqlens();
    if (cuSeqlens && qType.getDimSize(0) != 1)
      return rewriter.notifyMatchFailure(op, "needs B = 1 with cu_seqlens");
    AdjointBuilder a{rewriter,           loc,      ctx, time, heads,
                     valueHeads / heads, cuSeqlens};
    float scale = op.getScale().convertToFloat();
    Type f32 = rewriter.getF32Type();
    AffineMap id4 = rewriter.getMultiDimIdentityMap(4);

    // The per-token log-decay [B,T,H] (a fixed decay broadcast), or none.
    Value gate = op.getG();
    if (op.getGate() == GateKind::Fixed)
      gate = broadcastLogDecay(rewriter, loc, *op.getLogDecay(), op.getQ());
    if (gate &&
        !cast<RankedTensorType>(gate.getType()).getElementType().isF32())
      gate = a.remap(gate, false);
    // G_t decays by alpha_{t+1}: the gates shifted one token earlier (none
    // after a sequence's last token), for the recurrences in reverse time.
    Value shiftedGate = gate ? a.shift(gate, /*later=*/false) : Value();
    // The value-side log-gate [B,T,HV,V] (f32), likewise shifted for the
    // recurrences in reverse time.
    Value valueGate = op.getGv() ? a.remap(op.getGv(), false) : Value();
    Value shiftedValueGate =
        valueGate ? a.shift(valueGate, /*later=*/false) : Value();
    // G's writes `s q do^T` take the scale as the adjoint recurrences'
    // output scale (they are linear in their writes and initial state; the
    // delta rule's transition does not depend on the state) instead of a
    // scaled copy of do or q; not for a scale whose inverse could overflow
    // or lose the initial state's precision.
    bool foldScale =
        std::isnormal(scale) && std::fabs(std::log2(std::fabs(scale))) <= 32.0f;
    Value dFinal = op.getDFinalState();
    if (!dFinal)
      dFinal = zeroTensor(rewriter, loc,
                          mixedSizes(rewriter, loc, op.getInitialState()));
    // Reads a key-head gate (scalar or channel) from a [B,T,H,K] iteration.
    AffineMap gateMap = channel ? id4 : dimMap(ctx, 4, {0, 1, 2});

    if (general) {
      replaceWithCasts(
          rewriter, op,
          generalAdjoint(rewriter, op, a, gate, shiftedGate, dFinal, scale));
      return success();
    }

    // The delta rule's b = beta k and a = alpha * k ([B,T,H,K], f32).
    Value keys, lowB, lowA, beta;
    if (delta) {
      keys = a.remap(op.getK(), false);
      beta = a.remap(op.getBeta(), false);
      SmallVector<OpFoldResult> keySizes = mixedSizes(rewriter, loc, keys);
      lowB = buildGeneric(rewriter, loc, ValueRange{keys, beta},
                          emptyTensor(rewriter, loc, keySizes, f32),
                          {id4, dimMap(ctx, 4, {0, 1, 2}), id4}, 4, 0,
                          [](OpBuilder &nb, Location l, ValueRange args) {
                            return mulF(nb, l, args[0], args[1]);
                          });
      lowA = keys;
      if (gate)
        lowA = buildGeneric(
            rewriter, loc, ValueRange{keys, gate},
            emptyTensor(rewriter, loc, keySizes, f32), {id4, gateMap, id4}, 4,
            0, [](OpBuilder &nb, Location l, ValueRange args) {
              return mulF(nb, l, args[0], math::ExpOp::create(nb, l, args[1]));
            });
    }

    // The values that pair with the keys of S: v, or v - p for the delta
    // rule, with p_t = a_t^T S_{t-1} read by the forward recurrence on the
    // inputs one token later.
    Value values = a.remap(op.getV(), false);
    if (delta) {
      Value laterKeys = a.shift(keys, /*later=*/true);
      Value laterValues = a.shift(values, /*later=*/true);
      Value laterGate = gate ? a.shift(gate, /*later=*/true) : Value();
      Value laterBeta = a.shift(beta, /*later=*/true);
      RecurrenceOp reads = a.recurrence(lowA, laterKeys, laterValues, laterGate,
                                        Value(), op.getInitialState(), 1.0f,
                                        /*reverse=*/false, laterBeta);
      values = buildGeneric(
          rewriter, loc, ValueRange{values, reads.getO()},
          emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, values), f32),
          {id4, id4, id4}, 4, 0,
          [](OpBuilder &nb, Location l, ValueRange args) {
            return arith::SubFOp::create(nb, l, args[0], args[1]);
          });
    }

    // dq: S^T in forward time. (Each operand is built in its own statement:
    // la's IR must not depend on the host compiler's argument order.)
    Value dO = a.remap(op.getDO(), false);
    Value forwardValues =
        delta ? a.remap(lowB, true) : a.remap(op.getK(), /*widen=*/true);
    // A channel gate decays the K side: the values of this recurrence.
    Value forwardGate = gate ? a.remap(gate, true) : Value();
    Value forwardState = a.transpose(op.getInitialState());
    // (Not a structured binding: the lambda below captures them.)
    std::pair<Value, Value> forwardGates =
        transposedGates(a, forwardGate, valueGate, channel);
    Value forwardKeyGate = forwardGates.first;
    Value forwardValueGate = forwardGates.second;
    auto transposedForward = [&](Value query, float queryScale) {
      return a.recurrence(query, values, forwardValues, forwardKeyGate,
                          forwardValueGate, forwardState, queryScale,
                          /*reverse=*/false);
    };
    RecurrenceOp forward = transposedForward(dO, scale);
    Value dq = a.sumGroups(forward.getO(), 2);

    // dv (and, for the delta rule, the reads G_t^T b_t): G in reverse time
    // (q and k share an element type). With `transposedReads` G is also
    // read from its value side: dk_t = G_t v_t, or for the delta rule
    // y_t = G_t x_t.
    Value bothSidesQuery = transposedReads ? values : Value();
    RecurrenceOp adjoint;
    // a one token earlier (a_{t+1} at token t), for the delta rule.
    Value earlierA;
    if (delta) {
      Value adjointKeys = a.remap(op.getQ(), false, foldScale ? 1.0f : scale);
      Value adjointInit = foldScale && op.getDFinalState()
                              ? a.scaleState(dFinal, 1 / scale)
                              : dFinal;
      Value earlierB = a.shift(lowB, /*later=*/false);
      earlierA = a.shift(lowA, /*later=*/false);
      // A_{t+1}^T = D_{t+1} - a_{t+1} b_{t+1}^T: low-rank a' = b, b' = a.
      adjoint = a.recurrence(lowB, adjointKeys, dO, shiftedGate, Value(),
                             adjointInit, foldScale ? scale : 1.0f,
                             /*reverse=*/true, Value(), earlierB, earlierA,
                             bothSidesQuery);
    } else if (foldScale) {
      // G = s G' with G' written by q do^T from dS_T / s: dv = s G'^T k is
      // the output of G' at scale s, and no copy of s do is needed.
      adjoint = a.recurrence(
          op.getK(), op.getQ(), dO, shiftedGate, shiftedValueGate,
          op.getDFinalState() ? a.scaleState(dFinal, 1 / scale) : dFinal, scale,
          /*reverse=*/true, Value(), Value(), Value(), bothSidesQuery);
    } else {
      Value scaledDO = a.remap(op.getDO(), false, scale);
      adjoint = a.recurrence(op.getK(), op.getQ(), scaledDO, shiftedGate,
                             shiftedValueGate, dFinal, 1.0f,
                             /*reverse=*/true, Value(), Value(), Value(),
                             bothSidesQuery);
    }
    Value dv = adjoint.getO();

    // dS_0 = D_0 G_0 Diag(gamma_0) (- a_0 dv_0^T), per sequence at its first
    // token.
    Value dInitial = adjoint.getFinalState();
    if (foldScale)
      dInitial = a.scaleState(dInitial, scale);
    OpFoldResult numSequences =
        tensor::getMixedSize(rewriter, loc, dInitial, 0);
    if (valueGate) {
      Value first = a.firstTokens(valueGate, numSequences);
      dInitial = buildGeneric(
          rewriter, loc, ValueRange{first, dInitial},
          emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, dInitial), f32),
          {dimMap(ctx, 4, {0, 1, 3}), id4, id4}, 4, 0,
          [](OpBuilder &nb, Location l, ValueRange args) {
            return mulF(nb, l, math::ExpOp::create(nb, l, args[0]), args[1]);
          });
    }
    if (gate || delta)
      dInitial = initialStateGradient(rewriter, loc, a, gate, channel, dInitial,
                                      delta ? lowA : Value(),
                                      delta ? dv : Value(), numSequences);

    // G read from its value side: dk = G v, or for the delta rule y = G x.
    // Without `transposedReads`, G^T in reverse time queried with the values
    // of S (for the delta rule as two recurrences: keys do, values s q; keys
    // dv one token later, values -a one token later).
    // (With the scale folded, G^T = s G'^T as above.)
    Value dk, transposedGate, transposedState;
    if (bothSidesQuery) {
      dk = a.sumGroups(adjoint.getTransposedO(), 2);
    } else {
      float transposedScale = foldScale ? scale : 1.0f;
      Value transposedValues =
          a.remap(op.getQ(), true, foldScale ? 1.0f : scale);
      transposedGate = shiftedGate ? a.remap(shiftedGate, true) : Value();
      transposedState =
          a.transpose(dFinal, op.getDFinalState() ? 1 / transposedScale : 1.0f);
      auto [transposedKeyGate, transposedValueGate] =
          transposedGates(a, transposedGate, shiftedValueGate, channel);
      RecurrenceOp transposed = a.recurrence(
          values, dO, transposedValues, transposedKeyGate, transposedValueGate,
          transposedState, transposedScale, /*reverse=*/true);
      dk = a.sumGroups(transposed.getO(), 2);
    }
    // The factor of k in the gate's gradient: dk, or beta y - z.
    Value keyFactor = dk;
    Value dBeta;
    if (delta) {
      // y = G x: read from G itself, or the G^T part above plus its
      // low-rank part.
      Value y = dk;
      SmallVector<Value> yParts = {y};
      if (!bothSidesQuery) {
        Value earlierDv = a.shift(dv, /*later=*/false);
        Value negatedA = a.remap(earlierA, true, -1.0f);
        Value zeroState = zeroTensor(
            rewriter, loc, mixedSizes(rewriter, loc, transposedState));
        RecurrenceOp lowRankPart = a.recurrence(
            values, earlierDv, negatedA, channel ? Value() : transposedGate,
            channel ? transposedGate : Value(), zeroState, 1.0f,
            /*reverse=*/true);
        yParts.push_back(a.sumGroups(lowRankPart.getO(), 2));
      }
      // z = b (x . dv) - S dv, per value head, then summed per key head.
      Value stateDv = transposedForward(dv, 1.0f).getO();
      SmallVector<OpFoldResult> headSizes = mixedSizes(rewriter, loc, dv);
      headSizes.pop_back();
      Value readDv = buildGeneric(
          rewriter, loc, ValueRange{values, dv},
          zeroTensor(rewriter, loc, headSizes),
          {id4, id4, dimMap(ctx, 4, {0, 1, 2})}, 3, 1,
          [](OpBuilder &nb, Location l, ValueRange args) {
            return addF(nb, l, args[2], mulF(nb, l, args[0], args[1]));
          });
      Value z = buildGeneric(
          rewriter, loc, ValueRange{lowB, readDv, stateDv},
          emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, stateDv), f32),
          {dimMap(ctx, 4, {0, 1, -3, 3}, a.group), dimMap(ctx, 4, {0, 1, 2}),
           id4, id4},
          4, 0, [](OpBuilder &nb, Location l, ValueRange args) {
            return arith::SubFOp::create(nb, l, mulF(nb, l, args[0], args[1]),
                                         args[2]);
          });
      z = a.sumGroups(z, 2);
      SmallVector<OpFoldResult> keySizes = mixedSizes(rewriter, loc, keys);
      AffineMap headMap = dimMap(ctx, 4, {0, 1, 2});
      // dk = beta y + z and the factor beta y - z, from y's parts.
      unsigned parts = yParts.size();
      auto sumParts = [parts](OpBuilder &nb, Location l, ValueRange args) {
        Value sum = args[0];
        for (unsigned i = 1; i < parts; ++i)
          sum = addF(nb, l, sum, args[i]);
        return sum;
      };
      auto combine = [&](float sign) {
        SmallVector<Value> inputs(yParts);
        inputs.append({beta, z});
        SmallVector<AffineMap> maps(parts, id4);
        maps.append({headMap, id4, id4});
        return buildGeneric(
            rewriter, loc, inputs, emptyTensor(rewriter, loc, keySizes, f32),
            maps, 4, 0, [&](OpBuilder &nb, Location l, ValueRange args) {
              Value scaled = mulF(nb, l, args[parts], sumParts(nb, l, args));
              Value signedZ =
                  mulF(nb, l, constantF32(nb, l, sign), args[parts + 1]);
              return addF(nb, l, scaled, signedZ);
            });
      };
      dk = combine(1.0f);
      keyFactor = combine(-1.0f);
      // dbeta = k . y.
      SmallVector<Value> betaInputs(yParts);
      betaInputs.push_back(keys);
      SmallVector<AffineMap> betaMaps(parts + 1, id4);
      betaMaps.push_back(headMap);
      dBeta = buildGeneric(
          rewriter, loc, betaInputs,
          zeroTensor(rewriter, loc, mixedSizes(rewriter, loc, beta)), betaMaps,
          3, 1, [&](OpBuilder &nb, Location l, ValueRange args) {
            Value product = mulF(nb, l, args[parts], sumParts(nb, l, args));
            return addF(nb, l, args[parts + 1], product);
          });
    }

    SmallVector<Value> results = {dq, dk, dv, dInitial};
    if (op.getG())
      results.push_back(gateGradient(rewriter, op, a, dq, keyFactor,
                                     forward.getFinalState(), dFinal));
    if (valueGate) {
      // o, recomputed: the forward recurrence itself (f32 output).
      RecurrenceOp outputs =
          a.recurrence(op.getQ(), op.getK(), values, gate, valueGate,
                       op.getInitialState(), scale, /*reverse=*/false);
      results.push_back(valueGateGradient(rewriter, op, a, outputs.getO(), dv,
                                          forward.getFinalState(), dFinal));
    }
    if (dBeta)
      results.push_back(dBeta);
    replaceWithCasts(rewriter, op, results);
    return success();
  }

  /// `dS_0 = A_0^T G_0 = D_0 G_0 - a_0 r_0^T`, per sequence at its first
  /// token, from the adjoint's final state `adjointFinal` (G_0); the
  /// low-rank part when `lowA` (and the reads `r` [B,T,HV,V]) are given.
  static Value initialStateGradient(PatternRewriter &rewriter, Location loc,
                                    AdjointBuilder &a, Value gate, bool channel,
                                    Value adjointFinal, Value lowA, Value r,
                                    OpFoldResult numSequences) {
    MLIRContext *ctx = rewriter.getContext();
    AffineMap id4 = rewriter.getMultiDimIdentityMap(4);
    SmallVector<Value> inputs;
    SmallVector<AffineMap> maps;
    if (gate) {
      inputs.push_back(a.firstTokens(gate, numSequences));
      maps.push_back(channel ? dimMap(ctx, 4, {0, -2, 2}, a.group)
                             : dimMap(ctx, 4, {0, -2}, a.group));
    }
    inputs.push_back(adjointFinal);
    maps.push_back(id4);
    bool lowRank = static_cast<bool>(lowA);
    if (lowRank) {
      Value firstA = a.firstTokens(lowA, numSequences);
      inputs.push_back(firstA);
      maps.push_back(dimMap(ctx, 4, {0, -2, 2}, a.group));
      Value firstR = a.firstTokens(r, numSequences);
      inputs.push_back(firstR);
      maps.push_back(dimMap(ctx, 4, {0, 1, 3}));
    }
    maps.push_back(id4);
    bool hasGate = static_cast<bool>(gate);
    return buildGeneric(
        rewriter, loc, inputs,
        emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, adjointFinal),
                    rewriter.getF32Type()),
        maps, 4, 0, [&](OpBuilder &nb, Location l, ValueRange args) {
          Value result = args[hasGate ? 1 : 0];
          if (hasGate) {
            Value alpha = math::ExpOp::create(nb, l, args[0]);
            result = mulF(nb, l, alpha, result);
          }
          if (lowRank) {
            unsigned at = hasGate ? 2 : 1;
            Value product = mulF(nb, l, args[at], args[at + 1]);
            result = arith::SubFOp::create(nb, l, result, product);
          }
          return result;
        });
  }

  /// The general low-rank form's adjoint (`S_t = D_t S_{t-1} - b_t p_t^T +
  /// k_t v_t^T` with the reads `p_t = S_{t-1}^T a_t`): dq, dk, dv, dS_0,
  /// dg, da, db. Given the reads p and `r_t = G_t^T b_t`, S and its adjoint
  /// `G_{t-1} = D_t G_t - a_t r_t^T + s q_{t-1} do_{t-1}^T` are diagonal
  /// recurrences with two writes per token, which one la.recurrence takes
  /// as sub-steps (`interleave`); the gradients are their reads.
  static SmallVector<Value> generalAdjoint(PatternRewriter &rewriter,
                                           RecurrenceGradOp op,
                                           AdjointBuilder &a, Value gate,
                                           Value shiftedGate, Value dFinal,
                                           float scale) {
    Location loc = op.getLoc();
    bool channel = op.getGate() == GateKind::Channel;
    Value lowA = a.remap(op.getA(), false);
    Value lowB = a.remap(op.getB(), false);
    Value keys = a.remap(op.getK(), false);
    Value values = a.remap(op.getV(), false);
    Value dO = a.remap(op.getDO(), false);
    SmallVector<OpFoldResult> keySizes = mixedSizes(rewriter, loc, keys);
    SmallVector<OpFoldResult> valueSizes = mixedSizes(rewriter, loc, values);
    SmallVector<OpFoldResult> wideKeySizes = mixedSizes(rewriter, loc, dO);
    wideKeySizes[3] = keySizes[3];

    // p_t = S_{t-1}^T a_t: the forward recurrence on its inputs one token
    // later (its state at token t is S_{t-1}), queried with a.
    Value laterA = a.shift(lowA, /*later=*/true);
    Value laterB = a.shift(lowB, /*later=*/true);
    Value laterKeys = a.shift(keys, /*later=*/true);
    Value laterValues = a.shift(values, /*later=*/true);
    Value laterGate = gate ? a.shift(gate, /*later=*/true) : Value();
    RecurrenceOp reads = a.recurrence(
        lowA, laterKeys, laterValues, laterGate, Value(), op.getInitialState(),
        1.0f, /*reverse=*/false, Value(), laterA, laterB);
    Value p = reads.getO();

    // r_t = G_t^T b_t: G in reverse time, whose transition
    // A_{t+1}^T = D_{t+1} - a_{t+1} b_{t+1}^T is the general form with
    // a' = b_{t+1}, b' = a_{t+1}.
    Value scaledQ = a.remap(op.getQ(), false, scale);
    Value earlierA = a.shift(lowA, /*later=*/false);
    Value earlierB = a.shift(lowB, /*later=*/false);
    RecurrenceOp adjoint =
        a.recurrence(lowB, scaledQ, dO, shiftedGate, Value(), dFinal, 1.0f,
                     /*reverse=*/true, Value(), earlierB, earlierA);
    Value r = adjoint.getO();
    Value earlierR = a.shift(r, /*later=*/false);

    // dS_0 = A_0^T G_0 = D_0 G_0 - a_0 r_0^T, per sequence at its first
    // token.
    Value dInitial = adjoint.getFinalState();
    OpFoldResult numSequences =
        tensor::getMixedSize(rewriter, loc, dInitial, 0);
    dInitial = initialStateGradient(rewriter, loc, a, gate, channel, dInitial,
                                    lowA, r, numSequences);

    // S^T in forward time, three steps per token: (read r_t: S_{t-1} r_t),
    // (decay, write v_t k_t^T), (write -p_t b_t^T, read s do_t: S_t s do_t).
    // A channel gate decays S's K side: the value side here.
    AdjointBuilder threeSteps = a.withSubSteps(3);
    Value wideGate = gate ? a.remap(gate, /*widen=*/true) : Value();
    SmallVector<OpFoldResult> gateSizes =
        gate ? mixedSizes(rewriter, loc, wideGate)
             : SmallVector<OpFoldResult>();
    Value stepGate =
        gate ? a.interleave({Value(), wideGate, Value()}, gateSizes) : Value();
    Value scaledDO = a.remap(op.getDO(), false, scale);
    Value wideKeys = a.remap(op.getK(), /*widen=*/true);
    Value negatedB = a.remap(lowB, /*widen=*/true, -1.0f);
    // (One op-building call per statement: la's IR must not depend on the
    // host compiler's argument order.)
    Value forwardQueries = a.interleave({r, Value(), scaledDO}, valueSizes);
    Value forwardKeys = a.interleave({Value(), values, p}, valueSizes);
    Value forwardValues =
        a.interleave({Value(), wideKeys, negatedB}, wideKeySizes);
    Value forwardState = a.transpose(op.getInitialState());
    RecurrenceOp forward = threeSteps.recurrence(
        forwardQueries, forwardKeys, forwardValues,
        channel ? Value() : stepGate, channel ? stepGate : Value(),
        forwardState, 1.0f, /*reverse=*/false);
    Value dq = a.sumGroups(a.subStep(forward.getO(), 3, 2), 2);
    // da_t = -S_{t-1} r_t.
    Value da =
        a.sumGroups(a.remap(a.subStep(forward.getO(), 3, 0), false, -1.0f), 2);
    // (remap returns its input for a scale of 1 only; -1 builds the copy.)

    // G^T in reverse time, three steps per token, listed in time order
    // (run last to first): (read p_t: G_t p_t), (write do_t s q_t^T, read
    // v_t: G_t v_t), (decay D_{t+1}, write -r_{t+1} a_{t+1}^T).
    Value wideShiftedGate =
        shiftedGate ? a.remap(shiftedGate, /*widen=*/true) : Value();
    Value reverseGate =
        shiftedGate
            ? a.interleave({Value(), Value(), wideShiftedGate}, gateSizes)
            : Value();
    Value wideScaledQ = a.remap(op.getQ(), /*widen=*/true, scale);
    Value negatedEarlierA = a.remap(earlierA, /*widen=*/true, -1.0f);
    Value transposedQueries = a.interleave({p, values, Value()}, valueSizes);
    Value transposedKeys = a.interleave({Value(), dO, earlierR}, valueSizes);
    Value transposedValues =
        a.interleave({Value(), wideScaledQ, negatedEarlierA}, wideKeySizes);
    Value transposedState = a.transpose(dFinal);
    RecurrenceOp transposed = threeSteps.recurrence(
        transposedQueries, transposedKeys, transposedValues,
        channel ? Value() : reverseGate, channel ? reverseGate : Value(),
        transposedState, 1.0f, /*reverse=*/true);
    Value dk = a.sumGroups(a.subStep(transposed.getO(), 3, 1), 2);
    // db_t = -G_t p_t.
    Value db = a.sumGroups(
        a.remap(a.subStep(transposed.getO(), 3, 0), false, -1.0f), 2);

    // dv_t = G_t^T k_t: G in reverse time, two steps per token in time
    // order: (write s q_t do_t^T, read k_t), (decay D_{t+1}, write
    // -a_{t+1} r_{t+1}^T).
    AdjointBuilder twoSteps = a.withSubSteps(2);
    Value keyStepGate =
        shiftedGate ? a.interleave({Value(), shiftedGate},
                                   mixedSizes(rewriter, loc, shiftedGate))
                    : Value();
    Value negatedEarlierKeyA = a.remap(earlierA, false, -1.0f);
    Value adjointQueries = a.interleave({keys, Value()}, keySizes);
    Value adjointKeys = a.interleave({scaledQ, negatedEarlierKeyA}, keySizes);
    Value adjointValues = a.interleave({dO, earlierR}, valueSizes);
    RecurrenceOp valueReads = twoSteps.recurrence(
        adjointQueries, adjointKeys, adjointValues, keyStepGate, Value(),
        dFinal, 1.0f, /*reverse=*/true);
    Value dv = a.subStep(valueReads.getO(), 2, 0);

    SmallVector<Value> results = {dq, dk, dv, dInitial};
    if (op.getG())
      results.push_back(generalGateGradient(rewriter, op, a,
                                            {{op.getQ(), dq, 1.0f},
                                             {op.getK(), dk, -1.0f},
                                             {lowB, db, -1.0f},
                                             {lowA, da, 1.0f}},
                                            {lowA, da, 1.0f},
                                            forward.getFinalState(), dFinal));
    results.push_back(da);
    results.push_back(db);
    return results;
  }

  /// The key and value-side gates of a transposed recurrence (whose keys
  /// are on S's V side) from S's key-side gate `keyGate` (widened to the
  /// value heads) and value-side gate `valueGate` ([B,T,HV,V]): a channel
  /// gate moves to the other side; a scalar one stays on the key side,
  /// folded into `valueGate` when there is one (a scalar commutes).
  static std::pair<Value, Value> transposedGates(AdjointBuilder &a,
                                                 Value keyGate, Value valueGate,
                                                 bool channel) {
    if (!valueGate || !keyGate)
      return channel ? std::pair{valueGate, keyGate}
                     : std::pair{valueGate ? valueGate : keyGate, Value()};
    if (channel)
      return {valueGate, keyGate};
    AffineMap id = a.b.getMultiDimIdentityMap(4);
    Value folded =
        buildGeneric(a.b, a.loc, ValueRange{valueGate, keyGate},
                     emptyTensor(a.b, a.loc, mixedSizes(a.b, a.loc, valueGate),
                                 a.b.getF32Type()),
                     {id, dimMap(a.ctx, 4, {0, 1, 2}), id}, 4, 0,
                     [](OpBuilder &nb, Location l, ValueRange args) {
                       return addF(nb, l, args[0], args[1]);
                     });
    return {folded, Value()};
  }

  /// `init[n] + sum_{u >= t} terms_u` of the sequence n of each token t
  /// (per sequence with cu_seqlens), less token t's own `excluded` terms,
  /// with the final state's term `finalTerm` [N,...] as init: one loop over
  /// the tokens reading the terms' factors.
  static Value sumFromFinal(AdjointBuilder &a, ArrayRef<GateTerm> terms,
                            ArrayRef<GateTerm> excluded, bool perChannel,
                            Value finalTerm) {
    if (a.cuSeqlens)
      return a.reverseCumsumPerSequence(terms, excluded, perChannel, finalTerm);
    return a.reverseCumsum(terms, excluded, perChannel, finalTerm);
  }

  /// The value-side log-gate's gradient `dgv_t = sum_{u >= t} (o_u * do_u -
  /// v_u * dv_u)` plus the final state's `S_T * dS_T` summed over K (S_T^T
  /// is `finalTransposed`), per sequence with cu_seqlens.
  static Value valueGateGradient(PatternRewriter &rewriter, RecurrenceGradOp op,
                                 AdjointBuilder &a, Value o, Value dv,
                                 Value finalTransposed, Value dFinal) {
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    AffineMap id = rewriter.getMultiDimIdentityMap(4);
    // colsum(S_T * dS_T): loops (n, hv, vv, kk), the reduction last.
    SmallVector<OpFoldResult> headSizes = mixedSizes(rewriter, loc, dFinal);
    headSizes = {headSizes[0], headSizes[1], headSizes[3]};
    Value finalTerm = buildGeneric(
        rewriter, loc, ValueRange{finalTransposed, dFinal},
        zeroTensor(rewriter, loc, headSizes),
        {id, dimMap(ctx, 4, {0, 1, 3, 2}), dimMap(ctx, 4, {0, 1, 2})}, 3, 1,
        [](OpBuilder &nb, Location l, ValueRange args) {
          return addF(nb, l, args[2], mulF(nb, l, args[0], args[1]));
        });
    return sumFromFinal(a, {{op.getDO(), o, 1.0f}, {op.getV(), dv, -1.0f}}, {},
                        /*perChannel=*/true, finalTerm);
  }

  /// The final state's term of the log-gate's gradient: `S_T * dS_T` summed
  /// over V (S_T^T is `finalTransposed`), per key head, and over K for a
  /// scalar gate: [N,H] or [N,H,K].
  static Value gateFinalTerm(PatternRewriter &rewriter, RecurrenceGradOp op,
                             AdjointBuilder &a, Value finalTransposed,
                             Value dFinal) {
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    bool channel = op.getGate() == GateKind::Channel;
    AffineMap id = rewriter.getMultiDimIdentityMap(4);
    SmallVector<OpFoldResult> headSizes = mixedSizes(rewriter, loc, dFinal);
    headSizes.resize(channel ? 3 : 2);
    Value finalTerm = buildGeneric(
        rewriter, loc, ValueRange{finalTransposed, dFinal},
        zeroTensor(rewriter, loc, headSizes),
        {dimMap(ctx, 4, {0, 1, 3, 2}), id,
         channel ? dimMap(ctx, 4, {0, 1, 2}) : dimMap(ctx, 4, {0, 1})},
        headSizes.size(), 4 - headSizes.size(),
        [](OpBuilder &nb, Location l, ValueRange args) {
          return addF(nb, l, args[2], mulF(nb, l, args[0], args[1]));
        });
    return a.sumGroups(finalTerm, 1);
  }

  /// The log-gate's gradient `dg_t = sum_{u >= t} (q_u * dq_u - k_u *
  /// keyFactor_u)` plus the final state's `S_T * dS_T` summed over V (S_T^T
  /// is `finalTransposed`); summed over K for a scalar gate, and per
  /// sequence with cu_seqlens.
  static Value gateGradient(PatternRewriter &rewriter, RecurrenceGradOp op,
                            AdjointBuilder &a, Value dq, Value keyFactor,
                            Value finalTransposed, Value dFinal) {
    Value finalTerm = gateFinalTerm(rewriter, op, a, finalTransposed, dFinal);
    // Each sequence's own sum, from its final state's term.
    return sumFromFinal(a,
                        {{op.getQ(), dq, 1.0f}, {op.getK(), keyFactor, -1.0f}},
                        {}, op.getGate() == GateKind::Channel, finalTerm);
  }

  /// The general low-rank form's log-gate gradient: by the same argument,
  /// the reads of the state count (q_u at S_u, a_u at S_{u-1}) and the
  /// writes subtract (k_u and -b_u), so
  /// `dg_t = sum_{u >= t} (q*dq - k*dk - b*db + a*da)_u - (a*da)_t` plus the
  /// final state's term: the read `a_t^T S_{t-1}` does not depend on g_t.
  static Value generalGateGradient(PatternRewriter &rewriter,
                                   RecurrenceGradOp op, AdjointBuilder &a,
                                   ArrayRef<GateTerm> terms,
                                   GateTerm beforeGate, Value finalTransposed,
                                   Value dFinal) {
    Value finalTerm = gateFinalTerm(rewriter, op, a, finalTransposed, dFinal);
    return sumFromFinal(a, terms, {beforeGate},
                        op.getGate() == GateKind::Channel, finalTerm);
  }
};

struct LaExpandRecurrenceGradPass
    : la::impl::LaExpandRecurrenceGradPassBase<LaExpandRecurrenceGradPass> {
  using Base::Base;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateSimplifyRecurrencePatterns(patterns);
    populateExpandRecurrenceGradPatterns(patterns, transposedReads);
    LogicalResult converged =
        applyPatternsGreedily(getOperation(), std::move(patterns));
    // Never a failure without a word: the driver stops at its iteration
    // limit silently. Packed sequences with a run-time B are what leaves
    // the gradient unexpanded (B must be 1, and is not known to be).
    WalkResult unexpanded =
        getOperation()->walk([](RecurrenceGradOp op) -> WalkResult {
          if (op.getCuSeqlens() && op.getQ().getType().getDimSize(0) != 1) {
            op.emitOpError("with 'cu_seqlens' needs a static B = 1 (packed "
                           "sequences) to be chunked, got 'q' of type ")
                << op.getQ().getType();
            return WalkResult::interrupt();
          }
          return WalkResult::advance();
        });
    if (unexpanded.wasInterrupted())
      return signalPassFailure();
    if (failed(converged)) {
      getOperation()->emitError(
          "la-expand-recurrence-grad: the rewrites did not converge");
      return signalPassFailure();
    }
  }
};
} // namespace

void mlir::la::populateExpandRecurrenceGradPatterns(RewritePatternSet &patterns,
                                                    bool transposedReads) {
  patterns.add<RecurrenceGradToRecurrences>(patterns.getContext(),
                                            transposedReads);
}
