//===- ChunkedToLinalg.cpp - level-2 la ops to linalg and scf -------------===//
//
// Each chunked op becomes linalg.generic ops on tensors (the state scan an
// scf.for over chunks). Loops: b batch, n chunk, i/j rows of a chunk, h key
// head, hv value head, kk key channel, vv value channel. A value head reads
// key head hv floordiv (HV/H).
//
//===----------------------------------------------------------------------===//

#include "la/Conversion/LaToLinalg.h"
#include "la/Dialect/La/LaDialect.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"

#include <functional>
#include <limits>

using namespace mlir;
using namespace mlir::la;

/// exp(min(x, 0)): the decay factor of a log-gate difference that is <= 0 in
/// exact arithmetic; the clamp keeps rounding (or masked entries) finite.
static Value safeDecay(OpBuilder &b, Location loc, Value x) {
  Value zero = constantF32(b, loc, 0.0f);
  return math::ExpOp::create(b, loc,
                             arith::MinimumFOp::create(b, loc, x, zero));
}

/// The most negative log-gate the chunked program uses: exp(-104) rounds to
/// 0 in f32, so a gate at or below it (-inf included: a hard reset) is an
/// exact decay of 0, while the cumulative gates stay finite (-inf - -inf
/// would be NaN) and small enough to keep their precision.
constexpr float kMinLogGate = -104.0f;

/// A log-gate element as f32, clamped below at kMinLogGate (NaN stays NaN).
static Value logGateToF32(OpBuilder &b, Location loc, Value gate) {
  // One op per statement: argument evaluation order is the host compiler's.
  Value wide = extendToF32(b, loc, gate);
  Value floor = constantF32(b, loc, kMinLogGate);
  return arith::MaximumFOp::create(b, loc, wide, floor);
}

/// acc - a * b as acc + (-a) * b: a reduction the vectoriser recognises
/// (it accepts addf as the combiner, not subf).
static Value subtractProduct(OpBuilder &b, Location loc, Value acc, Value a,
                             Value x) {
  return addF(b, loc, acc, mulF(b, loc, arith::NegFOp::create(b, loc, a), x));
}

/// `j <= i` for two linalg loop indices.
static Value causal(OpBuilder &b, Location loc, unsigned iDim, unsigned jDim,
                    bool strict = false) {
  Value i = linalg::IndexOp::create(b, loc, iDim);
  Value j = linalg::IndexOp::create(b, loc, jDim);
  return arith::CmpIOp::create(
      b, loc, strict ? arith::CmpIPredicate::ult : arith::CmpIPredicate::ule, j,
      i);
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
  ChunkCumsumToLinalg(MLIRContext *ctx, bool scan)
      : OpRewritePattern(ctx), scan(scan) {}

  /// A running row R (R = g[0] or 0) carried by an scf.for over the rows
  /// i = 1..C-1: R += g[i] (inclusive) or g[i-1] (exclusive), then G[i] = R.
  /// The sums are not read back from G: after la-tile the reads of a row
  /// of G could not be told apart from the writes of the next one, and
  /// bufferization would copy G's rows around every step.
  Value buildScan(PatternRewriter &rewriter, ChunkCumsumOp op) const {
    Location loc = op.getLoc();
    Value g = op.getG();
    int64_t rank = op.getG().getType().getRank();
    AffineMap id = rewriter.getMultiDimIdentityMap(rank);
    SmallVector<OpFoldResult> sizes = mixedSizes(rewriter, loc, g);
    OpFoldResult unit = rewriter.getIndexAttr(1);
    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    Value rows = getValueOrCreateConstantIndexOp(rewriter, loc, sizes[2]);
    // Row 0 of the sums, in a tensor of its own and as G's first row.
    SmallVector<OpFoldResult> rowSizes = sizes;
    rowSizes[2] = unit;
    Value running;
    if (op.getExclusive()) {
      running = zeroTensor(rewriter, loc, rowSizes);
    } else {
      Value firstRow = sliceDim(rewriter, loc, g, 2, zero, unit);
      Value rowInit =
          emptyTensor(rewriter, loc, rowSizes, rewriter.getF32Type());
      running = buildGeneric(rewriter, loc, firstRow, rowInit, {id, id}, rank,
                             0, [&](OpBuilder &b, Location l, ValueRange args) {
                               return logGateToF32(b, l, args[0]);
                             });
    }
    Value first = insertAt(
        rewriter, loc, running,
        emptyTensor(rewriter, loc, sizes, rewriter.getF32Type()), 2, zero);
    auto loop = scf::ForOp::create(
        rewriter, loc, one, rows, one, ValueRange{first, running},
        [&](OpBuilder &b, Location l, Value i, ValueRange iterArgs) {
          Value row = i;
          if (op.getExclusive())
            row = arith::SubIOp::create(b, l, i, one);
          Value next = buildGeneric(
              b, l, sliceDim(b, l, g, 2, row, unit), iterArgs[1], {id, id},
              rank, 0, [&](OpBuilder &nb, Location nl, ValueRange args) {
                return addF(nb, nl, args[1], logGateToF32(nb, nl, args[0]));
              });
          scf::YieldOp::create(
              b, l, ValueRange{insertAt(b, l, next, iterArgs[0], 2, i), next});
        });
    return loop.getResult(0);
  }

  LogicalResult matchAndRewrite(ChunkCumsumOp op,
                                PatternRewriter &rewriter) const override {
    if (scan) {
      rewriter.replaceOp(op, buildScan(rewriter, op));
      return success();
    }
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
    Value init =
        zeroTensor(rewriter, loc, mixedSizes(rewriter, loc, op.getG()));
    Value result = buildGeneric(
        rewriter, loc, op.getG(), init,
        {dimMap(ctx, numLoops, inDims), dimMap(ctx, numLoops, outDims)}, rank,
        1, [&](OpBuilder &b, Location l, ValueRange args) -> Value {
          Value inRange = causal(b, l, 2, rank, op.getExclusive());
          Value gate = logGateToF32(b, l, args[0]);
          Value zeroGate = constantF32(b, l, 0.0f);
          Value term = arith::SelectOp::create(b, l, inRange, gate, zeroGate);
          return addF(b, l, args[1], term);
        });
    rewriter.replaceOp(op, result);
    return success();
  }

  bool scan;
};

/// Marks the op computing `product` as one whose terms vanish where loop
/// `column` exceeds loop `row` (la-tile shortens those loops).
static void markLowerTriangular(Value product, int64_t row, int64_t column) {
  Operation *op = product.getDefiningOp();
  getLaDialect(op).getLowerTriangularAttrHelper().setAttr(
      op, DenseI64ArrayAttr::get(op->getContext(), {row, column}));
}

/// Marks the op computing `value` as one whose entries with loop `column` >=
/// loop `block` * `size` are never read (la-tile skips them).
static void markBlockCausal(Value value, int64_t block, int64_t column,
                            int64_t size) {
  Operation *op = value.getDefiningOp();
  getLaDialect(op).getBlockCausalAttrHelper().setAttr(
      op, DenseI64ArrayAttr::get(op->getContext(), {block, column, size}));
}

/// [B,NC,C,H,K] -> [B,NC,H,K,C].
static Value transposeRowsLast(OpBuilder &b, Location loc, Value x) {
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
  Value init =
      emptyTensor(b, loc, {sizes[0], sizes[1], sizes[3], sizes[4], sizes[2]},
                  cast<RankedTensorType>(x.getType()).getElementType());
  return linalg::TransposeOp::create(b, loc, x, init,
                                     ArrayRef<int64_t>{0, 1, 3, 4, 2})
      .getResult()[0];
}

/// Splits dimension `dim` of `x` into (size / s, s).
static Value splitDim(OpBuilder &b, Location loc, Value x, unsigned dim,
                      int64_t s) {
  auto type = cast<RankedTensorType>(x.getType());
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
  SmallVector<OpFoldResult> split;
  SmallVector<ReassociationIndices> reassociation;
  for (unsigned d = 0; d < sizes.size(); ++d) {
    int64_t next = split.size();
    if (d == dim) {
      split.push_back(b.getIndexAttr(type.getDimSize(d) / s));
      split.push_back(b.getIndexAttr(s));
      reassociation.push_back({next, next + 1});
    } else {
      split.push_back(sizes[d]);
      reassociation.push_back({next});
    }
  }
  auto splitType =
      RankedTensorType::get(staticShape(split), type.getElementType());
  return tensor::ExpandShapeOp::create(b, loc, splitType, x, reassociation,
                                       split);
}

