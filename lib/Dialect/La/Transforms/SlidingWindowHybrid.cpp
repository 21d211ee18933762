//===- SlidingWindowHybrid.cpp - la.sliding_window_hybrid decomposed ------===//
//
// LoLCATs' hybrid is linear attention outside a window plus softmax attention
// inside it, under one normalisation. The far part is la's canonical
// recurrence on the learned features, its keys and values moved `w` tokens
// later, so that token t reads the state after token t - w; a column of ones
// appended to the values makes its last output column the far normaliser.
// The window is computed over blocks of C tokens: a block's queries see the
// keys of their own block and of the `shifts` blocks before it, each pair of
// blocks a C x C product, masked to the window (the same form as la's
// intra-chunk products, which la-tile vectorises).
//
//===----------------------------------------------------------------------===//

#include "la/Dialect/La/AggregatedOpInterfaceImpl.h"
#include "la/Dialect/La/LaDialect.h"
#include "la/Dialect/La/LaOps.h"
#include "la/Dialect/La/LaPasses.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/PatternMatch.h"

#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <limits>

using namespace mlir;
using namespace mlir::la;

/// Larger than any token index (as f32): "no non-finite value".
static constexpr float kNoToken = 1e30f;

/// `x` [B,T,H,D] moved `shift` tokens later in its element type: zeros in
/// front, the last `shift` tokens dropped. With `onesColumn` a column D of
/// ones is appended to the moved tokens (zeros in front there too).
/// Of T tokens moved `shift` later: how many stay, kept = max(T - shift, 0),
/// and where they land, T - kept.
static std::pair<OpFoldResult, OpFoldResult>
movedSpan(OpBuilder &b, Location loc, OpFoldResult tokens, int64_t shift) {
  MLIRContext *ctx = b.getContext();
  AffineExpr s0 = getAffineSymbolExpr(0, ctx);
  OpFoldResult kept = affine::makeComposedFoldedAffineMax(
      b, loc,
      AffineMap::get(0, 1, {s0 - shift, getAffineConstantExpr(0, ctx)}, ctx),
      {tokens});
  OpFoldResult offset = affine::makeComposedFoldedAffineApply(
      b, loc, s0 - getAffineSymbolExpr(1, ctx), {tokens, kept});
  return {kept, offset};
}

static Value shiftTokens(OpBuilder &b, Location loc, Value x, int64_t shift,
                         bool onesColumn) {
  MLIRContext *ctx = b.getContext();
  Type element = cast<RankedTensorType>(x.getType()).getElementType();
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
  AffineExpr s0 = getAffineSymbolExpr(0, ctx);
  auto [kept, offset] = movedSpan(b, loc, sizes[1], shift);
  SmallVector<OpFoldResult> destSizes = sizes;
  if (onesColumn)
    destSizes[3] =
        affine::makeComposedFoldedAffineApply(b, loc, s0 + 1, {sizes[3]});
  Value dest = filledTensor(b, loc, destSizes, element, 0.0);
  SmallVector<OpFoldResult> ones(4, b.getIndexAttr(1));
  SmallVector<OpFoldResult> partSizes = {sizes[0], kept, sizes[2], sizes[3]};
  if (onesColumn) {
    Value column = filledTensor(
        b, loc, {sizes[0], kept, sizes[2], b.getIndexAttr(1)}, element, 1.0);
    dest = tensor::InsertSliceOp::create(
        b, loc, column, dest,
        SmallVector<OpFoldResult>{b.getIndexAttr(0), offset, b.getIndexAttr(0),
                                  sizes[3]},
        SmallVector<OpFoldResult>{sizes[0], kept, sizes[2], b.getIndexAttr(1)},
        ones);
  }
  Value part = tensor::ExtractSliceOp::create(
      b, loc, x, SmallVector<OpFoldResult>(4, b.getIndexAttr(0)), partSizes,
      ones);
  return tensor::InsertSliceOp::create(
      b, loc, part, dest,
      SmallVector<OpFoldResult>{b.getIndexAttr(0), offset, b.getIndexAttr(0),
                                b.getIndexAttr(0)},
      partSizes, ones);
}

/// Whether the f32 `x` is finite (false for NaN and +-inf).
static Value isFiniteF32(OpBuilder &b, Location loc, Value x) {
  Value magnitude = math::AbsFOp::create(b, loc, x);
  Value infinity = constantF32(b, loc, std::numeric_limits<float>::infinity());
  return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, magnitude,
                               infinity);
}

/// `x` [B,T,H,D] as f32 [B,L,H,D] with its tokens from token `before` on,
/// zeros elsewhere (L = `length`); with `zeroNonFinite` its NaN and
/// infinite elements are zeros too.
static Value paddedF32(OpBuilder &b, Location loc, Value x, OpFoldResult before,
                       OpFoldResult length, bool zeroNonFinite) {
  MLIRContext *ctx = b.getContext();
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
  // An f32 x that already has its place and length is its own padding.
  std::optional<int64_t> from = getConstantIntValue(before);
  std::optional<int64_t> to = getConstantIntValue(length);
  std::optional<int64_t> tokens = getConstantIntValue(sizes[1]);
  if (!zeroNonFinite && from == 0 && to && to == tokens &&
      cast<RankedTensorType>(x.getType()).getElementType().isF32())
    return x;
  AffineMap id = AffineMap::getMultiDimIdentityMap(4, ctx);
  Value wide = buildGeneric(
      b, loc, ValueRange{x}, emptyTensor(b, loc, sizes, b.getF32Type()),
      {id, id}, 4, 0, [&](OpBuilder &nb, Location l, ValueRange args) {
        Value value = extendToF32(nb, l, args[0]);
        if (!zeroNonFinite)
          return value;
        Value finite = isFiniteF32(nb, l, value);
        Value zero = constantF32(nb, l, 0.0f);
        return arith::SelectOp::create(nb, l, finite, value, zero).getResult();
      });
  Value dest = zeroTensor(b, loc, {sizes[0], length, sizes[2], sizes[3]});
  return tensor::InsertSliceOp::create(
      b, loc, wide, dest,
      SmallVector<OpFoldResult>{b.getIndexAttr(0), before, b.getIndexAttr(0),
                                b.getIndexAttr(0)},
      sizes, SmallVector<OpFoldResult>(4, b.getIndexAttr(1)));
}

/// [B,L,...] as [B,L/block,block,...] (L a multiple of block).
static Value splitBlocks(OpBuilder &b, Location loc, Value x, int64_t block) {
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
  AffineExpr s0 = b.getAffineSymbolExpr(0);
  SmallVector<OpFoldResult> shape = {
      sizes[0],
      affine::makeComposedFoldedAffineApply(b, loc, s0.floorDiv(block),
                                            {sizes[1]}),
      b.getIndexAttr(block)};
  SmallVector<ReassociationIndices> groups = {{0}, {1, 2}};
  for (unsigned dim = 2, rank = sizes.size(); dim < rank; ++dim) {
    shape.push_back(sizes[dim]);
    groups.push_back({static_cast<int64_t>(dim) + 1});
  }
  auto type = RankedTensorType::get(
      staticShape(shape), cast<RankedTensorType>(x.getType()).getElementType());
  return tensor::ExpandShapeOp::create(b, loc, type, x, groups, shape);
}

