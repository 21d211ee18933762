//===- LaUtils.cpp - helpers shared by la's passes ------------------------===//

#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace mlir::la;

Value mlir::la::castFloat(OpBuilder &b, Location loc, Value x, Type type) {
  Type from = x.getType();
  if (from == type)
    return x;
  if (from.getIntOrFloatBitWidth() < type.getIntOrFloatBitWidth())
    return arith::ExtFOp::create(b, loc, type, x);
  return arith::TruncFOp::create(b, loc, type, x);
}

Value mlir::la::extendToF32(OpBuilder &b, Location loc, Value x) {
  return castFloat(b, loc, x, b.getF32Type());
}

Value mlir::la::constantF32(OpBuilder &b, Location loc, float value) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(value));
}

Value mlir::la::emptyTensor(OpBuilder &b, Location loc,
                            ArrayRef<OpFoldResult> sizes, Type elementType) {
  return tensor::EmptyOp::create(b, loc, sizes, elementType);
}

Value mlir::la::filledTensor(OpBuilder &b, Location loc,
                             ArrayRef<OpFoldResult> sizes, Type elementType,
                             double value) {
  Value empty = emptyTensor(b, loc, sizes, elementType);
  Value fill =
      arith::ConstantOp::create(b, loc, b.getFloatAttr(elementType, value));
  return linalg::FillOp::create(b, loc, ValueRange{fill}, ValueRange{empty})
      .getResult(0);
}

Value mlir::la::zeroTensor(OpBuilder &b, Location loc,
                           ArrayRef<OpFoldResult> sizes) {
  return filledTensor(b, loc, sizes, b.getF32Type(), 0.0);
}

Value mlir::la::mulExtended(OpBuilder &b, Location loc, Value x, Value y) {
  Value wideX = extendToF32(b, loc, x);
  Value wideY = extendToF32(b, loc, y);
  return mulF(b, loc, wideX, wideY);
}

Value mlir::la::buildBlockScores(OpBuilder &b, Location loc, Value x, Value yT,
                                 Value init) {
  MLIRContext *ctx = b.getContext();
  return buildGeneric(
      b, loc, ValueRange{x, yT}, init,
      {dimMap(ctx, 6, {0, 1, 3, 2, 5}), dimMap(ctx, 6, {0, 1, 2, 5, 4}),
       dimMap(ctx, 6, {0, 1, 2, 3, 4})},
      5, 1, [](OpBuilder &nb, Location l, ValueRange args) {
        return addF(nb, l, args[2], mulExtended(nb, l, args[0], args[1]));
      });
}

Value mlir::la::mulF(OpBuilder &b, Location loc, Value x, Value y) {
  return arith::MulFOp::create(b, loc, x, y);
}

Value mlir::la::addF(OpBuilder &b, Location loc, Value x, Value y) {
  return arith::AddFOp::create(b, loc, x, y);
}

Value mlir::la::buildGeneric(
    OpBuilder &b, Location loc, ValueRange inputs, Value init,
    ArrayRef<AffineMap> maps, unsigned parallel, unsigned reductions,
    function_ref<Value(OpBuilder &, Location, ValueRange)> body) {
  return linalg::GenericOp::create(
             b, loc, init.getType(), inputs, ValueRange{init}, maps,
             iteratorTypes(parallel, reductions),
             [&](OpBuilder &nb, Location nloc, ValueRange args) {
               linalg::YieldOp::create(nb, nloc, body(nb, nloc, args));
             })
      .getResult(0);
}

Value mlir::la::sliceDim(OpBuilder &b, Location loc, Value x, unsigned dim,
                         OpFoldResult offset, OpFoldResult size) {
  auto type = cast<RankedTensorType>(x.getType());
  int64_t rank = type.getRank();
  SmallVector<OpFoldResult> offsets(rank, b.getIndexAttr(0));
  offsets[dim] = offset;
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
  sizes[dim] = size;
  SmallVector<OpFoldResult> strides(rank, b.getIndexAttr(1));
  auto sliceType =
      RankedTensorType::get(staticShape(sizes), type.getElementType());
  return tensor::ExtractSliceOp::create(b, loc, sliceType, x, offsets, sizes,
                                        strides);
}

