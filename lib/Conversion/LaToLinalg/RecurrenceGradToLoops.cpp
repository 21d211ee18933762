//===- RecurrenceGradToLoops.cpp - la.recurrence_grad as token loops ------===//
//
// The adjoint recurrence, one token at a time, backward in time. The forward
// states are kept only at the start of every block of `checkpoint` tokens;
// when the backward reaches a block it recomputes the block's states from
// its checkpoint, then runs the block's tokens in reverse. Every per-token
// product is a linalg.generic on the f32 state [B,HV,K,V].
//
//===----------------------------------------------------------------------===//

#include "TokenStep.h"
#include "la/Conversion/LaToLinalg.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace mlir::la;

namespace {
/// The gradients written token by token, each [B,T,...] f32. Absent ones
/// are null.
struct Gradients {
  Value dq, dk, dv, dg, dgv, dbeta, da, db;

  SmallVector<Value> values() const {
    SmallVector<Value> list;
    for (Value value : {dq, dk, dv, dg, dgv, dbeta, da, db})
      if (value)
        list.push_back(value);
    return list;
  }
  /// The inverse of values(), with the same presence as `like`.
  static Gradients from(const Gradients &like, ValueRange list) {
    Gradients result;
    unsigned next = 0;
    for (auto [slot, present] :
         {std::pair{&result.dq, like.dq}, std::pair{&result.dk, like.dk},
          std::pair{&result.dv, like.dv}, std::pair{&result.dg, like.dg},
          std::pair{&result.dgv, like.dgv},
          std::pair{&result.dbeta, like.dbeta}, std::pair{&result.da, like.da},
          std::pair{&result.db, like.db}})
      if (present)
        *slot = list[next++];
    return result;
  }
};

/// Emits the reverse step of one token. Loops over the state are (b, hv, kk,
/// vv) as in TokenStepBuilder; key-side gradients are formed per value head
/// and summed into their key head.
class AdjointStepBuilder {
public:
  AdjointStepBuilder(const RecurrenceInputs &in, bool gateGradient,
                     int64_t group, MLIRContext *ctx)
      : in(in), gateGradient(gateGradient), group(group), ctx(ctx),
        forward(in, group, ctx) {}

