//===- LaUtils.h - helpers shared by la's passes ----------------*- C++ -*-===//

#ifndef LA_DIALECT_LA_LAUTILS_H
#define LA_DIALECT_LA_LAUTILS_H

#include "la/Dialect/La/LaOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"

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

/// A tensor of the given sizes filled with `value`.
Value filledTensor(OpBuilder &b, Location loc, ArrayRef<OpFoldResult> sizes,
                   Type elementType, double value);

/// `tensor.empty` filled with an f32 zero.
Value zeroTensor(OpBuilder &b, Location loc, ArrayRef<OpFoldResult> sizes);

/// f32 multiply and add.
Value mulF(OpBuilder &b, Location loc, Value x, Value y);
Value addF(OpBuilder &b, Location loc, Value x, Value y);

/// extendToF32(x) * extendToF32(y), the extensions built in that order. (A
/// call with two op-building arguments would order them as the host
/// compiler evaluates arguments, and la's IR must not depend on it.)
Value mulExtended(OpBuilder &b, Location loc, Value x, Value y);

/// A `linalg.generic` with `inputs`, one `init`, `parallel` then
/// `reductions` loops, and a body that returns the value to yield.
Value buildGeneric(OpBuilder &b, Location loc, ValueRange inputs, Value init,
                   ArrayRef<AffineMap> maps, unsigned parallel,
                   unsigned reductions,
                   function_ref<Value(OpBuilder &, Location, ValueRange)> body);

/// P[b,n,h,i,j] = sum_kk x[b,n,i,h,kk] yT[b,n,h,kk,j] into `init` (the
/// score matrices of blocks of tokens: x [B,NC,C,H,K] rows, y read as
/// [B,NC,H,K,C] so that the score column j is the contiguous dimension),
/// the products in f32. Loops (b,n,h,i,j,kk).
Value buildBlockScores(OpBuilder &b, Location loc, Value x, Value yT,
                       Value init);
/// `size` entries of dim `dim` of `x` from `offset`, keeping the rank.
Value sliceDim(OpBuilder &b, Location loc, Value x, unsigned dim,
               OpFoldResult offset, OpFoldResult size);

/// Entry `offset` of dim `dim` of `x`, with that dim dropped.
Value extractUnitSlice(OpBuilder &b, Location loc, Value x, unsigned dim,
                       OpFoldResult offset);

/// Inserts `part` into `whole` at `offset` of dim `dim`. `part` has the rank
/// of `whole`, or one less (the unit dim `dim` dropped).
Value insertAt(OpBuilder &b, Location loc, Value part, Value whole,
               unsigned dim, OpFoldResult offset);

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

/// The use of a `tensor.empty` that `value`'s buffer starts as: followed
/// back through the tied destinations of destination-passing ops (linalg,
/// tensor.insert_slice), scf.forall's shared outputs and scf.for's
/// loop-carried inits. Null when the chain ends elsewhere (or `value` is
/// itself the tensor.empty).
OpOperand *findEmptyDestination(Value value);

/// Replaces `op`'s results with `values` (one per result; a null value for
/// an absent optional result is skipped), inserting tensor.cast where the
/// static shapes differ.
void replaceWithCasts(RewriterBase &rewriter, Operation *op,
                      ArrayRef<Value> values);

/// Sums `x` (f32) over the value heads of each key head along dim
/// `headDim` (value head hv belongs to key head hv floordiv `group`), giving
/// `heads` there. The axis is split into [heads, group] first: linalg needs
/// invertible maps, which hv floordiv group is not.
Value sumGroups(OpBuilder &b, Location loc, Value x, unsigned headDim,
                OpFoldResult heads, int64_t group);

/// Repeats each head of `x` along dim `headDim` `group` times (head h
/// becomes heads h*group ... h*group+group-1), in `x`'s element type: the
/// inverse direction of sumGroups, through a [.., H, group, ..] tensor
/// collapsed, so that every map stays a projected permutation.
Value repeatHeads(OpBuilder &b, Location loc, Value x, unsigned headDim,
                  int64_t group);

/// `x` with its axis `dim` reversed, in its element type: an affine map
/// `n - 1 - i` when the axis is static, a gather otherwise.
Value flipDim(OpBuilder &b, Location loc, Value x, unsigned dim);

/// `x` [B,T,...] with its time axis (dim 1) reversed.
inline Value flipTime(OpBuilder &b, Location loc, Value x) {
  return flipDim(b, loc, x, 1);
}

/// The flips that make the gradient of a `reverse` recurrence the forward
/// one's (la-derive-backward's for la.recurrence, la-lower-to-recurrence's
/// for la.attention_grad): its per-token operands and gradients flipped in
/// time, with packed sequences its states flipped along N and the offsets
/// `T - cu[N - i]` (the sequences in reverse order). Every method returns its
/// input unchanged without `reverse` (and for a null value).
class ReverseFlips {
public:
  ReverseFlips(OpBuilder &b, Location loc, bool reverse, Value cuSeqlens,
               Value q);
  /// A [B,T,...] operand or gradient.
  Value tokens(Value x) const;
  /// An [N,...] state or state gradient.
  Value sequences(Value x) const;
  /// The forward problem's cu_seqlens (null without packed sequences).
  Value offsets() const { return forwardOffsets; }

private:
  OpBuilder &b;
  Location loc;
  bool reverse;
  Value cuSeqlens, forwardOffsets;
};

/// A fixed per-head decay `logDecay` ([H]) as a scalar log-gate tensor
/// [B,T,H] (f32) for the q : [B,T,H,K] it applies to.
Value broadcastLogDecay(OpBuilder &b, Location loc, ArrayRef<float> logDecay,
                        Value q);

/// The zero initial state [N,HV,K,V] of `la.recurrence` (f32), for a
/// recurrence that starts from none.
Value zeroState(OpBuilder &b, Location loc, Value q, Value v, Value cuSeqlens);

/// The argument attribute of a function whose caller hands over that
/// argument's buffer for the function's result to be written into (a
/// recurrence's state updated in place; `la-in-place-arguments`).
inline constexpr llvm::StringLiteral kInPlaceAttrName = "la.in_place";

/// Whether `value` is a function argument marked `la.in_place`.
bool isInPlaceArgument(Value value);

/// The operands and attributes of an `la.recurrence`, so that a pattern can
/// rebuild one with a few parts changed. `oInit` and `initialState` are its
/// inits.
struct RecurrenceParts {
  Value q, k, v, g, gv, beta, a, b, cuSeqlens, stateIndices, oInit,
      initialState;
  /// The read from the state's value side and its init, or null.
  Value transposedQuery, transposedOInit;
  GateKind gate;
  std::optional<SmallVector<float>> logDecay;
  LowRank lowRank;
  float scale;
  bool normalizer;
  std::optional<float> eps;
  bool reverse = false;

  static RecurrenceParts of(RecurrenceOp op);
  /// Builds the op; its result types are its inits' types.
  RecurrenceOp build(OpBuilder &builder, Location loc) const;
};

} // namespace la
} // namespace mlir

#endif // LA_DIALECT_LA_LAUTILS_H
