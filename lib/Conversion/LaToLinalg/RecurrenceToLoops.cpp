//===- RecurrenceToLoops.cpp - la.recurrence as a loop over tokens --------===//
//
// The plain recurrence, one token at a time, on an f32 state [B,HV,K,V]:
// the correctness baseline and the decode path. Packed sequences run one
// loop each, from their own initial state.
//
//===----------------------------------------------------------------------===//

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
/// Emits the per-token update and read-out. Loops are named b (batch),
/// hv (value head), kk (key channel), vv (value channel); a value head reads
/// key head hv floordiv group.
class TokenStepBuilder {
public:
  TokenStepBuilder(RecurrenceOp op, int64_t group)
      : op(op), group(group), ctx(op.getContext()) {}

  /// Returns the state after token t and the output row [B,HV,V] (f32).
  std::pair<Value, Value> build(OpBuilder &b, Location loc, Value state,
                                Value t) {
    Value q = row(b, loc, op.getQ(), t);
    Value k = row(b, loc, op.getK(), t);
    Value v = row(b, loc, op.getV(), t);
    Value g = op.getG() ? row(b, loc, op.getG(), t) : Value();
    SmallVector<OpFoldResult> stateSizes = mixedSizes(b, loc, state);
    Type f32 = b.getF32Type();
    AffineMap stateMap = dimMap(ctx, 4, {0, 1, 2, 3});
    AffineMap keyMap = dimMap(ctx, 4, {0, -2, 2}, group);  // (b,hv,kk)
    AffineMap valueMap = dimMap(ctx, 4, {0, 1, 3});         // (b,hv,vv)

    Value next;
    switch (op.getLowRank()) {
    case LowRank::None: {
      // S = alpha * S + k v^T.
      SmallVector<Value> inputs = {state, k, v};
      SmallVector<AffineMap> maps = {stateMap, keyMap, valueMap};
      appendGate(g, inputs, maps);
      maps.push_back(stateMap);
      next = generic(b, loc, inputs, emptyTensor(b, loc, stateSizes, f32),
                     maps, 4, 0, [&](OpBuilder &nb, Location l, ValueRange a) {
                       Value s = decay(nb, l, a[0], g ? a[3] : Value());
                       Value kv = mul(nb, l, ext(nb, l, a[1]), ext(nb, l, a[2]));
                       return add(nb, l, s, kv);
                     });
      break;
    }
    case LowRank::Delta: {
      // S' = alpha * S; S = S' + beta k (v - k^T S')^T.
      Value decayed = state;
      if (g) {
        SmallVector<Value> inputs = {state};
        SmallVector<AffineMap> maps = {stateMap};
        appendGate(g, inputs, maps);
        maps.push_back(stateMap);
        decayed = generic(b, loc, inputs, emptyTensor(b, loc, stateSizes, f32),
                          maps, 4, 0,
                          [&](OpBuilder &nb, Location l, ValueRange a) {
                            return decay(nb, l, a[0], a[1]);
                          });
      }
      Value readBack = contractKeys(b, loc, k, decayed);
      Value beta = row(b, loc, op.getBeta(), t);
      next = generic(
          b, loc, ValueRange{decayed, k, v, readBack, beta},
          emptyTensor(b, loc, stateSizes, f32),
          {stateMap, keyMap, valueMap, valueMap, dimMap(ctx, 4, {0, -2}, group),
           stateMap},
          4, 0, [&](OpBuilder &nb, Location l, ValueRange a) {
            Value error = arith::SubFOp::create(nb, l, ext(nb, l, a[2]), a[3]);
            Value scaledKey = mul(nb, l, ext(nb, l, a[4]), ext(nb, l, a[1]));
            return add(nb, l, a[0], mul(nb, l, scaledKey, error));
          });
      break;
    }
    case LowRank::General: {
      // S = alpha * S - b (a^T S)^T + k v^T, with a^T applied to the old S.
      Value readBack = contractKeys(b, loc, row(b, loc, op.getA(), t), state);
      SmallVector<Value> inputs = {state, k, v, readBack,
                                   row(b, loc, op.getB(), t)};
      SmallVector<AffineMap> maps = {stateMap, keyMap, valueMap, valueMap,
                                     keyMap};
      appendGate(g, inputs, maps);
      maps.push_back(stateMap);
      next = generic(b, loc, inputs, emptyTensor(b, loc, stateSizes, f32),
                     maps, 4, 0, [&](OpBuilder &nb, Location l, ValueRange a) {
                       Value s = decay(nb, l, a[0], g ? a[5] : Value());
                       Value kv = mul(nb, l, ext(nb, l, a[1]), ext(nb, l, a[2]));
                       Value lowRank = mul(nb, l, ext(nb, l, a[4]), a[3]);
                       return add(nb, l, arith::SubFOp::create(nb, l, s, lowRank),
                                  kv);
                     });
      break;
    }
    }

    // o_t = S^T (scale q). Loops (b,hv,vv,kk).
    SmallVector<OpFoldResult> outSizes = {stateSizes[0], stateSizes[1],
                                          stateSizes[3]};
    Value scale = constantF32(b, loc, op.getScale().convertToFloat());
    Value out = generic(
        b, loc, ValueRange{q, next}, zeroTensor(b, loc, outSizes),
        {dimMap(ctx, 4, {0, -2, 3}, group), dimMap(ctx, 4, {0, 1, 3, 2}),
         dimMap(ctx, 4, {0, 1, 2})},
        3, 1, [&](OpBuilder &nb, Location l, ValueRange a) {
          Value scaled = mul(nb, l, ext(nb, l, a[0]), scale);
          return add(nb, l, a[2], mul(nb, l, scaled, a[1]));
        });
    return {next, out};
  }

private:
  /// u[b,hv,vv] = sum_kk x[b,hv/group,kk] S[b,hv,kk,vv]. Loops (b,hv,vv,kk).
  Value contractKeys(OpBuilder &b, Location loc, Value x, Value state) {
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, state);
    SmallVector<OpFoldResult> outSizes = {sizes[0], sizes[1], sizes[3]};
    return generic(b, loc, ValueRange{x, state}, zeroTensor(b, loc, outSizes),
                   {dimMap(ctx, 4, {0, -2, 3}, group),
                    dimMap(ctx, 4, {0, 1, 3, 2}), dimMap(ctx, 4, {0, 1, 2})},
                   3, 1, [&](OpBuilder &nb, Location l, ValueRange a) {
                     return add(nb, l, a[2],
                                mul(nb, l, ext(nb, l, a[0]), a[1]));
                   });
  }

  void appendGate(Value g, SmallVectorImpl<Value> &inputs,
                  SmallVectorImpl<AffineMap> &maps) {
    if (!g)
      return;
    inputs.push_back(g);
    maps.push_back(op.getGate() == GateKind::Channel
                       ? dimMap(ctx, 4, {0, -2, 2}, group)
                       : dimMap(ctx, 4, {0, -2}, group));
  }

  static Value decay(OpBuilder &b, Location loc, Value s, Value logGate) {
    if (!logGate)
      return s;
    return mul(b, loc, s, math::ExpOp::create(b, loc, ext(b, loc, logGate)));
  }

  /// Row t of dim 1: [B,T,...] -> [B,...].
  static Value row(OpBuilder &b, Location loc, Value x, Value t) {
    auto type = cast<RankedTensorType>(x.getType());
    int64_t rank = type.getRank();
    SmallVector<OpFoldResult> offsets(rank, b.getIndexAttr(0));
    offsets[1] = t;
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
    sizes[1] = b.getIndexAttr(1);
    SmallVector<OpFoldResult> strides(rank, b.getIndexAttr(1));
    SmallVector<int64_t> shape(type.getShape());
    shape.erase(shape.begin() + 1);
    return tensor::ExtractSliceOp::create(
        b, loc, RankedTensorType::get(shape, type.getElementType()), x,
        offsets, sizes, strides);
  }

  static Value generic(OpBuilder &b, Location loc, ValueRange inputs,
                       Value init, ArrayRef<AffineMap> maps, unsigned parallel,
                       unsigned reductions,
                       function_ref<Value(OpBuilder &, Location, ValueRange)>
                           body) {
    return linalg::GenericOp::create(
               b, loc, init.getType(), inputs, ValueRange{init}, maps,
               iteratorTypes(parallel, reductions),
               [&](OpBuilder &nb, Location l, ValueRange args) {
                 linalg::YieldOp::create(nb, l, body(nb, l, args));
               })
        .getResult(0);
  }
  static Value ext(OpBuilder &b, Location l, Value x) {
    return extendToF32(b, l, x);
  }
  static Value mul(OpBuilder &b, Location l, Value x, Value y) {
    return arith::MulFOp::create(b, l, x, y);
  }
  static Value add(OpBuilder &b, Location l, Value x, Value y) {
    return arith::AddFOp::create(b, l, x, y);
  }

  RecurrenceOp op;
  int64_t group;
  MLIRContext *ctx;
};