Value mlir::la::extractUnitSlice(OpBuilder &b, Location loc, Value x,
                                 unsigned dim, OpFoldResult offset) {
  auto type = cast<RankedTensorType>(x.getType());
  int64_t rank = type.getRank();
  SmallVector<OpFoldResult> offsets(rank, b.getIndexAttr(0));
  offsets[dim] = offset;
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
  sizes[dim] = b.getIndexAttr(1);
  SmallVector<OpFoldResult> strides(rank, b.getIndexAttr(1));
  SmallVector<int64_t> shape(type.getShape());
  shape.erase(shape.begin() + dim);
  return tensor::ExtractSliceOp::create(
      b, loc, RankedTensorType::get(shape, type.getElementType()), x, offsets,
      sizes, strides);
}

Value mlir::la::insertAt(OpBuilder &b, Location loc, Value part, Value whole,
                         unsigned dim, OpFoldResult offset) {
  int64_t rank = cast<RankedTensorType>(whole.getType()).getRank();
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, part);
  if (static_cast<int64_t>(sizes.size()) < rank)
    sizes.insert(sizes.begin() + dim, b.getIndexAttr(1));
  SmallVector<OpFoldResult> offsets(rank, b.getIndexAttr(0));
  offsets[dim] = offset;
  SmallVector<OpFoldResult> strides(rank, b.getIndexAttr(1));
  return tensor::InsertSliceOp::create(b, loc, part, whole, offsets, sizes,
                                       strides);
}

AffineMap mlir::la::dimMap(MLIRContext *ctx, unsigned numDims,
                           ArrayRef<int64_t> dims, int64_t groupSize) {
  SmallVector<AffineExpr> results;
  for (int64_t dim : dims) {
    if (dim >= 0) {
      results.push_back(getAffineDimExpr(dim, ctx));
      continue;
    }
    AffineExpr expr = getAffineDimExpr(-dim - 1, ctx);
    results.push_back(groupSize == 1 ? expr : expr.floorDiv(groupSize));
  }
  return AffineMap::get(numDims, 0, results, ctx);
}

SmallVector<utils::IteratorType> mlir::la::iteratorTypes(unsigned parallel,
                                                         unsigned reductions) {
  SmallVector<utils::IteratorType> types(parallel,
                                         utils::IteratorType::parallel);
  types.append(reductions, utils::IteratorType::reduction);
  return types;
}

SmallVector<OpFoldResult> mlir::la::mixedSizes(OpBuilder &b, Location loc,
                                               Value value) {
  return tensor::getMixedSizes(b, loc, value);
}

SmallVector<int64_t> mlir::la::staticShape(ArrayRef<OpFoldResult> sizes) {
  SmallVector<int64_t> shape;
  for (OpFoldResult size : sizes)
    shape.push_back(getConstantIntValue(size).value_or(ShapedType::kDynamic));
  return shape;
}

void mlir::la::replaceWithCasts(RewriterBase &rewriter, Operation *op,
                                ArrayRef<Value> values) {
  SmallVector<Value> results;
  for (auto [result, value] : llvm::zip(op->getResults(), values)) {
    Value replacement = value;
    if (replacement.getType() != result.getType())
      replacement = tensor::CastOp::create(rewriter, op->getLoc(),
                                           result.getType(), replacement);
    results.push_back(replacement);
  }
  rewriter.replaceOp(op, results);
}

