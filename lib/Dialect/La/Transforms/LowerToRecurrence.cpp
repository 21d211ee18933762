//===- LowerToRecurrence.cpp - la.attention to la.recurrence --------------===//
//
// Every level-0 variant becomes the canonical level-1 recurrence: the named
// variant turns into a gate kind plus a low-rank structure, defaults become
// explicit, and in-kernel L2 normalisation becomes linalg ops on tensors.
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
namespace {
/// The operands of the canonical recurrence of an la.attention (or of its
/// gradient, which has the same operands). With gates, beta or erase per
/// value head (`group` > 1 value heads per key head), q and k (and every
/// per-key-head gate operand) are repeated to one head per value head, and
/// the recurrence runs with H = HV.
struct CanonicalOperands {
  Value q, k, values, g, beta, erase, a, b;
  GateKind gate;
  DenseF32ArrayAttr logDecay;
  LowRank lowRank;
  int64_t group = 1;
  // The erase gate on the key the state is read with (erase_read_key).
  bool eraseReadKey = false;
};
} // namespace

static EraseWriteParts buildEraseWrite(OpBuilder &b, Location loc,
                                       const CanonicalOperands &c, Value write,
                                       Value v) {
  Value k = c.k;
  MLIRContext *ctx = b.getContext();
  Type f32 = b.getF32Type();
  SmallVector<OpFoldResult> keySizes = mixedSizes(b, loc, k);
  AffineMap id = b.getMultiDimIdentityMap(4);

  // alpha: exp(g) per channel, per head, per fixed head decay, or 1.
  SmallVector<Value> inputs = {k};
  SmallVector<AffineMap> maps = {id};
  switch (c.gate) {
  case GateKind::None:
    break;
  case GateKind::Fixed: {
    ArrayRef<float> decay = c.logDecay.asArrayRef();
    auto type =
        RankedTensorType::get({static_cast<int64_t>(decay.size())}, f32);
    inputs.push_back(
        arith::ConstantOp::create(b, loc, DenseElementsAttr::get(type, decay)));
    maps.push_back(dimMap(ctx, 4, {2}));
    break;
  }
  case GateKind::Scalar:
    inputs.push_back(c.g);
    maps.push_back(dimMap(ctx, 4, {0, 1, 2}));
    break;
  case GateKind::Channel:
    inputs.push_back(c.g);
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
  if (!c.eraseReadKey) {
    // (I - (e * k) k^T) Diag(alpha) = Diag(alpha) - (e * k) (alpha * k)^T.
    Value erase = product(c.erase, k, keySizes);
    Value values = product(write, v, mixedSizes(b, loc, v));
    return {a, erase, values};
  }
  // (I - k (e * k)^T) Diag(alpha) = Diag(alpha) - k (alpha * e * k)^T.
  Value readKey = product(c.erase, a, keySizes);
  Value writeKey = buildGeneric(
      b, loc, ValueRange{k}, emptyTensor(b, loc, keySizes, f32), {id, id}, 4, 0,
      [](OpBuilder &nb, Location l, ValueRange args) {
        return extendToF32(nb, l, args[0]);
      });
  Value values = product(write, v, mixedSizes(b, loc, v));
  return {readKey, writeKey, values};
}

/// `x` in f32: itself, or an element-wise extension.
static Value tensorToF32(OpBuilder &b, Location loc, Value x) {
  auto type = cast<RankedTensorType>(x.getType());
  if (type.getElementType().isF32())
    return x;
  AffineMap id = b.getMultiDimIdentityMap(type.getRank());
  return buildGeneric(
      b, loc, ValueRange{x},
      emptyTensor(b, loc, mixedSizes(b, loc, x), b.getF32Type()), {id, id},
      type.getRank(), 0, [](OpBuilder &nb, Location l, ValueRange args) {
        return extendToF32(nb, l, args[0]);
      });
}

/// Value heads per key head when any of g, beta and erase is given per
/// value head (static shapes), else 1.
template <typename OpT> static int64_t perValueHeadGroup(OpT op) {
  int64_t heads = op.getQ().getType().getDimSize(2);
  int64_t valueHeads = op.getV().getType().getDimSize(2);
  if (ShapedType::isDynamic(heads) || ShapedType::isDynamic(valueHeads) ||
      heads == valueHeads)
    return 1;
  for (Value x : {Value(op.getG()), Value(op.getBeta()), Value(op.getErase())})
    if (x && cast<RankedTensorType>(x.getType()).getDimSize(2) == valueHeads)
      return valueHeads / heads;
  return 1;
}

/// `x` with one head per value head: repeated unless it has them already.
static Value toValueHeads(OpBuilder &b, Location loc, Value x, int64_t group,
                          int64_t valueHeads) {
  if (!x || group == 1 ||
      cast<RankedTensorType>(x.getType()).getDimSize(2) == valueHeads)
    return x;
  return repeatHeads(b, loc, x, 2, group);
}

/// The gradient of an operand that `toValueHeads` repeated: summed back over
/// each key head's value heads.
static Value fromValueHeads(OpBuilder &b, Location loc, Value gradient,
                            Value input, int64_t group) {
  if (!gradient || group == 1 ||
      cast<RankedTensorType>(input.getType()).getDimSize(2) ==
          cast<RankedTensorType>(gradient.getType()).getDimSize(2))
    return gradient;
  return sumGroups(b, loc, gradient, 2, mixedSizes(b, loc, input)[2], group);
}

template <typename OpT>
static CanonicalOperands buildCanonicalOperands(OpBuilder &b, Location loc,
                                                OpT op, double l2normEps) {
  CanonicalOperands c;
  c.q = op.getQ();
  c.k = op.getK();
  if (op.getQkL2norm()) {
    c.q = buildL2Normalize(b, loc, c.q, l2normEps);
    c.k = buildL2Normalize(b, loc, c.k, l2normEps);
  }
  c.gate = op.getGate();
  c.logDecay = op.getLogDecayAttr();
  c.g = op.getG();
  c.beta = op.getBeta();
  c.erase = op.getErase();
  if (op.getUpdate() == UpdateRule::Dplr) {
    c.a = tensorToF32(b, loc, op.getA());
    c.b = tensorToF32(b, loc, op.getB());
  }
  c.group = perValueHeadGroup(op);
  c.eraseReadKey = op.getEraseReadKey();
  if (c.group > 1) {
    int64_t valueHeads = op.getV().getType().getDimSize(2);
    c.q = toValueHeads(b, loc, c.q, c.group, valueHeads);
    c.k = toValueHeads(b, loc, c.k, c.group, valueHeads);
    c.g = toValueHeads(b, loc, c.g, c.group, valueHeads);
    c.beta = toValueHeads(b, loc, c.beta, c.group, valueHeads);
    c.erase = toValueHeads(b, loc, c.erase, c.group, valueHeads);
    c.a = toValueHeads(b, loc, c.a, c.group, valueHeads);
    c.b = toValueHeads(b, loc, c.b, c.group, valueHeads);
    if (c.logDecay) {
      SmallVector<float> repeated;
      for (float decay : c.logDecay.asArrayRef())
        repeated.append(c.group, decay);
      c.logDecay = b.getDenseF32ArrayAttr(repeated);
    }
  }
  c.lowRank =
      op.getUpdate() == UpdateRule::Delta ? LowRank::Delta : LowRank::None;
  // The dplr rule's a and b are the level-1 op's (the state read with a
  // before the decay, as la.recurrence reads it).
  if (op.getUpdate() == UpdateRule::Dplr)
    c.lowRank = LowRank::General;
  if (op.getAllowNegEigval())
    c.beta = buildDoubled(b, loc, c.beta);
  c.values = op.getV();
  if (op.getUpdate() == UpdateRule::EraseWrite) {
    EraseWriteParts parts =
        buildEraseWrite(b, loc, c, op.getWrite(), op.getV());
    c.lowRank = LowRank::General;
    c.a = parts.a;
    c.b = parts.b;
    c.values = parts.values;
  }
  return c;
}

/// Query heads per key head (ONNX's grouped query heads: q has G times the
/// heads of k, and k, v, the gates and the state are per key head), or 1.
template <typename OpT> static int64_t queryGroup(OpT op) {
  int64_t queryHeads = op.getQ().getType().getDimSize(2);
  int64_t heads = op.getK().getType().getDimSize(2);
  if (ShapedType::isDynamic(queryHeads) || ShapedType::isDynamic(heads) ||
      heads == 0 || queryHeads == heads)
    return 1;
  return queryHeads / heads;
}

/// The op of `op` (a clone) with k, v, the gates, beta, erase, write, the
/// initial state and `log_decay` repeated per query head, so that every
/// head of q reads a state of its own. The G states of a group are
/// computed alike from the same inputs: G times the state work of one
/// (a recurrence whose queries share a state would not repeat it).
template <typename OpT>
static OpT repeatPerQueryHead(PatternRewriter &rewriter, OpT op,
                              int64_t group) {
  Location loc = op.getLoc();
  auto repeat = [&](Value x, unsigned dim) {
    return x ? repeatHeads(rewriter, loc, x, dim, group) : x;
  };
  Value k = repeat(op.getK(), 2), v = repeat(op.getV(), 2);
  Value g = repeat(op.getG(), 2), beta = repeat(op.getBeta(), 2);
  Value gv = repeat(op.getGv(), 2);
  Value erase = repeat(op.getErase(), 2), write = repeat(op.getWrite(), 2);
  Value lowRankA = repeat(op.getA(), 2), lowRankB = repeat(op.getB(), 2);
  Value state = repeat(op.getInitialState(), 1);
  auto repeated = cast<OpT>(rewriter.clone(*op));
  repeated.getKMutable().assign(k);
  repeated.getVMutable().assign(v);
  if (g)
    repeated.getGMutable().assign(g);
  if (gv)
    repeated.getGvMutable().assign(gv);
  if (beta)
    repeated.getBetaMutable().assign(beta);
  if (erase)
    repeated.getEraseMutable().assign(erase);
  if (write)
    repeated.getWriteMutable().assign(write);
  if (lowRankA)
    repeated.getAMutable().assign(lowRankA);
  if (lowRankB)
    repeated.getBMutable().assign(lowRankB);
  if (state)
    repeated.getInitialStateMutable().assign(state);
  if (DenseF32ArrayAttr logDecay = op.getLogDecayAttr()) {
    SmallVector<float> values;
    for (float decay : logDecay.asArrayRef())
      values.append(group, decay);
    repeated.setLogDecayAttr(rewriter.getDenseF32ArrayAttr(values));
  }
  return repeated;
}

/// [N,H*G,K,V] -> [N,H,K,V]: the first state of each group of G.
static Value firstOfGroups(OpBuilder &b, Location loc, Value states,
                           int64_t group) {
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, states);
  sizes[1] = affine::makeComposedFoldedAffineApply(
      b, loc, b.getAffineSymbolExpr(0).floorDiv(group), {sizes[1]});
  SmallVector<OpFoldResult> offsets(4, b.getIndexAttr(0));
  SmallVector<OpFoldResult> strides(4, b.getIndexAttr(1));
  strides[1] = b.getIndexAttr(group);
  return tensor::ExtractSliceOp::create(b, loc, states, offsets, sizes,
                                        strides);
}

