//===- ChunkedProgram.h - the level-2 program of a recurrence ---*- C++ -*-===//
//
// Shared by la-chunk (one program over whole tensors, per-chunk states
// materialised) and la-fuse-recurrence (the same program per batch, head and
// chunk inside loops, the state carried from chunk to chunk).
//
//===----------------------------------------------------------------------===//

#ifndef LA_LIB_DIALECT_LA_TRANSFORMS_CHUNKEDPROGRAM_H
#define LA_LIB_DIALECT_LA_TRANSFORMS_CHUNKEDPROGRAM_H

#include "la/Dialect/La/LaOps.h"

#include "mlir/IR/Builders.h"

namespace mlir {
namespace la {

/// The chunk size for a recurrence whose q is `q` ([B,T,H,K]): `requested`,
/// but no more than a static T (a longer chunk would only be padding).
int64_t chunkSizeFor(int64_t requested, Value q);

/// Builds the chunked program for one batch of equally long sequences.
class ChunkedProgramBuilder {
public:
  ChunkedProgramBuilder(OpBuilder &b, Location loc, int64_t chunkSize)
      : b(b), loc(loc), chunkSize(chunkSize) {}

  struct Result {
    Value output;     // [B,T,HV,V] (chunked: [B,NC,C,HV,V]), output type;
                      // HQ heads with grouped query heads
    Value finalState; // [B,HV,K,V] f32
    /// The read from the state's value side, [B,T,HV,K] (chunked:
    /// [B,NC,C,HV,K]), or null without a transposed query.
    Value transposedOutput = Value();
  };

  /// The inputs of one program: [B,T,...] with T possibly dynamic, or the
  /// same chunked as [B,NC,C,...]: q, k : [B,T,H,K], v : [B,T,HV,V], g :
  /// [B,T,H(,K)] or null, beta : [B,T,H] (the delta rule) or a, b :
  /// [B,T,H,K] (the general low-rank form) or neither, initialState :
  /// [B,HV,K,V] or null. With grouped query heads q is [B,T,HQ,K] (HQ a
  /// multiple of HV) and the output [B,T,HQ,V].
  /// `transposedQuery : [B,T,HV,V]` (no grouped query heads) adds
  /// la.recurrence's read from the value side, its output of element type
  /// `transposedElementType`.
  struct Inputs {
    Value q, k, v, g, gv, beta, a, b, initialState;
    Value transposedQuery = Value();
    Type transposedElementType = Type();
  };

  /// Sets the number of chunks and the padding for `time` tokens.
  void prepare(OpFoldResult time);
  OpFoldResult getNumChunks() const { return numChunks; }

  /// [B,T,...] -> [B,NC,C,...], zero-padded in time (null stays null).
  Value chunkify(Value x);
  /// [B,NC,C,HV,V] -> [B,T,HV,V], dropping the padding.
  Value unchunkify(Value x);

  /// The level-2 ops on chunked inputs; the output stays chunked.
  Result buildChunked(const Inputs &chunked, float scale,
                      Type outputElementType);

  /// prepare, chunkify, buildChunked and unchunkify.
  Result build(const Inputs &in, float scale, Type outputElementType);

private:
  /// `S_t x_t` for the transposed query x: chunked [B,NC,C,HV,K].
  Value buildTransposedRead(const Inputs &in, Value keys, Value values,
                            Value extraKeys, Value extraValues, Value gates,
                            Value valueGates, Value states, float scale);

  OpBuilder &b;
  Location loc;
  int64_t chunkSize;
  OpFoldResult time, numChunks, padding;
};

} // namespace la
} // namespace mlir

#endif // LA_LIB_DIALECT_LA_TRANSFORMS_CHUNKEDPROGRAM_H
