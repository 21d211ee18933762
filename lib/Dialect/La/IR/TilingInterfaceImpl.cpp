//===- TilingInterfaceImpl.cpp - TilingInterface of la.recurrence ---------===//
//
// la.recurrence's iteration domain is (B, T, HV, V): batches, value heads and
// value columns are independent, and T is a reduction whose accumulator is
// the state. A tile is the recurrence on slices of the operands; its state
// init is the slice of the state that the enclosing loop carries, so a loop
// over T tiles (scf::tileUsingSCF, `transform.structured.tile_using_for`)
// runs the recurrence chunk after chunk. T is in processing order: for a
// `reverse` recurrence, the iteration tile [t, t + n) is the tokens
// [T - t - n, T - t), so the loop still carries the state forward.
//
// With packed sequences (`cu_seqlens`, B = 1) the first loop runs over the
// N sequences instead of B: a tile of one sequence is the recurrence of
// that sequence (B = 1, its tokens [cu[n], cu[n+1]) as a run-time T, its
// row of the state), so an scf.forall over sequences and heads is the
// tasks of packed sequences, on the CPU's threads and the GPU's blocks.
//
//===----------------------------------------------------------------------===//

#include "la/Dialect/La/LaOps.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

using namespace mlir;
using namespace mlir::la;

Value mlir::la::extractIndex(OpBuilder &b, Location loc, Value tensor,
                             Value index) {
  Value element = tensor::ExtractOp::create(b, loc, tensor, index);
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), element);
}

std::pair<Value, Value> mlir::la::extractSequenceBounds(OpBuilder &b,
                                                        Location loc,
                                                        Value cuSeqlens,
                                                        Value n, Value tokens) {
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value next = arith::AddIOp::create(b, loc, n, one);
  Value rawStart = extractIndex(b, loc, cuSeqlens, n);
  Value rawEnd = extractIndex(b, loc, cuSeqlens, next);
  Value start = arith::MinSIOp::create(
      b, loc, arith::MaxSIOp::create(b, loc, rawStart, zero), tokens);
  Value end = arith::MinSIOp::create(
      b, loc, arith::MaxSIOp::create(b, loc, rawEnd, start), tokens);
  return {start, end};
}

namespace {
/// Loops of la.recurrence's iteration domain.
enum RecurrenceLoop : unsigned { kBatch = 0, kTime, kValueHead, kValueColumn };

/// The slices of the operands that one tile of the iteration domain reads.
struct RecurrenceTile {
  OpFoldResult batch[2], time[2], valueHead[2], valueColumn[2], keyHead[2];
  /// The heads of q: the key heads, or with grouped query heads the query
  /// heads of the tile's value heads (also the output's heads).
  OpFoldResult queryHead[2];
  /// The offset and size of the state's first dim (B, N sequences, or the
  /// pool's row of a tile's one batch with state indices).
  OpFoldResult stateRow[2];
  /// Whether the tile keeps the state indices (it spans every batch, so
  /// its state is the whole pool).
  bool keepsStateIndices = false;
  /// Whether the tile is one of packed sequences (its tokens are a slice;
  /// it drops `cu_seqlens`).
  bool oneSequence = false;
  /// The fixed gate's log-decays of the tile's key heads.
  std::optional<SmallVector<float>> logDecay;
};
} // namespace

/// Whether [offset, offset + size) is all of `tensor`'s dimension `dim`: a
/// run-time size is the same value, or a `tensor.dim` of that dimension
/// (the iteration domain's bound, which tiling passes back).
static bool isWholeDim(OpBuilder &b, Value tensor, int64_t dim,
                       OpFoldResult offset, OpFoldResult size) {
  if (!isZeroInteger(offset))
    return false;
  if (isEqualConstantIntOrValue(
          size, tensor::getMixedSize(b, tensor.getLoc(), tensor, dim)))
    return true;
  auto value = dyn_cast_if_present<Value>(size);
  auto dimOp = value ? value.getDefiningOp<tensor::DimOp>() : tensor::DimOp();
  return dimOp && dimOp.getSource() == tensor &&
         dimOp.getConstantIndex() == dim;
}