/// The channel-gated product of `buildScores` before masking,
///   P[b,n,h,i,j] = sum_kk x[i,kk] y[j,kk] exp(min(X[i,kk] - G[j,kk], 0)),
/// with the rows in blocks of s (the sub-chunks of flash-linear-attention's
/// GLA kernels) so that only the diagonal blocks take an exponential per
/// product term. For i in block a and j in an earlier block c, with R_a = X
/// at block a's first row and E_c = G at block c's last row,
///   exp(X_i - G_j) = exp(X_i - R_a) exp(R_a - E_c) exp(E_c - G_j),
/// each factor <= 1 (the cumulative gates fall along the chunk), so those
/// blocks are one plain product of pre-scaled x and y: the exponentials are
/// one per element of x and y plus one per block pair and channel, and the
/// per-block-pair factor is a multiplication. Diagonal blocks keep the
/// per-term exponential. Entries of later blocks are 0 (the causal mask
/// drops them).
static Value buildBlockedChannelProduct(OpBuilder &b, Location loc, Value x,
                                        Value y, Value xGates, Value gates,
                                        int64_t s) {
  MLIRContext *ctx = b.getContext();
  Type f32 = b.getF32Type();
  SmallVector<OpFoldResult> xSizes = mixedSizes(b, loc, x); // [B,NC,C,H,K]
  int64_t c = cast<RankedTensorType>(x.getType()).getDimSize(2);
  OpFoldResult numBlocks = b.getIndexAttr(c / s), blockSize = b.getIndexAttr(s);
  OpFoldResult chunk = xSizes[2], heads = xSizes[3], keys = xSizes[4];
  // Row `row` of each block of a [B,NC,nb,s,H,K] tensor: [B,NC,nb,H,K].
  auto blockRow = [&](Value blocks, int64_t row) {
    return tensor::CollapseShapeOp::create(
        b, loc,
        sliceDim(b, loc, blocks, 3, b.getIndexAttr(row), b.getIndexAttr(1)),
        ArrayRef<ReassociationIndices>{{0}, {1}, {2, 3}, {4}, {5}});
  };

  // Rows in blocks: [B,NC,nb,s,H,K]; the references R[b,n,a,h,kk] (X at
  // each block's first row) and E[b,n,c,h,kk] (G at its last row).
  Value xBlocks = splitDim(b, loc, x, 2, s);
  Value xGateBlocks = splitDim(b, loc, xGates, 2, s);
  Value reference = blockRow(xGateBlocks, 0);
  Value blockEnd = blockRow(splitDim(b, loc, gates, 2, s), s - 1);

  // x~ = x exp(X - R). Loops (b,n,a,r,h,kk).
  Value scaledX = buildGeneric(
      b, loc, ValueRange{xBlocks, xGateBlocks, reference},
      emptyTensor(b, loc, mixedSizes(b, loc, xBlocks), f32),
      {dimMap(ctx, 6, {0, 1, 2, 3, 4, 5}), dimMap(ctx, 6, {0, 1, 2, 3, 4, 5}),
       dimMap(ctx, 6, {0, 1, 2, 4, 5}), dimMap(ctx, 6, {0, 1, 2, 3, 4, 5})},
      6, 0, [&](OpBuilder &nb, Location l, ValueRange args) {
        Value diff = arith::SubFOp::create(nb, l, args[1], args[2]);
        Value x = extendToF32(nb, l, args[0]);
        return mulF(nb, l, x, safeDecay(nb, l, diff));
      });

  // y^T[b,n,h,kk,c,t] exp(E_c - G^T[b,n,h,kk,c,t]), y read transposed.
  // Loops (b,n,h,kk,c,t).
  Value yTBlocks = splitDim(b, loc, transposeRowsLast(b, loc, y), 4, s);
  Value gTBlocks = splitDim(b, loc, transposeRowsLast(b, loc, gates), 4, s);
  Value scaledYTBlocks = buildGeneric(
      b, loc, ValueRange{yTBlocks, gTBlocks, blockEnd},
      emptyTensor(b, loc, mixedSizes(b, loc, yTBlocks), f32),
      {dimMap(ctx, 6, {0, 1, 2, 3, 4, 5}), dimMap(ctx, 6, {0, 1, 2, 3, 4, 5}),
       dimMap(ctx, 6, {0, 1, 4, 2, 3}), dimMap(ctx, 6, {0, 1, 2, 3, 4, 5})},
      6, 0, [&](OpBuilder &nb, Location l, ValueRange args) {
        Value diff = arith::SubFOp::create(nb, l, args[2], args[1]);
        Value x = extendToF32(nb, l, args[0]);
        return mulF(nb, l, x, safeDecay(nb, l, diff));
      });

  // The block-pair factor F[b,n,h,a,c,kk] = exp(min(R_a - E_c, 0)), needed
  // for c < a only. Loops (b,n,h,a,c,kk).
  Value pairFactor = buildGeneric(
      b, loc, ValueRange{reference, blockEnd},
      emptyTensor(b, loc,
                  {xSizes[0], xSizes[1], heads, numBlocks, numBlocks, keys},
                  f32),
      {dimMap(ctx, 6, {0, 1, 3, 2, 5}), dimMap(ctx, 6, {0, 1, 4, 2, 5}),
       dimMap(ctx, 6, {0, 1, 2, 3, 4, 5})},
      6, 0, [&](OpBuilder &nb, Location l, ValueRange args) {
        return safeDecay(nb, l, arith::SubFOp::create(nb, l, args[0], args[1]));
      });
  markBlockCausal(pairFactor, /*block=*/3, /*column=*/4, 1);

  // y~_a^T[b,n,h,a,kk,(c,t)] = F[a,c,kk] y^T[kk,c,t] exp(E_c - G[c,t]).
  // Loops (b,n,h,a,kk,c,t); only the blocks c < a are read.
  Value scaledYT = buildGeneric(
      b, loc, ValueRange{scaledYTBlocks, pairFactor},
      emptyTensor(
          b, loc,
          {xSizes[0], xSizes[1], heads, numBlocks, keys, numBlocks, blockSize},
          f32),
      {dimMap(ctx, 7, {0, 1, 2, 4, 5, 6}), dimMap(ctx, 7, {0, 1, 2, 3, 5, 4}),
       dimMap(ctx, 7, {0, 1, 2, 3, 4, 5, 6})},
      7, 0, [&](OpBuilder &nb, Location l, ValueRange args) {
        return mulF(nb, l, args[0], args[1]);
      });
  markBlockCausal(scaledYT, /*block=*/3, /*column=*/5, 1);
  scaledYT = tensor::CollapseShapeOp::create(
      b, loc, scaledYT,
      ArrayRef<ReassociationIndices>{{0}, {1}, {2}, {3}, {4}, {5, 6}});

  // Earlier blocks: P_off[b,n,h,a,r,j] = sum_kk x~[a,r,kk] y~_a^T[kk,j].
  // Loops (b,n,h,a,r,j,kk).
  Value offDiagonal = buildGeneric(
      b, loc, ValueRange{scaledX, scaledYT},
      zeroTensor(b, loc,
                 {xSizes[0], xSizes[1], heads, numBlocks, blockSize, chunk}),
      {dimMap(ctx, 7, {0, 1, 3, 4, 2, 6}), dimMap(ctx, 7, {0, 1, 2, 3, 6, 5}),
       dimMap(ctx, 7, {0, 1, 2, 3, 4, 5})},
      6, 1, [](OpBuilder &nb, Location l, ValueRange args) {
        return addF(nb, l, args[2], mulF(nb, l, args[0], args[1]));
      });
  // Only its columns of earlier blocks (j < a s) are combined below.
  markBlockCausal(offDiagonal, /*block=*/3, /*column=*/5, s);

  // Diagonal blocks, one exponential per term:
  // D[b,n,h,a,r,t] = sum_kk x[a,r,kk] y[a,t,kk] exp(min(X[a,r] - G[a,t], 0)).
  // Loops (b,n,h,a,r,t,kk).
  Value diagonal = buildGeneric(
      b, loc, ValueRange{xBlocks, yTBlocks, xGateBlocks, gTBlocks},
      zeroTensor(
          b, loc,
          {xSizes[0], xSizes[1], heads, numBlocks, blockSize, blockSize}),
      {dimMap(ctx, 7, {0, 1, 3, 4, 2, 6}), dimMap(ctx, 7, {0, 1, 2, 6, 3, 5}),
       dimMap(ctx, 7, {0, 1, 3, 4, 2, 6}), dimMap(ctx, 7, {0, 1, 2, 6, 3, 5}),
       dimMap(ctx, 7, {0, 1, 2, 3, 4, 5})},
      6, 1, [](OpBuilder &nb, Location l, ValueRange args) {
        Value product = mulExtended(nb, l, args[0], args[1]);
        Value diff = arith::SubFOp::create(nb, l, args[2], args[3]);
        product = mulF(nb, l, product, safeDecay(nb, l, diff));
        return addF(nb, l, args[4], product);
      });

  // P[a,r,(a2,t)] = a2 == a ? D[a,r,t] : (a2 < a ? P_off[a,r,(a2,t)] : 0).
  // Loops (b,n,h,a,r,a2,t) over [B,NC,H,nb,s,nb,s].
  Value offBlocks = splitDim(b, loc, offDiagonal, 5, s);
  Value combined = buildGeneric(
      b, loc, ValueRange{offBlocks, diagonal},
      emptyTensor(b, loc, mixedSizes(b, loc, offBlocks), f32),
      {dimMap(ctx, 7, {0, 1, 2, 3, 4, 5, 6}),
       dimMap(ctx, 7, {0, 1, 2, 3, 4, 6}),
       dimMap(ctx, 7, {0, 1, 2, 3, 4, 5, 6})},
      7, 0, [](OpBuilder &nb, Location l, ValueRange args) -> Value {
        Value rowBlock = linalg::IndexOp::create(nb, l, 3);
        Value colBlock = linalg::IndexOp::create(nb, l, 5);
        Value same = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                           colBlock, rowBlock);
        Value earlier = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ult,
                                              colBlock, rowBlock);
        Value off = arith::SelectOp::create(nb, l, earlier, args[0],
                                            constantF32(nb, l, 0.0f));
        return arith::SelectOp::create(nb, l, same, args[1], off);
      });
  return tensor::CollapseShapeOp::create(
      b, loc, combined,
      ArrayRef<ReassociationIndices>{{0}, {1}, {2}, {3, 4}, {5, 6}});
}