namespace {
/// Grouped query heads become one query head per state (see
/// repeatPerQueryHead): the final state is the first of each group. Only
/// with expand-query-groups: la.recurrence takes them as they are.
struct ExpandQueryGroups : OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    int64_t group = queryGroup(op);
    if (group == 1)
      return rewriter.notifyMatchFailure(op, "no grouped query heads");
    Location loc = op.getLoc();
    AttentionOp repeated = repeatPerQueryHead(rewriter, op, group);
    SmallVector<Value> results = {repeated.getO()};
    if (Value finalState = repeated.getFinalState()) {
      SmallVector<int64_t> shape(op.getFinalState().getType().getShape());
      shape[1] = op.getQ().getType().getDimSize(2);
      finalState.setType(RankedTensorType::get(shape, rewriter.getF32Type()));
      results.push_back(firstOfGroups(rewriter, loc, finalState, group));
    }
    replaceWithCasts(rewriter, op, results);
    return success();
  }
};

/// The gradient of grouped query heads: the gradient of the repeated op,
/// d_final_state given to the first state of each group (the others are
/// not read), and the repeated inputs' gradients summed over each group.
struct ExpandQueryGroupsGrad : OpRewritePattern<AttentionGradOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AttentionGradOp op,
                                PatternRewriter &rewriter) const override {
    int64_t group = queryGroup(op);
    if (group == 1)
      return rewriter.notifyMatchFailure(op, "no grouped query heads");
    Location loc = op.getLoc();
    // Built before the repeated op (a clone placed here) that uses it.
    Value scattered;
    if (Value dFinal = op.getDFinalState()) {
      SmallVector<OpFoldResult> sizes = mixedSizes(rewriter, loc, dFinal);
      SmallVector<OpFoldResult> wide = sizes;
      wide[1] = mixedSizes(rewriter, loc, op.getQ())[2];
      // One op per statement: argument order is unspecified in C++, and
      // the IR must not depend on the compiler.
      Value zero = constantF32(rewriter, loc, 0.0f);
      Value empty = emptyTensor(rewriter, loc, wide, rewriter.getF32Type());
      Value zeros = linalg::FillOp::create(rewriter, loc, ValueRange{zero},
                                           ValueRange{empty})
                        .getResult(0);
      SmallVector<OpFoldResult> offsets(4, rewriter.getIndexAttr(0));
      SmallVector<OpFoldResult> strides(4, rewriter.getIndexAttr(1));
      strides[1] = rewriter.getIndexAttr(group);
      scattered = tensor::InsertSliceOp::create(rewriter, loc, dFinal, zeros,
                                                offsets, sizes, strides);
    }
    AttentionGradOp repeated = repeatPerQueryHead(rewriter, op, group);
    if (scattered)
      repeated.getDFinalStateMutable().assign(scattered);
    // The repeated inputs' gradients: [.., H*G, ..] results, summed back.
    SmallVector<Value> results = {repeated.getDq()};
    Value inputs[] = {op.getK(),           op.getV(),    op.getG(),
                      op.getGv(),          op.getBeta(), op.getErase(),
                      op.getWrite(),       op.getA(),    op.getB(),
                      op.getInitialState()};
    Value gradients[] = {repeated.getDk(),     repeated.getDv(),
                         repeated.getDg(),     repeated.getDgv(),
                         repeated.getDbeta(),  repeated.getDerase(),
                         repeated.getDwrite(), repeated.getDa(),
                         repeated.getDb(),     repeated.getDInitialState()};
    for (auto [index, pair] : llvm::enumerate(llvm::zip(inputs, gradients))) {
      auto [input, gradient] = pair;
      if (!input)
        continue;
      unsigned headDim = index == 9 ? 1 : 2;
      auto inputType = cast<RankedTensorType>(input.getType());
      SmallVector<int64_t> shape(inputType.getShape());
      if (!ShapedType::isDynamic(shape[headDim]))
        shape[headDim] *= group;
      gradient.setType(RankedTensorType::get(shape, rewriter.getF32Type()));
      results.push_back(sumGroups(rewriter, loc, gradient, headDim,
                                  mixedSizes(rewriter, loc, input)[headDim],
                                  group));
    }
    replaceWithCasts(rewriter, op, results);
    return success();
  }
};