/// Whether [offset, offset + size) is every packed sequence of `op`: N
/// itself, or N - 1 computed from the size of `cu_seqlens` (the iteration
/// domain's bound, which tiling passes back as a new value).
static bool isAllSequences(OpBuilder &b, RecurrenceOp op, OpFoldResult offset,
                           OpFoldResult size) {
  if (!isZeroInteger(offset))
    return false;
  OpFoldResult sequences = op.getNumSequences(b);
  if (isEqualConstantIntOrValue(size, sequences))
    return true;
  auto apply = dyn_cast_if_present<Value>(size)
                   ? cast<Value>(size).getDefiningOp<affine::AffineApplyOp>()
                   : affine::AffineApplyOp();
  if (!apply || apply->getNumOperands() != 1)
    return false;
  auto dim = apply->getOperand(0).getDefiningOp<tensor::DimOp>();
  std::optional<int64_t> index = dim ? dim.getConstantIndex() : std::nullopt;
  AffineExpr result = apply.getAffineMap().getResult(0);
  AffineExpr operand = apply.getAffineMap().getNumDims()
                           ? b.getAffineDimExpr(0)
                           : b.getAffineSymbolExpr(0);
  return dim && dim.getSource() == op.getCuSeqlens() && index == 0 &&
         result == operand - 1;
}

/// The query heads [G * offset, G * (offset + size)) of the value heads
/// [offset, offset + size): the heads of q and o in a tile of a recurrence
/// with grouped query heads.
static std::pair<OpFoldResult, OpFoldResult>
queryHeadsOf(OpBuilder &b, Location loc, int64_t group, OpFoldResult offset,
             OpFoldResult size) {
  AffineExpr d0 = b.getAffineDimExpr(0);
  return {affine::makeComposedFoldedAffineApply(b, loc, d0 * group, {offset}),
          affine::makeComposedFoldedAffineApply(b, loc, d0 * group, {size})};
}