/// Whether every entry of the cumulative gates `xGates` and `gates`
/// [B,NC,C,H,K] lies within `limit` of `reference` [B,NC,H,K], as an i1
/// computed at run time (false when a gate is NaN).
static Value gatesWithinSpread(OpBuilder &b, Location loc, Value xGates,
                               Value gates, Value reference, double limit) {
  MLIRContext *ctx = b.getContext();
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, gates);
  auto distance = [](OpBuilder &nb, Location l, Value gate, Value ref) {
    return math::AbsFOp::create(
        nb, l, arith::SubFOp::create(nb, l, extendToF32(nb, l, gate), ref));
  };
  // Per channel, so that the channels are the vector lanes. Loops
  // (kk, b, n, i, h).
  AffineMap gateMap = dimMap(ctx, 5, {1, 2, 3, 4, 0});
  Value perChannel = buildGeneric(
      b, loc, ValueRange{xGates, gates, reference},
      zeroTensor(b, loc, {sizes[4]}),
      {gateMap, gateMap, dimMap(ctx, 5, {1, 2, 4, 0}), dimMap(ctx, 5, {0})}, 1,
      4, [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
        // One op per statement: argument evaluation order is the compiler's.
        Value queryDistance = distance(nb, l, args[0], args[2]);
        Value keyDistance = distance(nb, l, args[1], args[2]);
        Value spread =
            arith::MaximumFOp::create(nb, l, queryDistance, keyDistance);
        return arith::MaximumFOp::create(nb, l, args[3], spread);
      });
  Value overall =
      buildGeneric(b, loc, perChannel, zeroTensor(b, loc, {}),
                   {dimMap(ctx, 1, {0}), AffineMap::get(1, 0, ctx)}, 0, 1,
                   [](OpBuilder &nb, Location l, ValueRange args) -> Value {
                     return arith::MaximumFOp::create(nb, l, args[1], args[0]);
                   });
  Value spread = tensor::ExtractOp::create(b, loc, overall, ValueRange{});
  return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, spread,
                               constantF32(b, loc, static_cast<float>(limit)));
}

/// The operands of the one-product form of a channel-gated score product,
/// against one reference row R [B,NC,H,K] for the whole chunk:
///   exp(X_i - G_j) = exp(X_i - R) exp(R - G_j),
/// so that P = (x exp(X - R)) (y exp(R - G))^T is a plain product, with two
/// exponentials per element of x and y and none per product term. The
/// factors are bounded only by how far the gates stray from R, which the
/// caller checks at run time. Returns x~ [B,NC,C,H,K] and y~^T [B,NC,H,K,C]
/// (the score column j last: the vector dimension of the product).
/// value * exp(R - G) (`towardReference`) or value * exp(G - R) per element
/// of value [B,NC,C,H,K] with its cumulative gates G and the reference row
/// R [B,NC,H,K], in f32. Loops (b,n,i,h,kk).
static Value scaleRows(OpBuilder &b, Location loc, Value value, Value rowGates,
                       Value reference, bool towardReference) {
  MLIRContext *ctx = b.getContext();
  AffineMap rows = dimMap(ctx, 5, {0, 1, 2, 3, 4});
  return buildGeneric(
      b, loc, ValueRange{value, rowGates, reference},
      emptyTensor(b, loc, mixedSizes(b, loc, value), b.getF32Type()),
      {rows, rows, dimMap(ctx, 5, {0, 1, 3, 4}), rows}, 5, 0,
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Value gate = extendToF32(nb, l, args[1]);
        Value diff = towardReference
                         ? arith::SubFOp::create(nb, l, args[2], gate)
                         : arith::SubFOp::create(nb, l, gate, args[2]);
        Value x = extendToF32(nb, l, args[0]);
        return mulF(nb, l, x, math::ExpOp::create(nb, l, diff));
      });
}

static std::pair<Value, Value>
buildReferenceRowOperands(OpBuilder &b, Location loc, Value x, Value y,
                          Value xGates, Value gates, Value reference) {
  auto scaleRows = [&](Value value, Value rowGates, bool towardReference) {
    return ::scaleRows(b, loc, value, rowGates, reference, towardReference);
  };
  // x~ = x exp(X - R).
  Value scaledX = scaleRows(x, xGates, /*towardReference=*/false);
  // y~ = y exp(R - G), then transposed to y~^T[b,n,h,kk,j]: an element-wise
  // op that read y and G transposed would transpose both (and R) in
  // registers, twice the code of one transpose.
  Value scaledY = scaleRows(y, gates, /*towardReference=*/true);
  Value scaledYT = transposeRowsLast(b, loc, scaledY);
  return {scaledX, scaledYT};
}

/// An scf.if on `condition` yielding a tensor of `type` from each branch's
/// builder (cast to `type` where a dynamic size is typed differently).
static Value buildChoice(OpBuilder &b, Location loc, RankedTensorType type,
                         Value condition,
                         function_ref<Value(OpBuilder &)> thenBuilder,
                         function_ref<Value(OpBuilder &)> elseBuilder) {
  auto choice = scf::IfOp::create(b, loc, TypeRange{type}, condition,
                                  /*withElseRegion=*/true);
  auto yield = [&](Value result) {
    if (result.getType() != type)
      result = tensor::CastOp::create(b, loc, type, result);
    scf::YieldOp::create(b, loc, result);
  };
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(choice.thenBlock());
  yield(thenBuilder(b));
  b.setInsertionPointToStart(choice.elseBlock());
  yield(elseBuilder(b));
  return choice.getResult(0);
}

/// P[b,n,h,i,j] = sum_kk x[b,n,i,h,kk] yT[b,n,h,kk,j] into `init`, for
/// causally masked scores: the entries j > i are never read. yT is y read
/// as [B,NC,H,K,C], so that the score column j is the contiguous (vector)
/// dimension of the product. Loops (b,n,h,i,j,kk).
static Value buildRowProduct(OpBuilder &b, Location loc, Value x, Value yT,
                             Value init) {
  Value product = buildBlockScores(b, loc, x, yT, init);
  markLowerTriangular(product, /*row=*/3, /*column=*/4);
  return product;
}

/// The masked, decayed score matrix of a chunk, [B,NC,H,C,C]:
///   M[b,n,h,i,j] = [j <= i] * scale * rowScale_i * (x_i . (y_j * D_ij))
/// with D_ij = exp(X_i - G_j) (per channel for a channel-wise gate), X the
/// cumulative gates of the x side (`xGates`, or `gates` when null), and
/// j < i when `strict`. x, y : [B,NC,C,H,K]; rowScale : [B,NC,C,H] or null.
static Value buildScores(OpBuilder &b, Location loc, Value x, Value y,
                         Value gates, Value rowScale, float scale, bool strict,
                         const ChannelGateProducts &gateProducts,
                         Value xGates = Value()) {
  MLIRContext *ctx = b.getContext();
  bool channel = isChannelGate(gates);
  if (!xGates)
    xGates = gates;
  SmallVector<OpFoldResult> xSizes = mixedSizes(b, loc, x);
  SmallVector<OpFoldResult> scoreSizes = {xSizes[0], xSizes[1], xSizes[3],
                                          xSizes[2], xSizes[2]};
  int64_t chunkSize = cast<RankedTensorType>(x.getType()).getDimSize(2);
  int64_t block = gateProducts.block;
  // The product before masking: the blocked channel-gate form, or one
  // linalg.generic (with an exponential per term for a channel gate).
  auto buildProduct = [&](OpBuilder &pb) -> Value {
    if (channel && block > 0 && chunkSize % block == 0 && chunkSize > block)
      return buildBlockedChannelProduct(pb, loc, x, y, xGates, gates, block);
    // Built in this order, not as call arguments (unspecified order).
    Value yT = transposeRowsLast(pb, loc, y);
    if (!channel)
      return buildRowProduct(pb, loc, x, yT, zeroTensor(pb, loc, scoreSizes));
    // P = x y^T decayed per channel, one exponential per term. Loops
    // (b,n,h,i,j,kk); y and its gates read as [B,NC,H,K,C].
    Value gT = transposeRowsLast(pb, loc, gates);
    Value product = buildGeneric(
        pb, loc, ValueRange{x, yT, xGates, gT}, zeroTensor(pb, loc, scoreSizes),
        {dimMap(ctx, 6, {0, 1, 3, 2, 5}), dimMap(ctx, 6, {0, 1, 2, 5, 4}),
         dimMap(ctx, 6, {0, 1, 3, 2, 5}), dimMap(ctx, 6, {0, 1, 2, 5, 4}),
         dimMap(ctx, 6, {0, 1, 2, 3, 4})},
        5, 1, [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
          Value product = mulExtended(nb, l, args[0], args[1]);
          Value diff = arith::SubFOp::create(nb, l, args[2], args[3]);
          product = mulF(nb, l, product, safeDecay(nb, l, diff));
          return addF(nb, l, args[4], product);
        });
    // The mask below drops the entries j > i.
    markLowerTriangular(product, /*row=*/3, /*column=*/4);
    return product;
  };
  Value scores;
  if (channel && gateProducts.spreadLimit > 0) {
    // Chunks whose gates stay near their first row take one plain product;
    // the others the form above. The check and the scaled operands are
    // built outside the branch, where CSE shares them between the products
    // of one chunk that have the same gates and operands.
    Value reference = extractUnitSlice(b, loc, xGates, 2, b.getIndexAttr(0));
    Value withinSpread = gatesWithinSpread(b, loc, xGates, gates, reference,
                                           gateProducts.spreadLimit);
    auto [scaledX, scaledYT] =
        buildReferenceRowOperands(b, loc, x, y, xGates, gates, reference);
    auto scoreType =
        RankedTensorType::get(staticShape(scoreSizes), b.getF32Type());
    scores = buildChoice(
        b, loc, scoreType, withinSpread,
        [&](OpBuilder &pb) {
          return buildRowProduct(pb, loc, scaledX, scaledYT,
                                 zeroTensor(pb, loc, scoreSizes));
        },
        buildProduct);
  } else {
    scores = buildProduct(b);
  }

  // Mask, scale, and the scalar decay. Loops (b,n,h,i,j).
  SmallVector<Value> inputs = {scores};
  SmallVector<AffineMap> maps = {dimMap(ctx, 5, {0, 1, 2, 3, 4})};
  bool scalarGate = gates && !channel;
  if (scalarGate) {
    inputs.append({xGates, gates});
    maps.append({dimMap(ctx, 5, {0, 1, 3, 2}), dimMap(ctx, 5, {0, 1, 4, 2})});
  }
  if (rowScale) {
    inputs.push_back(rowScale);
    maps.push_back(dimMap(ctx, 5, {0, 1, 3, 2}));
  }
  maps.push_back(dimMap(ctx, 5, {0, 1, 2, 3, 4}));
  Value scaleValue = constantF32(b, loc, scale);
  return buildGeneric(
      b, loc, inputs, emptyTensor(b, loc, scoreSizes, b.getF32Type()), maps, 5,
      0, [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
        Value value = mulF(nb, l, args[0], scaleValue);
        if (scalarGate) {
          Value diff = arith::SubFOp::create(nb, l, args[1], args[2]);
          value = mulF(nb, l, value, safeDecay(nb, l, diff));
        }
        if (rowScale)
          value =
              mulF(nb, l, value, extendToF32(nb, l, args[scalarGate ? 3 : 1]));
        Value i = linalg::IndexOp::create(nb, l, 3);
        Value j = linalg::IndexOp::create(nb, l, 4);
        Value keep = arith::CmpIOp::create(nb, l,
                                           strict ? arith::CmpIPredicate::ult
                                                  : arith::CmpIPredicate::ule,
                                           j, i);
        return arith::SelectOp::create(nb, l, keep, value,
                                       constantF32(nb, l, 0.0f));
      });
}

