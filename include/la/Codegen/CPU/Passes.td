//===- Passes.td - CPU code generation passes of la --------*- tablegen -*-===//
//
// The CPU half of la's code generation: the linalg program on tensors that
// convert-la-to-linalg produces, tiled onto threads and vector registers.
//
//===----------------------------------------------------------------------===//

#ifndef LA_CODEGEN_CPU_PASSES_TD
#define LA_CODEGEN_CPU_PASSES_TD

include "mlir/Pass/PassBase.td"

def LaTilePass : Pass<"la-tile", "func::FuncOp"> {
  let summary = "Tile and vectorise la's structured ops for the CPU";
  let description = [{
    Runs on the `linalg` ops on tensors that `convert-la-to-linalg` produces.
    Each op with static loop ranges and projected-permutation maps is tiled
    twice. The loops outside the register tile (batch, chunk, head, ...)
    become one `scf.forall` with one iteration per index, which
    `scf-forall-to-parallel` and `convert-scf-to-openmp` share among threads
    (or `scf.for` with `distribute=false`, for ops already inside an
    `scf.forall`, such as la-fuse-recurrence's tasks, where nested OpenMP
    regions would only add their cost, and for ops of fewer than 16384
    iterations inside an `scf.for`, such as one token's row in a loop over
    tokens, whose work would not pay for the region entered per iteration).
    The register tile takes
    `lane-tile` iterations of the output's innermost loop (the vector lanes),
    `row-tile` iterations of an output loop that some input does not read
    (so each loaded vector is reused by every row) and `reduction-tile`
    iterations of each reduction loop; a tile size that does not divide its
    loop leaves a partial tile, which is peeled into its own loop.

    A copy that reverses one dim (the time flips of `reverse` recurrences:
    an input map `n - 1 - d`, which is not a projected permutation) is first
    rewritten into an `scf.for` over that dim copying one slice per
    iteration with identity maps, so that it is tiled and vectorised too
    (a `reverse` recurrence of (1,4096,8,128,128) went from 60 to 43 ms, its
    forward twin taking 42-47 ms).

    With `vectorize` (the default) every register-tile op is then vectorised
    (contractions into `vector.contract`), tensor slices are folded into the
    vector transfers and accumulator tiles are hoisted out of the reduction
    loops, so they stay in registers. Ops outside this form (dynamic shapes,
    the floordiv maps of grouped value heads, the block maps of the triangular
    inverse) are left as they are and lowered to scalar loops later.

    An op marked `la.lower_triangular = array<i64: row, column>` (a row loop
    and a reduction loop: the product's terms vanish where `column > row`,
    as in a causally masked score matrix times V, or a lower-triangular
    `T` times a matrix) gets its column loop cut at the end of each row
    tile: the tile at rows `[r, r + R)` runs the columns up to
    `min(r + R, C)`, which skips about half of a `C x C` product.
    `convert-la-to-linalg` sets the mark on the products it builds from
    masked scores. Its mirror, `la.upper_triangular = array<i64: row,
    column>` (terms with `column < row` vanish: the earlier block of
    `la.sliding_window_hybrid`'s window), starts the column loop of the
    tile at rows `[r, r + R)` at the column tile that holds column `r`.
    Likewise `la.block_causal = array<i64: block, column,
    size>` (only entries with `column < block * size` are read later, as in
    the earlier-block part of a blocked channel-gate score product): when
    `block` is an outer loop, the column loop inside it (a register-tile
    loop, or an outer loop nested in the block's, as for element-wise ops,
    whose row tile is 1) stops at `min(block * size, C)`; with `distribute`
    the loops of one `scf.forall` are not cut.
  }];
  let dependentDialects = [
    "::mlir::la::LaDialect",
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
    "::mlir::vector::VectorDialect"
  ];
  let options = [
    Option<"rowTile", "row-tile", "int64_t", "8",
           "rows of the register tile (>= 1)">,
    Option<"laneTile", "lane-tile", "int64_t", "32",
           "vector lanes of the register tile (>= 1)">,
    Option<"reductionTile", "reduction-tile", "int64_t", "1",
           "reduction steps per register tile (>= 1)">,
    Option<"distribute", "distribute", "bool", "true",
           "outer loops as scf.forall (threads) instead of scf.for">,
    Option<"vectorize", "vectorize", "bool", "true",
           "vectorise the register tiles">
  ];
}

def LaInPlaceDestinationsPass : Pass<"la-in-place-destinations",
                                     "func::FuncOp"> {
  let summary = "Choose destinations so that bufferization writes in place";
  let description = [{
    Runs on the `linalg` ops on tensors of the chunked program, before
    `la-tile` and one-shot bufferization, and rewrites the destinations
    (`outs`) of its ops so that the buffers they become are written in
    place instead of being allocated and copied per chunk:

    - Loop-carried state: when an `scf.for` yields a chain of ops whose
      first op is element-wise, reads the loop's iteration argument with
      the same indexing as its output and ignores its own `outs` (the
      state's decay, followed by the state update's accumulation), the
      chain is moved to the end of the loop body, after every other reader
      of the iteration argument, and its first op is rewritten to update
      the iteration argument in place (`outs(%iter_arg)`). The state then
      lives in one buffer per task instead of a new one per chunk.
    - One destination per op: a `tensor.empty` (or a `linalg.fill` of one)
      used as the destination of several ops is cloned for each, before
      its user, since two ops writing one buffer force a copy.
    - Destinations inside the result: a `tensor.empty` whose ops' result is
      inserted into a larger tensor (a chunk's output into the task's
      output) is replaced by the slice it is inserted into (upstream's
      empty-tensor elimination), so the output is written where it lives.
    - Function results: a result that is a `tensor.collapse_shape` of a
      tensor built in a `tensor.empty` (the output, chunked while it is
      computed) gets an empty of the result's shape, expanded; after
      bufferization and canonicalization the result is then the
      allocation itself, which `buffer-results-to-out-params` replaces by
      the caller's buffer (no copy of the whole output at the end).
    - Every other `tensor.empty` becomes a `bufferization.alloc_tensor`,
      so that later CSE cannot merge two of them into one buffer again.
  }];
  let dependentDialects = [
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

def LaPrefetchChunksPass : Pass<"la-prefetch-chunks", "func::FuncOp"> {
  let summary = "Prefetch the next chunks' inputs in la's fused chunk loops";
  let description = [{
    Runs on buffers, on the loops that `la-fuse-recurrence` marks with
    `la.fused_chunk_loop` (its loop over the chunks of one task). Each chunk reads
    a [C, D] slice of every input, C rows of D contiguous elements that lie
    a whole [H, D] row apart in memory: 4 KiB apart for H = 8 and D = 128 in
    f32, so each row is on its own page and the hardware prefetchers, which
    do not cross pages, miss the first line of every row. This pass issues
    `memref.prefetch` for the slice that iteration `i + distance` will
    read, at the start of iteration `i`, one per cache line (64 bytes),
    so the next chunk's rows arrive while this chunk computes.

    A slice is prefetched when the loop's body reads (`vector.transfer_read`,
    `vector.load`, `memref.load`) a static-shaped view, defined outside the
    loop, of a function argument that the function only reads, at indices
    of which exactly one is the chunk: the induction variable (an entry of a
    chunked `[B, NC, C, ...]` view) or the induction variable plus a row
    that varies inside the loop (`affine.apply` of `s0 + s1`: the loop over
    tokens in steps of the chunk size that upstream tiling builds, whose
    chunk is the step's rows). Indices fixed in the loop select, those that
    inner loops vary span their whole dimension. Iteration `i + distance`
    is prefetched only when all of it is in the loop's range. `locality` is
    the prefetch's cache-level hint
    (3: all levels, 0: none); the default, 2, brings lines to L2, which
    holds a chunk of every input while L1 does not.
  }];
  let dependentDialects = [
    "::mlir::la::LaDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect"
  ];
  let options = [
    Option<"distance", "distance", "int64_t", "1",
           "iterations ahead to prefetch (>= 1)">,
    Option<"locality", "locality", "int64_t", "2",
           "the prefetches' locality hint (0 to 3)">
  ];
}

def LaFlushDenormalsPass : Pass<"la-flush-denormals", "func::FuncOp"> {
  let summary = "Treat denormal floats as zeros while an x86 kernel runs";
  let description = [{
    Runs on buffers, before the thread loops become OpenMP. Sets MXCSR's
    flush-to-zero and denormals-are-zero bits at the function's entry and
    at the start of each outermost `scf.forall` body (a thread's task:
    OpenMP's threads keep their own MXCSR), and restores the saved bits before each
    `func.return` and at the end of each body, through the LLVM intrinsics
    `llvm.x86.sse.stmxcsr` / `ldmxcsr` on a stack slot. A state that decays
    through a long stretch without writes reaches the denormal range, where
    each x86 operation on it takes a microcode assist (8x slower on a
    half-masked Gated DeltaNet call); values below 2^-126 (1.2e-38) become
    zeros, far below any tolerance la checks. x86 only: la-lower-to-cpu
    adds it on x86 hosts (`flush-denormals`, default on).
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::LLVM::LLVMDialect"
  ];
}

def LaOutlineTasksPass : Pass<"la-outline-tasks", "ModuleOp"> {
  let summary = "Give each outermost scf.forall of a function a function of its own";
  let description = [{
    Runs on buffers, where `scf.forall` loops have no results. In each
    function with at least two outermost `scf.forall` loops (a backward's
    adjoint recurrences are a task loop each), moves every such loop into a
    new private function `<function>_task<i>` (`noinline`, external LLVM
    linkage), taking the values it uses from above as arguments (constants
    are rebuilt inside, so LLVM still folds them), and calls it in the
    loop's place. The CPU pipeline runs it for one-thread kernels
    (`outline-tasks`, default on), which are otherwise one function: the
    Python package compiles a kernel's external functions in parallel
    parts, as it does a threaded kernel's OpenMP regions
    (`docs/python.md`).
  }];
  let dependentDialects = [
    "::mlir::func::FuncDialect",
    "::mlir::LLVM::LLVMDialect"
  ];
}

def LaOutlineChunkPartsPass : Pass<"la-outline-chunk-parts", "ModuleOp"> {
  let summary = "Give the large loop nests of la's chunk loops functions of their own";
  let description = [{
    Runs on buffers, after `la-outline-tasks`. In the loops that
    `la-fuse-recurrence` marks with `la.fused_chunk_loop`, every op of the
    body that has regions and a size of at least `min-size` (its nested
    ops, a vector op counted once per 8 elements of its largest vector, as
    it is unrolled into machine vectors: a chunk's products, its gate
    scans) moves into a new private function
    `<function>_part<i>` (`noinline`, LLVM linkage `internal`), which
    takes the values it uses from above as arguments (constants are
    rebuilt inside) and returns the op's results; a call replaces it. A
    large `scf.if` (the run-time choice between a product's fast and
    blocked forms) stays, and the large ops of its branches are outlined.
    Ops with a stack allocation or a thread loop, or that take or return a
    vector (other than a constant), stay where they are.

    clang compiles a function's loop nests as functions of their own
    faster than the one large function they would be inlined into (GLA's
    forward: 0.47 s against 0.62 s of clang); internal, each is still
    specialised to its call's constant sizes, and a call per chunk and part
    costs nothing next to a chunk's work. The CPU pipeline runs it on one
    thread (`outline-chunk-parts`, default on), after `la-outline-tasks`:
    the Python package's split keeps each task's parts with it
    (`docs/python.md`).
  }];
  let dependentDialects = [
    "::mlir::func::FuncDialect",
    "::mlir::LLVM::LLVMDialect"
  ];
  let options = [
    Option<"minSize", "min-size", "int64_t", "16",
           "the size an op needs to be outlined (>= 2): its nested ops, a "
           "vector op counted once per 8 elements of its largest vector">
  ];
}

def LaCopyLoopsPass : Pass<"la-copy-loops", "func::FuncOp"> {
  let summary = "Turn strided or dynamic memref.copy ops into loops";
  let description = [{
    Runs on buffers, before `convert-linalg-to-loops`. The LLVM lowering of
    `memref.copy` (`finalize-memref-to-llvm`) uses `llvm.memcpy` only when
    both sides have the identity layout or a static, contiguous row-major
    one; every other copy becomes a call of the C runner utilities'
    `memrefCopy`, which copies element by element (one `memcpy` call per
    element). The programs la generates have such copies wherever a slice
    has a dynamic size or an outer stride: the backward's shifted inputs and
    per-token rows with a run-time T, a partial chunk's rows. This pass
    rewrites exactly those copies: where both sides' innermost dimension is
    static (at most 1024 elements of 32 bits or more, or of narrower
    elements filling whole 512-bit vectors: LLVM's x86 backend fails on
    some odd-length f16 and bf16 vectors) with unit stride, into `scf.for`
    loops
    over the outer dimensions that copy one row per iteration as a vector
    (`vector.load` and `vector.store`; LLVM left the element loops of such
    copies scalar, unrolled); otherwise into `linalg.copy`, which
    `convert-linalg-to-loops` turns into element loops. Copies that lower
    to `llvm.memcpy` and copies of unranked memrefs are left alone.
    `vector-rows=false` makes every such copy a `linalg.copy` (the
    untiled, scalar pipeline).
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect"
  ];
  let options = [
    Option<"vectorRows", "vector-rows", "bool", "true",
           "copy contiguous rows of static length as vectors">
  ];
}

#endif // LA_CODEGEN_CPU_PASSES_TD