/// The tile of the operands for the iteration-domain tile (`offsets`,
/// `sizes`), or failure (with the reason on `op`'s location when `report`;
/// fusion only asks) when the tile is not a recurrence on slices.
static FailureOr<RecurrenceTile> computeTile(OpBuilder &b, RecurrenceOp op,
                                             ArrayRef<OpFoldResult> offsets,
                                             ArrayRef<OpFoldResult> sizes,
                                             bool report) {
  Location loc = op.getLoc();
  auto reject = [&](const Twine &reason) {
    if (report)
      op.emitOpError(reason);
    return failure();
  };
  RecurrenceTile tile;
  tile.batch[0] = offsets[kBatch];
  tile.batch[1] = sizes[kBatch];
  tile.time[0] = offsets[kTime];
  tile.time[1] = sizes[kTime];
  if (op.getReverse()) {
    AffineExpr time, offset, size;
    bindSymbols(b.getContext(), time, offset, size);
    tile.time[0] = affine::makeComposedFoldedAffineApply(
        b, loc, time - offset - size,
        {tensor::getMixedSize(b, loc, op.getV(), 1), offsets[kTime],
         sizes[kTime]});
  }
  tile.valueHead[0] = offsets[kValueHead];
  tile.valueHead[1] = sizes[kValueHead];
  tile.valueColumn[0] = offsets[kValueColumn];
  tile.valueColumn[1] = sizes[kValueColumn];
  tile.stateRow[0] = offsets[kBatch];
  tile.stateRow[1] = sizes[kBatch];

  // Packed sequences restart the state at offsets known only at run time:
  // a tile spans all of T and either every sequence (the op itself) or one
  // of them, whose tokens and state row are then its slices.
  Value cuSeqlens = op.getCuSeqlens();
  if (cuSeqlens) {
    if (!isWholeDim(b, op.getV(), 1, offsets[kTime], sizes[kTime]))
      return reject("with 'cu_seqlens' cannot be tiled along T");
    tile.batch[0] = b.getIndexAttr(0);
    tile.batch[1] = b.getIndexAttr(1);
    tile.stateRow[0] = b.getIndexAttr(0);
    tile.stateRow[1] = tensor::getMixedSize(b, loc, op.getInitialState(), 0);
    if (!isAllSequences(b, op, offsets[kBatch], sizes[kBatch])) {
      if (!isOneInteger(sizes[kBatch]))
        return reject("with 'cu_seqlens' can only be tiled along its "
                      "sequences one at a time");
      Value n = getValueOrCreateConstantIndexOp(b, loc, offsets[kBatch]);
      Value tokens = tensor::DimOp::create(b, loc, op.getV(), 1);
      auto [start, end] = extractSequenceBounds(b, loc, cuSeqlens, n, tokens);
      tile.oneSequence = true;
      tile.time[0] = start;
      tile.time[1] = arith::SubIOp::create(b, loc, end, start).getResult();
      tile.stateRow[0] = offsets[kBatch];
      tile.stateRow[1] = b.getIndexAttr(1);
    }
  }

  // A pool of states: one batch's (or sequence's) tile reads and writes the
  // pool's row that its index names; a tile of every batch is the whole
  // pool, indices kept.
  if (Value indices = op.getStateIndices()) {
    bool oneRow = cuSeqlens ? tile.oneSequence : isOneInteger(sizes[kBatch]);
    if (oneRow) {
      Value batch = getValueOrCreateConstantIndexOp(b, loc, offsets[kBatch]);
      Value row = tensor::ExtractOp::create(b, loc, indices, batch);
      tile.stateRow[0] =
          arith::IndexCastOp::create(b, loc, b.getIndexType(), row).getResult();
      tile.stateRow[1] = b.getIndexAttr(1);
    } else if (cuSeqlens ||
               isWholeDim(b, op.getV(), 0, offsets[kBatch], sizes[kBatch])) {
      tile.stateRow[0] = b.getIndexAttr(0);
      tile.stateRow[1] = tensor::getMixedSize(b, loc, op.getInitialState(), 0);
      tile.keepsStateIndices = true;
    } else {
      return reject("with 'state_indices' can only be tiled along B one batch "
                    "at a time (a tile's pool rows are not a slice)");
    }
  }

  // A read from the value side sums over V: a tile of it has all of V.
  if (op.getTransposedQuery() &&
      !isWholeDim(b, op.getV(), 3, offsets[kValueColumn], sizes[kValueColumn]))
    return reject("with 'transposed_query' cannot be tiled along V (its read "
                  "sums over V)");

  // The normaliser's z restarts at zero in every recurrence: it is not part
  // of the state that a loop over T tiles carries.
  if (op.getNormalizer() &&
      !isWholeDim(b, op.getV(), 1, offsets[kTime], sizes[kTime]))
    return reject("with 'normalizer' cannot be tiled along T (its z is not "
                  "in the state; la-simplify-recurrence makes it a value "
                  "column that is)");

  // Value head hv reads key head hv / G: a tile of value heads covers whole
  // groups of G, or lies in one (tile offsets are multiples of the tile
  // size, as scf::tileUsingSCF makes them).
  int64_t keyHeads = op.getK().getType().getDimSize(2);
  int64_t valueHeads = op.getV().getType().getDimSize(2);
  OpFoldResult hvOffset = offsets[kValueHead], hvSize = sizes[kValueHead];
  if (isWholeDim(b, op.getV(), 2, hvOffset, hvSize)) {
    tile.keyHead[0] = b.getIndexAttr(0);
    tile.keyHead[1] = tensor::getMixedSize(b, loc, op.getK(), 2);
  } else if (ShapedType::isDynamic(keyHeads) ||
             ShapedType::isDynamic(valueHeads)) {
    return reject("with dynamic heads can only be tiled over whole heads");
  } else {
    int64_t group = valueHeads / keyHeads;
    std::optional<int64_t> size = getConstantIntValue(hvSize);
    AffineExpr d0 = b.getAffineDimExpr(0);
    if (group == 1) {
      tile.keyHead[0] = hvOffset;
      tile.keyHead[1] = hvSize;
    } else if (size && (*size % group == 0 || group % *size == 0)) {
      tile.keyHead[0] = affine::makeComposedFoldedAffineApply(
          b, loc, d0.floorDiv(group), {hvOffset});
      tile.keyHead[1] =
          b.getIndexAttr(*size % group == 0 ? *size / group : int64_t(1));
    } else {
      return reject("expects a tile of value heads that covers whole groups "
                    "of " +
                    Twine(group) + " (HV / H) or lies in one");
    }
  }

  tile.queryHead[0] = tile.keyHead[0];
  tile.queryHead[1] = tile.keyHead[1];
  if (int64_t group = op.getQueryGroupSize()) {
    std::tie(tile.queryHead[0], tile.queryHead[1]) =
        queryHeadsOf(b, loc, group, hvOffset, hvSize);
  }

  if (std::optional<ArrayRef<float>> decay = op.getLogDecay()) {
    std::optional<int64_t> first = getConstantIntValue(tile.keyHead[0]);
    std::optional<int64_t> count = getConstantIntValue(tile.keyHead[1]);
    if (!first || !count)
      return reject("with a 'fixed' gate can only be tiled at constant head "
                    "offsets (la-simplify-recurrence makes it a scalar gate)");
    tile.logDecay = SmallVector<float>(decay->slice(*first, *count));
  }
  return tile;
}

