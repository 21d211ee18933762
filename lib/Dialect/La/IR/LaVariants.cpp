//===- LaVariants.cpp - the named variants of la.attention ----------------===//

#include "la/Dialect/La/LaVariants.h"

#include "llvm/Support/ErrorHandling.h"

using namespace mlir;
using namespace mlir::la;

// The rows of la.attention's variant table; every (update, gate) pair has
// exactly one (a test checks), so the printer never fails.
static constexpr VariantInfo kVariants[] = {
    {"linear", UpdateRule::Additive, GateKind::None,
     "linear attention (Katharopoulos et al.)"},
    {"retention", UpdateRule::Additive, GateKind::Fixed,
     "RetNet: a fixed decay per head"},
    {"mamba2", UpdateRule::Additive, GateKind::Scalar,
     "Mamba-2 / simple GLA: a scalar data-dependent gate"},
    {"gla", UpdateRule::Additive, GateKind::Channel,
     "gated linear attention: a channel-wise gate"},
    {"deltanet", UpdateRule::Delta, GateKind::None, "DeltaNet: the delta rule"},
    {"decayed_deltanet", UpdateRule::Delta, GateKind::Fixed,
     "the delta rule with a fixed decay per head"},
    {"gated_deltanet", UpdateRule::Delta, GateKind::Scalar,
     "Gated DeltaNet: the delta rule with a scalar gate"},
    {"kda", UpdateRule::Delta, GateKind::Channel,
     "Kimi Delta Attention: the delta rule with a channel-wise gate"},
    {"deltanet2", UpdateRule::EraseWrite, GateKind::None,
     "DeltaNet-2: erase and write gates"},
    {"decayed_deltanet2", UpdateRule::EraseWrite, GateKind::Fixed,
     "DeltaNet-2 with a fixed decay per head"},
    {"scalar_gated_deltanet2", UpdateRule::EraseWrite, GateKind::Scalar,
     "DeltaNet-2 with a scalar gate"},
    {"gated_deltanet2", UpdateRule::EraseWrite, GateKind::Channel,
     "Gated DeltaNet-2: erase and write gates, a channel-wise gate"},
    {"dplr", UpdateRule::Dplr, GateKind::None,
     "diagonal-plus-low-rank: explicit low-rank vectors a, b"},
    {"decayed_dplr", UpdateRule::Dplr, GateKind::Fixed,
     "diagonal-plus-low-rank with a fixed decay per head"},
    {"scalar_gated_dplr", UpdateRule::Dplr, GateKind::Scalar,
     "diagonal-plus-low-rank with a scalar gate"},
    {"rwkv7", UpdateRule::Dplr, GateKind::Channel,
     "RWKV-7 (fla's DPLR delta rule): a channel-wise gate, explicit a and b"},
};

ArrayRef<VariantInfo> mlir::la::getVariants() { return kVariants; }

std::optional<OperandRole> mlir::la::getOperandRole(AttentionOp op,
                                                    Value operand) {
  if (operand == op.getQ())
    return OperandRole::Query;
  if (operand == op.getK())
    return (op.getUpdate() == UpdateRule::Delta ||
            op.getUpdate() == UpdateRule::EraseWrite) &&
                   !op.getQkL2norm()
               ? OperandRole::UnitNormKey
               : OperandRole::Key;
  if (operand == op.getV())
    return OperandRole::Value;
  if (operand == op.getG())
    return OperandRole::LogGate;
  if (operand == op.getBeta() || operand == op.getErase() ||
      operand == op.getWrite())
    return OperandRole::UnitInterval;
  if (operand == op.getA())
    return OperandRole::UnitNormKey;
  if (operand == op.getB())
    return OperandRole::LowRankWrite;
  if (operand == op.getInitialState())
    return OperandRole::State;
  if (operand == op.getCuSeqlens())
    return OperandRole::SeqLens;
  return std::nullopt;
}

const VariantInfo *mlir::la::lookupVariant(StringRef keyword) {
  for (const VariantInfo &variant : kVariants)
    if (variant.keyword == keyword)
      return &variant;
  return nullptr;
}

const VariantInfo &mlir::la::lookupVariant(UpdateRule update, GateKind gate) {
  for (const VariantInfo &variant : kVariants)
    if (variant.update == update && variant.gate == gate)
      return variant;
  llvm_unreachable("every (update, gate) pair has a variant");
}