/// Inserts `part` into `whole` at `offset` of dim `dim`, `size` entries:
/// the sizes of the slice that `part` was computed in (sliceDim of `whole`),
/// not `part`'s own tensor.dim, so that bufferization sees the insertion
/// write back where the slice was read and keeps it in place.
static Value insertSized(OpBuilder &b, Location loc, Value part, Value whole,
                         unsigned dim, OpFoldResult offset, OpFoldResult size) {
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, whole);
  sizes[dim] = size;
  SmallVector<OpFoldResult> offsets(sizes.size(), b.getIndexAttr(0));
  offsets[dim] = offset;
  SmallVector<OpFoldResult> strides(sizes.size(), b.getIndexAttr(1));
  return tensor::InsertSliceOp::create(b, loc, part, whole, offsets, sizes,
                                       strides);
}

/// Slices `parts`' token operands (q, k, v and the per-token gates, beta,
/// a, b: [B,T,...]) to `size` tokens from `start`.
static void sliceTokens(OpBuilder &b, Location loc, RecurrenceParts &parts,
                        OpFoldResult start, OpFoldResult size) {
  for (Value *x : {&parts.q, &parts.k, &parts.v, &parts.g, &parts.gv,
                   &parts.beta, &parts.a, &parts.b})
    if (*x)
      *x = sliceDim(b, loc, *x, 1, start, size);
}