static Value slice(OpBuilder &b, Location loc, Value source,
                   ArrayRef<OpFoldResult> offsets,
                   ArrayRef<OpFoldResult> sizes) {
  if (!source)
    return source;
  SmallVector<OpFoldResult> strides(offsets.size(), b.getIndexAttr(1));
  return tensor::ExtractSliceOp::create(b, loc, source, offsets, sizes,
                                        strides);
}

/// The state's offsets and sizes for `tile`.
static void stateTile(OpBuilder &b, RecurrenceOp op, const RecurrenceTile &tile,
                      SmallVectorImpl<OpFoldResult> &offsets,
                      SmallVectorImpl<OpFoldResult> &sizes) {
  offsets.assign({tile.stateRow[0], tile.valueHead[0], b.getIndexAttr(0),
                  tile.valueColumn[0]});
  sizes.assign({tile.stateRow[1], tile.valueHead[1],
                tensor::getMixedSize(b, op.getLoc(), op.getInitialState(), 2),
                tile.valueColumn[1]});
}

SmallVector<utils::IteratorType> RecurrenceOp::getLoopIteratorTypes() {
  return {utils::IteratorType::parallel, utils::IteratorType::reduction,
          utils::IteratorType::parallel, utils::IteratorType::parallel};
}

OpFoldResult RecurrenceOp::getNumSequences(OpBuilder &b) {
  Location loc = getLoc();
  if (!getCuSeqlens())
    return tensor::getMixedSize(b, loc, getV(), 0);
  AffineExpr offsets = b.getAffineSymbolExpr(0);
  return affine::makeComposedFoldedAffineApply(
      b, loc, offsets - 1, {tensor::getMixedSize(b, loc, getCuSeqlens(), 0)});
}

SmallVector<Range> RecurrenceOp::getIterationDomain(OpBuilder &b) {
  SmallVector<Range> domain;
  for (int64_t dim = 0; dim < 4; ++dim)
    domain.push_back(Range{b.getIndexAttr(0),
                           dim == kBatch
                               ? getNumSequences(b)
                               : tensor::getMixedSize(b, getLoc(), getV(), dim),
                           b.getIndexAttr(1)});
  return domain;
}