/// Whether a float scalar is neither NaN nor infinite.
static Value isFinite(OpBuilder &b, Location loc, Value x) {
  Value magnitude = math::AbsFOp::create(b, loc, extendToF32(b, loc, x));
  Value infinity = constantF32(b, loc, std::numeric_limits<float>::infinity());
  return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, magnitude,
                               infinity);
}

/// A linalg loop index as f32 (exact below 2^24).
static Value loopIndexAsF32(OpBuilder &b, Location loc, unsigned dim) {
  Value index = linalg::IndexOp::create(b, loc, dim);
  Value row = arith::IndexCastUIOp::create(b, loc, b.getI32Type(), index);
  return arith::UIToFPOp::create(b, loc, b.getF32Type(), row);
}

/// Larger than any row of a chunk, exact in f32.
constexpr double kNoNonFiniteRow = 16777216.0;

/// `x` ([B,NC,C,..,..]) with its NaN and infinite elements replaced by 0.
static Value zeroNonFinite(OpBuilder &b, Location loc, Value x) {
  auto type = cast<RankedTensorType>(x.getType());
  AffineMap id = b.getMultiDimIdentityMap(type.getRank());
  // x is the destination: bufferization reuses its buffer where x is not
  // read later (on the GPU, a chunk's buffers share its shared memory).
  // A 16-bit float is tested and selected as its bits: LLVM's x86 backend
  // cannot legalise compares and selects of bf16 vectors of some widths
  // (<9 x bfloat>), and InstCombine narrows an f32 test of an extended bf16
  // back into one. Non-finite means an exponent of all ones.
  Type element = type.getElementType();
  unsigned width = element.getIntOrFloatBitWidth();
  Type bits = b.getIntegerType(width);
  int64_t exponent = element.isBF16() ? 0x7F80 : 0x7C00; // else f16
  return buildGeneric(
      b, loc, ValueRange{}, x, {id}, type.getRank(), 0,
      [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
        if (element.isF32()) {
          Value zero =
              arith::ConstantOp::create(nb, l, nb.getZeroAttr(element));
          return arith::SelectOp::create(nb, l, isFinite(nb, l, args[0]),
                                         args[0], zero);
        }
        Value value = arith::BitcastOp::create(nb, l, bits, args[0]);
        Value mask =
            arith::ConstantOp::create(nb, l, nb.getIntegerAttr(bits, exponent));
        Value finite = arith::CmpIOp::create(
            nb, l, arith::CmpIPredicate::ne,
            arith::AndIOp::create(nb, l, value, mask), mask);
        Value zero = arith::ConstantOp::create(nb, l, nb.getZeroAttr(bits));
        Value kept = arith::SelectOp::create(nb, l, finite, value, zero);
        return arith::BitcastOp::create(nb, l, element, kept);
      });
}

/// F = the first index j along dimension `rowDim` of `x` with x NaN or
/// infinite, per position of the other dimensions (F has them in order), or
/// kNoNonFiniteRow when there is none; as f32. Loops: the other dimensions,
/// then j.
static Value firstNonFiniteRow(OpBuilder &b, Location loc, Value x,
                               unsigned rowDim) {
  MLIRContext *ctx = b.getContext();
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
  unsigned rank = sizes.size();
  SmallVector<OpFoldResult> otherSizes;
  SmallVector<int64_t> xDims;
  for (unsigned d = 0; d < rank; ++d) {
    if (d == rowDim) {
      xDims.push_back(rank - 1);
      continue;
    }
    xDims.push_back(otherSizes.size());
    otherSizes.push_back(sizes[d]);
  }
  SmallVector<int64_t> outDims;
  for (unsigned d = 0; d + 1 < rank; ++d)
    outDims.push_back(d);
  Value init =
      filledTensor(b, loc, otherSizes, b.getF32Type(), kNoNonFiniteRow);
  return buildGeneric(
      b, loc, x, init, {dimMap(ctx, rank, xDims), dimMap(ctx, rank, outDims)},
      rank - 1, 1, [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
        Value finite = isFinite(nb, l, args[0]);
        Value rowValue = loopIndexAsF32(nb, l, rank - 1);
        // The accumulator only in the combiner: a reduction the vectoriser
        // recognises.
        Value none = constantF32(nb, l, kNoNonFiniteRow);
        Value candidate =
            arith::SelectOp::create(nb, l, finite, none, rowValue);
        return arith::MinimumFOp::create(nb, l, args[1], candidate);
      });
}

/// `product` with NaN from the row (dimension `rowDim`) `firstBad` gives on,
/// in place: the rows a causal product took from a non-finite operand row.
static Value poisonFromFirstBad(OpBuilder &b, Location loc, Value product,
                                Value firstBad, unsigned rowDim) {
  MLIRContext *ctx = b.getContext();
  unsigned rank = cast<RankedTensorType>(product.getType()).getRank();
  SmallVector<int64_t> otherDims;
  for (unsigned d = 0; d < rank; ++d)
    if (d != rowDim)
      otherDims.push_back(d);
  return buildGeneric(
      b, loc, ValueRange{firstBad}, product,
      {dimMap(ctx, rank, otherDims), b.getMultiDimIdentityMap(rank)}, rank, 0,
      [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
        Value rowValue = loopIndexAsF32(nb, l, rowDim);
        Value poisoned = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OGE,
                                               rowValue, args[0]);
        Value nan = constantF32(nb, l, std::numeric_limits<float>::quiet_NaN());
        return arith::SelectOp::create(nb, l, poisoned, nan, args[1]);
      });
}

/// A causal product of `x` (rows along `rowDim`, as in its result), built by
/// `product` from x with non-finite elements zeroed, then NaN from x's first
/// non-finite row on, per column (see applyScores).
static Value guardedCausalProduct(OpBuilder &b, Location loc, Value x,
                                  unsigned rowDim,
                                  function_ref<Value(Value finiteX)> product) {
  Value firstBad = firstNonFiniteRow(b, loc, x, rowDim);
  Value finiteX = zeroNonFinite(b, loc, x);
  return poisonFromFirstBad(b, loc, product(finiteX), firstBad, rowDim);
}

/// O[b,n,i,hv,vv] = sum_j M[b,n,hv/group,i,j] x[b,n,j,hv,vv] into `init`.
/// Loops (b,n,i,hv,vv,j).
///
/// M is lower triangular, so row i of O depends on the rows j <= i of x
/// only; but a product over whole tiles multiplies the zeros above the
/// diagonal too, and 0 * NaN or 0 * inf would carry a non-finite x[j] into
/// the earlier rows. The product therefore reads x with its non-finite
/// elements zeroed, and then O[i, c] becomes NaN from the first row of x
/// that is non-finite in column c on, as in the recurrence: every row
/// before it is exact.
static Value applyScores(OpBuilder &b, Location loc, Value scores, Value x,
                         Value init, int64_t group) {
  MLIRContext *ctx = b.getContext();
  return guardedCausalProduct(b, loc, x, /*rowDim=*/2, [&](Value finiteX) {
    Value product = buildGeneric(
        b, loc, ValueRange{scores, finiteX}, init,
        {dimMap(ctx, 6, {0, 1, -4, 2, 5}, group),
         dimMap(ctx, 6, {0, 1, 5, 3, 4}), dimMap(ctx, 6, {0, 1, 2, 3, 4})},
        5, 1, [&](OpBuilder &nb, Location l, ValueRange args) {
          return addF(nb, l, args[2],
                      mulF(nb, l, args[0], extendToF32(nb, l, args[1])));
        });
    // The scores are causal: terms with j > i vanish.
    markLowerTriangular(product, /*row=*/2, /*column=*/5);
    return product;
  });
}