/// `parts`' recurrence (one segment of tokens per batch, no cu_seqlens) with
/// the state after every `every` tokens: a loop over the T/every whole
/// segments, each an la.recurrence over its tokens from the state the
/// segment before ended with, whose final state is checkpoint j, then one
/// over the rest of the tokens (none when a static T leaves none). Checkpoint j
/// goes to row `firstRow + j` of `checkpoints` ([B,rows,HV,K,V]); with
/// `rowLimit`, rows at or past it are not written. Returns o, the final state
/// and the checkpoints.
static SmallVector<Value> buildSegments(OpBuilder &b, Location loc,
                                        RecurrenceParts parts, int64_t every,
                                        Value checkpoints, Value firstRow,
                                        Value rowLimit) {
  AffineExpr time = b.getAffineSymbolExpr(0);
  OpFoldResult tokens = tensor::getMixedSize(b, loc, parts.q, 1);
  OpFoldResult whole = affine::makeComposedFoldedAffineApply(
      b, loc, time.floorDiv(every), {tokens});
  OpFoldResult rest =
      affine::makeComposedFoldedAffineApply(b, loc, time % every, {tokens});

  // The recurrence over `size` tokens from `start`, from `state`; o is
  // written into `o` at those tokens.
  auto segment = [&](OpBuilder &nb, Location l, OpFoldResult start,
                     OpFoldResult size, Value o, Value state) {
    RecurrenceParts part = parts;
    sliceTokens(nb, l, part, start, size);
    part.oInit = sliceDim(nb, l, o, 1, start, size);
    part.initialState = state;
    RecurrenceOp recurrence = part.build(nb, l);
    return std::make_pair(
        insertSized(nb, l, recurrence.getO(), o, 1, start, size),
        recurrence.getFinalState());
  };

  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value count = getValueOrCreateConstantIndexOp(b, loc, whole);
  auto loop = scf::ForOp::create(
      b, loc, zero, count, one,
      ValueRange{parts.oInit, parts.initialState, checkpoints},
      [&](OpBuilder &nb, Location l, Value j, ValueRange iterArgs) {
        OpFoldResult start = affine::makeComposedFoldedAffineApply(
            nb, l, nb.getAffineDimExpr(0) * every, {OpFoldResult(j)});
        // (No structured binding: a lambda below captures the state.)
        std::pair<Value, Value> segmentResults = segment(
            nb, l, start, nb.getIndexAttr(every), iterArgs[0], iterArgs[1]);
        Value o = segmentResults.first, state = segmentResults.second;
        Value row = arith::AddIOp::create(nb, l, firstRow, j);
        Value saved;
        if (!rowLimit) {
          saved = insertAt(nb, l, state, iterArgs[2], 1, row);
        } else {
          // Rows past the checkpoints' end are not written (their count
          // is the result's size, which the caller chose).
          Value inside = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt,
                                               row, rowLimit);
          saved =
              scf::IfOp::create(
                  nb, l, inside,
                  [&](OpBuilder &ib, Location il) {
                    scf::YieldOp::create(
                        ib, il, insertAt(ib, il, state, iterArgs[2], 1, row));
                  },
                  [&](OpBuilder &ib, Location il) {
                    scf::YieldOp::create(ib, il, iterArgs[2]);
                  })
                  .getResult(0);
        }
        scf::YieldOp::create(nb, l, ValueRange{o, state, saved});
      });
  Value o = loop.getResult(0), state = loop.getResult(1);
  std::optional<int64_t> staticRest = getConstantIntValue(rest);
  if (staticRest && *staticRest == 0)
    return {o, state, loop.getResult(2)};
  // The rest, also when it may be empty at run time (an empty recurrence
  // passes its state through; an scf.if around it would make bufferization
  // copy the carried o).
  OpFoldResult start = affine::makeComposedFoldedAffineApply(
      b, loc, time - time % every, {tokens});
  auto [oOut, stateOut] = segment(b, loc, start, rest, o, state);
  return {oOut, stateOut, loop.getResult(2)};
}

/// Offset `i` of `cuSeqlens` as an index.
static Value offsetAt(OpBuilder &b, Location loc, Value cuSeqlens, Value i) {
  Value offset = tensor::ExtractOp::create(b, loc, cuSeqlens, i);
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), offset);
}