  /// Given dS = dL/dS_t from the tokens after t, the states before and after
  /// token t, and the output gradient, writes token t's gradients and
  /// returns dL/dS_{t-1}.
  Value build(OpBuilder &b, Location loc, Value dState, Value before,
              Value after, Value dO, Value t, Gradients &grads) {
    Value q = extractUnitSlice(b, loc, in.q, 1, t);
    Value k = extractUnitSlice(b, loc, in.k, 1, t);
    Value v = extractUnitSlice(b, loc, in.v, 1, t);
    Value dOut = extractUnitSlice(b, loc, dO, 1, t);
    Value g = in.g ? extractUnitSlice(b, loc, in.g, 1, t) : Value();
    // The value-side log-gate [B,HV,V] (no low-rank part with it).
    Value gv = in.gv ? extractUnitSlice(b, loc, in.gv, 1, t) : Value();
    Value beta = in.beta ? extractUnitSlice(b, loc, in.beta, 1, t) : Value();
    Value lowA = in.a ? extractUnitSlice(b, loc, in.a, 1, t) : Value();
    Value lowB = in.b ? extractUnitSlice(b, loc, in.b, 1, t) : Value();
    Value scale = constantF32(b, loc, in.scale);

    // dS += (scale q) dO^T: token t's read-out.
    dState = buildGeneric(
        b, loc, ValueRange{dState, q, dOut}, dState,
        {stateMap(), keyMap(), valueMap(), stateMap()}, 4, 0,
        [&](OpBuilder &nb, Location l, ValueRange a) {
          Value scaled = mulF(nb, l, extendToF32(nb, l, a[1]), scale);
          return addF(nb, l, a[0],
                      mulF(nb, l, scaled, extendToF32(nb, l, a[2])));
        });

    // dq = scale S_t dO.
    Value dq = scaleBy(b, loc, rowContract(b, loc, after, dOut), in.scale);
    grads.dq = insertAt(b, loc, sumGroups(b, loc, dq), grads.dq, 1, t);

    // Value side: dS^T k (w = k, or beta k with the delta rule).
    Value keyColumn = forward.contractKeys(b, loc, k, dState);
    Value dv = keyColumn;
    Value du; // the gradient of u = a^T S_{t-1}
    switch (in.lowRank) {
    case LowRank::None:
      break;
    case LowRank::Delta:
      // dv = beta dS^T k, du = -beta dS^T k.
      dv = scaleByKeyHead(b, loc, keyColumn, beta, 1.0f);
      du = scaleByKeyHead(b, loc, keyColumn, beta, -1.0f);
      break;
    case LowRank::General:
      du = scaleBy(b, loc, forward.contractKeys(b, loc, lowB, dState), -1.0f);
      break;
    }
    grads.dv = insertAt(b, loc, dv, grads.dv, 1, t);

    // Key side, per value head: dw = dS v, db = -dS u, da = S_{t-1} du and
    // dalpha = rowsum(dS * S_{t-1}).
    Value dw = sumGroups(b, loc, rowContract(b, loc, dState, v));
    Value dLowB, dLowA;
    if (du) {
      Value u =
          forward.contractKeys(b, loc, lowRankA(b, loc, k, lowA, g), before);
      dLowB = sumGroups(b, loc,
                        scaleBy(b, loc, rowContract(b, loc, dState, u), -1.0f));
      dLowA = sumGroups(b, loc, rowContract(b, loc, before, du));
    }
    // With gv, P = Diag(alpha) S_{t-1} Diag(gamma): dalpha carries gamma,
    // and dgv = colsum(dS * P).
    Value dAlpha;
    if (g)
      dAlpha = sumGroups(b, loc, rowDot(b, loc, dState, before, gv));
    if (gv)
      grads.dgv =
          insertAt(b, loc, valueGateGradient(b, loc, dState, before, g, gv),
                   grads.dgv, 1, t);

    writeKeyGradients(b, loc, k, g, beta, dw, dLowA, dLowB, dAlpha, t, grads);

    // dS_{t-1} = Diag(alpha) dS Diag(gamma) + a du^T.
    return adjointTransition(b, loc, dState, k, g, gv, lowA, du);
  }

private:
  AffineMap stateMap() { return dimMap(ctx, 4, {0, 1, 2, 3}); }
  AffineMap keyMap() { return dimMap(ctx, 4, {0, -2, 2}, group); }
  AffineMap valueMap() { return dimMap(ctx, 4, {0, 1, 3}); }
  AffineMap gateMap() {
    return in.gate == GateKind::Channel ? dimMap(ctx, 4, {0, -2, 2}, group)
                                        : dimMap(ctx, 4, {0, -2}, group);
  }

  /// out[b,hv,kk] = sum_vv X[b,hv,kk,vv] y[b,hv,vv].
  Value rowContract(OpBuilder &b, Location loc, Value x, Value y) {
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
    return buildGeneric(
        b, loc, ValueRange{x, y},
        zeroTensor(b, loc, {sizes[0], sizes[1], sizes[2]}),
        {stateMap(), valueMap(), dimMap(ctx, 4, {0, 1, 2})}, 3, 1,
        [&](OpBuilder &nb, Location l, ValueRange a) {
          return addF(nb, l, a[2], mulF(nb, l, a[0], extendToF32(nb, l, a[1])));
        });
  }

  /// out[b,hv,kk] = sum_vv X[b,hv,kk,vv] Y[b,hv,kk,vv] (times
  /// exp(gv[b,hv,vv]) when `gv` is given).
  Value rowDot(OpBuilder &b, Location loc, Value x, Value y, Value gv) {
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
    SmallVector<Value> inputs = {x, y};
    SmallVector<AffineMap> maps = {stateMap(), stateMap()};
    if (gv) {
      inputs.push_back(gv);
      maps.push_back(valueMap());
    }
    maps.push_back(dimMap(ctx, 4, {0, 1, 2}));
    return buildGeneric(
        b, loc, inputs, zeroTensor(b, loc, {sizes[0], sizes[1], sizes[2]}),
        maps, 3, 1, [&](OpBuilder &nb, Location l, ValueRange a) {
          Value term = mulF(nb, l, a[0], a[1]);
          if (gv)
            term = mulF(nb, l, term,
                        math::ExpOp::create(nb, l, extendToF32(nb, l, a[2])));
          return addF(nb, l, a.back(), term);
        });
  }