/// O[b,n,i,hv,vv] = sum_j M[b,n,hv/group,i,j] x[b,n,j,hv,vv]
///                    exp(C[b,n,i,hv,vv] - C[b,n,j,hv,vv])
/// for value-side cumulative gates C [B,NC,C,HV,V]: the decay depends on the
/// output column, so it cannot be folded into M. Where every gate of a chunk
/// lies within `spreadLimit` of its first row R (checked at run time), it
/// is one product of pre-scaled rows, exp(C_i - R) (M (x exp(R - C_j)));
/// elsewhere every term takes an exponential. Both are guarded against
/// non-finite rows of x like applyScores.
static Value applyValueGatedScores(OpBuilder &b, Location loc, Value scores,
                                   Value x, Value valueGates, int64_t group,
                                   double spreadLimit) {
  MLIRContext *ctx = b.getContext();
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
  AffineMap id = b.getMultiDimIdentityMap(5);
  // One exponential per term. Loops (b,n,i,hv,vv,j).
  auto perTerm = [&](OpBuilder &pb) {
    return guardedCausalProduct(pb, loc, x, /*rowDim=*/2, [&](Value finiteX) {
      Value product = buildGeneric(
          pb, loc, ValueRange{scores, finiteX, valueGates, valueGates},
          zeroTensor(pb, loc, sizes),
          {dimMap(ctx, 6, {0, 1, -4, 2, 5}, group),
           dimMap(ctx, 6, {0, 1, 5, 3, 4}), dimMap(ctx, 6, {0, 1, 2, 3, 4}),
           dimMap(ctx, 6, {0, 1, 5, 3, 4}), dimMap(ctx, 6, {0, 1, 2, 3, 4})},
          5, 1, [&](OpBuilder &nb, Location l, ValueRange args) {
            Value term = mulF(nb, l, args[0], extendToF32(nb, l, args[1]));
            Value diff = arith::SubFOp::create(nb, l, args[2], args[3]);
            term = mulF(nb, l, term, safeDecay(nb, l, diff));
            // Masked terms are dropped, not multiplied by a zero score: a
            // later token's non-finite gate must not reach row i.
            Value keep = causal(nb, l, 2, 5);
            Value kept = arith::SelectOp::create(nb, l, keep, term,
                                                 constantF32(nb, l, 0.0f));
            return addF(nb, l, args[4], kept);
          });
      markLowerTriangular(product, /*row=*/2, /*column=*/5);
      return product;
    });
  };
  if (spreadLimit <= 0)
    return perTerm(b);

  Value reference =
      extractUnitSlice(b, loc, valueGates, 2, b.getIndexAttr(0)); // [B,NC,HV,V]
  Value withinSpread =
      gatesWithinSpread(b, loc, valueGates, valueGates, reference, spreadLimit);
  Value scaledX =
      scaleRows(b, loc, x, valueGates, reference, /*towardReference=*/true);
  auto resultType = RankedTensorType::get(staticShape(sizes), b.getF32Type());
  auto onePass = [&](OpBuilder &pb) {
    Value product = applyScores(pb, loc, scores, scaledX,
                                zeroTensor(pb, loc, sizes), group);
    // exp(C_i - R) <= 1: the cumulative gates fall along the chunk.
    return buildGeneric(pb, loc, ValueRange{product, valueGates, reference},
                        emptyTensor(pb, loc, sizes, pb.getF32Type()),
                        {id, id, dimMap(ctx, 5, {0, 1, 3, 4}), id}, 5, 0,
                        [&](OpBuilder &nb, Location l, ValueRange args) {
                          Value diff =
                              arith::SubFOp::create(nb, l, args[1], args[2]);
                          return mulF(nb, l, args[0], safeDecay(nb, l, diff));
                        });
  };
  return buildChoice(b, loc, resultType, withinSpread, onePass, perTerm);
}

struct ChunkIntraToLinalg : OpRewritePattern<ChunkIntraOp> {
  ChunkIntraToLinalg(MLIRContext *ctx, ChannelGateProducts gateProducts)
      : OpRewritePattern(ctx), gateProducts(gateProducts) {}

  LogicalResult matchAndRewrite(ChunkIntraOp op,
                                PatternRewriter &rewriter) const override {
    FailureOr<int64_t> group =
        groupSize(op.getK().getType(), op.getV().getType(), 3, 3);
    if (failed(group))
      return rewriter.notifyMatchFailure(op, "needs static H and HV");
    Location loc = op.getLoc();
    // Adds the masked product of one key/value pair to `init`.
    auto addPair = [&](Value keys, Value values, Value init) {
      Value scores =
          buildScores(rewriter, loc, op.getQ(), keys, op.getGates(),
                      /*rowScale=*/Value(), op.getScale().convertToFloat(),
                      /*strict=*/false, gateProducts);
      return applyScores(rewriter, loc, scores, values, init, *group);
    };
    if (Value valueGates = op.getValueGates()) {
      Value scores =
          buildScores(rewriter, loc, op.getQ(), op.getK(), op.getGates(),
                      /*rowScale=*/Value(), op.getScale().convertToFloat(),
                      /*strict=*/false, gateProducts);
      rewriter.replaceOp(op, applyValueGatedScores(
                                 rewriter, loc, scores, op.getV(), valueGates,
                                 *group, gateProducts.spreadLimit));
      return success();
    }
    Value result = addPair(
        op.getK(), op.getV(),
        zeroTensor(rewriter, loc, mixedSizes(rewriter, loc, op.getV())));
    if (Value extraKeys = op.getExtraKeys())
      result = addPair(extraKeys, op.getExtraValues(), result);
    rewriter.replaceOp(op, result);
    return success();
  }

  ChannelGateProducts gateProducts;
};

