//===- ChunkedToLinalg.cpp - level-2 la ops to linalg and scf -------------===//
//
// Each chunked op becomes linalg.generic ops on tensors (the state scan an
// scf.for over chunks). Loops: b batch, n chunk, i/j rows of a chunk, h key
// head, hv value head, kk key channel, vv value channel. A value head reads
// key head hv floordiv (HV/H).
//
//===----------------------------------------------------------------------===//

#include "la/Conversion/LaToLinalg.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace mlir::la;

/// A generic op with one f32/typed init and the given inputs and maps.
static Value generic(OpBuilder &b, Location loc, ValueRange inputs, Value init,
                     ArrayRef<AffineMap> maps, unsigned parallel,
                     unsigned reductions,
                     function_ref<Value(OpBuilder &, Location, ValueRange)>
                         body) {
  return linalg::GenericOp::create(
             b, loc, init.getType(), inputs, ValueRange{init}, maps,
             iteratorTypes(parallel, reductions),
             [&](OpBuilder &nb, Location nloc, ValueRange args) {
               linalg::YieldOp::create(nb, nloc, body(nb, nloc, args));
             })
      .getResult(0);
}

/// exp(min(x, 0)): the decay factor of a log-gate difference that is <= 0 in
/// exact arithmetic; the clamp keeps rounding (or masked entries) finite.
static Value safeDecay(OpBuilder &b, Location loc, Value x) {
  Value zero = constantF32(b, loc, 0.0f);
  return math::ExpOp::create(b, loc, arith::MinimumFOp::create(b, loc, x, zero));
}

static Value mulF(OpBuilder &b, Location loc, Value x, Value y) {
  return arith::MulFOp::create(b, loc, x, y);
}

static Value addF(OpBuilder &b, Location loc, Value x, Value y) {
  return arith::AddFOp::create(b, loc, x, y);
}

/// `j <= i` for two linalg loop indices.
static Value causal(OpBuilder &b, Location loc, unsigned iDim, unsigned jDim) {
  Value i = linalg::IndexOp::create(b, loc, iDim);
  Value j = linalg::IndexOp::create(b, loc, jDim);
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ule, j, i);
}

/// HV / H, requiring both static.
static FailureOr<int64_t> groupSize(RankedTensorType keyType,
                                    RankedTensorType valueType, int64_t hDim,
                                    int64_t hvDim) {
  int64_t heads = keyType.getDimSize(hDim);
  int64_t valueHeads = valueType.getDimSize(hvDim);
  if (ShapedType::isDynamic(heads) || ShapedType::isDynamic(valueHeads))
    return failure();
  return valueHeads / heads;
}

static bool isChannelGate(Value gates) {
  return gates && cast<RankedTensorType>(gates.getType()).getRank() == 5;
}

namespace {
struct ChunkCumsumToLinalg : OpRewritePattern<ChunkCumsumOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ChunkCumsumOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    // G[.., i, ..] = sum_j [j <= i] g[.., j, ..]; j is the last loop.
    int64_t rank = op.getG().getType().getRank();
    unsigned numLoops = rank + 1;
    SmallVector<int64_t> outDims, inDims;
    for (int64_t d = 0; d < rank; ++d) {
      outDims.push_back(d);
      inDims.push_back(d == 2 ? rank : d);
    }
    Value init = zeroTensor(rewriter, loc, mixedSizes(rewriter, loc, op.getG()));
    Value result = generic(
        rewriter, loc, op.getG(), init,
        {dimMap(ctx, numLoops, inDims), dimMap(ctx, numLoops, outDims)}, rank,
        1, [&](OpBuilder &b, Location l, ValueRange args) -> Value {
          Value term = arith::SelectOp::create(
              b, l, causal(b, l, 2, rank), extendToF32(b, l, args[0]),
              constantF32(b, l, 0.0f));
          return addF(b, l, args[1], term);
        });
    rewriter.replaceOp(op, result);
    return success();
  }
};

