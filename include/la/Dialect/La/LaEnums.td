//===- LaEnums.td - enums of the la dialect ----------------*- tablegen -*-===//

#ifndef LA_DIALECT_LA_LAENUMS_TD
#define LA_DIALECT_LA_LAENUMS_TD

include "la/Dialect/La/LaDialect.td"
include "mlir/IR/EnumAttr.td"
include "mlir/Dialect/SCF/IR/DeviceMappingInterface.td"

def La_UpdateRule : I32EnumAttr<"UpdateRule", "state update rule", [
    I32EnumAttrCase<"Additive", 0, "additive">,
    I32EnumAttrCase<"Delta", 1, "delta">,
    I32EnumAttrCase<"EraseWrite", 2, "erase_write">,
    I32EnumAttrCase<"Dplr", 3, "dplr">
  ]> {
  let cppNamespace = "::mlir::la";
  let genSpecializedAttr = 0;
}
def La_UpdateRuleAttr : EnumAttr<La_Dialect, La_UpdateRule, "update"> {
  let summary = "additive (S += k v^T), delta (S -= beta k (k^T S - v^T)), "
                "erase_write (Gated DeltaNet-2: S += k (w*v)^T - (e*k)(k^T S)) "
                "or dplr (RWKV-7: S += k v^T - b (a^T S), explicit a and b)";
}

def La_GateKind : I32EnumAttr<"GateKind", "kind of the diagonal decay", [
    I32EnumAttrCase<"None", 0, "none">,
    I32EnumAttrCase<"Fixed", 1, "fixed">,
    I32EnumAttrCase<"Scalar", 2, "scalar">,
    I32EnumAttrCase<"Channel", 3, "channel">
  ]> {
  let cppNamespace = "::mlir::la";
  let genSpecializedAttr = 0;
}
def La_GateKindAttr : EnumAttr<La_Dialect, La_GateKind, "gate"> {
  let summary = "none, a fixed per-head log-decay, a data-dependent scalar "
                "[B,T,H] or a channel-wise [B,T,H,K] log-gate";
}

def La_LowRank : I32EnumAttr<"LowRank", "low-rank part of the transition", [
    I32EnumAttrCase<"None", 0, "none">,
    I32EnumAttrCase<"Delta", 1, "delta">,
    I32EnumAttrCase<"General", 2, "general">
  ]> {
  let cppNamespace = "::mlir::la";
  let genSpecializedAttr = 0;
}
def La_LowRankAttr : EnumAttr<La_Dialect, La_LowRank, "low_rank"> {
  let summary = "none, the delta-rule structure (b = beta k, a = alpha * k, "
                "write key beta k) or explicit vectors a and b";
}

def La_TaskMappingAttr : AttrDef<La_Dialect, "TaskMapping",
    [DeclareAttrInterfaceMethods<DeviceMappingAttrInterface,
                                 ["getMappingId", "isLinearMapping",
                                  "getRelativeIndex"]>]> {
  let mnemonic = "task";
  let summary = "a dimension of la-fuse-recurrence's tasks";
  let description = [{
    The mapping of the `scf.forall` that `la-fuse-recurrence` builds over
    its tasks (batch, value head, value tile): `#la.task<0>`, `#la.task<1>`,
    ... name its dimensions. A mapped forall is kept by canonicalization even
    with one iteration (an unmapped one is folded into straight-line code),
    so the task structure that `la-tile-for-gpu` maps onto GPU blocks is a
    fact of the IR, not of the pass order. The CPU lowers it as any forall.
  }];
  let parameters = (ins "int64_t":$dim);
  let assemblyFormat = "`<` $dim `>`";
}

#endif // LA_DIALECT_LA_LAENUMS_TD
