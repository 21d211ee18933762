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

    A channel-wise gate's score product (`Q K^T` with a decay per key
    channel: GLA, KDA, the general form) is built in blocks of `gate-block`
    rows when that divides the chunk and the chunk has more than one block.
    For row `i` in block `a` and column `j` in an earlier block `c`, with
    `R_a` the gates at block `a`'s first row and `E_c` those at block `c`'s
    last row, `exp(G_i - G_j) = exp(G_i - R_a) exp(R_a - E_c) exp(E_c -
    G_j)`, each factor at most 1: the queries and the keys are pre-scaled
    once (one exponential per element), each key block is multiplied by
    one factor per block pair and channel (marked `la.block_causal`, so
    `la-tile` skips the pairs the mask drops), and those blocks are one
    plain product. Only the diagonal blocks take an exponential per product
    term, so smaller blocks mean fewer exponentials and more (multiplied)
    key copies: the CPU pipeline uses 8, the GPU 16 (its key copies live in
    shared memory). `gate-block=0` leaves the whole product with an
    exponential per term.

    With `gate-spread-limit=L > 0` the form is chosen at run time, per
    chunk in a fused program: where every cumulative gate of the chunk (and
    of the query side's gates) lies within `L` of the query side's gates at
    the chunk's first row `R`, `exp(X_i - G_j) = exp(X_i - R) exp(R - G_j)`
    with both factors within `exp(+-L)`, and the scores are one plain
    product of `q exp(X - R)` and `k exp(R - G)`: no exponential per term
    and no blocks. Elsewhere (strong decays, where those factors could
    overflow) the form above runs. The check is one pass over the chunk's
    gates; a NaN gate fails it. The CPU pipeline uses `L = 32`
    (`exp(32)` is about `8e13`); the GPU pipeline does not use this form.
  }];
  let options = [
    Option<"cumsumScan", "cumsum-scan", "bool", "true",
           "la.chunk_cumsum as a loop over rows instead of a masked "
           "reduction">,
    Option<"gateBlock", "gate-block", "int64_t", "8",
           "rows per block of a channel-gate score product (0: unblocked)">,
    Option<"gateSpreadLimit", "gate-spread-limit", "double", "32",
           "run-time bound on how far a chunk's cumulative gates may stray "
           "from its first row for the one-product form of a channel-gate "
           "score product (0: never that form)">
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