struct ChunkIntraToLinalg : OpRewritePattern<ChunkIntraOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ChunkIntraOp op,
                                PatternRewriter &rewriter) const override {
    FailureOr<int64_t> group =
        groupSize(op.getK().getType(), op.getV().getType(), 3, 3);
    if (failed(group))
      return rewriter.notifyMatchFailure(op, "needs static H and HV");
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    Value gates = op.getGates();
    bool channel = isChannelGate(gates);
    float scale = op.getScale().convertToFloat();

    // P[b,n,h,i,j] = sum_kk q[b,n,i,h,kk] k[b,n,j,h,kk] (* exp(G_i - G_j)
    // per channel). Loops (b,n,h,i,j,kk).
    SmallVector<OpFoldResult> qSizes = mixedSizes(rewriter, loc, op.getQ());
    SmallVector<OpFoldResult> scoreSizes = {qSizes[0], qSizes[1], qSizes[3],
                                            qSizes[2], qSizes[2]};
    SmallVector<Value> inputs = {op.getQ(), op.getK()};
    SmallVector<AffineMap> maps = {dimMap(ctx, 6, {0, 1, 3, 2, 5}),
                                   dimMap(ctx, 6, {0, 1, 4, 2, 5})};
    if (channel) {
      inputs.append({gates, gates});
      maps.append({dimMap(ctx, 6, {0, 1, 3, 2, 5}),
                   dimMap(ctx, 6, {0, 1, 4, 2, 5})});
    }
    maps.push_back(dimMap(ctx, 6, {0, 1, 2, 3, 4}));
    Value scores = generic(
        rewriter, loc, inputs, zeroTensor(rewriter, loc, scoreSizes), maps, 5,
        1, [&](OpBuilder &b, Location l, ValueRange args) -> Value {
          Value product = mulF(b, l, extendToF32(b, l, args[0]),
                               extendToF32(b, l, args[1]));
          if (channel) {
            Value diff = arith::SubFOp::create(b, l, args[2], args[3]);
            product = mulF(b, l, product, safeDecay(b, l, diff));
          }
          return addF(b, l, args.back(), product);
        });

    // M = [j <= i] * scale * P (* exp(G_i - G_j) for a scalar gate).
    // Loops (b,n,h,i,j).
    inputs = {scores};
    maps = {dimMap(ctx, 5, {0, 1, 2, 3, 4})};
    if (gates && !channel) {
      inputs.append({gates, gates});
      maps.append({dimMap(ctx, 5, {0, 1, 3, 2}), dimMap(ctx, 5, {0, 1, 4, 2})});
    }
    maps.push_back(dimMap(ctx, 5, {0, 1, 2, 3, 4}));
    Value scaleValue = constantF32(rewriter, loc, scale);
    Value masked = generic(
        rewriter, loc, inputs,
        emptyTensor(rewriter, loc, scoreSizes, rewriter.getF32Type()), maps, 5,
        0, [&](OpBuilder &b, Location l, ValueRange args) -> Value {
          Value value = mulF(b, l, args[0], scaleValue);
          if (gates && !channel) {
            Value diff = arith::SubFOp::create(b, l, args[1], args[2]);
            value = mulF(b, l, value, safeDecay(b, l, diff));
          }
          return arith::SelectOp::create(b, l, causal(b, l, 3, 4), value,
                                         constantF32(b, l, 0.0f));
        });

    // O[b,n,i,hv,vv] = sum_j M[b,n,hv/G,i,j] v[b,n,j,hv,vv].
    // Loops (b,n,i,hv,vv,j).
    Value result = generic(
        rewriter, loc, ValueRange{masked, op.getV()},
        zeroTensor(rewriter, loc, mixedSizes(rewriter, loc, op.getV())),
        {dimMap(ctx, 6, {0, 1, -4, 2, 5}, *group),
         dimMap(ctx, 6, {0, 1, 5, 3, 4}), dimMap(ctx, 6, {0, 1, 2, 3, 4})},
        5, 1, [&](OpBuilder &b, Location l, ValueRange args) -> Value {
          return addF(b, l, args[2],
                      mulF(b, l, args[0], extendToF32(b, l, args[1])));
        });
    rewriter.replaceOp(op, result);
    return success();
  }
};

/// Extracts chunk `n` of a [B,NC,C,...] tensor as [B,C,...].
static Value extractChunk(OpBuilder &b, Location loc, Value x, Value n) {
  auto type = cast<RankedTensorType>(x.getType());
  int64_t rank = type.getRank();
  SmallVector<OpFoldResult> offsets(rank, b.getIndexAttr(0));
  offsets[1] = n;
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
  sizes[1] = b.getIndexAttr(1);
  SmallVector<OpFoldResult> strides(rank, b.getIndexAttr(1));
  SmallVector<int64_t> shape(type.getShape());
  shape.erase(shape.begin() + 1);
  return tensor::ExtractSliceOp::create(
      b, loc, RankedTensorType::get(shape, type.getElementType()), x, offsets,
      sizes, strides);
}