RecurrenceParts RecurrenceParts::of(RecurrenceOp op) {
  RecurrenceParts parts;
  parts.q = op.getQ();
  parts.k = op.getK();
  parts.v = op.getV();
  parts.g = op.getG();
  parts.gv = op.getGv();
  parts.beta = op.getBeta();
  parts.a = op.getA();
  parts.b = op.getB();
  parts.cuSeqlens = op.getCuSeqlens();
  parts.stateIndices = op.getStateIndices();
  parts.oInit = op.getOInit();
  parts.initialState = op.getInitialState();
  parts.transposedQuery = op.getTransposedQuery();
  parts.transposedOInit = op.getTransposedOInit();
  parts.gate = op.getGate();
  if (std::optional<ArrayRef<float>> decay = op.getLogDecay())
    parts.logDecay = SmallVector<float>(*decay);
  parts.lowRank = op.getLowRank();
  parts.scale = op.getScale().convertToFloat();
  parts.normalizer = op.getNormalizer();
  parts.reverse = op.getReverse();
  if (std::optional<APFloat> eps = op.getEps())
    parts.eps = eps->convertToFloat();
  return parts;
}

bool mlir::la::isInPlaceArgument(Value value) {
  auto arg = dyn_cast<BlockArgument>(value);
  if (!arg)
    return false;
  auto func = dyn_cast<FunctionOpInterface>(arg.getOwner()->getParentOp());
  return func && arg.getOwner()->isEntryBlock() &&
         func.getArgAttr(arg.getArgNumber(), kInPlaceAttrName);
}

Value mlir::la::zeroState(OpBuilder &b, Location loc, Value q, Value v,
                          Value cuSeqlens) {
  OpFoldResult rows = tensor::getMixedSize(b, loc, v, 0);
  if (cuSeqlens) {
    int64_t offsets = cast<ShapedType>(cuSeqlens.getType()).getDimSize(0);
    if (!ShapedType::isDynamic(offsets))
      rows = b.getIndexAttr(offsets - 1);
    else
      rows = arith::SubIOp::create(b, loc,
                                   tensor::DimOp::create(b, loc, cuSeqlens, 0),
                                   arith::ConstantIndexOp::create(b, loc, 1))
                 .getResult();
  }
  return zeroTensor(b, loc,
                    {rows, tensor::getMixedSize(b, loc, v, 2),
                     tensor::getMixedSize(b, loc, q, 3),
                     tensor::getMixedSize(b, loc, v, 3)});
}

RecurrenceOp RecurrenceParts::build(OpBuilder &builder, Location loc) const {
  MLIRContext *ctx = builder.getContext();
  DenseF32ArrayAttr decayAttr;
  if (logDecay)
    decayAttr = builder.getDenseF32ArrayAttr(*logDecay);
  SmallVector<Value> inits = {oInit, initialState};
  if (transposedQuery)
    inits.push_back(transposedOInit);
  return RecurrenceOp::create(
      builder, loc, oInit.getType(), initialState.getType(),
      transposedQuery ? transposedOInit.getType() : Type(), q, k, v, g, gv,
      beta, a, b, cuSeqlens, stateIndices, transposedQuery, inits,
      GateKindAttr::get(ctx, gate), decayAttr, LowRankAttr::get(ctx, lowRank),
      builder.getF32FloatAttr(scale),
      normalizer ? builder.getUnitAttr() : UnitAttr(),
      eps ? builder.getF32FloatAttr(*eps) : FloatAttr(),
      reverse ? builder.getUnitAttr() : UnitAttr());
}