/// `parts`' recurrence with the state after every `every` tokens of each
/// sequence, the checkpoints of type `checkpointsType`: [B,T/every,HV,K,V],
/// or with packed sequences [1,C,HV,K,V], sequence i's checkpoints after
/// those of the sequences before it (C = sum_i len_i / every when the type
/// does not fix it). Returns o, the final state and the checkpoints.
static SmallVector<Value>
buildCheckpointedRecurrence(OpBuilder &b, Location loc, RecurrenceParts parts,
                            int64_t every, Type checkpointsType) {
  auto type = cast<RankedTensorType>(checkpointsType);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, parts.initialState);
  Value cuSeqlens = parts.cuSeqlens;
  if (!cuSeqlens) {
    sizes.insert(sizes.begin() + 1,
                 affine::makeComposedFoldedAffineApply(
                     b, loc, b.getAffineSymbolExpr(0).floorDiv(every),
                     {tensor::getMixedSize(b, loc, parts.q, 1)}));
    Value checkpoints = emptyTensor(b, loc, sizes, b.getF32Type());
    if (checkpoints.getType() != type)
      checkpoints = tensor::CastOp::create(b, loc, type, checkpoints);
    return buildSegments(b, loc, parts, every, checkpoints, zero, Value());
  }

  // Packed sequences: one sequence after the other, each its segments.
  Value sequences = arith::SubIOp::create(
      b, loc, tensor::DimOp::create(b, loc, cuSeqlens, 0), one);
  Value rows;
  if (!type.isDynamicDim(1)) {
    rows = arith::ConstantIndexOp::create(b, loc, type.getDimSize(1));
  } else {
    Value step = arith::ConstantIndexOp::create(b, loc, every);
    rows = scf::ForOp::create(
               b, loc, zero, sequences, one, ValueRange{zero},
               [&](OpBuilder &nb, Location l, Value i, ValueRange sum) {
                 Value next = arith::AddIOp::create(nb, l, i, one);
                 Value length = arith::SubIOp::create(
                     nb, l, offsetAt(nb, l, cuSeqlens, next),
                     offsetAt(nb, l, cuSeqlens, i));
                 Value whole = arith::DivUIOp::create(nb, l, length, step);
                 scf::YieldOp::create(
                     nb, l,
                     ValueRange{arith::AddIOp::create(nb, l, sum[0], whole)});
               })
               .getResult(0);
  }
  sizes[0] = b.getIndexAttr(1);
  sizes.insert(sizes.begin() + 1, rows);
  Value checkpoints = emptyTensor(b, loc, sizes, b.getF32Type());
  if (checkpoints.getType() != type)
    checkpoints = tensor::CastOp::create(b, loc, type, checkpoints);
  // The final states go into a tensor of their own: the loop writes its
  // carried tensors in place, and the initial states may be the caller's
  // (function arguments bufferize as writable buffers).
  Value finalStates = emptyTensor(
      b, loc, mixedSizes(b, loc, parts.initialState), b.getF32Type());
  if (finalStates.getType() != parts.initialState.getType())
    finalStates = tensor::CastOp::create(b, loc, parts.initialState.getType(),
                                         finalStates);
  auto loop = scf::ForOp::create(
      b, loc, zero, sequences, one,
      ValueRange{parts.oInit, finalStates, checkpoints, zero},
      [&](OpBuilder &nb, Location l, Value i, ValueRange iterArgs) {
        Value start = offsetAt(nb, l, cuSeqlens, i);
        Value end =
            offsetAt(nb, l, cuSeqlens, arith::AddIOp::create(nb, l, i, one));
        Value length = arith::SubIOp::create(nb, l, end, start);
        RecurrenceParts sequence = parts;
        sequence.cuSeqlens = Value();
        sliceTokens(nb, l, sequence, start, length);
        sequence.oInit = sliceDim(nb, l, iterArgs[0], 1, start, length);
        sequence.initialState =
            sliceDim(nb, l, parts.initialState, 0, i, nb.getIndexAttr(1));
        Value firstRow = iterArgs[3];
        // Rows counted here are exactly the sequences'; a size the type
        // fixes may be smaller than that (the caller's error: then the last
        // ones are dropped rather than written past the end).
        SmallVector<Value> results =
            buildSegments(nb, l, sequence, every, iterArgs[2], firstRow,
                          type.isDynamicDim(1) ? Value() : rows);
        Value o = insertSized(nb, l, results[0], iterArgs[0], 1, start, length);
        Value states = insertAt(nb, l, results[1], iterArgs[1], 0, i);
        Value whole = arith::DivUIOp::create(
            nb, l, length, arith::ConstantIndexOp::create(nb, l, every));
        Value nextRow = arith::AddIOp::create(nb, l, firstRow, whole);
        scf::YieldOp::create(nb, l, ValueRange{o, states, results[2], nextRow});
      });
  return {loop.getResult(0), loop.getResult(1), loop.getResult(2)};
}