/// [B,NC,C,...] as [B,NC*C,...].
static Value joinBlocks(OpBuilder &b, Location loc, Value x) {
  unsigned rank = cast<RankedTensorType>(x.getType()).getRank();
  SmallVector<ReassociationIndices> groups = {{0}, {1, 2}};
  for (unsigned dim = 3; dim < rank; ++dim)
    groups.push_back({static_cast<int64_t>(dim)});
  return tensor::CollapseShapeOp::create(b, loc, x, groups);
}

/// Inside a linalg body over blocks: whether key row j of the block `shift`
/// blocks before query row i's block n lies in i's window (and, given the
/// first token `start` of the query's sequence as f32, in its sequence).
static Value inWindow(OpBuilder &b, Location loc, int64_t shift, int64_t block,
                      int64_t window, unsigned nDim, unsigned iDim,
                      unsigned jDim, Value start = Value()) {
  // Every op is built in its own statement: the order in which a call's
  // arguments are evaluated is the host compiler's, and la's IR must not
  // depend on it.
  auto index = [&](unsigned dim) {
    return linalg::IndexOp::create(b, loc, dim).getResult();
  };
  auto constant = [&](int64_t value) {
    return arith::ConstantIndexOp::create(b, loc, value).getResult();
  };
  auto compare = [&](arith::CmpIPredicate predicate, Value x, int64_t value) {
    Value bound = constant(value);
    return arith::CmpIOp::create(b, loc, predicate, x, bound).getResult();
  };
  Value i = index(iDim), j = index(jDim);
  // The query token minus the key token.
  Value offsetRow = arith::AddIOp::create(b, loc, i, constant(shift * block));
  Value distance = arith::SubIOp::create(b, loc, offsetRow, j);
  Value notAfter = compare(arith::CmpIPredicate::sge, distance, 0);
  Value near = compare(arith::CmpIPredicate::sle, distance, window - 1);
  Value valid = arith::AndIOp::create(b, loc, notAfter, near);
  if (start) {
    // The key's token (n - shift) * C + j, negative in the padding blocks.
    Value n = index(nDim);
    Value blockStart = arith::MulIOp::create(b, loc, n, constant(block));
    Value column = arith::SubIOp::create(b, loc, j, constant(shift * block));
    Value key = arith::AddIOp::create(b, loc, blockStart, column);
    Value keyF32 = arith::SIToFPOp::create(
        b, loc, b.getF32Type(),
        arith::IndexCastOp::create(b, loc, b.getI64Type(), key));
    Value inSequence =
        arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGE, keyF32, start);
    valid = arith::AndIOp::create(b, loc, valid, inSequence);
  }
  if (shift == 0)
    return valid;
  // Blocks before the first are padding.
  Value notPadding = compare(arith::CmpIPredicate::sge, index(nDim), shift);
  return arith::AndIOp::create(b, loc, valid, notPadding);
}

/// A linalg loop index as f32 (exact below 2^24 tokens).
static Value indexAsF32(OpBuilder &b, Location loc, unsigned dim) {
  Value index = linalg::IndexOp::create(b, loc, dim);
  return arith::UIToFPOp::create(
      b, loc, b.getF32Type(),
      arith::IndexCastUIOp::create(b, loc, b.getI64Type(), index));
}

/// The first token of each token's sequence, [T] as f32, from packed
/// sequences' offsets: start[t] = max over n of (cu[n] <= t ? cu[n] : 0).
/// Loops (t, n).
static Value sequenceStarts(OpBuilder &b, Location loc, Value offsets,
                            OpFoldResult time) {
  MLIRContext *ctx = b.getContext();
  return buildGeneric(
      b, loc, ValueRange{offsets}, zeroTensor(b, loc, {time}),
      {dimMap(ctx, 2, {1}), dimMap(ctx, 2, {0})}, 1, 1,
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Value offset = arith::SIToFPOp::create(nb, l, nb.getF32Type(), args[0]);
        Value reached = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OLE,
                                              offset, indexAsF32(nb, l, 0));
        Value candidate = arith::SelectOp::create(nb, l, reached, offset,
                                                  constantF32(nb, l, 0.0f));
        return arith::MaximumFOp::create(nb, l, args[1], candidate).getResult();
      });
}

/// `x` [B,T,H,D] (f32, moved `shift` tokens later) with the tokens whose
/// source token lies before their sequence's start (`starts`, [T]) zeroed:
/// with packed sequences, what the move brought over from the sequence
/// before. Written into `x`.
static Value zeroAcrossStarts(OpBuilder &b, Location loc, Value x, Value starts,
                              int64_t shift) {
  MLIRContext *ctx = b.getContext();
  AffineMap id = dimMap(ctx, 4, {0, 1, 2, 3});
  return buildGeneric(
      b, loc, ValueRange{starts}, x, {dimMap(ctx, 4, {1}), id}, 4, 0,
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Value token = indexAsF32(nb, l, 1);
        Value distance = constantF32(nb, l, static_cast<float>(shift));
        Value source = arith::SubFOp::create(nb, l, token, distance);
        Value inSequence = arith::CmpFOp::create(
            nb, l, arith::CmpFPredicate::OGE, source, args[0]);
        return arith::SelectOp::create(nb, l, inSequence, args[1],
                                       constantF32(nb, l, 0.0f))
            .getResult();
      });
}

/// `x` [B,T,H,D] converted to f32 (a copy; `x` itself when it is f32).
static Value toF32(OpBuilder &b, Location loc, Value x) {
  if (cast<RankedTensorType>(x.getType()).getElementType().isF32())
    return x;
  MLIRContext *ctx = b.getContext();
  AffineMap id = dimMap(ctx, 4, {0, 1, 2, 3});
  return buildGeneric(
      b, loc, ValueRange{x},
      emptyTensor(b, loc, mixedSizes(b, loc, x), b.getF32Type()), {id, id}, 4,
      0, [](OpBuilder &nb, Location l, ValueRange args) {
        return extendToF32(nb, l, args[0]);
      });
}

