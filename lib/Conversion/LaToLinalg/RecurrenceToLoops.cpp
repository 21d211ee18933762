//===- RecurrenceToLoops.cpp - la.recurrence as a loop over tokens --------===//
//
// The plain recurrence, one token at a time, on an f32 state [B,HV,K,V]:
// the correctness baseline and the decode path. Packed sequences run one
// loop each, from their own initial state.
//
//===----------------------------------------------------------------------===//

#include "TokenStep.h"
#include "la/Conversion/LaToLinalg.h"
#include "la/Dialect/La/LaPasses.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace mlir::la;

static Value decay(OpBuilder &b, Location loc, Value s, Value logGate) {
  if (!logGate)
    return s;
  return mulF(b, loc, s,
              math::ExpOp::create(b, loc, extendToF32(b, loc, logGate)));
}

std::pair<Value, Value> TokenStepBuilder::build(OpBuilder &b, Location loc,
                                                Value state, Value t) {
  Value q = extractUnitSlice(b, loc, in.q, 1, t);
  Value k = extractUnitSlice(b, loc, in.k, 1, t);
  Value v = extractUnitSlice(b, loc, in.v, 1, t);
  Value g = in.g ? extractUnitSlice(b, loc, in.g, 1, t) : Value();
  Value gv = in.gv ? extractUnitSlice(b, loc, in.gv, 1, t) : Value();
  SmallVector<OpFoldResult> stateSizes = mixedSizes(b, loc, state);
  Type f32 = b.getF32Type();
  AffineMap stateMap = dimMap(ctx, 4, {0, 1, 2, 3});
  AffineMap keyMap = dimMap(ctx, 4, {0, -2, 2}, group); // (b,hv,kk)
  AffineMap valueMap = dimMap(ctx, 4, {0, 1, 3});       // (b,hv,vv)

  Value next;
  switch (in.lowRank) {
  case LowRank::None: {
    // S = alpha * S * exp(gv) + k v^T.
    SmallVector<Value> inputs = {state, k, v};
    SmallVector<AffineMap> maps = {stateMap, keyMap, valueMap};
    appendGate(g, inputs, maps);
    if (gv) {
      inputs.push_back(gv);
      maps.push_back(valueMap);
    }
    maps.push_back(stateMap);
    next =
        buildGeneric(b, loc, inputs, emptyTensor(b, loc, stateSizes, f32), maps,
                     4, 0, [&](OpBuilder &nb, Location l, ValueRange a) {
                       Value s = decay(nb, l, a[0], g ? a[3] : Value());
                       s = decay(nb, l, s, gv ? a[g ? 4 : 3] : Value());
                       Value kv = mulExtended(nb, l, a[1], a[2]);
                       return addF(nb, l, s, kv);
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
      decayed = buildGeneric(b, loc, inputs,
                             emptyTensor(b, loc, stateSizes, f32), maps, 4, 0,
                             [&](OpBuilder &nb, Location l, ValueRange a) {
                               return decay(nb, l, a[0], a[1]);
                             });
    }
    Value readBack = contractKeys(b, loc, k, decayed);
    Value beta = extractUnitSlice(b, loc, in.beta, 1, t);
    next =
        buildGeneric(b, loc, ValueRange{decayed, k, v, readBack, beta},
                     emptyTensor(b, loc, stateSizes, f32),
                     {stateMap, keyMap, valueMap, valueMap,
                      dimMap(ctx, 4, {0, -2}, group), stateMap},
                     4, 0, [&](OpBuilder &nb, Location l, ValueRange a) {
                       Value error = arith::SubFOp::create(
                           nb, l, extendToF32(nb, l, a[2]), a[3]);
                       Value scaledKey = mulExtended(nb, l, a[4], a[1]);
                       return addF(nb, l, a[0], mulF(nb, l, scaledKey, error));
                     });
    break;
  }
  case LowRank::General: {
    // S = alpha * S - b (a^T S)^T + k v^T, with a^T applied to the old S.
    Value readBack =
        contractKeys(b, loc, extractUnitSlice(b, loc, in.a, 1, t), state);
    SmallVector<Value> inputs = {state, k, v, readBack,
                                 extractUnitSlice(b, loc, in.b, 1, t)};
    SmallVector<AffineMap> maps = {stateMap, keyMap, valueMap, valueMap,
                                   keyMap};
    appendGate(g, inputs, maps);
    maps.push_back(stateMap);
    next = buildGeneric(
        b, loc, inputs, emptyTensor(b, loc, stateSizes, f32), maps, 4, 0,
        [&](OpBuilder &nb, Location l, ValueRange a) {
          Value s = decay(nb, l, a[0], g ? a[5] : Value());
          Value kv = mulExtended(nb, l, a[1], a[2]);
          Value lowRank = mulF(nb, l, extendToF32(nb, l, a[4]), a[3]);
          return addF(nb, l, arith::SubFOp::create(nb, l, s, lowRank), kv);
        });
    break;
  }
  }

  // o_t = S^T (scale q). Loops (b,hv,vv,kk); with grouped query heads
  // (b,hq,vv,kk), query head hq reading state hq / G.
  SmallVector<OpFoldResult> outSizes = {stateSizes[0], stateSizes[1],
                                        stateSizes[3]};
  AffineMap queryMap = dimMap(ctx, 4, {0, -2, 3}, group);
  AffineMap readMap = dimMap(ctx, 4, {0, 1, 3, 2});
  if (queryGroup) {
    outSizes[1] = tensor::getMixedSize(b, loc, q, 1);
    queryMap = dimMap(ctx, 4, {0, 1, 3});
    readMap = dimMap(ctx, 4, {0, -2, 3, 2}, queryGroup);
  }
  Value scale = constantF32(b, loc, in.scale);
  Value out =
      buildGeneric(b, loc, ValueRange{q, next}, zeroTensor(b, loc, outSizes),
                   {queryMap, readMap, dimMap(ctx, 4, {0, 1, 2})}, 3, 1,
                   [&](OpBuilder &nb, Location l, ValueRange a) {
                     Value scaled =
                         mulF(nb, l, extendToF32(nb, l, a[0]), scale);
                     return addF(nb, l, a[2], mulF(nb, l, scaled, a[1]));
                   });
  return {next, out};
}

Value TokenStepBuilder::contractKeys(OpBuilder &b, Location loc, Value x,
                                     Value state) {
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, state);
  SmallVector<OpFoldResult> outSizes = {sizes[0], sizes[1], sizes[3]};
  return buildGeneric(
      b, loc, ValueRange{x, state}, zeroTensor(b, loc, outSizes),
      {dimMap(ctx, 4, {0, -2, 3}, group), dimMap(ctx, 4, {0, 1, 3, 2}),
       dimMap(ctx, 4, {0, 1, 2})},
      3, 1, [&](OpBuilder &nb, Location l, ValueRange a) {
        return addF(nb, l, a[2], mulF(nb, l, extendToF32(nb, l, a[0]), a[1]));
      });
}