struct AttentionToRecurrence : OpRewritePattern<AttentionOp> {
  AttentionToRecurrence(MLIRContext *ctx, double l2normEps,
                        bool expandQueryGroups)
      : OpRewritePattern(ctx), l2normEps(l2normEps),
        expandQueryGroups(expandQueryGroups) {}

  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    if (queryGroup(op) > 1 && expandQueryGroups)
      return rewriter.notifyMatchFailure(op, "expand the query groups first");
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    CanonicalOperands c = buildCanonicalOperands(rewriter, loc, op, l2normEps);
    Value q = c.q, k = c.k, values = c.values, beta = c.beta, a = c.a, b = c.b;
    LowRank lowRank = c.lowRank;
    FloatAttr eps;
    if (op.getNormalizer())
      eps = rewriter.getF32FloatAttr(op.getEffectiveEps());
    // One output per query head: HV of them, or HQ with grouped query
    // heads (which la.recurrence reads from the states of their group).
    SmallVector<OpFoldResult> outputSizes = mixedSizes(rewriter, loc, values);
    outputSizes[2] = tensor::getMixedSize(rewriter, loc, op.getO(), 2);
    Value oInit = emptyTensor(rewriter, loc, outputSizes,
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
        rewriter, loc, oInit.getType(), state.getType(),
        /*transposed_o=*/Type(), q, k, values, c.g, op.getGv(), beta, a, b,
        op.getCuSeqlens(), op.getStateIndices(), /*transposed_query=*/Value(),
        ValueRange{oInit, state}, op.getGateAttr(), c.logDecay,
        LowRankAttr::get(ctx, lowRank),
        rewriter.getF32FloatAttr(op.getEffectiveScale()),
        op.getNormalizerAttr(), eps, op.getReverseAttr());
    if (std::optional<int64_t> every = op.getCheckpointEvery()) {
      // The whole-sequence op is the template of the segments' ops.
      SmallVector<Value> results = buildCheckpointedRecurrence(
          rewriter, loc, RecurrenceParts::of(recurrence), *every,
          op.getCheckpoints().getType());
      rewriter.eraseOp(recurrence);
      if (!op.getFinalState())
        results.erase(results.begin() + 1);
      replaceWithCasts(rewriter, op, results);
      return success();
    }
    SmallVector<Value> results = {recurrence.getO()};
    if (op.getFinalState())
      results.push_back(recurrence.getFinalState());
    replaceWithCasts(rewriter, op, results);
    return success();
  }

  double l2normEps;
  bool expandQueryGroups;
};

} // namespace

/// The f32 log-gate of key channel `kk` for `buildGeneric` bodies over
/// (b,t,h,kk): the input and map that read it, or none for an ungated or
/// fixed-gate op (a fixed gate gets no gradient, but alpha is still needed).
static void addGateInput(OpBuilder &b, Location loc, const CanonicalOperands &c,
                         SmallVectorImpl<Value> &inputs,
                         SmallVectorImpl<AffineMap> &maps) {
  MLIRContext *ctx = b.getContext();
  switch (c.gate) {
  case GateKind::None:
    return;
  case GateKind::Fixed: {
    ArrayRef<float> decay = c.logDecay.asArrayRef();
    auto type = RankedTensorType::get({static_cast<int64_t>(decay.size())},
                                      b.getF32Type());
    inputs.push_back(
        arith::ConstantOp::create(b, loc, DenseElementsAttr::get(type, decay)));
    maps.push_back(dimMap(ctx, 4, {2}));
    return;
  }
  case GateKind::Scalar:
    inputs.push_back(c.g);
    maps.push_back(dimMap(ctx, 4, {0, 1, 2}));
    return;
  case GateKind::Channel:
    inputs.push_back(c.g);
    maps.push_back(b.getMultiDimIdentityMap(4));
    return;
  }
}

/// The adjoint of buildL2Normalize: for `y = x r` with
/// `r = (sum_K x^2 + eps)^-1/2`, `dx = r dy - x r^3 sum_K(x dy)`, in f32.
static Value buildL2NormalizeGrad(OpBuilder &b, Location loc, Value x, Value dy,
                                  double eps) {
  MLIRContext *ctx = b.getContext();
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
  SmallVector<OpFoldResult> rowSizes(sizes.begin(), sizes.end() - 1);
  AffineMap id = b.getMultiDimIdentityMap(4);
  AffineMap row = dimMap(ctx, 4, {0, 1, 2});
  Value sumOfSquares = buildGeneric(
      b, loc, ValueRange{x}, zeroTensor(b, loc, rowSizes), {id, row}, 3, 1,
      [](OpBuilder &nb, Location l, ValueRange args) {
        Value elem = extendToF32(nb, l, args[0]);
        return addF(nb, l, args[1], mulF(nb, l, elem, elem));
      });
  Value dot = buildGeneric(
      b, loc, ValueRange{x, dy}, zeroTensor(b, loc, rowSizes), {id, id, row}, 3,
      1, [](OpBuilder &nb, Location l, ValueRange args) {
        return addF(nb, l, args[2], mulExtended(nb, l, args[0], args[1]));
      });
  Value epsValue = constantF32(b, loc, static_cast<float>(eps));
  return buildGeneric(
      b, loc, ValueRange{x, dy, sumOfSquares, dot},
      emptyTensor(b, loc, sizes, b.getF32Type()), {id, id, row, row, id}, 4, 0,
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Value elem = extendToF32(nb, l, args[0]);
        Value r = math::RsqrtOp::create(nb, l, addF(nb, l, args[2], epsValue));
        Value r3dot = mulF(nb, l, mulF(nb, l, mulF(nb, l, r, r), r), args[3]);
        Value direct = mulF(nb, l, r, extendToF32(nb, l, args[1]));
        return arith::SubFOp::create(nb, l, direct, mulF(nb, l, elem, r3dot))
            .getResult();
      });
}

namespace {
/// la.attention_grad -> the level-1 la.recurrence_grad of the same canonical
/// recurrence as la.attention's lowering, with the adjoints of the level-0
/// maps (L2 norm, doubled beta, the erase_write form, the dplr rule's
/// per-value-head repeats) around it.
struct AttentionGradToRecurrenceGrad : OpRewritePattern<AttentionGradOp> {
  AttentionGradToRecurrenceGrad(MLIRContext *ctx, double l2normEps)
      : OpRewritePattern(ctx), l2normEps(l2normEps) {}

