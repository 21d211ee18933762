//===- Passes.td - la conversion passes --------------------*- tablegen -*-===//

#ifndef LA_CONVERSION_PASSES_TD
#define LA_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertLaToLinalgPass : Pass<"convert-la-to-linalg"> {
  let summary = "Lower the remaining la ops to linalg, tensor and scf";
  let description = [{
    Lowers the chunked level-2 ops (`la.chunk_*`) to `linalg.generic` ops on
    tensors and an `scf.for` over chunks, and every remaining
    `la.recurrence` to the plain recurrence: an `scf.for` over tokens carrying
    the f32 state (per packed sequence with `cu_seqlens`). Run `la-chunk`
    first to get the chunked algorithm; without it this pass gives the
    sequential baseline, which is also the decode path (T = 1 with a carried
    state). `la.attention` must have been lowered by
    `la-lower-to-recurrence`; any la op left is an error.

    `la.chunk_cumsum` becomes one masked reduction over the chunk's rows
    (`C^2` additions per element, all of them parallel: the GPU's form), or
    with `cumsum-scan` an `scf.for` over the rows adding each row to the
    previous sum (`C` additions per element: the CPU's form).
  }];
  let options = [
    Option<"cumsumScan", "cumsum-scan", "bool", "false",
           "la.chunk_cumsum as a loop over rows instead of a masked "
           "reduction">
  ];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

#endif // LA_CONVERSION_PASSES_TD