/// The recurrence on one tile of the iteration domain.
static FailureOr<TilingResult> buildTile(OpBuilder &b, RecurrenceOp op,
                                         ArrayRef<OpFoldResult> offsets,
                                         ArrayRef<OpFoldResult> sizes,
                                         bool report) {
  FailureOr<RecurrenceTile> tile = computeTile(b, op, offsets, sizes, report);
  if (failed(tile))
    return failure();
  Location loc = op.getLoc();
  OpFoldResult zero = b.getIndexAttr(0);
  // [B,T,H,K], [B,T,H] and [B,T,HV,V] operands.
  SmallVector<OpFoldResult> keyOffsets = {tile->batch[0], tile->time[0],
                                          tile->keyHead[0], zero};
  SmallVector<OpFoldResult> keySizes = {
      tile->batch[1], tile->time[1], tile->keyHead[1],
      tensor::getMixedSize(b, loc, op.getQ(), 3)};
  ArrayRef<OpFoldResult> headOffsets = ArrayRef(keyOffsets).take_front(3);
  ArrayRef<OpFoldResult> headSizes = ArrayRef(keySizes).take_front(3);
  SmallVector<OpFoldResult> valueOffsets = {
      tile->batch[0], tile->time[0], tile->valueHead[0], tile->valueColumn[0]};
  SmallVector<OpFoldResult> valueSizes = {
      tile->batch[1], tile->time[1], tile->valueHead[1], tile->valueColumn[1]};
  SmallVector<OpFoldResult> queryOffsets = keyOffsets, querySizes = keySizes;
  queryOffsets[2] = tile->queryHead[0];
  querySizes[2] = tile->queryHead[1];
  SmallVector<OpFoldResult> outputOffsets = valueOffsets,
                            outputSizes = valueSizes;
  if (op.hasQueryGroups()) {
    outputOffsets[2] = tile->queryHead[0];
    outputSizes[2] = tile->queryHead[1];
  }
  SmallVector<OpFoldResult> stateOffsets, stateSizes;
  stateTile(b, op, *tile, stateOffsets, stateSizes);

  Value g = op.getG();
  bool channelGate = op.getGate() == GateKind::Channel;
  SmallVector<Value> slices = {
      slice(b, loc, op.getQ(), queryOffsets, querySizes),
      slice(b, loc, op.getK(), keyOffsets, keySizes),
      slice(b, loc, op.getV(), valueOffsets, valueSizes),
      channelGate ? slice(b, loc, g, keyOffsets, keySizes)
                  : slice(b, loc, g, headOffsets, headSizes),
      slice(b, loc, op.getGv(), valueOffsets, valueSizes),
      slice(b, loc, op.getBeta(), headOffsets, headSizes),
      slice(b, loc, op.getA(), keyOffsets, keySizes),
      slice(b, loc, op.getB(), keyOffsets, keySizes),
      tile->oneSequence ? Value() : op.getCuSeqlens(),
      tile->keepsStateIndices ? op.getStateIndices() : Value(),
      slice(b, loc, op.getOInit(), outputOffsets, outputSizes),
      slice(b, loc, op.getInitialState(), stateOffsets, stateSizes)};
  // The value-side read: its query sliced like v, its output [B,T,HV,K]
  // like o but with all of K.
  Value transposedQuery, transposedInit;
  SmallVector<Value> inits = {slices[10], slices[11]};
  if (op.getTransposedQuery()) {
    transposedQuery =
        slice(b, loc, op.getTransposedQuery(), valueOffsets, valueSizes);
    outputOffsets[kValueColumn] = zero;
    outputSizes[kValueColumn] = tensor::getMixedSize(b, loc, op.getK(), 3);
    transposedInit =
        slice(b, loc, op.getTransposedOInit(), outputOffsets, outputSizes);
    inits.push_back(transposedInit);
    slices.append({transposedQuery, transposedInit});
  }

  auto tiled = RecurrenceOp::create(
      b, loc, slices[10].getType(), slices[11].getType(),
      transposedInit ? transposedInit.getType() : Type(), slices[0], slices[1],
      slices[2], slices[3], slices[4], slices[5], slices[6], slices[7],
      slices[8], slices[9], transposedQuery, inits, op.getGateAttr(),
      tile->logDecay ? b.getDenseF32ArrayAttr(*tile->logDecay)
                     : DenseF32ArrayAttr(),
      op.getLowRankAttr(), op.getScaleAttr(), op.getNormalizerAttr(),
      op.getEpsAttr(), op.getReverseAttr());
  SmallVector<Operation *> generatedSlices;
  for (Value value : slices)
    if (value && value.getDefiningOp<tensor::ExtractSliceOp>())
      generatedSlices.push_back(value.getDefiningOp());
  return TilingResult{
      {tiled}, SmallVector<Value>(tiled->getResults()), generatedSlices};
}