/// Inserts the output row [B,HV,V] at token t of o [B,T,HV,V].
static Value insertRow(OpBuilder &b, Location loc, Value rowValue, Value output,
                       Value t) {
  auto outputType = cast<RankedTensorType>(output.getType());
  Value converted = rowValue;
  Type elementType = outputType.getElementType();
  if (!elementType.isF32()) {
    auto rowType = cast<RankedTensorType>(rowValue.getType());
    AffineMap id = b.getMultiDimIdentityMap(3);
    Value init = emptyTensor(b, loc, mixedSizes(b, loc, rowValue), elementType);
    converted = linalg::GenericOp::create(
                    b, loc, init.getType(), rowValue, init,
                    ArrayRef<AffineMap>{id, id}, iteratorTypes(3),
                    [&](OpBuilder &nb, Location l, ValueRange a) {
                      linalg::YieldOp::create(
                          nb, l, castFloat(nb, l, a[0], elementType));
                    })
                    .getResult(0);
    (void)rowType;
  }
  SmallVector<OpFoldResult> offsets(4, b.getIndexAttr(0));
  offsets[1] = t;
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, output);
  sizes[1] = b.getIndexAttr(1);
  SmallVector<OpFoldResult> strides(4, b.getIndexAttr(1));
  return tensor::InsertSliceOp::create(b, loc, converted, output, offsets,
                                       sizes, strides);
}