/// Extracts row `row` of dim 1 of a [B,C,...] tensor as [B,...].
static Value extractRow(OpBuilder &b, Location loc, Value x, OpFoldResult row) {
  auto type = cast<RankedTensorType>(x.getType());
  int64_t rank = type.getRank();
  SmallVector<OpFoldResult> offsets(rank, b.getIndexAttr(0));
  offsets[1] = row;
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
  sizes[1] = b.getIndexAttr(1);
  SmallVector<OpFoldResult> strides(rank, b.getIndexAttr(1));
  SmallVector<int64_t> shape(type.getShape());
  shape.erase(shape.begin() + 1);
  return tensor::ExtractSliceOp::create(
      b, loc, RankedTensorType::get(shape, type.getElementType()), x, offsets,
      sizes, strides);
}

struct ChunkStateScanToLinalg : OpRewritePattern<ChunkStateScanOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ChunkStateScanOp op,
                                PatternRewriter &rewriter) const override {
    FailureOr<int64_t> group =
        groupSize(op.getK().getType(), op.getV().getType(), 3, 3);
    if (failed(group))
      return rewriter.notifyMatchFailure(op, "needs static H and HV");
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    Value gates = op.getGates();
    bool channel = isChannelGate(gates);
    Type f32 = rewriter.getF32Type();

    // Sizes come from the operands: the results are being replaced.
    SmallVector<OpFoldResult> keySizes = mixedSizes(rewriter, loc, op.getK());
    SmallVector<OpFoldResult> valueSizes =
        mixedSizes(rewriter, loc, op.getV());
    SmallVector<OpFoldResult> stateSizes = {valueSizes[0], valueSizes[3],
                                            keySizes[4], valueSizes[4]};
    Value state = op.getInitialState();
    if (!state)
      state = zeroTensor(rewriter, loc, stateSizes);
    Value states = emptyTensor(rewriter, loc,
                               {valueSizes[0], valueSizes[1], valueSizes[3],
                                keySizes[4], valueSizes[4]},
                               f32);
    if (state.getType() != op.getFinalState().getType())
      state = tensor::CastOp::create(rewriter, loc,
                                     op.getFinalState().getType(), state);
    if (states.getType() != op.getStates().getType())
      states = tensor::CastOp::create(rewriter, loc, op.getStates().getType(),
                                      states);
    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    Value numChunks =
        getValueOrCreateConstantIndexOp(rewriter, loc, keySizes[1]);
    OpFoldResult lastRow = affine::makeComposedFoldedAffineApply(
        rewriter, loc,
        getAffineSymbolExpr(0, ctx) - 1,
        {keySizes[2]});

    auto loop = scf::ForOp::create(
        rewriter, loc, zero, numChunks, one, ValueRange{state, states},
        [&](OpBuilder &b, Location l, Value n, ValueRange iterArgs) {
          Value current = iterArgs[0];
          // Record the state entering chunk n.
          SmallVector<OpFoldResult> offsets(5, b.getIndexAttr(0));
          offsets[1] = n;
          SmallVector<OpFoldResult> sizes =
              mixedSizes(b, l, iterArgs[1]);
          sizes[1] = b.getIndexAttr(1);
          SmallVector<OpFoldResult> strides(5, b.getIndexAttr(1));
          Value recorded = tensor::InsertSliceOp::create(
              b, l, current, iterArgs[1], offsets, sizes, strides);

          Value keys = extractChunk(b, l, op.getK(), n);   // [B,C,H,K]
          Value values = extractChunk(b, l, op.getV(), n); // [B,C,HV,V]
          Value decayed = current;
          Value weightedKeys = keys;
          if (gates) {
            Value g = extractChunk(b, l, gates, n);  // [B,C,H(,K)]
            Value last = extractRow(b, l, g, lastRow); // [B,H(,K)]
            // S <- exp(G_C) S. Loops (b,hv,kk,vv).
            SmallVector<int64_t> lastDims = {0, -2};
            if (channel)
              lastDims.push_back(2);
            decayed = generic(
                b, l, ValueRange{current, last},
                emptyTensor(b, l, stateSizes, f32),
                {dimMap(ctx, 4, {0, 1, 2, 3}), dimMap(ctx, 4, lastDims, *group),
                 dimMap(ctx, 4, {0, 1, 2, 3})},
                4, 0, [&](OpBuilder &nb, Location nl, ValueRange args) {
                  return mulF(nb, nl, args[0],
                              math::ExpOp::create(nb, nl, args[1]));
                });
            // K * exp(G_C - G). Loops (b,j,h,kk).
            SmallVector<int64_t> gDims = {0, 1, 2}, lDims = {0, 2};
            if (channel) {
              gDims.push_back(3);
              lDims.push_back(3);
            }
            weightedKeys = generic(
                b, l, ValueRange{keys, g, last},
                emptyTensor(b, l, mixedSizes(b, l, keys), f32),
                {dimMap(ctx, 4, {0, 1, 2, 3}), dimMap(ctx, 4, gDims),
                 dimMap(ctx, 4, lDims), dimMap(ctx, 4, {0, 1, 2, 3})},
                4, 0, [&](OpBuilder &nb, Location nl, ValueRange args) {
                  Value diff = arith::SubFOp::create(nb, nl, args[2], args[1]);
                  return mulF(nb, nl, extendToF32(nb, nl, args[0]),
                              safeDecay(nb, nl, diff));
                });
          }
          // S += (K w)^T V. Loops (b,hv,kk,vv,j).
          Value next = generic(
              b, l, ValueRange{weightedKeys, values}, decayed,
              {dimMap(ctx, 5, {0, 4, -2, 2}, *group),
               dimMap(ctx, 5, {0, 4, 1, 3}), dimMap(ctx, 5, {0, 1, 2, 3})},
              4, 1, [&](OpBuilder &nb, Location nl, ValueRange args) {
                return addF(nb, nl, args[2],
                            mulF(nb, nl, extendToF32(nb, nl, args[0]),
                                 extendToF32(nb, nl, args[1])));
              });
          scf::YieldOp::create(b, l, ValueRange{next, recorded});
        });
    rewriter.replaceOp(op, {loop.getResult(1), loop.getResult(0)});
    return success();
  }
};