FailureOr<TilingResult>
RecurrenceOp::getTiledImplementation(OpBuilder &b,
                                     ArrayRef<OpFoldResult> offsets,
                                     ArrayRef<OpFoldResult> sizes) {
  return buildTile(b, *this, offsets, sizes, /*report=*/true);
}

LogicalResult RecurrenceOp::getResultTilePosition(
    OpBuilder &b, unsigned resultNumber, ArrayRef<OpFoldResult> offsets,
    ArrayRef<OpFoldResult> sizes, SmallVector<OpFoldResult> &resultOffsets,
    SmallVector<OpFoldResult> &resultSizes) {
  if (resultNumber == 2) {
    // The value-side read's rows are o's, with all of K.
    if (failed(getResultTilePosition(b, 0, offsets, sizes, resultOffsets,
                                     resultSizes)))
      return failure();
    resultOffsets[kValueColumn] = b.getIndexAttr(0);
    resultSizes[kValueColumn] = tensor::getMixedSize(b, getLoc(), getK(), 3);
    return success();
  }
  if (resultNumber == 0 && getCuSeqlens()) {
    // The output rows of the tile's sequences.
    FailureOr<RecurrenceTile> tile =
        computeTile(b, *this, offsets, sizes, /*report=*/false);
    if (failed(tile))
      return failure();
    bool groups = hasQueryGroups();
    resultOffsets.assign({tile->batch[0], tile->time[0],
                          groups ? tile->queryHead[0] : tile->valueHead[0],
                          tile->valueColumn[0]});
    resultSizes.assign({tile->batch[1], tile->time[1],
                        groups ? tile->queryHead[1] : tile->valueHead[1],
                        tile->valueColumn[1]});
    return success();
  }
  if (resultNumber == 0) {
    resultOffsets.assign(offsets.begin(), offsets.end());
    resultSizes.assign(sizes.begin(), sizes.end());
    // The output rows are tokens, which a reverse recurrence visits from
    // the end.
    if (getReverse()) {
      AffineExpr time, offset, size;
      bindSymbols(b.getContext(), time, offset, size);
      resultOffsets[kTime] = affine::makeComposedFoldedAffineApply(
          b, getLoc(), time - offset - size,
          {tensor::getMixedSize(b, getLoc(), getV(), 1), offsets[kTime],
           sizes[kTime]});
    }
    if (int64_t group = getQueryGroupSize())
      std::tie(resultOffsets[kValueHead], resultSizes[kValueHead]) =
          queryHeadsOf(b, getLoc(), group, offsets[kValueHead],
                       sizes[kValueHead]);
    return success();
  }
  FailureOr<RecurrenceTile> tile =
      computeTile(b, *this, offsets, sizes, /*report=*/false);
  if (failed(tile))
    return failure();
  stateTile(b, *this, *tile, resultOffsets, resultSizes);
  return success();
}