/// S[b,hv,kk,vv] += sum_j keys[b,j,hv/group,kk] values[b,j,hv,vv].
/// Loops (b,hv,kk,vv,j).
static Value accumulateOuter(OpBuilder &b, Location loc, Value keys,
                             Value values, Value state, int64_t group) {
  MLIRContext *ctx = b.getContext();
  return buildGeneric(
      b, loc, ValueRange{keys, values}, state,
      {dimMap(ctx, 5, {0, 4, -2, 2}, group), dimMap(ctx, 5, {0, 4, 1, 3}),
       dimMap(ctx, 5, {0, 1, 2, 3})},
      4, 1, [&](OpBuilder &nb, Location l, ValueRange args) {
        return addF(nb, l, args[2], mulExtended(nb, l, args[0], args[1]));
      });
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
    SmallVector<OpFoldResult> valueSizes = mixedSizes(rewriter, loc, op.getV());
    SmallVector<OpFoldResult> stateSizes = {valueSizes[0], valueSizes[3],
                                            keySizes[4], valueSizes[4]};
    OpFoldResult lastRow = affine::makeComposedFoldedAffineApply(
        rewriter, loc, getAffineSymbolExpr(0, ctx) - 1, {keySizes[2]});
    Value correction = op.getCorrection();
    // Chunks of one token (decode): the decay and the update are one pass
    // over the state, S' = exp(g) S + k v^T, instead of a decayed copy and
    // an accumulation into it (the state streams from memory once).
    bool oneTokenUpdate = getConstantIntValue(keySizes[2]) == 1 &&
                          !op.getValueGates() && !op.getExtraKeys();

    // One chunk: from the state S_n entering chunk n, the corrected values
    // V' = U - W S_n (with a correction) and S_{n+1}. Returns {S_{n+1}, V'}.
    auto step = [&](OpBuilder &b, Location l, Value current,
                    OpFoldResult n) -> std::pair<Value, Value> {
      Value keys = extractUnitSlice(b, l, op.getK(), 1, n);   // [B,C,H,K]
      Value values = extractUnitSlice(b, l, op.getV(), 1, n); // [B,C,HV,V]
      if (correction) {
        // V' = U - W S_n. Loops (b,j,hv,vv,kk).
        Value w = extractUnitSlice(b, l, correction, 1, n); // [B,C,H,K]
        values = buildGeneric(
            b, l, ValueRange{w, current}, values,
            {dimMap(ctx, 5, {0, 1, -3, 4}, *group),
             dimMap(ctx, 5, {0, 2, 4, 3}), dimMap(ctx, 5, {0, 1, 2, 3})},
            4, 1, [&](OpBuilder &nb, Location nl, ValueRange args) {
              return subtractProduct(nb, nl, args[2], args[0], args[1]);
            });
      }
      if (oneTokenUpdate) {
        // Loops (b,hv,kk,vv); the decay factors exponentiated once.
        OpFoldResult zero = b.getIndexAttr(0);
        SmallVector<Value> inputs = {current,
                                     extractUnitSlice(b, l, keys, 1, zero),
                                     extractUnitSlice(b, l, values, 1, zero)};
        SmallVector<AffineMap> maps = {dimMap(ctx, 4, {0, 1, 2, 3}),
                                       dimMap(ctx, 4, {0, -2, 2}, *group),
                                       dimMap(ctx, 4, {0, 1, 3})};
        if (gates) {
          Value g = extractUnitSlice(b, l, gates, 1, n);   // [B,1,H(,K)]
          Value last = extractUnitSlice(b, l, g, 1, zero); // [B,H(,K)]
          unsigned rank = cast<RankedTensorType>(last.getType()).getRank();
          SmallVector<int64_t> identity =
              llvm::to_vector(llvm::seq<int64_t>(0, rank));
          inputs.push_back(buildGeneric(
              b, l, ValueRange{last},
              emptyTensor(b, l, mixedSizes(b, l, last), f32),
              {dimMap(ctx, rank, identity), dimMap(ctx, rank, identity)}, rank,
              0, [&](OpBuilder &nb, Location nl, ValueRange args) {
                return math::ExpOp::create(nb, nl, args[0]).getResult();
              }));
          SmallVector<int64_t> lastDims = {0, -2};
          if (channel)
            lastDims.push_back(2);
          maps.push_back(dimMap(ctx, 4, lastDims, *group));
        }
        maps.push_back(dimMap(ctx, 4, {0, 1, 2, 3}));
        bool gated = static_cast<bool>(gates);
        Value next = buildGeneric(
            b, l, inputs, emptyTensor(b, l, stateSizes, f32), maps, 4, 0,
            [&](OpBuilder &nb, Location nl, ValueRange args) {
              Value kept = gated ? mulF(nb, nl, args[0], args[3]) : args[0];
              return addF(nb, nl, kept, mulExtended(nb, nl, args[1], args[2]));
            });
        return {next, values};
      }
      Value decayed = current;
      // K * exp(G_C - G) for a key tensor of the chunk. Loops (b,j,h,kk).
      std::function<Value(Value)> weigh = [](Value k) { return k; };
      if (gates) {
        Value g = extractUnitSlice(b, l, gates, 1, n);      // [B,C,H(,K)]
        Value last = extractUnitSlice(b, l, g, 1, lastRow); // [B,H(,K)]
        // S <- exp(G_C) S. Loops (b,hv,kk,vv). The decay factors are
        // exponentiated once ([B,H(,K)]), not once per state element.
        SmallVector<int64_t> lastDims = {0, -2};
        if (channel)
          lastDims.push_back(2);
        unsigned lastRank = cast<RankedTensorType>(last.getType()).getRank();
        SmallVector<int64_t> lastIdentity =
            llvm::to_vector(llvm::seq<int64_t>(0, lastRank));
        Value lastFactor = buildGeneric(
            b, l, ValueRange{last},
            emptyTensor(b, l, mixedSizes(b, l, last), f32),
            {dimMap(ctx, lastRank, lastIdentity),
             dimMap(ctx, lastRank, lastIdentity)},
            lastRank, 0, [&](OpBuilder &nb, Location nl, ValueRange args) {
              return math::ExpOp::create(nb, nl, args[0]).getResult();
            });
        decayed = buildGeneric(
            b, l, ValueRange{current, lastFactor},
            emptyTensor(b, l, stateSizes, f32),
            {dimMap(ctx, 4, {0, 1, 2, 3}), dimMap(ctx, 4, lastDims, *group),
             dimMap(ctx, 4, {0, 1, 2, 3})},
            4, 0, [&](OpBuilder &nb, Location nl, ValueRange args) {
              return mulF(nb, nl, args[0], args[1]);
            });
        SmallVector<int64_t> gDims = {0, 1, 2}, lDims = {0, 2};
        if (channel) {
          gDims.push_back(3);
          lDims.push_back(3);
        }
        weigh = [&, g, last, gDims, lDims](Value k) {
          return buildGeneric(
              b, l, ValueRange{k, g, last},
              emptyTensor(b, l, mixedSizes(b, l, k), f32),
              {dimMap(ctx, 4, {0, 1, 2, 3}), dimMap(ctx, 4, gDims),
               dimMap(ctx, 4, lDims), dimMap(ctx, 4, {0, 1, 2, 3})},
              4, 0, [&](OpBuilder &nb, Location nl, ValueRange args) {
                Value diff = arith::SubFOp::create(nb, nl, args[2], args[1]);
                Value x = extendToF32(nb, nl, args[0]);
                return mulF(nb, nl, x, safeDecay(nb, nl, diff));
              });
        };
      }
      // Value-side gates: S <- S exp(C_C) and V <- V exp(C_C - C). Loops
      // (b,hv,kk,vv) and (b,j,hv,vv).
      if (Value valueGates = op.getValueGates()) {
        Value c = extractUnitSlice(b, l, valueGates, 1, n); // [B,C,HV,V]
        Value last = extractUnitSlice(b, l, c, 1, lastRow); // [B,HV,V]
        decayed = buildGeneric(
            b, l, ValueRange{decayed, last}, emptyTensor(b, l, stateSizes, f32),
            {dimMap(ctx, 4, {0, 1, 2, 3}), dimMap(ctx, 4, {0, 1, 3}),
             dimMap(ctx, 4, {0, 1, 2, 3})},
            4, 0, [&](OpBuilder &nb, Location nl, ValueRange args) {
              return mulF(nb, nl, args[0], safeDecay(nb, nl, args[1]));
            });
        values = buildGeneric(
            b, l, ValueRange{values, c, last},
            emptyTensor(b, l, mixedSizes(b, l, values), f32),
            {dimMap(ctx, 4, {0, 1, 2, 3}), dimMap(ctx, 4, {0, 1, 2, 3}),
             dimMap(ctx, 4, {0, 2, 3}), dimMap(ctx, 4, {0, 1, 2, 3})},
            4, 0, [&](OpBuilder &nb, Location nl, ValueRange args) {
              Value diff = arith::SubFOp::create(nb, nl, args[2], args[1]);
              Value x = extendToF32(nb, nl, args[0]);
              return mulF(nb, nl, x, safeDecay(nb, nl, diff));
            });
      }
      // S += (K2 w)^T V2 for the uncorrected extra pair.
      if (Value extraKeys = op.getExtraKeys()) {
        Value weighedKeys = weigh(extractUnitSlice(b, l, extraKeys, 1, n));
        Value extraValues = extractUnitSlice(b, l, op.getExtraValues(), 1, n);
        decayed =
            accumulateOuter(b, l, weighedKeys, extraValues, decayed, *group);
      }
      // S += (K w)^T V.
      Value next = accumulateOuter(b, l, weigh(keys), values, decayed, *group);
      return {next, values};
    };

    // Without a gate the first update accumulates into the incoming state;
    // the caller's initial state must not change, so that starts from a
    // copy. (With a gate the decay writes a new tensor first.)
    Value state = op.getInitialState();
    if (state && !gates && !op.getValueGates() && !oneTokenUpdate)
      state = bufferization::AllocTensorOp::create(
          rewriter, loc, cast<RankedTensorType>(state.getType()),
          /*dynamicSizes=*/ValueRange{}, /*copy=*/state);
    else if (!state)
      state = zeroTensor(rewriter, loc, stateSizes);
    if (state.getType() != op.getFinalState().getType())
      state = tensor::CastOp::create(rewriter, loc,
                                     op.getFinalState().getType(), state);

    // One chunk (as in la-fuse-recurrence's loop): no loop, and the recorded
    // state and corrected values are views of the values themselves.
    if (getConstantIntValue(keySizes[1]) == 1) {
      auto [next, values] =
          step(rewriter, loc, state, rewriter.getIndexAttr(0));
      auto expandAt1 = [&](Value x, Type type) -> Value {
        auto xType = cast<RankedTensorType>(x.getType());
        SmallVector<ReassociationIndices> reassociation = {{0, 1}};
        for (int64_t d = 1; d < xType.getRank(); ++d)
          reassociation.push_back({d + 1});
        SmallVector<OpFoldResult> sizes = mixedSizes(rewriter, loc, x);
        sizes.insert(sizes.begin() + 1, rewriter.getIndexAttr(1));
        Value expanded = tensor::ExpandShapeOp::create(
            rewriter, loc,
            RankedTensorType::get(staticShape(sizes), xType.getElementType()),
            x, reassociation, sizes);
        return expanded.getType() == type
                   ? expanded
                   : tensor::CastOp::create(rewriter, loc, type, expanded)
                         .getResult();
      };
      SmallVector<Value> results = {expandAt1(state, op.getStates().getType()),
                                    next};
      if (correction)
        results.push_back(expandAt1(values, op.getCorrected().getType()));
      rewriter.replaceOp(op, results);
      return success();
    }

    Value states = emptyTensor(rewriter, loc,
                               {valueSizes[0], valueSizes[1], valueSizes[3],
                                keySizes[4], valueSizes[4]},
                               f32);
    if (states.getType() != op.getStates().getType())
      states = tensor::CastOp::create(rewriter, loc, op.getStates().getType(),
                                      states);
    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    Value numChunks =
        getValueOrCreateConstantIndexOp(rewriter, loc, keySizes[1]);
    SmallVector<Value> inits = {state, states};
    if (correction)
      inits.push_back(emptyTensor(rewriter, loc, valueSizes, f32));

    auto loop = scf::ForOp::create(
        rewriter, loc, zero, numChunks, one, inits,
        [&](OpBuilder &b, Location l, Value n, ValueRange iterArgs) {
          Value current = iterArgs[0];
          // Record the state entering chunk n.
          Value recorded = insertAt(b, l, current, iterArgs[1], 1, n);
          auto [next, values] = step(b, l, current, n);
          SmallVector<Value> yields = {next, recorded};
          if (correction)
            yields.push_back(insertAt(b, l, values, iterArgs[2], 1, n));
          scf::YieldOp::create(b, l, yields);
        });
    SmallVector<Value> results = {loop.getResult(1), loop.getResult(0)};
    if (correction)
      results.push_back(loop.getResult(2));
    rewriter.replaceOp(op, results);
    return success();
  }
};