  LogicalResult matchAndRewrite(AttentionGradOp op,
                                PatternRewriter &rewriter) const override {
    if (queryGroup(op) > 1)
      return rewriter.notifyMatchFailure(op, "expand the query groups first");
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    Type f32 = rewriter.getF32Type();
    CanonicalOperands c = buildCanonicalOperands(rewriter, loc, op, l2normEps);
    Value state = op.getInitialState();
    if (!state)
      state = zeroState(rewriter, loc, c.q, c.values, op.getCuSeqlens());

    auto f32Like = [&](Value x) -> Type {
      return RankedTensorType::get(
          cast<RankedTensorType>(x.getType()).getShape(), f32);
    };
    SmallVector<Type> resultTypes = {f32Like(c.q), f32Like(c.k),
                                     f32Like(c.values), f32Like(state)};
    for (Value input : {c.g, Value(op.getGv()), c.beta, c.a, c.b})
      if (input)
        resultTypes.push_back(f32Like(input));
    FloatAttr eps;
    if (op.getNormalizer())
      eps = rewriter.getF32FloatAttr(op.getEffectiveEps());
    // `reverse`: the gradient of the forward recurrence on the flipped
    // tokens (packed sequences in reverse order, their states flipped along
    // N), flipped back; as la-derive-backward does for la.recurrence.
    ReverseFlips flips(rewriter, loc, op.getReverse(), op.getCuSeqlens(), c.q);
    // One op per statement: the IR must not depend on the host compiler's
    // argument order.
    Value q = flips.tokens(c.q), k = flips.tokens(c.k);
    Value values = flips.tokens(c.values), g = flips.tokens(c.g);
    Value gv = flips.tokens(op.getGv()), beta = flips.tokens(c.beta);
    Value lowA = flips.tokens(c.a), lowB = flips.tokens(c.b);
    Value initial = flips.sequences(state);
    Value dO = flips.tokens(op.getDO());
    Value dFinal = flips.sequences(op.getDFinalState());
    auto grad = RecurrenceGradOp::create(
        rewriter, loc, resultTypes, q, k, values, g, gv, beta, lowA, lowB,
        flips.offsets(), initial, dO, dFinal, op.getGateAttr(), c.logDecay,
        LowRankAttr::get(ctx, c.lowRank),
        rewriter.getF32FloatAttr(op.getEffectiveScale()),
        op.getNormalizerAttr(), eps, op.getCheckpointAttr());
    Value gradDa = flips.tokens(grad.getDa());
    Value gradDb = flips.tokens(grad.getDb());
    Value dInitialState = flips.sequences(grad.getDInitialState());

    Value dq = flips.tokens(grad.getDq()), dk = flips.tokens(grad.getDk());
    Value dv = flips.tokens(grad.getDv()), dg = flips.tokens(grad.getDg());
    Value dgv = flips.tokens(grad.getDgv());
    Value dbeta = flips.tokens(grad.getDbeta());
    Value derase, dwrite, da, db;
    if (op.getUpdate() == UpdateRule::Dplr) {
      da = fromValueHeads(rewriter, loc, gradDa, op.getA(), c.group);
      db = fromValueHeads(rewriter, loc, gradDb, op.getB(), c.group);
    }
    AffineMap id = rewriter.getMultiDimIdentityMap(4);
    if (op.getUpdate() == UpdateRule::EraseWrite) {
      // a = alpha * k and b = erase * k (erase_read_key: a = alpha * erase *
      // k and b = k): both feed dk, erase and alpha the gate.
      bool readKey = c.eraseReadKey;
      SmallVector<Value> inputs = {c.k, gradDa, gradDb, c.erase, dk};
      SmallVector<AffineMap> maps = {id, id, id, id, id};
      addGateInput(rewriter, loc, c, inputs, maps);
      maps.push_back(id);
      bool gated = inputs.size() > 5;
      auto alphaOf = [&](OpBuilder &nb, Location l, ValueRange args) {
        return gated ? math::ExpOp::create(nb, l, extendToF32(nb, l, args[5]))
                           .getResult()
                     : constantF32(nb, l, 1.0f);
      };
      dk = buildGeneric(
          rewriter, loc, inputs,
          emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, dk), f32), maps,
          4, 0, [&](OpBuilder &nb, Location l, ValueRange args) {
            Value alpha = alphaOf(nb, l, args);
            if (readKey) {
              Value alphaErase =
                  mulF(nb, l, alpha, extendToF32(nb, l, args[3]));
              Value fromA = mulF(nb, l, alphaErase, args[1]);
              return addF(nb, l, args[4], addF(nb, l, fromA, args[2]));
            }
            Value fromA = mulF(nb, l, alpha, args[1]);
            Value fromB = mulExtended(nb, l, args[3], args[2]);
            return addF(nb, l, args[4], addF(nb, l, fromA, fromB));
          });
      if (readKey) {
        // derase = alpha * k * da.
        SmallVector<Value> eraseInputs = {c.k, gradDa};
        SmallVector<AffineMap> eraseMaps = {id, id};
        addGateInput(rewriter, loc, c, eraseInputs, eraseMaps);
        eraseMaps.push_back(id);
        bool eraseGated = eraseInputs.size() > 2;
        derase = buildGeneric(
            rewriter, loc, eraseInputs,
            emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, c.k), f32),
            eraseMaps, 4, 0, [&](OpBuilder &nb, Location l, ValueRange args) {
              Value term = mulExtended(nb, l, args[0], args[1]);
              if (!eraseGated)
                return term;
              Value alpha =
                  math::ExpOp::create(nb, l, extendToF32(nb, l, args[2]));
              return mulF(nb, l, alpha, term);
            });
      } else {
        derase = buildGeneric(
            rewriter, loc, ValueRange{c.k, gradDb},
            emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, c.k), f32),
            {id, id, id}, 4, 0, [](OpBuilder &nb, Location l, ValueRange args) {
              return mulExtended(nb, l, args[0], args[1]);
            });
      }
      // d(log alpha) += a * da (alpha * k * da, or alpha * erase * k * da
      // with erase_read_key), summed over K for a scalar gate.
      if (dg) {
        bool scalar = op.getGate() == GateKind::Scalar;
        AffineMap gateMap = scalar ? dimMap(ctx, 4, {0, 1, 2}) : id;
        SmallVector<Value> gateInputs = {c.k, gradDa};
        SmallVector<AffineMap> gateMaps = {id, id};
        if (readKey) {
          gateInputs.push_back(c.erase);
          gateMaps.push_back(id);
        }
        gateInputs.push_back(c.g);
        gateMaps.append({gateMap, gateMap});
        unsigned gateArg = gateInputs.size() - 1;
        dg = buildGeneric(
            rewriter, loc, gateInputs, dg, gateMaps, scalar ? 3 : 4,
            scalar ? 1 : 0, [&](OpBuilder &nb, Location l, ValueRange args) {
              Value alpha =
                  math::ExpOp::create(nb, l, extendToF32(nb, l, args[gateArg]));
              Value term =
                  mulF(nb, l, alpha, mulExtended(nb, l, args[0], args[1]));
              if (readKey)
                term = mulF(nb, l, term, extendToF32(nb, l, args[2]));
              return addF(nb, l, args[gateArg + 1], term);
            });
      }
      // values = write * v.
      SmallVector<OpFoldResult> valueSizes =
          mixedSizes(rewriter, loc, op.getV());
      Value dvalues = dv;
      dwrite = buildGeneric(rewriter, loc, ValueRange{op.getV(), dvalues},
                            emptyTensor(rewriter, loc, valueSizes, f32),
                            {id, id, id}, 4, 0,
                            [](OpBuilder &nb, Location l, ValueRange args) {
                              return mulExtended(nb, l, args[0], args[1]);
                            });
      dv = buildGeneric(rewriter, loc, ValueRange{op.getWrite(), dvalues},
                        emptyTensor(rewriter, loc, valueSizes, f32),
                        {id, id, id}, 4, 0,
                        [](OpBuilder &nb, Location l, ValueRange args) {
                          return mulExtended(nb, l, args[0], args[1]);
                        });
    }
    if (op.getAllowNegEigval())
      dbeta = buildDoubled(rewriter, loc, dbeta);
    // Per-value-head operands: the repeated ones' gradients summed back.
    dq = fromValueHeads(rewriter, loc, dq, op.getQ(), c.group);
    dk = fromValueHeads(rewriter, loc, dk, op.getK(), c.group);
    dg = fromValueHeads(rewriter, loc, dg, op.getG(), c.group);
    dbeta = fromValueHeads(rewriter, loc, dbeta, op.getBeta(), c.group);
    derase = fromValueHeads(rewriter, loc, derase, op.getErase(), c.group);
    if (op.getQkL2norm()) {
      dq = buildL2NormalizeGrad(rewriter, loc, op.getQ(), dq, l2normEps);
      dk = buildL2NormalizeGrad(rewriter, loc, op.getK(), dk, l2normEps);
    }

    SmallVector<Value> results = {dq, dk, dv};
    for (Value gradient : {dg, dgv, dbeta, derase, dwrite, da, db})
      if (gradient)
        results.push_back(gradient);
    if (op.getInitialState())
      results.push_back(dInitialState);
    replaceWithCasts(rewriter, op, results);
    return success();
  }

  double l2normEps;
};