Value mlir::la::sumGroups(OpBuilder &b, Location loc, Value x, unsigned headDim,
                          OpFoldResult heads, int64_t group) {
  if (group == 1)
    return x;
  MLIRContext *ctx = b.getContext();
  auto type = cast<RankedTensorType>(x.getType());
  unsigned rank = type.getRank();
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
  sizes[headDim] = heads;
  SmallVector<int64_t> splitShape(type.getShape());
  std::optional<int64_t> staticHeads = getConstantIntValue(heads);
  splitShape[headDim] = staticHeads ? *staticHeads : ShapedType::kDynamic;
  splitShape.insert(splitShape.begin() + headDim + 1, group);
  SmallVector<ReassociationIndices> reassociation;
  for (unsigned d = 0, next = 0; d < rank; ++d) {
    ReassociationIndices indices = {static_cast<int64_t>(next++)};
    if (d == headDim)
      indices.push_back(next++);
    reassociation.push_back(indices);
  }
  SmallVector<OpFoldResult> splitSizes(sizes);
  splitSizes.insert(splitSizes.begin() + headDim + 1, b.getIndexAttr(group));
  Value split = tensor::ExpandShapeOp::create(
      b, loc, RankedTensorType::get(splitShape, type.getElementType()), x,
      reassociation, splitSizes);
  // Loops (dims of the result..., j) over split[..., h, j, ...].
  SmallVector<AffineExpr> inputExprs, outputExprs;
  for (unsigned d = 0; d < rank; ++d) {
    AffineExpr dim = getAffineDimExpr(d, ctx);
    inputExprs.push_back(dim);
    outputExprs.push_back(dim);
    if (d == headDim)
      inputExprs.push_back(getAffineDimExpr(rank, ctx));
  }
  return buildGeneric(b, loc, ValueRange{split}, zeroTensor(b, loc, sizes),
                      {AffineMap::get(rank + 1, 0, inputExprs, ctx),
                       AffineMap::get(rank + 1, 0, outputExprs, ctx)},
                      rank, 1, [](OpBuilder &nb, Location l, ValueRange a) {
                        return addF(nb, l, a[1], a[0]);
                      });
}

Value mlir::la::repeatHeads(OpBuilder &b, Location loc, Value x,
                            unsigned headDim, int64_t group) {
  if (group == 1)
    return x;
  MLIRContext *ctx = b.getContext();
  auto type = cast<RankedTensorType>(x.getType());
  unsigned rank = type.getRank();
  SmallVector<OpFoldResult> splitSizes = mixedSizes(b, loc, x);
  splitSizes.insert(splitSizes.begin() + headDim + 1, b.getIndexAttr(group));
  // Loops over split[..., h, j, ...]; x is read without j.
  SmallVector<AffineExpr> inputExprs;
  SmallVector<ReassociationIndices> reassociation;
  for (unsigned d = 0, next = 0; d < rank; ++d) {
    inputExprs.push_back(getAffineDimExpr(next, ctx));
    ReassociationIndices indices = {static_cast<int64_t>(next++)};
    if (d == headDim)
      indices.push_back(next++);
    reassociation.push_back(indices);
  }
  Value split =
      buildGeneric(b, loc, ValueRange{x},
                   emptyTensor(b, loc, splitSizes, type.getElementType()),
                   {AffineMap::get(rank + 1, 0, inputExprs, ctx),
                    b.getMultiDimIdentityMap(rank + 1)},
                   rank + 1, 0, [](OpBuilder &, Location, ValueRange args) {
                     return args[0];
                   });
  return tensor::CollapseShapeOp::create(b, loc, split, reassociation);
}

Value mlir::la::broadcastLogDecay(OpBuilder &b, Location loc,
                                  ArrayRef<float> logDecay, Value q) {
  auto type = RankedTensorType::get({static_cast<int64_t>(logDecay.size())},
                                    b.getF32Type());
  Value constant =
      arith::ConstantOp::create(b, loc, DenseElementsAttr::get(type, logDecay));
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, q);
  sizes.pop_back();
  MLIRContext *ctx = b.getContext();
  return buildGeneric(b, loc, ValueRange{constant},
                      emptyTensor(b, loc, sizes, b.getF32Type()),
                      {dimMap(ctx, 3, {2}), dimMap(ctx, 3, {0, 1, 2})}, 3, 0,
                      [](OpBuilder &, Location, ValueRange a) { return a[0]; });
}