  /// dgv[b,hv,vv] = sum_kk dS * P with P = alpha * S_{t-1} * gamma: loops
  /// (b, hv, vv, kk), the reduction over key channels last.
  Value valueGateGradient(OpBuilder &b, Location loc, Value dState,
                          Value before, Value g, Value gv) {
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, dState);
    AffineMap state = dimMap(ctx, 4, {0, 1, 3, 2});
    SmallVector<Value> inputs = {dState, before, gv};
    SmallVector<AffineMap> maps = {state, state, dimMap(ctx, 4, {0, 1, 2})};
    if (g) {
      inputs.push_back(g);
      maps.push_back(in.gate == GateKind::Channel
                         ? dimMap(ctx, 4, {0, -2, 3}, group)
                         : dimMap(ctx, 4, {0, -2}, group));
    }
    maps.push_back(dimMap(ctx, 4, {0, 1, 2}));
    return buildGeneric(
        b, loc, inputs, zeroTensor(b, loc, {sizes[0], sizes[1], sizes[3]}),
        maps, 3, 1, [&](OpBuilder &nb, Location l, ValueRange a) {
          Value term = mulF(nb, l, a[0], a[1]);
          term = mulF(nb, l, term,
                      math::ExpOp::create(nb, l, extendToF32(nb, l, a[2])));
          if (g)
            term = mulF(nb, l, term,
                        math::ExpOp::create(nb, l, extendToF32(nb, l, a[3])));
          return addF(nb, l, a.back(), term);
        });
  }

  /// factor * x, elementwise (x f32).
  Value scaleBy(OpBuilder &b, Location loc, Value x, float factor) {
    if (factor == 1.0f)
      return x;
    unsigned rank = cast<RankedTensorType>(x.getType()).getRank();
    AffineMap id = b.getMultiDimIdentityMap(rank);
    Value constant = constantF32(b, loc, factor);
    return buildGeneric(b, loc, ValueRange{x}, x, {id, id}, rank, 0,
                        [&](OpBuilder &nb, Location l, ValueRange a) {
                          return mulF(nb, l, a[0], constant);
                        });
  }

  /// factor * beta[b,hv/group] * x[b,hv,vv].
  Value scaleByKeyHead(OpBuilder &b, Location loc, Value x, Value beta,
                       float factor) {
    Value constant = constantF32(b, loc, factor);
    return buildGeneric(
        b, loc, ValueRange{x, beta},
        emptyTensor(b, loc, mixedSizes(b, loc, x), b.getF32Type()),
        {dimMap(ctx, 3, {0, 1, 2}), dimMap(ctx, 3, {0, -2}, group),
         dimMap(ctx, 3, {0, 1, 2})},
        3, 0, [&](OpBuilder &nb, Location l, ValueRange a) {
          Value scaled = mulF(nb, l, extendToF32(nb, l, a[1]), constant);
          return mulF(nb, l, a[0], scaled);
        });
  }