void TokenStepBuilder::appendGate(Value g, SmallVectorImpl<Value> &inputs,
                                  SmallVectorImpl<AffineMap> &maps) {
  if (!g)
    return;
  inputs.push_back(g);
  maps.push_back(in.gate == GateKind::Channel
                     ? dimMap(ctx, 4, {0, -2, 2}, group)
                     : dimMap(ctx, 4, {0, -2}, group));
}

namespace {
/// Inserts the output row [B,HV,V] (f32) at token t of o [B,T,HV,V].
static Value insertRow(OpBuilder &b, Location loc, Value rowValue, Value output,
                       Value t) {
  Type elementType = cast<RankedTensorType>(output.getType()).getElementType();
  Value converted = rowValue;
  if (!elementType.isF32()) {
    AffineMap id = b.getMultiDimIdentityMap(3);
    converted = buildGeneric(
        b, loc, rowValue,
        emptyTensor(b, loc, mixedSizes(b, loc, rowValue), elementType),
        {id, id}, 3, 0, [&](OpBuilder &nb, Location l, ValueRange a) {
          return castFloat(nb, l, a[0], elementType);
        });
  }
  return insertAt(b, loc, converted, output, 1, t);
}

/// The read from the state's value side at token t, `S_t (scale x_t)`:
/// [B,HV,K] (f32) from `state` [B,HV,K,V] and `query` [B,T,HV,V].
static Value readValueSide(OpBuilder &b, Location loc, Value state, Value query,
                           Value t, float scale) {
  MLIRContext *ctx = b.getContext();
  Value row = extractUnitSlice(b, loc, query, 1, t);
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, state);
  Value scaleValue = constantF32(b, loc, scale);
  // Loops (b,hv,kk,vv).
  return buildGeneric(b, loc, ValueRange{row, state},
                      zeroTensor(b, loc, {sizes[0], sizes[1], sizes[2]}),
                      {dimMap(ctx, 4, {0, 1, 3}), dimMap(ctx, 4, {0, 1, 2, 3}),
                       dimMap(ctx, 4, {0, 1, 2})},
                      3, 1, [&](OpBuilder &nb, Location l, ValueRange a) {
                        Value scaled =
                            mulF(nb, l, extendToF32(nb, l, a[0]), scaleValue);
                        return addF(nb, l, a[2], mulF(nb, l, scaled, a[1]));
                      });
}

