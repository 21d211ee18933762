//===- LaPasses.td - passes of the la dialect --------------*- tablegen -*-===//

#ifndef LA_DIALECT_LA_LAPASSES_TD
#define LA_DIALECT_LA_LAPASSES_TD

include "mlir/Pass/PassBase.td"

def LaLowerToRecurrencePass : Pass<"la-lower-to-recurrence"> {
  let summary = "Lower every la.attention variant to the canonical recurrence";
  let description = [{
    Rewrites each level-0 `la.attention` into one level-1 `la.recurrence`:
    the named variant becomes a diagonal gate kind plus a low-rank structure,
    the default scale `K^-0.5` and epsilon become explicit, and in-kernel L2
    normalisation of q and k becomes `linalg.generic` ops on tensors (computed
    in f32; for f16/bf16 inputs the normalised q and k stay in f32 so no
    precision is lost before the recurrence).
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let options = [
    Option<"l2normEps", "l2norm-eps", "double", "1e-6",
           "epsilon added to the sum of squares in the L2 normalisation">
  ];
}

#endif // LA_DIALECT_LA_LAPASSES_TD