LogicalResult RecurrenceOp::getIterationDomainTileFromResultTile(
    OpBuilder &b, unsigned resultNumber, ArrayRef<OpFoldResult> offsets,
    ArrayRef<OpFoldResult> sizes,
    SmallVectorImpl<OpFoldResult> &iterDomainOffsets,
    SmallVectorImpl<OpFoldResult> &iterDomainSizes) {
  // Any tile of a result needs the whole sequence before it: the iteration
  // domain's tile spans all of T.
  OpFoldResult time = tensor::getMixedSize(b, getLoc(), getV(), 1);
  if (resultNumber == 0 || resultNumber == 2) {
    if (!isWholeDim(b, getV(), 1, offsets[kTime], sizes[kTime]))
      return failure();
    iterDomainOffsets.assign(offsets.begin(), offsets.end());
    iterDomainSizes.assign(sizes.begin(), sizes.end());
    // The value-side read (its last dim is K) needs all of V.
    if (resultNumber == 2) {
      iterDomainOffsets[kValueColumn] = b.getIndexAttr(0);
      iterDomainSizes[kValueColumn] =
          tensor::getMixedSize(b, getLoc(), getV(), 3);
    }
    // Packed sequences: the rows of all of T are every sequence's.
    if (getCuSeqlens())
      iterDomainSizes[kBatch] = getNumSequences(b);
    // With grouped query heads, whole groups of the output's heads.
    if (int64_t group = getQueryGroupSize()) {
      std::optional<int64_t> headOffset =
          getConstantIntValue(offsets[kValueHead]);
      std::optional<int64_t> heads = getConstantIntValue(sizes[kValueHead]);
      if (!heads || *heads % group != 0 ||
          (headOffset && *headOffset % group != 0))
        return failure();
      AffineExpr d0 = b.getAffineDimExpr(0);
      iterDomainOffsets[kValueHead] = affine::makeComposedFoldedAffineApply(
          b, getLoc(), d0.floorDiv(group), {offsets[kValueHead]});
      iterDomainSizes[kValueHead] = b.getIndexAttr(*heads / group);
    }
    return success();
  }
  // The state [N,HV,K,V]: whole key rows (K mixes under the transition).
  if (!isWholeDim(b, getInitialState(), 2, offsets[2], sizes[2]))
    return failure();
  // Rows of a pool are not batches: only all of them map back. (Packed
  // sequences' rows are the iteration domain's first loop.)
  if (getStateIndices() &&
      !isWholeDim(b, getInitialState(), 0, offsets[0], sizes[0]))
    return failure();
  OpFoldResult batchOffset = offsets[0], batchSize = sizes[0];
  if (getStateIndices()) {
    batchOffset = b.getIndexAttr(0);
    batchSize = getNumSequences(b);
  }
  iterDomainOffsets.assign(
      {batchOffset, b.getIndexAttr(0), offsets[1], offsets[3]});
  iterDomainSizes.assign({batchSize, time, sizes[1], sizes[3]});
  return success();
}

FailureOr<TilingResult>
RecurrenceOp::generateResultTileValue(OpBuilder &b, unsigned resultNumber,
                                      ArrayRef<OpFoldResult> offsets,
                                      ArrayRef<OpFoldResult> sizes) {
  SmallVector<OpFoldResult> domainOffsets, domainSizes;
  if (failed(getIterationDomainTileFromResultTile(
          b, resultNumber, offsets, sizes, domainOffsets, domainSizes)))
    return failure();
  FailureOr<TilingResult> tiled =
      buildTile(b, *this, domainOffsets, domainSizes, /*report=*/false);
  if (failed(tiled))
    return failure();
  // The caller wants one result.
  tiled->tiledValues = {tiled->tiledValues[resultNumber]};
  return tiled;
}