struct ChunkInterToLinalg : OpRewritePattern<ChunkInterOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ChunkInterOp op,
                                PatternRewriter &rewriter) const override {
    FailureOr<int64_t> group =
        groupSize(op.getQ().getType(), op.getIntra().getType(), 3, 3);
    if (failed(group))
      return rewriter.notifyMatchFailure(op, "needs static H and HV");
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    Value gates = op.getGates();
    Type f32 = rewriter.getF32Type();

    // Q' = scale * q * exp(G). Loops (b,n,i,h,kk).
    SmallVector<Value> inputs = {op.getQ()};
    SmallVector<AffineMap> maps = {dimMap(ctx, 5, {0, 1, 2, 3, 4})};
    if (gates) {
      inputs.push_back(gates);
      maps.push_back(isChannelGate(gates) ? dimMap(ctx, 5, {0, 1, 2, 3, 4})
                                          : dimMap(ctx, 5, {0, 1, 2, 3}));
    }
    maps.push_back(dimMap(ctx, 5, {0, 1, 2, 3, 4}));
    Value scaleValue = constantF32(rewriter, loc, op.getScale().convertToFloat());
    Value scaledQueries = generic(
        rewriter, loc, inputs,
        emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, op.getQ()), f32),
        maps, 5, 0, [&](OpBuilder &b, Location l, ValueRange args) -> Value {
          Value value = mulF(b, l, extendToF32(b, l, args[0]), scaleValue);
          if (gates)
            value = mulF(b, l, value, safeDecay(b, l, args[1]));
          return value;
        });

    // O = intra + Q'^T S_n. Loops (b,n,i,hv,vv,kk).
    Value sum = generic(
        rewriter, loc, ValueRange{scaledQueries, op.getStates()},
        op.getIntra(),
        {dimMap(ctx, 6, {0, 1, 2, -4, 5}, *group),
         dimMap(ctx, 6, {0, 1, 3, 5, 4}), dimMap(ctx, 6, {0, 1, 2, 3, 4})},
        5, 1, [&](OpBuilder &b, Location l, ValueRange args) -> Value {
          return addF(b, l, args[2], mulF(b, l, args[0], args[1]));
        });
    Type outputElementType = op.getResult().getType().getElementType();
    if (!outputElementType.isF32()) {
      AffineMap id = rewriter.getMultiDimIdentityMap(5);
      sum = generic(rewriter, loc, sum,
                    emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, sum),
                                outputElementType),
                    {id, id}, 5, 0,
                    [&](OpBuilder &b, Location l, ValueRange args) {
                      return castFloat(b, l, args[0], outputElementType);
                    });
    }
    rewriter.replaceOp(op, sum);
    return success();
  }
};
} // namespace

void mlir::la::populateChunkedToLinalgPatterns(RewritePatternSet &patterns) {
  patterns.add<ChunkCumsumToLinalg, ChunkIntraToLinalg, ChunkStateScanToLinalg,
               ChunkInterToLinalg>(patterns.getContext());
}