/// Marks the op computing `value` for la-tile: nothing with loop `column`
/// past loop `row` matters (`lower`), or nothing before it. Within the
/// window a query's own block holds only keys up to it, and the farthest
/// block only keys after it (that block is `shifts` * C >= w - 1 tokens
/// back).
static void markTriangle(Value value, bool lower, int64_t row, int64_t column) {
  Operation *op = value.getDefiningOp();
  auto dims = DenseI64ArrayAttr::get(op->getContext(), {row, column});
  LaDialect &dialect = *op->getContext()->getLoadedDialect<LaDialect>();
  if (lower)
    dialect.getLowerTriangularAttrHelper().setAttr(op, dims);
  else
    dialect.getUpperTriangularAttrHelper().setAttr(op, dims);
}

namespace {
/// The hybrid's program on tensors, shared by its decomposition and its
/// gradient: the sizes, the far part's recurrence and the window's block
/// products (each built by its method, in this order).
struct HybridProgram {
  OpBuilder &b;
  Location loc;
  MLIRContext *ctx;
  SlidingWindowHybridOp op;
  Type f32;
  int64_t window, block, shifts;
  float scale;
  Value q, k, v, offsets, starts;
  OpFoldResult batch, heads, queryTime, time, context, valueDim, numBlocks;
  bool noContext;
  SmallVector<OpFoldResult> ones;
  OpFoldResult zero, front;
  AffineMap scoreMap, rowMap;
  // The far part.
  Value movedKeys, movedValues;
  RecurrenceParts far;
  RecurrenceOp farOp;
  // The window, over NC blocks of C tokens of the keys (S padded to NC * C).
  Value queries, keys, values, keysT, startBlocks;
  SmallVector<Value> scores, weights;
  Value rowMax, rowSum, weighted;

  HybridProgram(OpBuilder &builder, SlidingWindowHybridOp op)
      : b(builder), loc(op.getLoc()), ctx(builder.getContext()), op(op),
        f32(builder.getF32Type()), window(op.getWindow()),
        scale(op.getEffectiveScale()), q(op.getQ()), k(op.getK()), v(op.getV()),
        offsets(op.getCuSeqlens()), ones(4, builder.getIndexAttr(1)),
        zero(builder.getIndexAttr(0)) {
    // Blocks of 16 to 64 tokens (the sizes la-tile's register tiles
    // divide), large enough that a window reaches few blocks back.
    block = std::clamp<int64_t>(
        llvm::PowerOf2Ceil(std::max<int64_t>(window - 1, 1)), 16, 64);
    shifts = llvm::divideCeil(window - 1, block);
    front = b.getIndexAttr(shifts * block);
    SmallVector<OpFoldResult> qSizes = mixedSizes(b, loc, q);
    SmallVector<OpFoldResult> vSizes = mixedSizes(b, loc, v);
    // The window and the moved tokens are over the keys' S = L + T tokens;
    // the queries are the last T (packed sequences have no context: L = 0).
    batch = qSizes[0];
    heads = qSizes[2];
    queryTime = qSizes[1];
    time = offsets ? queryTime : vSizes[1];
    context = offsets ? OpFoldResult(b.getIndexAttr(0))
                      : affine::makeComposedFoldedAffineApply(
                            b, loc,
                            b.getAffineSymbolExpr(0) - b.getAffineSymbolExpr(1),
                            {time, queryTime});
    noContext = isConstantIntValue(context, 0);
    valueDim = vSizes[3];
    AffineExpr s0 = b.getAffineSymbolExpr(0);
    numBlocks = affine::makeComposedFoldedAffineApply(b, loc, s0.ceilDiv(block),
                                                      {time});
    scoreMap = dimMap(ctx, 5, {0, 1, 2, 3, 4});
    rowMap = dimMap(ctx, 5, {0, 1, 3, 2});
    if (offsets)
      starts = sequenceStarts(b, loc, offsets, time);
  }

  /// x [B,S,...] from token L on: the tokens of the queries.
  Value queryTokens(Value x) {
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
    SmallVector<OpFoldResult> at(sizes.size(), zero);
    at[1] = context;
    sizes[1] = queryTime;
    return tensor::ExtractSliceOp::create(
               b, loc, x, at, sizes,
               SmallVector<OpFoldResult>(sizes.size(), b.getIndexAttr(1)))
        .getResult();
  }

  /// The tokens of NC + extraBlocks blocks.
  OpFoldResult tokensOf(int64_t extraBlocks) {
    return affine::makeComposedFoldedAffineApply(
        b, loc, (b.getAffineSymbolExpr(0) + extraBlocks) * block, {numBlocks});
  }

  /// The far part: linear attention on the features, keys and values w
  /// tokens later, the values with a column of ones. With packed sequences
  /// each sequence's first w tokens read nothing from the sequence before:
  /// the moved tokens that came from it are zeroed (in f32: a select of
  /// 16-bit floats is not legal for every vector width on x86), and the
  /// recurrence restarts at every sequence. With context the recurrence
  /// runs over the queries' T tokens: the moved tokens before them are
  /// summed into its initial state.
  void buildFar() {
    far.q = op.getFeatureQ();
    movedKeys =
        shiftTokens(b, loc, op.getFeatureK(), window, /*onesColumn=*/false);
    movedValues = shiftTokens(b, loc, v, window, /*onesColumn=*/true);
    if (offsets) {
      far.q = toF32(b, loc, far.q);
      movedKeys =
          zeroAcrossStarts(b, loc, toF32(b, loc, movedKeys), starts, window);
      movedValues =
          zeroAcrossStarts(b, loc, toF32(b, loc, movedValues), starts, window);
      far.cuSeqlens = offsets;
    }
    far.k = noContext ? movedKeys : queryTokens(movedKeys);
    far.v = noContext ? movedValues : queryTokens(movedValues);
    far.gate = GateKind::None;
    far.lowRank = LowRank::None;
    far.scale = 1.0f;
    far.normalizer = false;
    far.oInit = emptyTensor(b, loc, mixedSizes(b, loc, far.v), f32);
    far.initialState = op.getInitialState()
                           ? op.getInitialState()
                           : zeroState(b, loc, far.q, far.v, offsets);
    if (!noContext) {
      // state[b,h,f,c] += sum_{t < L} movedKeys[b,t,h,f] movedValues[b,t,h,c].
      Value earlyKeys = earlyTokens(movedKeys);
      Value earlyValues = earlyTokens(movedValues);
      // The given state is an input: the sum goes into a copy.
      Value init = far.initialState;
      if (op.getInitialState())
        init = linalg::CopyOp::create(
                   b, loc, init,
                   emptyTensor(b, loc, mixedSizes(b, loc, init), f32))
                   .getResult(0);
      far.initialState = buildGeneric(
          b, loc, ValueRange{earlyKeys, earlyValues}, init, earlyMaps(), 4, 1,
          [](OpBuilder &nb, Location l, ValueRange args) {
            Value key = extendToF32(nb, l, args[0]);
            Value value = extendToF32(nb, l, args[1]);
            return addF(nb, l, args[2], mulF(nb, l, key, value));
          });
    }
    farOp = far.build(b, loc);
  }

