//===- TokenStep.h - one token of la.recurrence on an f32 state -*- C++ -*-===//
//
// The per-token step shared by la.recurrence's loop lowering and the forward
// recomputation inside la.recurrence_grad's.
//
//===----------------------------------------------------------------------===//

#ifndef LA_CONVERSION_LATOLINALG_TOKENSTEP_H
#define LA_CONVERSION_LATOLINALG_TOKENSTEP_H

#include "la/Dialect/La/LaOps.h"

namespace mlir {
namespace la {

/// The inputs of a recurrence, as la.recurrence and la.recurrence_grad name
/// them. A `fixed` gate must have been made a `scalar` one with `g`. `gv`
/// (la.recurrence's value-side gate) is set by the caller that has one.
struct RecurrenceInputs {
  Value q, k, v, g, beta, a, b;
  GateKind gate;
  LowRank lowRank;
  float scale;
  Value gv = Value();

  template <typename OpT> static RecurrenceInputs of(OpT op) {
    return {op.getQ(),       op.getK(),
            op.getV(),       op.getG(),
            op.getBeta(),    op.getA(),
            op.getB(),       op.getGate(),
            op.getLowRank(), op.getScale().convertToFloat()};
  }
};

/// Emits the per-token update and read-out. Loops are named b (batch),
/// hv (value head), kk (key channel), vv (value channel); a value head reads
/// key head hv floordiv group. With grouped query heads (`queryGroup` G >
/// 0), the read-out has one row per query head hq, reading state hq / G.
class TokenStepBuilder {
public:
  TokenStepBuilder(const RecurrenceInputs &in, int64_t group, MLIRContext *ctx,
                   int64_t queryGroup = 0)
      : in(in), group(group), queryGroup(queryGroup), ctx(ctx) {}

  /// Returns the state after token t and the output row [B,HV,V] (f32;
  /// [B,HQ,V] with grouped query heads).
  std::pair<Value, Value> build(OpBuilder &b, Location loc, Value state,
                                Value t);

  /// u[b,hv,vv] = sum_kk x[b,hv/group,kk] S[b,hv,kk,vv]. Loops (b,hv,vv,kk).
  Value contractKeys(OpBuilder &b, Location loc, Value x, Value state);

private:
  void appendGate(Value g, SmallVectorImpl<Value> &inputs,
                  SmallVectorImpl<AffineMap> &maps);

  RecurrenceInputs in;
  int64_t group;
  int64_t queryGroup;
  MLIRContext *ctx;
};

} // namespace la
} // namespace mlir

#endif // LA_CONVERSION_LATOLINALG_TOKENSTEP_H