/// T = (I + A)^{-1} for strictly lower triangular A : [B,NC,H,C,C], in f32.
/// Forward substitution inside the s x s diagonal blocks (one row of every
/// block at a time), then block forward substitution: for block row i,
/// T_ij = -T_ii sum_{m<i} A_im T_mj, as two matrix products over full rows
/// with the columns of blocks >= i masked off.
static Value invertUnitLower(OpBuilder &b, Location loc, Value a,
                             int64_t blockSize) {
  MLIRContext *ctx = b.getContext();
  auto type = cast<RankedTensorType>(a.getType());
  int64_t c = type.getDimSize(3);
  int64_t s = blockSize, numBlocks = c / s;
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, a);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);

  // Diagonal blocks of A: [B,NC,H,nb,s,s]. Loops (b,n,h,m,r,t) read
  // A[b,n,h,m*s+r,m*s+t].
  auto blockExpr = [&](unsigned block, unsigned inner) {
    return getAffineDimExpr(block, ctx) * s + getAffineDimExpr(inner, ctx);
  };
  SmallVector<OpFoldResult> blockSizes = {
      sizes[0],          sizes[1],         sizes[2], b.getIndexAttr(numBlocks),
      b.getIndexAttr(s), b.getIndexAttr(s)};
  AffineMap diagRead = AffineMap::get(
      6, 0,
      {getAffineDimExpr(0, ctx), getAffineDimExpr(1, ctx),
       getAffineDimExpr(2, ctx), blockExpr(3, 4), blockExpr(3, 5)},
      ctx);
  AffineMap id6 = b.getMultiDimIdentityMap(6);
  Value diag = buildGeneric(
      b, loc, a, emptyTensor(b, loc, blockSizes, b.getF32Type()),
      {diagRead, id6}, 6, 0,
      [](OpBuilder &, Location, ValueRange args) { return args[0]; });

  // Forward substitution: row r of every block,
  // Td[r, col] = [col == r] - sum_t Ad[r, t] Td[t, col].
  Value blocksInit = zeroTensor(b, loc, blockSizes);
  auto rowLoop = scf::ForOp::create(
      b, loc, zero, arith::ConstantIndexOp::create(b, loc, s), one,
      ValueRange{blocksInit},
      [&](OpBuilder &nb, Location l, Value r, ValueRange iterArgs) {
        Value inverse = iterArgs[0];
        // Ad[.., r, :] as [B,NC,H,nb,1,s]; loops (b,n,h,m,x,col,t).
        Value aRow = sliceDim(nb, l, diag, 4, r, nb.getIndexAttr(1));
        SmallVector<OpFoldResult> rowSizes = blockSizes;
        rowSizes[4] = nb.getIndexAttr(1);
        Value identityRow = buildGeneric(
            nb, l, ValueRange{}, emptyTensor(nb, l, rowSizes, nb.getF32Type()),
            {id6}, 6, 0, [&](OpBuilder &bb, Location bl, ValueRange) -> Value {
              Value col = linalg::IndexOp::create(bb, bl, 5);
              Value isDiag = arith::CmpIOp::create(
                  bb, bl, arith::CmpIPredicate::eq, col, r);
              Value one = constantF32(bb, bl, 1.0f);
              Value zero = constantF32(bb, bl, 0.0f);
              return arith::SelectOp::create(bb, bl, isDiag, one, zero);
            });
        Value row = buildGeneric(
            nb, l, ValueRange{aRow, inverse}, identityRow,
            {dimMap(ctx, 7, {0, 1, 2, 3, 4, 6}),
             dimMap(ctx, 7, {0, 1, 2, 3, 6, 5}),
             dimMap(ctx, 7, {0, 1, 2, 3, 4, 5})},
            6, 1, [](OpBuilder &bb, Location bl, ValueRange args) {
              return subtractProduct(bb, bl, args[2], args[0], args[1]);
            });
        scf::YieldOp::create(nb, l, insertAt(nb, l, row, inverse, 4, r));
      });
  Value blocks = rowLoop.getResult(0);

  // Block-diagonal T: [B,NC,H,C,C], T[I,J] = [I/s == J/s] Td[I/s, I%s, J%s].
  AffineMap scatter = AffineMap::get(
      5, 0,
      {getAffineDimExpr(0, ctx), getAffineDimExpr(1, ctx),
       getAffineDimExpr(2, ctx), getAffineDimExpr(3, ctx).floorDiv(s),
       getAffineDimExpr(3, ctx) % s, getAffineDimExpr(4, ctx) % s},
      ctx);
  AffineMap id5 = b.getMultiDimIdentityMap(5);
  Value inverse = buildGeneric(
      b, loc, blocks, emptyTensor(b, loc, sizes, b.getF32Type()),
      {scatter, id5}, 5, 0,
      [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
        Value row = linalg::IndexOp::create(nb, l, 3);
        Value col = linalg::IndexOp::create(nb, l, 4);
        Value sValue = arith::ConstantIndexOp::create(nb, l, s);
        Value rowBlock = arith::DivUIOp::create(nb, l, row, sValue);
        Value colBlock = arith::DivUIOp::create(nb, l, col, sValue);
        Value sameBlock = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                                rowBlock, colBlock);
        return arith::SelectOp::create(nb, l, sameBlock, args[0],
                                       constantF32(nb, l, 0.0f));
      });
  if (numBlocks == 1)
    return inverse;

  // Block forward substitution over block rows 1 .. nb-1.
  auto blockLoop = scf::ForOp::create(
      b, loc, one, arith::ConstantIndexOp::create(b, loc, numBlocks), one,
      ValueRange{inverse},
      [&](OpBuilder &nb, Location l, Value i, ValueRange iterArgs) {
        Value current = iterArgs[0];
        Value rowOffset = arith::MulIOp::create(
            nb, l, i, arith::ConstantIndexOp::create(nb, l, s));
        Value aRows =
            sliceDim(nb, l, a, 3, rowOffset, nb.getIndexAttr(s)); // [..,s,C]
        Value tRows = sliceDim(nb, l, current, 3, rowOffset,
                               nb.getIndexAttr(s)); // [..,s,C]
        SmallVector<OpFoldResult> rowsSizes = sizes;
        rowsSizes[3] = nb.getIndexAttr(s);
        // lhs [..,s,m] times rhs [..,m,C] per (b,n,h): loops (b,n,h,r,col,t).
        auto rowsProduct = [&](Value lhs, Value rhs) {
          return buildGeneric(
              nb, l, ValueRange{lhs, rhs}, zeroTensor(nb, l, rowsSizes),
              {dimMap(ctx, 6, {0, 1, 2, 3, 5}), dimMap(ctx, 6, {0, 1, 2, 5, 4}),
               dimMap(ctx, 6, {0, 1, 2, 3, 4})},
              5, 1, [](OpBuilder &bb, Location bl, ValueRange a) {
                return addF(bb, bl, a[2], mulF(bb, bl, a[0], a[1]));
              });
        };
        // X = A[rows_i, :] T.
        Value x = rowsProduct(aRows, current);
        // Y = T_ii X, T_ii [..,1,s,s] collapsed to [..,s,s] (a rank-reducing
        // slice would be ambiguous when B is 1 as well).
        Value tii = tensor::CollapseShapeOp::create(
            nb, l, sliceDim(nb, l, blocks, 3, i, nb.getIndexAttr(1)),
            ArrayRef<ReassociationIndices>{{0}, {1}, {2}, {3, 4}, {5}});
        // T_ii is lower triangular: guarded like applyScores, so that a
        // non-finite row of X (a later token's) stays out of earlier rows.
        Value y =
            guardedCausalProduct(nb, l, x, /*rowDim=*/3, [&](Value finiteX) {
              return rowsProduct(tii, finiteX);
            });
        // Columns of earlier blocks get -Y; the rest keeps T_ii and zeros.
        Value rows = buildGeneric(
            nb, l, ValueRange{y}, tRows, {id5, id5}, 5, 0,
            [&](OpBuilder &bb, Location bl, ValueRange a) -> Value {
              Value col = linalg::IndexOp::create(bb, bl, 4);
              Value before = arith::CmpIOp::create(
                  bb, bl, arith::CmpIPredicate::ult, col, rowOffset);
              Value negated = arith::NegFOp::create(bb, bl, a[0]);
              return arith::SelectOp::create(bb, bl, before, negated, a[1]);
            });
        scf::YieldOp::create(nb, l,
                             insertAt(nb, l, rows, current, 3, rowOffset));
      });
  return blockLoop.getResult(0);
}

struct ChunkWYToLinalg : OpRewritePattern<ChunkWYOp> {
  ChunkWYToLinalg(MLIRContext *ctx, ChannelGateProducts gateProducts)
      : OpRewritePattern(ctx), gateProducts(gateProducts) {}