  /// The context's first L tokens of x [B,S,H,D].
  Value earlyTokens(Value x) {
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
    sizes[1] = context;
    return tensor::ExtractSliceOp::create(
        b, loc, x, SmallVector<OpFoldResult>(4, zero), sizes, ones);
  }

  /// The maps of the early tokens' contraction into the state: loops
  /// (b,h,f,c,t) over keys [B,L,H,F], values [B,L,H,C] and the state.
  SmallVector<AffineMap> earlyMaps() {
    return {dimMap(ctx, 5, {0, 4, 1, 2}), dimMap(ctx, 5, {0, 4, 1, 3}),
            dimMap(ctx, 5, {0, 1, 2, 3})};
  }

  /// x [B,T,H,D] in f32 as blocks [B,NC+extra,C,H,D], `extra` blocks of
  /// zeros in front and the queries' L context rows before x's tokens
  /// when `atQueries`.
  Value blocksOf(Value x, int64_t extra, bool atQueries, bool zeroNonFinite) {
    OpFoldResult before =
        atQueries ? context : OpFoldResult(b.getIndexAttr(extra * block));
    return splitBlocks(
        b, loc, paddedF32(b, loc, x, before, tokensOf(extra), zeroNonFinite),
        block);
  }

  /// x blocks [B,N,C,H,D] as [B,N,H,D,C]: the block's token the vector
  /// dimension.
  Value transposeBlocks(Value x) {
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
    return buildGeneric(
        b, loc, ValueRange{x},
        emptyTensor(b, loc, {sizes[0], sizes[1], sizes[3], sizes[4], sizes[2]},
                    f32),
        {dimMap(ctx, 5, {0, 1, 4, 2, 3}), dimMap(ctx, 5, {0, 1, 2, 3, 4})}, 5,
        0, [](OpBuilder &, Location, ValueRange args) { return args[0]; });
  }

  /// Blocks [B,N,...] of the padded keys' layout, `shift` blocks before
  /// each query block.
  Value blocksBefore(Value x, int64_t shift) {
    return sliceDim(b, loc, x, 1, b.getIndexAttr(shifts - shift), numBlocks);
  }

  SmallVector<OpFoldResult> scoreSizes() {
    return {batch, numBlocks, heads, b.getIndexAttr(block),
            b.getIndexAttr(block)};
  }
  SmallVector<OpFoldResult> rowSizes() {
    return {batch, numBlocks, b.getIndexAttr(block), heads};
  }

  /// An op over the scores of block pair `shift` (and the starts), its body
  /// given whether the entry is in the window.
  Value overScores(
      int64_t shift, ValueRange inputs, Value init, ArrayRef<AffineMap> maps,
      unsigned parallel, unsigned reductions,
      function_ref<Value(OpBuilder &, Location, Value, ValueRange, Value)>
          body) {
    SmallVector<Value> operands(inputs);
    SmallVector<AffineMap> allMaps(maps.drop_back());
    if (startBlocks) {
      operands.push_back(startBlocks);
      allMaps.push_back(dimMap(ctx, 5, {1, 3}));
    }
    allMaps.push_back(maps.back());
    return buildGeneric(
        b, loc, operands, init, allMaps, parallel, reductions,
        [&](OpBuilder &nb, Location l, ValueRange args) {
          Value start = startBlocks ? args[inputs.size()] : Value();
          Value valid = inWindow(nb, l, shift, block, window, 1, 3, 4, start);
          return body(nb, l, valid, args.take_front(inputs.size()),
                      args.back());
        });
  }

  /// O[b,n,i,h,d] += sum_j P[b,n,h,i,j] x[b,n,j,h,d] for block pair
  /// `shift`'s P (zero outside the window, so la-tile may skip the triangle
  /// outside it). Loops (b,n,i,h,d,j).
  Value accumulateBlockProduct(int64_t shift, Value p, Value x, Value acc) {
    Value product = buildGeneric(
        b, loc, ValueRange{p, x}, acc,
        {dimMap(ctx, 6, {0, 1, 3, 2, 5}), dimMap(ctx, 6, {0, 1, 5, 3, 4}),
         dimMap(ctx, 6, {0, 1, 2, 3, 4})},
        5, 1, [](OpBuilder &nb, Location l, ValueRange args) {
          return addF(nb, l, args[2], mulF(nb, l, args[0], args[1]));
        });
    if (shift == 0 || shift == shifts)
      markTriangle(product, /*lower=*/shift == 0, 2, 5);
    return product;
  }