Value mlir::la::flipDim(OpBuilder &b, Location loc, Value x, unsigned dim) {
  auto type = cast<RankedTensorType>(x.getType());
  unsigned rank = type.getRank();
  MLIRContext *ctx = b.getContext();
  Value init =
      emptyTensor(b, loc, mixedSizes(b, loc, x), type.getElementType());
  AffineMap id = b.getMultiDimIdentityMap(rank);
  int64_t extent = type.getDimSize(dim);
  if (!ShapedType::isDynamic(extent)) {
    SmallVector<AffineExpr> exprs(id.getResults());
    exprs[dim] = getAffineConstantExpr(extent - 1, ctx) - exprs[dim];
    return buildGeneric(
        b, loc, ValueRange{x}, init, {AffineMap::get(rank, 0, exprs, ctx), id},
        rank, 0,
        [](OpBuilder &, Location, ValueRange args) { return args[0]; });
  }
  // A dynamic extent n: each element reads x at n - 1 - i.
  // One op per statement: argument evaluation order is the compiler's.
  Value tokens = tensor::DimOp::create(b, loc, x, dim);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value last = arith::SubIOp::create(b, loc, tokens, one);
  return buildGeneric(b, loc, ValueRange{}, init, {id}, rank, 0,
                      [&](OpBuilder &nb, Location l, ValueRange) -> Value {
                        SmallVector<Value> indices;
                        for (unsigned d = 0; d < rank; ++d)
                          indices.push_back(linalg::IndexOp::create(nb, l, d));
                        indices[dim] =
                            arith::SubIOp::create(nb, l, last, indices[dim]);
                        return tensor::ExtractOp::create(nb, l, x, indices);
                      });
}

/// The offsets `cu_seqlens` [N+1] of packed sequences, taken in reverse
/// order over the flipped tokens: `T - cu[N - i]` for i in [0, N] (`q`
/// [B,T,...] gives T). A reverse recurrence is the forward one on these
/// offsets, its tokens flipped and its states flipped along N.
static Value reversedOffsets(OpBuilder &b, Location loc, Value cuSeqlens,
                             Value q) {
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value count = tensor::DimOp::create(b, loc, cuSeqlens, 0);
  Value last = arith::SubIOp::create(b, loc, count, one);
  Value tokens = tensor::DimOp::create(b, loc, q, 1);
  auto type = cast<RankedTensorType>(cuSeqlens.getType());
  Value tokensInt =
      arith::IndexCastOp::create(b, loc, type.getElementType(), tokens);
  Value init =
      emptyTensor(b, loc, mixedSizes(b, loc, cuSeqlens), type.getElementType());
  return buildGeneric(
      b, loc, ValueRange{}, init, {b.getMultiDimIdentityMap(1)}, 1, 0,
      [&](OpBuilder &nb, Location l, ValueRange) -> Value {
        Value i = linalg::IndexOp::create(nb, l, 0);
        Value mirrored = arith::SubIOp::create(nb, l, last, i);
        Value offset =
            tensor::ExtractOp::create(nb, l, cuSeqlens, ValueRange{mirrored});
        return arith::SubIOp::create(nb, l, tokensInt, offset);
      });
}

ReverseFlips::ReverseFlips(OpBuilder &b, Location loc, bool reverse,
                           Value cuSeqlens, Value q)
    : b(b), loc(loc), reverse(reverse), cuSeqlens(cuSeqlens),
      forwardOffsets(cuSeqlens) {
  if (reverse && cuSeqlens)
    forwardOffsets = reversedOffsets(b, loc, cuSeqlens, q);
}

Value ReverseFlips::tokens(Value x) const {
  return x && reverse ? flipTime(b, loc, x) : x;
}

Value ReverseFlips::sequences(Value x) const {
  return x && reverse && cuSeqlens ? flipDim(b, loc, x, 0) : x;
}

OpOperand *mlir::la::findEmptyDestination(Value value) {
  while (auto result = dyn_cast<OpResult>(value)) {
    Operation *op = result.getOwner();
    unsigned index = result.getResultNumber();
    OpOperand *destination = nullptr;
    if (auto forall = dyn_cast<scf::ForallOp>(op))
      destination = &forall.getOutputsMutable()[index];
    else if (auto loop = dyn_cast<scf::ForOp>(op))
      destination = &loop.getInitArgsMutable()[index];
    else if (auto dps = dyn_cast<DestinationStyleOpInterface>(op))
      destination = dps.getTiedOpOperand(result);
    if (!destination)
      return nullptr;
    if (destination->get().getDefiningOp<tensor::EmptyOp>())
      return destination;
    value = destination->get();
  }
  return nullptr;
}
