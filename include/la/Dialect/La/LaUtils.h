//===- LaUtils.h - helpers shared by la's passes ----------------*- C++ -*-===//

#ifndef LA_DIALECT_LA_LAUTILS_H
#define LA_DIALECT_LA_LAUTILS_H

#include "la/Dialect/La/LaOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/Builders.h"

namespace mlir {
namespace la {

/// Converts a float scalar to `type` (extf, truncf or nothing).
Value castFloat(OpBuilder &b, Location loc, Value x, Type type);

/// Converts a float scalar to f32.
Value extendToF32(OpBuilder &b, Location loc, Value x);

/// An f32 constant.
Value constantF32(OpBuilder &b, Location loc, float value);

/// `tensor.empty` of the given (mixed static/dynamic) sizes.
Value emptyTensor(OpBuilder &b, Location loc, ArrayRef<OpFoldResult> sizes,
                  Type elementType);

/// `tensor.empty` filled with an f32 zero.
Value zeroTensor(OpBuilder &b, Location loc, ArrayRef<OpFoldResult> sizes);

/// An affine map over `numDims` dims whose results are the listed dims;
/// a negative entry -d-1 stands for `dim(d) floordiv groupSize` (the key
/// head of a grouped value head).
AffineMap dimMap(MLIRContext *ctx, unsigned numDims, ArrayRef<int64_t> dims,
                 int64_t groupSize = 1);

/// `parallel` iterators followed by `reductions` reduction iterators.
SmallVector<utils::IteratorType> iteratorTypes(unsigned parallel,
                                               unsigned reductions = 0);

/// The mixed sizes of `value`, a ranked tensor.
SmallVector<OpFoldResult> mixedSizes(OpBuilder &b, Location loc, Value value);

/// The static shape of mixed sizes (dynamic where not constant).
SmallVector<int64_t> staticShape(ArrayRef<OpFoldResult> sizes);

/// The operands and attributes of an `la.recurrence`, so that a pattern can
/// rebuild one with a few parts changed.
struct RecurrenceParts {
  Value q, k, v, g, beta, a, b, initialState, cuSeqlens;
  GateKind gate;
  std::optional<SmallVector<float>> logDecay;
  LowRank lowRank;
  float scale;
  bool normalizer;
  std::optional<float> eps;

  static RecurrenceParts of(RecurrenceOp op);
  /// Builds the op; `finalStateType` may be null (no final state).
  RecurrenceOp build(OpBuilder &builder, Location loc, Type outputType,
                     Type finalStateType) const;
};

} // namespace la
} // namespace mlir

#endif // LA_DIALECT_LA_LAUTILS_H
