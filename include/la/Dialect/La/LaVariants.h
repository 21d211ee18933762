//===- LaVariants.h - the named variants of la.attention --------*- C++ -*-===//
//
// The one registry of the named linear-attention variants: la.attention's
// keywords, the C API (laGetVariant), la-run, the Python package and the
// tests all read it. A variant is a pair (update rule, gate kind); its
// operands follow from the pair (docs/design.md, "How to add a variant").
//
//===----------------------------------------------------------------------===//

#ifndef LA_DIALECT_LA_LAVARIANTS_H
#define LA_DIALECT_LA_LAVARIANTS_H

#include "la/Dialect/La/LaOps.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <optional>

namespace mlir {
namespace la {

struct VariantInfo {
  /// la.attention's keyword (also the name la-run and Python use).
  llvm::StringLiteral keyword;
  UpdateRule update;
  GateKind gate;
  /// The model, in a few words.
  llvm::StringLiteral summary;
};

/// Every named variant, one per (update, gate) pair.
llvm::ArrayRef<VariantInfo> getVariants();

/// The variant named `keyword`, or null.
const VariantInfo *lookupVariant(llvm::StringRef keyword);

/// The variant of (`update`, `gate`) (every pair has one).
const VariantInfo &lookupVariant(UpdateRule update, GateKind gate);

/// What an operand of la.attention holds, as fla's conventions and la's
/// numerics expect it: what tools that make inputs (la-run's random
/// arguments) generate and what they check.
enum class OperandRole {
  Query,
  /// Keys; unit-norm ones for the delta and erase-write rules without
  /// qk_l2norm (the transition is then a contraction).
  Key,
  UnitNormKey,
  Value,
  /// g: log-space gates, <= 0.
  LogGate,
  /// beta, erase and write: in (0, 1).
  UnitInterval,
  /// The dplr rule's b: rows of norm 1/2, so that with a unit-norm `a` the
  /// transition `I - b a^T` has eigenvalues in [1/2, 3/2].
  LowRankWrite,
  /// The initial state [N, HV, K, V].
  State,
  /// cu_seqlens: packed sequences' offsets.
  SeqLens,
};

/// The role of `operand` in `op`, or nullopt when `op` does not read it.
std::optional<OperandRole> getOperandRole(AttentionOp op, Value operand);

} // namespace la
} // namespace mlir

#endif // LA_DIALECT_LA_LAVARIANTS_H