/// linalg.softmax (a feature map's softmax over features, as Hedgehog's)
/// becomes its upstream decomposition (AggregatedOpInterface): max, exp,
/// sum and division generics, which the rest of the pipeline tiles and
/// lowers like any other producer. Left whole, it has no lowering to loops.
struct DecomposeSoftmax : OpRewritePattern<linalg::SoftmaxOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(linalg::SoftmaxOp op,
                                PatternRewriter &rewriter) const override {
    if (!op.hasPureTensorSemantics())
      return rewriter.notifyMatchFailure(op, "not on tensors");
    FailureOr<SmallVector<Value>> values = op.decomposeOperation(rewriter);
    if (failed(values))
      return failure();
    rewriter.replaceOp(op, *values);
    return success();
  }
};

struct LaLowerToRecurrencePass
    : la::impl::LaLowerToRecurrencePassBase<LaLowerToRecurrencePass> {
  using Base::Base;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateLowerToRecurrencePatterns(patterns, l2normEps, expandQueryGroups);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace

void mlir::la::populateLowerToRecurrencePatterns(RewritePatternSet &patterns,
                                                 double l2normEps,
                                                 bool expandQueryGroups) {
  MLIRContext *ctx = patterns.getContext();
  patterns.add<AttentionToRecurrence>(ctx, l2normEps, expandQueryGroups);
  patterns.add<AttentionGradToRecurrenceGrad>(ctx, l2normEps);
  populateDecomposeSlidingWindowHybridPatterns(patterns);
  patterns.add<DecomposeSoftmax>(ctx);
  if (expandQueryGroups)
    patterns.add<ExpandQueryGroups>(ctx, /*benefit=*/2);
  // The gradient always repeats them: la.recurrence_grad has no query
  // groups.
  patterns.add<ExpandQueryGroupsGrad>(ctx, /*benefit=*/2);
}