  /// The general low-rank form: with P the exclusive cumulative gates,
  /// A = strictly_lower((a e^P)(b e^-G)^T), M = strictly_lower((a e^P)(k
  /// e^-G)^T), T = (I + A)^{-1}, W = T (a e^P), U = -T (M V).
  SmallVector<Value> lowerGeneral(PatternRewriter &rewriter, ChunkWYOp op,
                                  int64_t group) const {
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    Value gates = op.getGates(), prevGates = op.getPrevGates();
    Value lowRank = buildScores(rewriter, loc, op.getA(), op.getB(), gates,
                                /*rowScale=*/Value(), 1.0f, /*strict=*/true,
                                gateProducts, prevGates);
    Value write = buildScores(rewriter, loc, op.getA(), op.getK(), gates,
                              /*rowScale=*/Value(), 1.0f, /*strict=*/true,
                              gateProducts, prevGates);
    Value inverse = invertUnitLower(rewriter, loc, lowRank, op.getBlockSize());

    // W = T (a * exp(P)): the factor applied per element first, then the
    // guarded causal product. Element-wise loops (b,n,t,h,kk).
    SmallVector<Value> inputs = {op.getA()};
    SmallVector<AffineMap> maps = {dimMap(ctx, 5, {0, 1, 2, 3, 4})};
    if (prevGates) {
      inputs.push_back(prevGates);
      maps.push_back(isChannelGate(prevGates) ? dimMap(ctx, 5, {0, 1, 2, 3, 4})
                                              : dimMap(ctx, 5, {0, 1, 2, 3}));
    }
    maps.push_back(dimMap(ctx, 5, {0, 1, 2, 3, 4}));
    SmallVector<OpFoldResult> keySizes = mixedSizes(rewriter, loc, op.getA());
    Value weightedA = buildGeneric(
        rewriter, loc, inputs,
        emptyTensor(rewriter, loc, keySizes, rewriter.getF32Type()), maps, 5, 0,
        [&](OpBuilder &b, Location l, ValueRange args) -> Value {
          Value term = extendToF32(b, l, args[0]);
          if (prevGates)
            term = mulF(b, l, term, safeDecay(b, l, args[1]));
          return term;
        });
    Value w = applyScores(rewriter, loc, inverse, weightedA,
                          zeroTensor(rewriter, loc, keySizes), /*group=*/1);

    // U = -T (M V).
    SmallVector<OpFoldResult> valueSizes = mixedSizes(rewriter, loc, op.getV());
    Value written = applyScores(rewriter, loc, write, op.getV(),
                                zeroTensor(rewriter, loc, valueSizes), group);
    Value solved = applyScores(rewriter, loc, inverse, written,
                               zeroTensor(rewriter, loc, valueSizes), group);
    AffineMap id = rewriter.getMultiDimIdentityMap(5);
    Value u = buildGeneric(
        rewriter, loc, solved,
        emptyTensor(rewriter, loc, valueSizes, rewriter.getF32Type()), {id, id},
        5, 0, [](OpBuilder &b, Location l, ValueRange args) {
          return arith::NegFOp::create(b, l, args[0]);
        });
    return {w, u};
  }

  LogicalResult matchAndRewrite(ChunkWYOp op,
                                PatternRewriter &rewriter) const override {
    FailureOr<int64_t> group =
        groupSize(op.getK().getType(), op.getV().getType(), 3, 3);
    int64_t chunkSize = op.getK().getType().getDimSize(2);
    if (failed(group) || ShapedType::isDynamic(chunkSize))
      return rewriter.notifyMatchFailure(op, "needs static H, HV and C");
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    Value gates = op.getGates();
    bool channel = isChannelGate(gates);
    if (!op.getBeta()) {
      rewriter.replaceOp(op, lowerGeneral(rewriter, op, *group));
      return success();
    }

    // A = strictly_lower(diag(beta) (K K^T * D)); T = (I + A)^{-1}.
    Value a = buildScores(rewriter, loc, op.getK(), op.getK(), gates,
                          op.getBeta(), 1.0f, /*strict=*/true, gateProducts);
    Value inverse = invertUnitLower(rewriter, loc, a, op.getBlockSize());

    // W = T (beta * exp(G) * K) and U = T (beta * V): the factors are
    // applied once per element first, so the products are plain
    // contractions. Element-wise loops (b,n,t,h,kk) and (b,n,t,hv,vv).
    Type f32 = rewriter.getF32Type();
    SmallVector<Value> inputs = {op.getK(), op.getBeta()};
    SmallVector<AffineMap> maps = {dimMap(ctx, 5, {0, 1, 2, 3, 4}),
                                   dimMap(ctx, 5, {0, 1, 2, 3})};
    if (gates) {
      inputs.push_back(gates);
      maps.push_back(channel ? dimMap(ctx, 5, {0, 1, 2, 3, 4})
                             : dimMap(ctx, 5, {0, 1, 2, 3}));
    }
    maps.push_back(dimMap(ctx, 5, {0, 1, 2, 3, 4}));
    Value weightedKeys = buildGeneric(
        rewriter, loc, inputs,
        emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, op.getK()), f32),
        maps, 5, 0, [&](OpBuilder &b, Location l, ValueRange args) -> Value {
          Value term = mulExtended(b, l, args[0], args[1]);
          if (gates)
            term = mulF(b, l, term, safeDecay(b, l, args[2]));
          return term;
        });
    Value weightedValues = buildGeneric(
        rewriter, loc, ValueRange{op.getV(), op.getBeta()},
        emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, op.getV()), f32),
        {dimMap(ctx, 5, {0, 1, 2, 3, 4}), dimMap(ctx, 5, {0, 1, 2, -4}, *group),
         dimMap(ctx, 5, {0, 1, 2, 3, 4})},
        5, 0, [&](OpBuilder &b, Location l, ValueRange args) -> Value {
          return mulExtended(b, l, args[0], args[1]);
        });
    Value w = applyScores(
        rewriter, loc, inverse, weightedKeys,
        zeroTensor(rewriter, loc, mixedSizes(rewriter, loc, op.getK())),
        /*group=*/1);
    Value u = applyScores(
        rewriter, loc, inverse, weightedValues,
        zeroTensor(rewriter, loc, mixedSizes(rewriter, loc, op.getV())),
        *group);
    rewriter.replaceOp(op, {w, u});
    return success();
  }

  ChannelGateProducts gateProducts;
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
    Value scaleValue =
        constantF32(rewriter, loc, op.getScale().convertToFloat());
    Value scaledQueries = buildGeneric(
        rewriter, loc, inputs,
        emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, op.getQ()), f32),
        maps, 5, 0, [&](OpBuilder &b, Location l, ValueRange args) -> Value {
          Value value = mulF(b, l, extendToF32(b, l, args[0]), scaleValue);
          if (gates)
            value = mulF(b, l, value, safeDecay(b, l, args[1]));
          return value;
        });

    // O = intra + Q'^T S_n. Loops (b,n,i,hv,vv,kk). With value-side gates C
    // the product is formed on its own and added as exp(C) Q'^T S_n.
    // Grouped query heads read state hv / (HV/HS); a single state (one task
    // of the fused schedule) is read without its head dim, so that the map
    // stays a projected permutation (la-tile's vector tiles need one).
    // Transposed states are read as S_n[vv, kk] instead.
    Value states = op.getStates();
    bool transposed = op.getTransposedStates();
    int64_t row = transposed ? 4 : 5, column = transposed ? 5 : 4;
    AffineMap statesMap = dimMap(ctx, 6, {0, 1, 3, row, column});
    FailureOr<int64_t> stateGroup =
        groupSize(op.getStates().getType(), op.getIntra().getType(), 2, 3);
    if (failed(stateGroup))
      return rewriter.notifyMatchFailure(op, "needs static state heads");
    if (*stateGroup > 1 && op.getStates().getType().getDimSize(2) == 1) {
      states =
          extractUnitSlice(rewriter, loc, states, 2, rewriter.getIndexAttr(0));
      statesMap = dimMap(ctx, 6, {0, 1, row, column});
    } else if (*stateGroup > 1) {
      statesMap = dimMap(ctx, 6, {0, 1, -4, row, column}, *stateGroup);
    }
    Value valueGates = op.getValueGates();
    Value sum = buildGeneric(
        rewriter, loc, ValueRange{scaledQueries, states},
        valueGates ? zeroTensor(rewriter, loc,
                                mixedSizes(rewriter, loc, op.getIntra()))
                   : op.getIntra(),
        {dimMap(ctx, 6, {0, 1, 2, -4, 5}, *group), statesMap,
         dimMap(ctx, 6, {0, 1, 2, 3, 4})},
        5, 1, [&](OpBuilder &b, Location l, ValueRange args) -> Value {
          return addF(b, l, args[2], mulF(b, l, args[0], args[1]));
        });
    if (valueGates) {
      // Into a fresh destination, the intra part read as an input: the
      // value-gated intra part is the result of a run-time choice (an
      // scf.if), and a destination rooted there is not the task's output
      // slice, which la-in-place-destinations would make it (else the
      // chunk's output is copied there, element by element).
      AffineMap id = rewriter.getMultiDimIdentityMap(5);
      sum = buildGeneric(
          rewriter, loc, ValueRange{sum, valueGates, op.getIntra()},
          emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, op.getIntra()),
                      f32),
          {id, id, id, id}, 5, 0,
          [&](OpBuilder &b, Location l, ValueRange args) -> Value {
            return addF(b, l, args[2],
                        mulF(b, l, args[0], safeDecay(b, l, args[1])));
          });
    }
    Type outputElementType = op.getResult().getType().getElementType();
    if (!outputElementType.isF32()) {
      AffineMap id = rewriter.getMultiDimIdentityMap(5);
      sum = buildGeneric(
          rewriter, loc, sum,
          emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, sum),
                      outputElementType),
          {id, id}, 5, 0, [&](OpBuilder &b, Location l, ValueRange args) {
            return castFloat(b, l, args[0], outputElementType);
          });
    }
    rewriter.replaceOp(op, sum);
    return success();
  }
};
} // namespace

void mlir::la::populateChunkedToLinalgPatterns(
    RewritePatternSet &patterns, bool cumsumScan,
    ChannelGateProducts gateProducts) {
  patterns.add<ChunkStateScanToLinalg, ChunkInterToLinalg>(
      patterns.getContext());
  patterns.add<ChunkCumsumToLinalg>(patterns.getContext(), cumsumScan);
  patterns.add<ChunkIntraToLinalg, ChunkWYToLinalg>(patterns.getContext(),
                                                    gateProducts);
}