  /// The window's forward: scores, row maxima, weights, row sums and the
  /// weighted values.
  void buildWindow() {
    queries = blocksOf(q, 0, /*atQueries=*/true, false);
    // Keys and values with `shifts` blocks of zeros in front: the block
    // `shift` blocks before block n is block n + shifts - shift. The
    // values' non-finite elements are zeros for the products (their
    // columns are poisoned after the combination).
    keys = blocksOf(k, shifts, false, false);
    values = blocksOf(v, shifts, false, true);
    keysT = transposeBlocks(keys);
    // Unscaled scores of each block pair: S_s[b,n,h,i,j] = q_i . k_j over
    // the block s before. Loops (b,n,h,i,j,kk).
    for (int64_t shift = 0; shift <= shifts; ++shift) {
      // Each op in its own statement: the IR must not depend on the order
      // in which the host compiler evaluates arguments.
      Value keyBlock = blocksBefore(keysT, shift);
      Value zeros = zeroTensor(b, loc, scoreSizes());
      scores.push_back(buildBlockScores(b, loc, queries, keyBlock, zeros));
      // Entries outside the triangle are masked below (their zero fill).
      if (shift == 0 || shift == shifts)
        markTriangle(scores.back(), /*lower=*/shift == 0, 3, 4);
    }
    // With packed sequences the window also stops at the query's sequence
    // start: the starts in blocks, [NC,C] (B = 1), read as (b,n,h,i,j) ->
    // (n,i) by the ops over scores.
    if (offsets) {
      Value padded = tensor::InsertSliceOp::create(
          b, loc, starts, zeroTensor(b, loc, {tokensOf(0)}),
          ArrayRef<OpFoldResult>{zero}, ArrayRef<OpFoldResult>{time},
          ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
      startBlocks = tensor::ExpandShapeOp::create(
          b, loc,
          RankedTensorType::get(staticShape(SmallVector<OpFoldResult>{
                                    numBlocks, b.getIndexAttr(block)}),
                                f32),
          padded, ArrayRef<ReassociationIndices>{{0, 1}},
          ArrayRef<OpFoldResult>{numBlocks, b.getIndexAttr(block)});
    }
    // c[b,n,i,h] = max(0, the largest scaled score in the window). Loops
    // (b,n,h,i,j). The body is max(c, f(S)), a reduction the vectoriser
    // recognises; scores outside the window (NaN ones too) count as -inf.
    rowMax = zeroTensor(b, loc, rowSizes());
    for (int64_t shift = 0; shift <= shifts; ++shift)
      rowMax = overScores(
          shift, ValueRange{scores[shift]}, rowMax, {scoreMap, rowMap}, 4, 1,
          [&](OpBuilder &nb, Location l, Value valid, ValueRange in,
              Value acc) -> Value {
            Value score = mulF(nb, l, in[0], constantF32(nb, l, scale));
            Value masked = arith::SelectOp::create(
                nb, l, valid, score,
                constantF32(nb, l, -std::numeric_limits<float>::infinity()));
            return arith::MaximumFOp::create(nb, l, acc, masked);
          });
    // The weights exp(scale S - c) (zero outside the window), their row
    // sums and their products with the values.
    rowSum = zeroTensor(b, loc, rowSizes());
    weighted = zeroTensor(
        b, loc, {batch, numBlocks, b.getIndexAttr(block), heads, valueDim});
    for (int64_t shift = 0; shift <= shifts; ++shift) {
      weights.push_back(overScores(
          shift, ValueRange{scores[shift], rowMax},
          emptyTensor(b, loc, scoreSizes(), f32), {scoreMap, rowMap, scoreMap},
          5, 0,
          [&](OpBuilder &nb, Location l, Value valid, ValueRange in,
              Value) -> Value {
            Value score = mulF(nb, l, in[0], constantF32(nb, l, scale));
            Value weight = math::ExpOp::create(
                nb, l, arith::SubFOp::create(nb, l, score, in[1]));
            return arith::SelectOp::create(nb, l, valid, weight,
                                           constantF32(nb, l, 0.0f));
          }));
      rowSum = buildGeneric(b, loc, ValueRange{weights.back()}, rowSum,
                            {scoreMap, rowMap}, 4, 1,
                            [](OpBuilder &nb, Location l, ValueRange args) {
                              return addF(nb, l, args[1], args[0]);
                            });
      weighted = accumulateBlockProduct(shift, weights.back(),
                                        blocksBefore(values, shift), weighted);
    }
  }

  /// The far part and the window, in that order.
  void build() {
    buildFar();
    buildWindow();
  }

  /// The window's weighted values, weight sums and row maxima at the
  /// queries' tokens.
  std::tuple<Value, Value, Value> windowAtQueries() {
    Value out = queryTokens(joinBlocks(b, loc, weighted));
    Value sum = queryTokens(joinBlocks(b, loc, rowSum));
    Value max = queryTokens(joinBlocks(b, loc, rowMax));
    return {out, sum, max};
  }

  /// The far output's first V columns and its normaliser (column V, as
  /// [B,T,H]).
  std::pair<Value, Value> farParts() {
    Value farOut = farOp.getO();
    Value farValues = tensor::ExtractSliceOp::create(
        b, loc, farOut, SmallVector<OpFoldResult>(4, zero),
        SmallVector<OpFoldResult>{batch, queryTime, heads, valueDim}, ones);
    auto rowsType = RankedTensorType::get(
        staticShape(SmallVector<OpFoldResult>{batch, queryTime, heads}), f32);
    Value farSum = tensor::ExtractSliceOp::create(
        b, loc, rowsType, farOut,
        SmallVector<OpFoldResult>{zero, zero, zero, valueDim},
        SmallVector<OpFoldResult>{batch, queryTime, heads, b.getIndexAttr(1)},
        ones);
    return {farValues, farSum};
  }
};
} // namespace

FailureOr<SmallVector<Value>>
mlir::la::decomposeSlidingWindowHybrid(OpBuilder &b, SlidingWindowHybridOp op) {
  HybridProgram p(b, op);
  p.build();
  Location loc = p.loc;
  MLIRContext *ctx = p.ctx;
  Type f32 = p.f32;
  int64_t block = p.block, shifts = p.shifts;
  OpFoldResult batch = p.batch, heads = p.heads, valueDim = p.valueDim;
  OpFoldResult numBlocks = p.numBlocks, zero = p.zero;

  // A non-finite value makes its column NaN from its token on. Without
  // packed sequences: the first such token per (batch, head, column), per
  // block and then over blocks. With them a token's own sequence counts
  // only: the window's count of non-finite values it holds (the far part's
  // recurrence carries them on past the window, per sequence).
  Value firstBad, windowBad;
  if (!p.offsets) {
    Value rawValues = p.blocksOf(p.v, 0, /*atQueries=*/false, false);
    Value firstBadPerBlock = buildGeneric(
        b, loc, ValueRange{rawValues},
        filledTensor(b, loc, {batch, numBlocks, heads, valueDim}, f32,
                     kNoToken),
        {dimMap(ctx, 5, {0, 1, 4, 2, 3}), dimMap(ctx, 5, {0, 1, 2, 3})}, 4, 1,
        [&](OpBuilder &nb, Location l, ValueRange args) {
          Value blockIndex = linalg::IndexOp::create(nb, l, 1);
          Value size = arith::ConstantIndexOp::create(nb, l, block);
          Value blockStart = arith::MulIOp::create(nb, l, blockIndex, size);
          Value row = linalg::IndexOp::create(nb, l, 4);
          Value token = arith::AddIOp::create(nb, l, blockStart, row);
          Value asFloat = arith::UIToFPOp::create(
              nb, l, f32,
              arith::IndexCastUIOp::create(nb, l, nb.getI64Type(), token));
          // min(first, f(v)): a reduction the vectoriser recognises.
          Value finite = isFiniteF32(nb, l, args[0]);
          Value none = constantF32(nb, l, kNoToken);
          Value candidate =
              arith::SelectOp::create(nb, l, finite, none, asFloat);
          return arith::MinimumFOp::create(nb, l, args[1], candidate)
              .getResult();
        });
    firstBad = buildGeneric(
        b, loc, ValueRange{firstBadPerBlock},
        filledTensor(b, loc, {batch, heads, valueDim}, f32, kNoToken),
        {dimMap(ctx, 4, {0, 3, 1, 2}), dimMap(ctx, 4, {0, 1, 2})}, 3, 1,
        [](OpBuilder &nb, Location l, ValueRange args) {
          return arith::MinimumFOp::create(nb, l, args[1], args[0]).getResult();
        });
  } else {
    // 1 where a value is not finite, 0 elsewhere; the keys' layout.
    SmallVector<OpFoldResult> vSizes = mixedSizes(b, loc, p.v);
    Value badTokens = buildGeneric(
        b, loc, ValueRange{p.v}, emptyTensor(b, loc, vSizes, f32),
        {dimMap(ctx, 4, {0, 1, 2, 3}), dimMap(ctx, 4, {0, 1, 2, 3})}, 4, 0,
        [&](OpBuilder &nb, Location l, ValueRange args) {
          Value finite = isFiniteF32(nb, l, extendToF32(nb, l, args[0]));
          Value no = constantF32(nb, l, 0.0f);
          Value yes = constantF32(nb, l, 1.0f);
          return arith::SelectOp::create(nb, l, finite, no, yes).getResult();
        });
    Value padded =
        zeroTensor(b, loc, {batch, p.tokensOf(shifts), heads, valueDim});
    Value bad = splitBlocks(
        b, loc,
        tensor::InsertSliceOp::create(
            b, loc, badTokens, padded,
            SmallVector<OpFoldResult>{zero, p.front, zero, zero}, vSizes,
            SmallVector<OpFoldResult>(4, b.getIndexAttr(1))),
        block);
    windowBad = zeroTensor(
        b, loc, {batch, numBlocks, b.getIndexAttr(block), heads, valueDim});
    for (int64_t shift = 0; shift <= shifts; ++shift) {
      Value inside = p.overScores(
          shift, ValueRange{}, emptyTensor(b, loc, p.scoreSizes(), f32),
          {p.scoreMap}, 5, 0,
          [&](OpBuilder &nb, Location l, Value valid, ValueRange,
              Value) -> Value {
            Value yes = constantF32(nb, l, 1.0f);
            Value no = constantF32(nb, l, 0.0f);
            return arith::SelectOp::create(nb, l, valid, yes, no);
          });
      windowBad = p.accumulateBlockProduct(
          shift, inside, p.blocksBefore(bad, shift), windowBad);
    }
  }

  // Back to the queries' tokens [B,T,...] and the two parts combined.
  auto [windowOut, windowSum, shiftMax] = p.windowAtQueries();
  auto [farValues, farSum] = p.farParts();
  // The queries' first token among the keys' (L), for the poison's compare.
  Value contextF32;
  if (!p.noContext) {
    Value count = getValueOrCreateConstantIndexOp(b, loc, p.context);
    contextF32 = arith::UIToFPOp::create(
        b, loc, f32,
        arith::IndexCastUIOp::create(b, loc, b.getI64Type(), count));
  }
  Type outElement = op.getO().getType().getElementType();
  AffineMap tokenMap = dimMap(ctx, 4, {0, 1, 2, 3});
  AffineMap tokenRowMap = dimMap(ctx, 4, {0, 1, 2});
  // The poison input: the first non-finite token per (b,h,vv), or the
  // window's count of them per token.
  Value poison =
      firstBad ? firstBad : p.queryTokens(joinBlocks(b, loc, windowBad));
  AffineMap poisonMap = firstBad ? dimMap(ctx, 4, {0, 2, 3}) : tokenMap;
  Value out = buildGeneric(
      b, loc,
      ValueRange{windowOut, farValues, windowSum, farSum, shiftMax, poison},
      emptyTensor(b, loc, {batch, p.queryTime, heads, valueDim}, outElement),
      {tokenMap, tokenMap, tokenRowMap, tokenRowMap, tokenRowMap, poisonMap,
       tokenMap},
      4, 0, [&](OpBuilder &nb, Location l, ValueRange args) {
        Value damp =
            math::ExpOp::create(nb, l, arith::NegFOp::create(nb, l, args[4]));
        Value numerator = addF(nb, l, args[0], mulF(nb, l, damp, args[1]));
        Value denominator = addF(nb, l, args[2], mulF(nb, l, damp, args[3]));
        Value ratio = arith::DivFOp::create(nb, l, numerator, denominator);
        Value poisoned;
        if (firstBad) {
          // The query's token among the keys' tokens.
          Value token = indexAsF32(nb, l, 1);
          if (contextF32)
            token = addF(nb, l, token, contextF32);
          poisoned = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OGE,
                                           token, args[5]);
        } else {
          poisoned = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OGT,
                                           args[5], constantF32(nb, l, 0.0f));
        }
        Value nan = constantF32(nb, l, std::numeric_limits<float>::quiet_NaN());
        Value result = arith::SelectOp::create(nb, l, poisoned, nan, ratio);
        return castFloat(nb, l, result, outElement);
      });
  if (out.getType() != op.getO().getType())
    out = tensor::CastOp::create(b, loc, op.getO().getType(), out);
  SmallVector<Value> results = {out};
  if (Value finalState = op.getFinalState()) {
    // The recurrence's state after its last moved token: every key but the
    // last w.
    Value state = p.farOp.getFinalState();
    if (state.getType() != finalState.getType())
      state = tensor::CastOp::create(b, loc, finalState.getType(), state);
    results.push_back(state);
  }
  return results;
}

