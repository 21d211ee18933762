//===- LaUtils.cpp - helpers shared by la's passes ------------------------===//

#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

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

Value mlir::la::zeroTensor(OpBuilder &b, Location loc,
                           ArrayRef<OpFoldResult> sizes) {
  Value empty = emptyTensor(b, loc, sizes, b.getF32Type());
  return linalg::FillOp::create(b, loc, constantF32(b, loc, 0.0f), empty)
      .getResult(0);
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

RecurrenceParts RecurrenceParts::of(RecurrenceOp op) {
  RecurrenceParts parts;
  parts.q = op.getQ();
  parts.k = op.getK();
  parts.v = op.getV();
  parts.g = op.getG();
  parts.beta = op.getBeta();
  parts.a = op.getA();
  parts.b = op.getB();
  parts.initialState = op.getInitialState();
  parts.cuSeqlens = op.getCuSeqlens();
  parts.gate = op.getGate();
  if (std::optional<ArrayRef<float>> decay = op.getLogDecay())
    parts.logDecay = SmallVector<float>(*decay);
  parts.lowRank = op.getLowRank();
  parts.scale = op.getScale().convertToFloat();
  parts.normalizer = op.getNormalizer();
  if (std::optional<APFloat> eps = op.getEps())
    parts.eps = eps->convertToFloat();
  return parts;
}

RecurrenceOp RecurrenceParts::build(OpBuilder &builder, Location loc,
                                    Type outputType,
                                    Type finalStateType) const {
  MLIRContext *ctx = builder.getContext();
  DenseF32ArrayAttr decayAttr;
  if (logDecay)
    decayAttr = builder.getDenseF32ArrayAttr(*logDecay);
  return RecurrenceOp::create(
      builder, loc, outputType, finalStateType, q, k, v, g, beta, a, b,
      initialState, cuSeqlens, GateKindAttr::get(ctx, gate), decayAttr,
      LowRankAttr::get(ctx, lowRank), builder.getF32FloatAttr(scale),
      normalizer ? builder.getUnitAttr() : UnitAttr(),
      eps ? builder.getF32FloatAttr(*eps) : FloatAttr());
}