  /// The low-rank key `a` [B,H,K] of the token: given (general) or
  /// alpha * k (delta, with alpha 1 without a gate).
  Value lowRankA(OpBuilder &b, Location loc, Value k, Value lowA, Value g) {
    if (in.lowRank == LowRank::General)
      return lowA;
    if (!g)
      return k;
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, k);
    AffineMap id = dimMap(ctx, 3, {0, 1, 2});
    AffineMap gate = in.gate == GateKind::Channel ? id : dimMap(ctx, 3, {0, 1});
    return buildGeneric(
        b, loc, ValueRange{k, g}, emptyTensor(b, loc, sizes, b.getF32Type()),
        {id, gate, id}, 3, 0, [&](OpBuilder &nb, Location l, ValueRange a) {
          Value alpha = math::ExpOp::create(nb, l, extendToF32(nb, l, a[1]));
          return mulF(nb, l, extendToF32(nb, l, a[0]), alpha);
        });
  }

  /// Sums a [B,HV,...] tensor over each key head's value heads.
  Value sumGroups(OpBuilder &b, Location loc, Value x) {
    return la::sumGroups(b, loc, x, 1, mixedSizes(b, loc, in.q)[2], group);
  }

  /// Writes dk, and as present dbeta, da, db and dg, at token t from the
  /// key-head sums of dw, da, db and dalpha ([B,H,K] each).
  void writeKeyGradients(OpBuilder &b, Location loc, Value k, Value g,
                         Value beta, Value dw, Value dLowA, Value dLowB,
                         Value dAlpha, Value t, Gradients &grads) {
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, dw);
    Type f32 = b.getF32Type();
    AffineMap id = dimMap(ctx, 3, {0, 1, 2});
    AffineMap perHead = dimMap(ctx, 3, {0, 1});
    AffineMap gate = in.gate == GateKind::Channel ? id : perHead;
    auto alphaOf = [&](OpBuilder &nb, Location l, Value logGate) {
      return math::ExpOp::create(nb, l, extendToF32(nb, l, logGate));
    };

    Value dk = dw;
    // dlog(alpha) per channel, before a scalar gate's sum over K.
    Value dLogAlpha;
    if (in.lowRank == LowRank::General) {
      grads.da = insertAt(b, loc, dLowA, grads.da, 1, t);
      grads.db = insertAt(b, loc, dLowB, grads.db, 1, t);
    }
    if (in.lowRank == LowRank::Delta) {
      // b = w = beta k and a = alpha * k.
      SmallVector<Value> inputs = {dw, dLowB, dLowA, beta};
      SmallVector<AffineMap> maps = {id, id, id, perHead};
      if (g) {
        inputs.push_back(g);
        maps.push_back(gate);
      }
      maps.push_back(id);
      dk = buildGeneric(b, loc, inputs, emptyTensor(b, loc, sizes, f32), maps,
                        3, 0, [&](OpBuilder &nb, Location l, ValueRange a) {
                          Value sum = addF(nb, l, a[0], a[1]);
                          Value fromWrite =
                              mulF(nb, l, extendToF32(nb, l, a[3]), sum);
                          Value alpha = g ? alphaOf(nb, l, a[4]) : Value();
                          Value fromA = alpha ? mulF(nb, l, alpha, a[2]) : a[2];
                          return addF(nb, l, fromWrite, fromA);
                        });
      // dbeta = sum_kk k (dw + db).
      SmallVector<OpFoldResult> headSizes = {sizes[0], sizes[1]};
      Value dbeta = buildGeneric(
          b, loc, ValueRange{dw, dLowB, k}, zeroTensor(b, loc, headSizes),
          {id, id, id, perHead}, 2, 1,
          [&](OpBuilder &nb, Location l, ValueRange a) {
            Value sum = addF(nb, l, a[0], a[1]);
            return addF(nb, l, a[3],
                        mulF(nb, l, extendToF32(nb, l, a[2]), sum));
          });
      grads.dbeta = insertAt(b, loc, dbeta, grads.dbeta, 1, t);
      if (g && gateGradient)
        // dalpha gains k * da through a = alpha * k.
        dLogAlpha = buildGeneric(
            b, loc, ValueRange{dAlpha, dLowA, k, g},
            emptyTensor(b, loc, sizes, f32), {id, id, id, gate, id}, 3, 0,
            [&](OpBuilder &nb, Location l, ValueRange a) {
              Value fromA = mulF(nb, l, extendToF32(nb, l, a[2]), a[1]);
              // One op per statement: the IR must not depend on the host
              // compiler's argument order.
              Value alpha = alphaOf(nb, l, a[3]);
              Value sum = addF(nb, l, a[0], fromA);
              return mulF(nb, l, alpha, sum);
            });
    } else if (g && gateGradient) {
      dLogAlpha = buildGeneric(
          b, loc, ValueRange{dAlpha, g}, emptyTensor(b, loc, sizes, f32),
          {id, gate, id}, 3, 0, [&](OpBuilder &nb, Location l, ValueRange a) {
            return mulF(nb, l, alphaOf(nb, l, a[1]), a[0]);
          });
    }
    grads.dk = insertAt(b, loc, dk, grads.dk, 1, t);

    if (!dLogAlpha)
      return;
    Value dg = dLogAlpha;
    if (in.gate == GateKind::Scalar)
      dg = buildGeneric(b, loc, ValueRange{dLogAlpha},
                        zeroTensor(b, loc, {sizes[0], sizes[1]}), {id, perHead},
                        2, 1, [&](OpBuilder &nb, Location l, ValueRange a) {
                          return addF(nb, l, a[1], a[0]);
                        });
    grads.dg = insertAt(b, loc, dg, grads.dg, 1, t);
  }

  /// Diag(alpha) dS Diag(gamma) + a du^T, the transposed transition
  /// applied to dS (gamma = exp(gv) only without a low-rank part).
  Value adjointTransition(OpBuilder &b, Location loc, Value dState, Value k,
                          Value g, Value gv, Value lowA, Value du) {
    if (!g && !du && !gv)
      return dState;
    SmallVector<Value> inputs = {dState};
    SmallVector<AffineMap> maps = {stateMap()};
    if (g) {
      inputs.push_back(g);
      maps.push_back(gateMap());
    }
    if (gv) {
      inputs.push_back(gv);
      maps.push_back(valueMap());
      maps.push_back(stateMap());
      return buildGeneric(
          b, loc, inputs, dState, maps, 4, 0,
          [&](OpBuilder &nb, Location l, ValueRange a) {
            Value result = mulF(
                nb, l, a[0],
                math::ExpOp::create(nb, l, extendToF32(nb, l, a[g ? 2 : 1])));
            if (g)
              result =
                  mulF(nb, l, result,
                       math::ExpOp::create(nb, l, extendToF32(nb, l, a[1])));
            return result;
          });
    }
    if (du) {
      inputs.push_back(in.lowRank == LowRank::General ? lowA : k);
      maps.push_back(keyMap());
      inputs.push_back(du);
      maps.push_back(valueMap());
    }
    maps.push_back(stateMap());
    bool delta = in.lowRank == LowRank::Delta;
    return buildGeneric(
        b, loc, inputs, dState, maps, 4, 0,
        [&](OpBuilder &nb, Location l, ValueRange a) {
          Value alpha = g ? math::ExpOp::create(nb, l, extendToF32(nb, l, a[1]))
                                .getResult()
                          : Value();
          Value result = a[0];
          unsigned next = g ? 2 : 1;
          if (du) {
            Value outer = mulF(nb, l, extendToF32(nb, l, a[next]), a[next + 1]);
            // The delta rule's a = alpha * k shares the diagonal's alpha.
            if (delta)
              return alpha ? mulF(nb, l, alpha, addF(nb, l, result, outer))
                           : addF(nb, l, result, outer);
            result =
                addF(nb, l, alpha ? mulF(nb, l, alpha, result) : result, outer);
            return result;
          }
          return mulF(nb, l, alpha, result);
        });
  }

  RecurrenceInputs in;
  bool gateGradient;
  int64_t group;
  MLIRContext *ctx;
  TokenStepBuilder forward;
};