/// The source tokens' gradient of x [B,S,H,D], the gradient of tokens moved
/// `shift` later: token s's is x[s + shift] (zeros for the last `shift`
/// tokens), its first `columns` columns.
static Value unshiftTokens(OpBuilder &b, Location loc, Value x, int64_t shift,
                           OpFoldResult columns) {
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
  auto [kept, from] = movedSpan(b, loc, sizes[1], shift);
  SmallVector<OpFoldResult> ones(4, b.getIndexAttr(1));
  SmallVector<OpFoldResult> partSizes = {sizes[0], kept, sizes[2], columns};
  Value part = tensor::ExtractSliceOp::create(
      b, loc, x,
      SmallVector<OpFoldResult>{b.getIndexAttr(0), from, b.getIndexAttr(0),
                                b.getIndexAttr(0)},
      partSizes, ones);
  Value dest = zeroTensor(b, loc, {sizes[0], sizes[1], sizes[2], columns});
  return tensor::InsertSliceOp::create(
      b, loc, part, dest, SmallVector<OpFoldResult>(4, b.getIndexAttr(0)),
      partSizes, ones);
}

/// acc [B,N+shifts,C,H,D] (the padded keys' blocks) plus, on the blocks
/// `shift` before each query block, sum_i P[b,n,h,i,j] x[b,n,i,h,d]: the
/// transposed block product. Loops (b,n,j,h,d,i).
static Value accumulateTransposedProduct(HybridProgram &p, int64_t shift,
                                         Value weights, Value x, Value acc) {
  OpBuilder &b = p.b;
  MLIRContext *ctx = p.ctx;
  Value slice = p.blocksBefore(acc, shift);
  Value product = buildGeneric(
      b, p.loc, ValueRange{weights, x}, slice,
      {dimMap(ctx, 6, {0, 1, 3, 5, 2}), dimMap(ctx, 6, {0, 1, 5, 3, 4}),
       dimMap(ctx, 6, {0, 1, 2, 3, 4})},
      5, 1, [](OpBuilder &nb, Location l, ValueRange args) {
        return addF(nb, l, args[2], mulF(nb, l, args[0], args[1]));
      });
  return insertAt(b, p.loc, product, acc, 1, b.getIndexAttr(p.shifts - shift));
}