struct RecurrenceToLoops : OpRewritePattern<RecurrenceOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RecurrenceOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getGate() == GateKind::Fixed || op.getNormalizer())
      return rewriter.notifyMatchFailure(op, "simplify the recurrence first");
    int64_t heads = op.getQ().getType().getDimSize(2);
    int64_t valueHeads = op.getV().getType().getDimSize(2);
    if (ShapedType::isDynamic(heads) || ShapedType::isDynamic(valueHeads))
      return rewriter.notifyMatchFailure(op, "needs static H and HV");
    Location loc = op.getLoc();
    TokenStepBuilder step(op, valueHeads / heads);
    Type outputElementType = op.getO().getType().getElementType();
    SmallVector<OpFoldResult> outputSizes =
        mixedSizes(rewriter, loc, op.getV());
    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    OpFoldResult keyDim = tensor::getMixedSize(rewriter, loc, op.getK(), 3);

    // Runs tokens [begin, end) from `state`, writing into `output`.
    auto timeLoop = [&](OpBuilder &b, Location l, Value begin, Value end,
                        Value state, Value output) {
      return scf::ForOp::create(
          b, l, begin, end, one, ValueRange{state, output},
          [&](OpBuilder &nb, Location nl, Value t, ValueRange iterArgs) {
            auto [next, outRow] = step.build(nb, nl, iterArgs[0], t);
            Value written = insertRow(nb, nl, outRow, iterArgs[1], t);
            scf::YieldOp::create(nb, nl, ValueRange{next, written});
          });
    };

    if (!op.getCuSeqlens()) {
      Value state = op.getInitialState();
      if (!state)
        state = zeroTensor(rewriter, loc,
                           {outputSizes[0], outputSizes[2], keyDim,
                            outputSizes[3]});
      Value output =
          emptyTensor(rewriter, loc, outputSizes, outputElementType);
      Value time = getValueOrCreateConstantIndexOp(
          rewriter, loc, tensor::getMixedSize(rewriter, loc, op.getQ(), 1));
      auto loop = timeLoop(rewriter, loc, zero, time, state, output);
      replace(op, rewriter, loop.getResult(1), loop.getResult(0));
      return success();
    }

    // Packed sequences: one time loop per sequence, each from its own state.
    Value cuSeqlens = op.getCuSeqlens();
    Value numSequences = arith::SubIOp::create(
        rewriter, loc, tensor::DimOp::create(rewriter, loc, cuSeqlens, 0),
        one);
    Value outputZero = arith::ConstantOp::create(
        rewriter, loc, rewriter.getZeroAttr(outputElementType));
    Value outputInit =
        linalg::FillOp::create(
            rewriter, loc, ValueRange{outputZero},
            ValueRange{emptyTensor(rewriter, loc, outputSizes,
                                   outputElementType)})
            .getResult(0);
    SmallVector<OpFoldResult> finalSizes = {numSequences, outputSizes[2],
                                            keyDim, outputSizes[3]};
    Value finalInit =
        emptyTensor(rewriter, loc, finalSizes, rewriter.getF32Type());
    auto loop = scf::ForOp::create(
        rewriter, loc, zero, numSequences, one,
        ValueRange{outputInit, finalInit},
        [&](OpBuilder &b, Location l, Value n, ValueRange iterArgs) {
          auto offsetAt = [&](Value index) -> Value {
            Value offset = tensor::ExtractOp::create(b, l, cuSeqlens, index);
            return arith::IndexCastOp::create(b, l, b.getIndexType(), offset);
          };
          Value begin = offsetAt(n);
          Value end = offsetAt(arith::AddIOp::create(b, l, n, one));
          SmallVector<OpFoldResult> oneState = {
              b.getIndexAttr(1), outputSizes[2], keyDim, outputSizes[3]};
          SmallVector<OpFoldResult> offsets(4, b.getIndexAttr(0));
          offsets[0] = n;
          SmallVector<OpFoldResult> strides(4, b.getIndexAttr(1));
          Value state;
          if (Value initial = op.getInitialState())
            state = tensor::ExtractSliceOp::create(
                b, l,
                RankedTensorType::get(staticShape(oneState),
                                      b.getF32Type()),
                initial, offsets, oneState, strides);
          else
            state = zeroTensor(b, l, oneState);
          auto inner = timeLoop(b, l, begin, end, state, iterArgs[0]);
          Value finals = tensor::InsertSliceOp::create(
              b, l, inner.getResult(0), iterArgs[1], offsets, oneState,
              strides);
          scf::YieldOp::create(b, l, ValueRange{inner.getResult(1), finals});
        });
    replace(op, rewriter, loop.getResult(0), loop.getResult(1));
    return success();
  }

  static void replace(RecurrenceOp op, PatternRewriter &rewriter,
                      Value output, Value finalState) {
    auto castTo = [&](Value value, Type type) -> Value {
      if (value.getType() == type)
        return value;
      return tensor::CastOp::create(rewriter, op.getLoc(), type, value);
    };
    SmallVector<Value> results = {castTo(output, op.getO().getType())};
    if (Value final = op.getFinalState())
      results.push_back(castTo(finalState, final.getType()));
    rewriter.replaceOp(op, results);
  }
};
} // namespace

void mlir::la::populateRecurrenceToLoopsPatterns(RewritePatternSet &patterns) {
  patterns.add<RecurrenceToLoops>(patterns.getContext());
}