struct RecurrenceGradToLoops : OpRewritePattern<RecurrenceGradOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RecurrenceGradOp op,
                                PatternRewriter &rewriter) const override {
    int64_t heads = op.getQ().getType().getDimSize(2);
    int64_t valueHeads = op.getV().getType().getDimSize(2);
    if (ShapedType::isDynamic(heads) || ShapedType::isDynamic(valueHeads))
      return rewriter.notifyMatchFailure(op, "needs static H and HV");
    if (op.getNormalizer())
      return rewriter.notifyMatchFailure(
          op, "the normaliser is rewritten by la-simplify-recurrence first");
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    int64_t group = valueHeads / heads;

    RecurrenceInputs in = RecurrenceInputs::of(op);
    in.gv = op.getGv();
    if (in.gate == GateKind::Fixed) {
      in.g = broadcastLogDecay(rewriter, loc, *op.getLogDecay(), op.getQ());
      in.gate = GateKind::Scalar;
    }
    TokenStepBuilder step(in, group, ctx);
    AdjointStepBuilder adjoint(in, /*gateGradient=*/op.getDg() != nullptr,
                               group, ctx);

    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    Value blockSize =
        arith::ConstantIndexOp::create(rewriter, loc, op.getCheckpoint());
    SmallVector<OpFoldResult> stateSizes =
        mixedSizes(rewriter, loc, op.getInitialState());
    stateSizes[0] = mixedSizes(rewriter, loc, op.getQ())[0];

    Gradients zeros;
    auto zerosLike = [&](Value x) {
      return zeroTensor(rewriter, loc, mixedSizes(rewriter, loc, x));
    };
    zeros.dq = zerosLike(op.getQ());
    zeros.dk = zerosLike(op.getK());
    zeros.dv = zerosLike(op.getV());
    if (op.getDg())
      zeros.dg = zerosLike(op.getG());
    if (op.getDgv())
      zeros.dgv = zerosLike(op.getGv());
    if (op.getDbeta())
      zeros.dbeta = zerosLike(op.getBeta());
    if (op.getDa())
      zeros.da = zerosLike(op.getA());
    if (op.getDb())
      zeros.db = zerosLike(op.getB());

    // The backward of tokens [begin, end) from state `initial` with the
    // final state's gradient `dFinal`: returns dL/dS_0 and the gradients.
    auto sequenceBackward =
        [&](OpBuilder &b, Location l, Value begin, Value end, Value initial,
            Value dFinal,
            const Gradients &gradsIn) -> std::pair<Value, Gradients> {
      Value length = arith::SubIOp::create(b, l, end, begin);
      Value blocks = arith::CeilDivUIOp::create(b, l, length, blockSize);
      auto blockBounds = [&](OpBuilder &nb, Location nl, Value block) {
        Value first = arith::AddIOp::create(
            nb, nl, begin, arith::MulIOp::create(nb, nl, block, blockSize));
        Value last = arith::MinUIOp::create(
            nb, nl, end, arith::AddIOp::create(nb, nl, first, blockSize));
        return std::pair{first, last};
      };
      // The forward over tokens [first, last) from `state`.
      auto forwardLoop = [&](OpBuilder &nb, Location nl, Value first,
                             Value last, Value state) {
        return scf::ForOp::create(
                   nb, nl, first, last, one, ValueRange{state},
                   [&](OpBuilder &ib, Location il, Value t, ValueRange args) {
                     Value next = step.build(ib, il, args[0], t).first;
                     scf::YieldOp::create(ib, il, next);
                   })
            .getResult(0);
      };

      // Pass 1: the state entering every block.
      SmallVector<OpFoldResult> checkpointSizes = {blocks};
      llvm::append_range(checkpointSizes, stateSizes);
      Value checkpoints = emptyTensor(b, l, checkpointSizes, b.getF32Type());
      auto pass1 = scf::ForOp::create(
          b, l, zero, blocks, one, ValueRange{initial, checkpoints},
          [&](OpBuilder &nb, Location nl, Value block, ValueRange args) {
            Value stored = insertAt(nb, nl, args[0], args[1], 0, block);
            auto [first, last] = blockBounds(nb, nl, block);
            Value state = forwardLoop(nb, nl, first, last, args[0]);
            scf::YieldOp::create(nb, nl, ValueRange{state, stored});
          });
      checkpoints = pass1.getResult(1);

      // Pass 2: the blocks in reverse; each recomputes its states, then runs
      // its tokens backward.
      SmallVector<Value> carried = {dFinal};
      llvm::append_range(carried, gradsIn.values());
      SmallVector<OpFoldResult> bufferSizes = {
          b.getIndexAttr(op.getCheckpoint() + 1)};
      llvm::append_range(bufferSizes, stateSizes);
      auto pass2 = scf::ForOp::create(
          b, l, zero, blocks, one, carried,
          [&](OpBuilder &nb, Location nl, Value r, ValueRange args) {
            Value last1 = arith::SubIOp::create(nb, nl, blocks, one);
            Value block = arith::SubIOp::create(nb, nl, last1, r);
            auto [first, last] = blockBounds(nb, nl, block);
            Value count = arith::SubIOp::create(nb, nl, last, first);
            // states[i] is the state before token first + i.
            Value start = extractUnitSlice(nb, nl, checkpoints, 0, block);
            Value states =
                insertAt(nb, nl, start,
                         emptyTensor(nb, nl, bufferSizes, nb.getF32Type()), 0,
                         nb.getIndexAttr(0));
            auto recompute = scf::ForOp::create(
                nb, nl, zero, count, one, ValueRange{start, states},
                [&](OpBuilder &ib, Location il, Value i, ValueRange inner) {
                  Value t = arith::AddIOp::create(ib, il, first, i);
                  Value next = step.build(ib, il, inner[0], t).first;
                  Value slot = arith::AddIOp::create(ib, il, i, one);
                  Value written = insertAt(ib, il, next, inner[1], 0, slot);
                  scf::YieldOp::create(ib, il, ValueRange{next, written});
                });
            Value blockStates = recompute.getResult(1);
            auto reverse = scf::ForOp::create(
                nb, nl, zero, count, one, args,
                [&](OpBuilder &ib, Location il, Value j, ValueRange inner) {
                  Value lastIndex = arith::SubIOp::create(ib, il, count, one);
                  Value i = arith::SubIOp::create(ib, il, lastIndex, j);
                  Value t = arith::AddIOp::create(ib, il, first, i);
                  Value before = extractUnitSlice(ib, il, blockStates, 0, i);
                  Value after = extractUnitSlice(
                      ib, il, blockStates, 0,
                      arith::AddIOp::create(ib, il, i, one).getResult());
                  Gradients grads = Gradients::from(zeros, inner.drop_front());
                  Value dState = adjoint.build(ib, il, inner[0], before, after,
                                               op.getDO(), t, grads);
                  SmallVector<Value> yielded = {dState};
                  llvm::append_range(yielded, grads.values());
                  scf::YieldOp::create(ib, il, yielded);
                });
            scf::YieldOp::create(nb, nl, reverse.getResults());
          });
      return {pass2.getResult(0),
              Gradients::from(zeros, pass2.getResults().drop_front())};
    };

    // The loops below carry the state and its adjoint in place; they start
    // from copies, so that the kernel never writes its inputs (function
    // arguments bufferize as writable buffers, and the caller's arrays are
    // read again, e.g. by autograd).
    auto copyOf = [&](Value x) {
      return linalg::CopyOp::create(
                 rewriter, loc, x,
                 emptyTensor(
                     rewriter, loc, mixedSizes(rewriter, loc, x),
                     cast<RankedTensorType>(x.getType()).getElementType()))
          .getResult(0);
    };
    Value initialState = copyOf(op.getInitialState());
    Value dFinal = op.getDFinalState() ? copyOf(op.getDFinalState()) : Value();
    SmallVector<Value> results;
    auto finish = [&](Value dInitial, const Gradients &grads) {
      Gradients all = grads;
      results = {all.dq, all.dk, all.dv, dInitial};
      for (Value optional : {all.dg, all.dgv, all.dbeta, all.da, all.db})
        if (optional)
          results.push_back(optional);
      rewriter.replaceOp(op, castAll(rewriter, loc, op, results));
    };

    if (!op.getCuSeqlens()) {
      Value time = getValueOrCreateConstantIndexOp(
          rewriter, loc, tensor::getMixedSize(rewriter, loc, op.getQ(), 1));
      if (!dFinal)
        dFinal = zeroTensor(rewriter, loc,
                            mixedSizes(rewriter, loc, op.getInitialState()));
      auto [dInitial, grads] = sequenceBackward(rewriter, loc, zero, time,
                                                initialState, dFinal, zeros);
      finish(dInitial, grads);
      return success();
    }

    // Packed sequences: one backward per sequence, each to its own state.
    Value cuSeqlens = op.getCuSeqlens();
    Value tokens = tensor::DimOp::create(rewriter, loc, op.getQ(), 1);
    Value numSequences = arith::SubIOp::create(
        rewriter, loc, tensor::DimOp::create(rewriter, loc, cuSeqlens, 0), one);
    SmallVector<Value> carried = {zerosLike(op.getInitialState())};
    llvm::append_range(carried, zeros.values());
    auto loop = scf::ForOp::create(
        rewriter, loc, zero, numSequences, one, carried,
        [&](OpBuilder &b, Location l, Value n, ValueRange args) {
          auto [begin, end] = extractSequenceBounds(b, l, cuSeqlens, n, tokens);
          Value initial = sliceDim(b, l, initialState, 0, n, b.getIndexAttr(1));
          Value dFinalOne =
              dFinal ? sliceDim(b, l, dFinal, 0, n, b.getIndexAttr(1))
                     : zeroTensor(b, l, mixedSizes(b, l, initial));
          auto [dInitial, grads] =
              sequenceBackward(b, l, begin, end, initial, dFinalOne,
                               Gradients::from(zeros, args.drop_front()));
          SmallVector<Value> yielded = {
              insertAt(b, l, dInitial, args[0], 0, n)};
          llvm::append_range(yielded, grads.values());
          scf::YieldOp::create(b, l, yielded);
        });
    finish(loop.getResult(0),
           Gradients::from(zeros, loop.getResults().drop_front()));
    return success();
  }

  /// Casts each value to the type of the op's result in its place.
  static SmallVector<Value> castAll(OpBuilder &b, Location loc, Operation *op,
                                    ArrayRef<Value> values) {
    SmallVector<Value> cast;
    for (auto [value, result] : llvm::zip(values, op->getResults()))
      cast.push_back(
          value.getType() == result.getType()
              ? value
              : tensor::CastOp::create(b, loc, result.getType(), value)
                    .getResult());
    return cast;
  }
};
} // namespace

void mlir::la::populateRecurrenceGradToLoopsPatterns(
    RewritePatternSet &patterns) {
  patterns.add<RecurrenceGradToLoops>(patterns.getContext());
}