SlidingWindowHybridGradients mlir::la::buildSlidingWindowHybridGradients(
    OpBuilder &b, SlidingWindowHybridOp op, Value dO, Value dFinalState) {
  HybridProgram p(b, op);
  p.build();
  Location loc = p.loc;
  MLIRContext *ctx = p.ctx;
  Type f32 = p.f32;
  OpFoldResult batch = p.batch, heads = p.heads, valueDim = p.valueDim;
  OpFoldResult queryTime = p.queryTime;
  AffineMap tokenMap = dimMap(ctx, 4, {0, 1, 2, 3});
  AffineMap tokenRowMap = dimMap(ctx, 4, {0, 1, 2});
  AffineMap rows3 = dimMap(ctx, 3, {0, 1, 2});
  SmallVector<OpFoldResult> rowSizes = {batch, queryTime, heads};
  SmallVector<OpFoldResult> outSizes = {batch, queryTime, heads, valueDim};

  // The forward's sums at the queries: o = (Nw + e^-c Nf) / D with D = Dw +
  // e^-c Df. o does not depend on c, which is held constant.
  auto [windowOut, windowSum, shiftMax] = p.windowAtQueries();
  auto [farValues, farSum] = p.farParts();
  Value denominator = buildGeneric(
      b, loc, ValueRange{windowSum, farSum, shiftMax},
      emptyTensor(b, loc, rowSizes, f32), {rows3, rows3, rows3, rows3}, 3, 0,
      [](OpBuilder &nb, Location l, ValueRange args) {
        Value damp =
            math::ExpOp::create(nb, l, arith::NegFOp::create(nb, l, args[2]));
        return addF(nb, l, args[0], mulF(nb, l, damp, args[1]));
      });
  // dN = dO / D (the numerator's cotangent), delta = sum_V dO o / D (minus
  // the denominator's).
  Value dN = buildGeneric(
      b, loc, ValueRange{dO, denominator}, emptyTensor(b, loc, outSizes, f32),
      {tokenMap, tokenRowMap, tokenMap}, 4, 0,
      [](OpBuilder &nb, Location l, ValueRange args) {
        Value cotangent = extendToF32(nb, l, args[0]);
        return arith::DivFOp::create(nb, l, cotangent, args[1]).getResult();
      });
  Value delta = buildGeneric(
      b, loc, ValueRange{dN, windowOut, farValues, shiftMax, denominator},
      zeroTensor(b, loc, rowSizes),
      {tokenMap, tokenMap, tokenMap, tokenRowMap, tokenRowMap, tokenRowMap}, 3,
      1, [](OpBuilder &nb, Location l, ValueRange args) {
        Value damp =
            math::ExpOp::create(nb, l, arith::NegFOp::create(nb, l, args[3]));
        Value numerator = addF(nb, l, args[1], mulF(nb, l, damp, args[2]));
        Value o = arith::DivFOp::create(nb, l, numerator, args[4]);
        return addF(nb, l, args[5], mulF(nb, l, args[0], o));
      });

  // The far part's cotangent [B,T,H,V+1]: e^-c dN, and -e^-c delta in the
  // normaliser's column V; its adjoint is la.recurrence_grad.
  // x e^-c (negated with `negate`), x over [B,T,H] or [B,T,H,V].
  Value maxima = shiftMax; // (a structured binding is not captured in C++17)
  auto damped = [&](Value x, bool negate) {
    bool rows = cast<RankedTensorType>(x.getType()).getRank() == 3;
    AffineMap xMap = rows ? rows3 : tokenMap;
    return buildGeneric(
        b, loc, ValueRange{x, maxima},
        emptyTensor(b, loc, rows ? rowSizes : outSizes, f32),
        {xMap, rows ? rows3 : tokenRowMap, xMap}, rows ? 3 : 4, 0,
        [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
          Value damp =
              math::ExpOp::create(nb, l, arith::NegFOp::create(nb, l, args[1]));
          Value product = mulF(nb, l, damp, args[0]);
          return negate ? arith::NegFOp::create(nb, l, product).getResult()
                        : product;
        });
  };
  Value dFarValues = damped(dN, /*negate=*/false);
  Value dFarSum = damped(delta, /*negate=*/true);
  SmallVector<OpFoldResult> farSizes = mixedSizes(b, loc, p.far.v);
  Value farCotangent = zeroTensor(b, loc, farSizes);
  farCotangent = tensor::InsertSliceOp::create(
      b, loc, dFarValues, farCotangent, SmallVector<OpFoldResult>(4, p.zero),
      outSizes, p.ones);
  farCotangent = tensor::InsertSliceOp::create(
      b, loc, dFarSum, farCotangent,
      SmallVector<OpFoldResult>{p.zero, p.zero, p.zero, valueDim},
      SmallVector<OpFoldResult>{batch, queryTime, heads, b.getIndexAttr(1)},
      p.ones);
  auto f32Like = [&](Value x) -> Type {
    return RankedTensorType::get(cast<RankedTensorType>(x.getType()).getShape(),
                                 f32);
  };
  auto farGrad = RecurrenceGradOp::create(
      b, loc,
      TypeRange{f32Like(p.far.q), f32Like(p.far.k), f32Like(p.far.v),
                f32Like(p.far.initialState)},
      p.far.q, p.far.k, p.far.v, Value(), Value(), Value(), Value(), Value(),
      p.offsets, p.far.initialState, farCotangent, dFinalState,
      GateKindAttr::get(ctx, GateKind::None), DenseF32ArrayAttr(),
      LowRankAttr::get(ctx, LowRank::None), b.getF32FloatAttr(1.0f), UnitAttr(),
      FloatAttr(), b.getI64IntegerAttr(64));

  // The moved tokens' gradients over all S keys: with context, the early
  // ones through their contraction into the initial state.
  Value dMovedKeys = farGrad.getDk(), dMovedValues = farGrad.getDv();
  Value dInitial = farGrad.getDInitialState();
  if (!p.noContext) {
    Value earlyKeys = p.earlyTokens(p.movedKeys);
    Value earlyValues = p.earlyTokens(p.movedValues);
    // d early[b,t,h,x] = sum_y dS0[b,h,(x,y) in state order] other[b,t,h,y],
    // loops (b,t,h,x,y): the keys' with the values (x = f) and the values'
    // with the keys (x = c).
    auto throughState = [&](Value other, Value like, bool keys) {
      AffineMap stateMap =
          keys ? dimMap(ctx, 5, {0, 2, 3, 4}) : dimMap(ctx, 5, {0, 2, 4, 3});
      return buildGeneric(b, loc, ValueRange{dInitial, other},
                          zeroTensor(b, loc, mixedSizes(b, loc, like)),
                          {stateMap, dimMap(ctx, 5, {0, 1, 2, 4}),
                           dimMap(ctx, 5, {0, 1, 2, 3})},
                          4, 1, [](OpBuilder &nb, Location l, ValueRange args) {
                            Value factor = extendToF32(nb, l, args[1]);
                            return addF(nb, l, args[2],
                                        mulF(nb, l, args[0], factor));
                          });
    };
    Value dEarlyKeys = throughState(earlyValues, earlyKeys, /*keys=*/true);
    Value dEarlyValues = throughState(earlyKeys, earlyValues, /*keys=*/false);
    auto joined = [&](Value early, Value late, Value like) {
      Value all = zeroTensor(b, loc, mixedSizes(b, loc, like));
      all = insertAt(b, loc, early, all, 1, p.zero);
      return insertAt(b, loc, late, all, 1, p.context);
    };
    dMovedKeys = joined(dEarlyKeys, dMovedKeys, p.movedKeys);
    dMovedValues = joined(dEarlyValues, dMovedValues, p.movedValues);
  }
  if (p.offsets) {
    // The moved tokens from the sequence before were zeros: no gradient.
    dMovedKeys = zeroAcrossStarts(b, loc, dMovedKeys, p.starts, p.window);
    dMovedValues = zeroAcrossStarts(b, loc, dMovedValues, p.starts, p.window);
  }
  OpFoldResult featureDim = mixedSizes(b, loc, op.getFeatureK())[3];
  Value dFeatureK = unshiftTokens(b, loc, dMovedKeys, p.window, featureDim);
  Value dvFar = unshiftTokens(b, loc, dMovedValues, p.window, valueDim);

  // The window's adjoint over the block pairs: dP = dN_i . v_j, dS = scale
  // e (dP - delta_i) (zero outside the window with e), dq = dS k, dk = dS^T
  // q, dv = e^T dN.
  Value dNBlocks = p.blocksOf(dN, 0, /*atQueries=*/true, false);
  OpFoldResult paddedTokens = p.tokensOf(0);
  Value deltaPadded = tensor::InsertSliceOp::create(
      b, loc, delta, zeroTensor(b, loc, {batch, paddedTokens, heads}),
      SmallVector<OpFoldResult>{p.zero, p.context, p.zero}, rowSizes,
      SmallVector<OpFoldResult>(3, b.getIndexAttr(1)));
  Value deltaBlocks = tensor::ExpandShapeOp::create(
      b, loc,
      RankedTensorType::get(
          staticShape(SmallVector<OpFoldResult>{
              batch, p.numBlocks, b.getIndexAttr(p.block), heads}),
          f32),
      deltaPadded, ArrayRef<ReassociationIndices>{{0}, {1, 2}, {3}},
      ArrayRef<OpFoldResult>{batch, p.numBlocks, b.getIndexAttr(p.block),
                             heads});
  Value valuesT = p.transposeBlocks(p.values);
  SmallVector<OpFoldResult> keyDims = mixedSizes(b, loc, p.keys);
  SmallVector<OpFoldResult> valueDims = mixedSizes(b, loc, p.values);
  Value queryGrad = zeroTensor(b, loc, mixedSizes(b, loc, p.queries));
  Value keyGrad = zeroTensor(b, loc, keyDims);
  Value valueGrad = zeroTensor(b, loc, valueDims);
  for (int64_t shift = 0; shift <= p.shifts; ++shift) {
    Value valueBlock = p.blocksBefore(valuesT, shift);
    Value zeros = zeroTensor(b, loc, p.scoreSizes());
    Value dP = buildBlockScores(b, loc, dNBlocks, valueBlock, zeros);
    Value dS = buildGeneric(
        b, loc, ValueRange{p.weights[shift], dP, deltaBlocks},
        emptyTensor(b, loc, p.scoreSizes(), f32),
        {p.scoreMap, p.scoreMap, p.rowMap, p.scoreMap}, 5, 0,
        [&](OpBuilder &nb, Location l, ValueRange args) {
          Value centred = arith::SubFOp::create(nb, l, args[1], args[2]);
          Value scaled = mulF(nb, l, args[0], constantF32(nb, l, p.scale));
          return mulF(nb, l, scaled, centred);
        });
    queryGrad = p.accumulateBlockProduct(
        shift, dS, p.blocksBefore(p.keys, shift), queryGrad);
    keyGrad = accumulateTransposedProduct(p, shift, dS, p.queries, keyGrad);
    valueGrad = accumulateTransposedProduct(p, shift, p.weights[shift],
                                            dNBlocks, valueGrad);
  }
  // The padded keys' blocks back to the S key tokens.
  auto keyTokens = [&](Value blocks) {
    Value joined = joinBlocks(b, loc, blocks);
    SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, joined);
    sizes[1] = p.time;
    return tensor::ExtractSliceOp::create(
               b, loc, joined,
               SmallVector<OpFoldResult>{p.zero, p.front, p.zero, p.zero},
               sizes, p.ones)
        .getResult();
  };
  Value dvWindow = keyTokens(valueGrad);
  AffineMap id = tokenMap;
  Value dv = buildGeneric(
      b, loc, ValueRange{dvWindow, dvFar},
      emptyTensor(b, loc, mixedSizes(b, loc, dvWindow), f32), {id, id, id}, 4,
      0, [](OpBuilder &nb, Location l, ValueRange args) {
        return addF(nb, l, args[0], args[1]);
      });
  SlidingWindowHybridGradients grads;
  grads.dq = p.queryTokens(joinBlocks(b, loc, queryGrad));
  grads.dk = keyTokens(keyGrad);
  grads.dv = dv;
  grads.dFeatureQ = farGrad.getDq();
  grads.dFeatureK = dFeatureK;
  if (op.getInitialState())
    grads.dInitialState = dInitial;
  return grads;
}