struct RecurrenceToLoops : OpRewritePattern<RecurrenceOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RecurrenceOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getGate() == GateKind::Fixed || op.getNormalizer())
      return rewriter.notifyMatchFailure(op, "simplify the recurrence first");
    if (op.getStateIndices())
      return rewriter.notifyMatchFailure(op, "decompose the state pool first");
    int64_t heads = op.getK().getType().getDimSize(2);
    int64_t valueHeads = op.getV().getType().getDimSize(2);
    if (ShapedType::isDynamic(heads) || ShapedType::isDynamic(valueHeads))
      return rewriter.notifyMatchFailure(op, "needs static H and HV");
    Location loc = op.getLoc();
    RecurrenceInputs inputs = RecurrenceInputs::of(op);
    inputs.gv = op.getGv();
    TokenStepBuilder step(inputs, valueHeads / heads, op.getContext(),
                          op.getQueryGroupSize());
    Type outputElementType = op.getO().getType().getElementType();
    SmallVector<OpFoldResult> valueSizes = mixedSizes(rewriter, loc, op.getV());
    SmallVector<OpFoldResult> outputSizes =
        mixedSizes(rewriter, loc, op.getOInit());
    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    OpFoldResult keyDim = tensor::getMixedSize(rewriter, loc, op.getK(), 3);

    Value transposedQuery = op.getTransposedQuery();
    float scale = op.getScale().convertToFloat();
    // Runs tokens [begin, end) from `state`, writing into `output` (and the
    // value-side read into `transposedOutput`).
    auto timeLoop = [&](OpBuilder &b, Location l, Value begin, Value end,
                        Value state, Value output, Value transposedOutput) {
      SmallVector<Value> carried = {state, output};
      if (transposedOutput)
        carried.push_back(transposedOutput);
      return scf::ForOp::create(
          b, l, begin, end, one, carried,
          [&](OpBuilder &nb, Location nl, Value r, ValueRange iterArgs) {
            // A reverse recurrence visits begin + end - 1 - r.
            Value t = r;
            if (op.getReverse()) {
              Value sum = arith::AddIOp::create(nb, nl, begin, end);
              Value last = arith::SubIOp::create(nb, nl, sum, one);
              t = arith::SubIOp::create(nb, nl, last, r);
            }
            auto [next, outRow] = step.build(nb, nl, iterArgs[0], t);
            SmallVector<Value> yields = {
                next, insertRow(nb, nl, outRow, iterArgs[1], t)};
            if (transposedQuery) {
              Value row =
                  readValueSide(nb, nl, next, transposedQuery, t, scale);
              yields.push_back(insertRow(nb, nl, row, iterArgs[2], t));
            }
            scf::YieldOp::create(nb, nl, yields);
          });
    };
    Value transposedInit = op.getTransposedOInit();
    Type transposedType =
        transposedInit
            ? cast<RankedTensorType>(transposedInit.getType()).getElementType()
            : Type();

    if (!op.getCuSeqlens()) {
      Value state = op.getNonZeroInitialState();
      if (!state)
        state =
            zeroTensor(rewriter, loc,
                       {valueSizes[0], valueSizes[2], keyDim, valueSizes[3]});
      Value output = emptyTensor(rewriter, loc, outputSizes, outputElementType);
      Value transposedOutput =
          transposedInit
              ? emptyTensor(rewriter, loc,
                            mixedSizes(rewriter, loc, transposedInit),
                            transposedType)
              : Value();
      Value time = getValueOrCreateConstantIndexOp(
          rewriter, loc, tensor::getMixedSize(rewriter, loc, op.getQ(), 1));
      auto loop =
          timeLoop(rewriter, loc, zero, time, state, output, transposedOutput);
      SmallVector<Value> results = {loop.getResult(1), loop.getResult(0)};
      if (transposedInit)
        results.push_back(loop.getResult(2));
      replaceWithCasts(rewriter, op, results);
      return success();
    }

    // Packed sequences: one time loop per sequence, each from its own state.
    Value cuSeqlens = op.getCuSeqlens();
    Value tokens = tensor::DimOp::create(rewriter, loc, op.getQ(), 1);
    Value numSequences = arith::SubIOp::create(
        rewriter, loc, tensor::DimOp::create(rewriter, loc, cuSeqlens, 0), one);
    Value outputInit =
        filledTensor(rewriter, loc, outputSizes, outputElementType, 0.0);
    SmallVector<OpFoldResult> finalSizes = {numSequences, valueSizes[2], keyDim,
                                            valueSizes[3]};
    Value finalInit =
        emptyTensor(rewriter, loc, finalSizes, rewriter.getF32Type());
    SmallVector<Value> inits = {outputInit, finalInit};
    if (transposedInit)
      inits.push_back(filledTensor(rewriter, loc,
                                   mixedSizes(rewriter, loc, transposedInit),
                                   transposedType, 0.0));
    auto loop = scf::ForOp::create(
        rewriter, loc, zero, numSequences, one, inits,
        [&](OpBuilder &b, Location l, Value n, ValueRange iterArgs) {
          std::pair<Value, Value> bounds =
              extractSequenceBounds(b, l, cuSeqlens, n, tokens);
          Value begin = bounds.first, end = bounds.second;
          Value state;
          if (Value initial = op.getNonZeroInitialState())
            state = sliceDim(b, l, initial, 0, n, b.getIndexAttr(1));
          else
            state = zeroTensor(
                b, l,
                {b.getIndexAttr(1), valueSizes[2], keyDim, valueSizes[3]});
          auto inner = timeLoop(b, l, begin, end, state, iterArgs[0],
                                transposedInit ? iterArgs[2] : Value());
          Value finals = insertAt(b, l, inner.getResult(0), iterArgs[1], 0, n);
          SmallVector<Value> yields = {inner.getResult(1), finals};
          if (transposedInit)
            yields.push_back(inner.getResult(2));
          scf::YieldOp::create(b, l, yields);
        });
    replaceWithCasts(rewriter, op, SmallVector<Value>(loop.getResults()));
    return success();
  }
};
} // namespace

void mlir::la::populateRecurrenceToLoopsPatterns(RewritePatternSet &patterns) {
  patterns.add<RecurrenceToLoops>(patterns.getContext());
  populateDecomposeStateIndicesPatterns(patterns);
}