namespace {
struct SlidingWindowHybridDecomposition
    : linalg::AggregatedOpInterface::ExternalModel<
          SlidingWindowHybridDecomposition, SlidingWindowHybridOp> {
  FailureOr<SmallVector<Value>> decomposeOperation(Operation *op,
                                                   OpBuilder &b) const {
    return decomposeSlidingWindowHybrid(b, cast<SlidingWindowHybridOp>(op));
  }
};

struct DecomposeSlidingWindowHybrid : OpRewritePattern<SlidingWindowHybridOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(SlidingWindowHybridOp op,
                                PatternRewriter &rewriter) const override {
    FailureOr<SmallVector<Value>> values =
        decomposeSlidingWindowHybrid(rewriter, op);
    if (failed(values))
      return failure();
    rewriter.replaceOp(op, *values);
    return success();
  }
};
} // namespace

void mlir::la::registerSlidingWindowHybridDecomposition(
    DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, LaDialect *) {
    SlidingWindowHybridOp::attachInterface<SlidingWindowHybridDecomposition>(
        *ctx);
  });
}

void mlir::la::populateDecomposeSlidingWindowHybridPatterns(
    RewritePatternSet &patterns) {
  patterns.add<DecomposeSlidingWindowHybrid>(patterns.getContext());
}
