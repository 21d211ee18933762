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

def LaSimplifyRecurrencePass : Pass<"la-simplify-recurrence"> {
  let summary = "Reduce la.recurrence to the forms the lowerings handle";
  let description = [{
    Two rewrites of the level-1 op onto itself, run by `la-chunk` and
    `convert-la-to-linalg` too:

    * a `fixed` per-head decay becomes a `scalar` gate tensor `[B,T,H]`
      broadcast from `log_decay`;
    * the `normalizer` becomes an extra value column of ones: the recurrence
      runs on `[v, 1]` in f32, its last output column is `z_t . q'_t`, and the
      output is the other columns divided by it plus `eps`. The initial state
      gets a zero column (the normaliser's sum starts at zero in every call)
      and the final state drops it.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

def LaChunkPass : Pass<"la-chunk"> {
  let summary = "Rewrite the canonical recurrence into its chunkwise-parallel form";
  let description = [{
    Rewrites each `la.recurrence` into the level-2 chunked ops: time is padded to a
    multiple of `chunk-size` (zero keys, values, beta and log-gates leave the
    state unchanged) and split into chunks, `la.chunk_cumsum` forms the
    in-chunk cumulative gates, `la.chunk_state_scan` the chunk-to-chunk state
    recurrence, `la.chunk_intra` the masked intra-chunk product and
    `la.chunk_inter` the output. For the delta rule, `la.chunk_wy` (the UT
    transform) gives W and U first and the scan forms the corrected values
    `V' = U - W S_n` that replace V. With `cu_seqlens`, an `scf.for` runs the
    chunked program once per packed sequence on its own slice and state, so
    no state crosses a boundary. A general low-rank part (`b_t a_t^T`) goes
    through the same WY transform with `a` and `b` (`la.chunk_wy a(..) b(..)`
    with the exclusive cumulative gates); its corrected values pair with `b`
    and `(k, v)` is carried as an extra, uncorrected pair.
  }];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let options = [
    Option<"chunkSize", "chunk-size", "int64_t", "64",
           "tokens per chunk (> 0)">
  ];
}

def LaFuseRecurrencePass : Pass<"la-fuse-recurrence"> {
  let summary = "Fuse the chunk-to-chunk state passing with each chunk's output";
  let description = [{
    Rewrites `la.recurrence` into the chunked level-2 ops of `la-chunk`, but
    run per (batch, value head) and per chunk: an `scf.forall` over
    `[B, HV]` (the threads' tasks) holds an `scf.for` over chunks that
    carries the f32 state `[1,1,K,V]`; each iteration runs `la.chunk_cumsum`,
    `la.chunk_wy` (delta rule), `la.chunk_state_scan` (one chunk, from the
    carried state), `la.chunk_intra` and `la.chunk_inter` on that chunk's
    `[1,1,C,1,...]` slices, so the output is formed while the state is in
    cache and no per-chunk state is written to memory. Grouped value heads
    read their key head inside the task, so the ops see `H = HV = 1`.

    Cost rule (`mode=auto`): fused when `B * HV >= threads` (`threads=0`:
    the machine's hardware threads; a dynamic B counts as 1), because then
    the (batch, head) tasks alone keep every thread busy. Otherwise the
    recurrence is left for `la-chunk`, whose materialised states let the
    intra-chunk and output ops also run in parallel over chunks.
    `mode=fused` or `mode=materialized` forces either. Recurrences with
    `cu_seqlens` are always left for `la-chunk`.

    Producers (`fuse-producers`, on by default): an operand computed by a
    structured op on tensors (a `linalg.generic` feature map, a gate
    activation, the L2 normalisation `la-lower-to-recurrence` emits, ...)
    whose result nothing else uses is computed per chunk inside the loop,
    on the `[1,C,1,...]` tile the chunk reads (through the op's
    `TilingInterface`), and so on up a chain of such producers; the operand
    is never materialised. This needs T to be a static multiple of the
    chunk size (no padding); otherwise the operand is chunked as before.

    Consumers (also under `fuse-producers`): when every user of the output
    is a structured op on tensors (projected-permutation maps, static
    shapes) whose result is [B,T,HV,V] or [B,T,HV] (a reduction over V, as
    in RMSNorm), and so on down to one [B,T,HV,V] result that leaves the set
    (the output's RMSNorm and its gating, say), those ops run per chunk
    inside the loop on the chunk's [1,C,1,V] tile: their other operands are
    sliced (a `linalg.fill` init is filled per tile), and the fused loop
    writes the last one's result. This needs T to be a static multiple of
    the chunk size and all of V in one task (no value tiles); the ops'
    inits and constants that are defined after the recurrence are moved
    before it.

    Value tiles (`value-tile=N`): every column of the value (and of the
    state) evolves on its own, so the value dimension can be split into
    `V / N` tiles that are tasks of their own: the forall runs over
    `[B, HV, V / N]`, each task carrying a `[1,1,K,N]` state, and the cost
    rule counts `B * HV * V / N` tasks. The key-side work (decays, the
    `Q K^T` scores, the WY factors) is then recomputed per value tile. A
    tile that does not divide a static V is ignored (the whole V is one
    tile).

    Packed inputs (`pack-inputs`): each chunk's slice of an input that is
    read from `[B, T, H, D]` memory is first copied (`linalg.copy`) into a
    compact `[1, 1, C, 1, D]` tensor. In the input the slice's C rows are a
    whole `H * D` row apart, 4 KiB for H = 8 and D = 128 in f32: they all
    fall into the same few sets of an 8-way L1 cache and evict each other
    while the ops read them again and again; the compact copy does not
    (`la-lower-to-cpu` turns this on).
  }];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let options = [
    Option<"chunkSize", "chunk-size", "int64_t", "64",
           "tokens per chunk (> 0)">,
    Option<"mode", "mode", "::mlir::la::FusionMode",
           "::mlir::la::FusionMode::Auto",
           "auto (the cost rule), fused or materialized",
           [{::llvm::cl::values(
             clEnumValN(::mlir::la::FusionMode::Auto, "auto",
                        "fused when there are at least as many tasks as "
                        "threads"),
             clEnumValN(::mlir::la::FusionMode::Fused, "fused",
                        "always the fused program"),
             clEnumValN(::mlir::la::FusionMode::Materialized, "materialized",
                        "never: left to la-chunk"))}]>,
    Option<"threads", "threads", "int64_t", "1",
           "threads the cost rule plans for (0: the hardware threads of the "
           "compiling machine, which makes the IR depend on it: only on "
           "request)">,
    Option<"fuseProducers", "fuse-producers", "bool", "true",
           "compute the operands' producers per chunk inside the loop">,
    Option<"valueTile", "value-tile", "int64_t", "0",
           "value columns per task (0: all of V; must divide V)">,
    Option<"packInputs", "pack-inputs", "bool", "true",
           "copy each chunk of the (unfused) inputs into a compact tensor">
  ];
}

def LaTilePass : Pass<"la-tile", "func::FuncOp"> {
  let summary = "Tile and vectorise la's structured ops for the CPU";
  let description = [{
    Runs on the `linalg` ops on tensors that `convert-la-to-linalg` produces.
    Each op with static loop ranges and projected-permutation maps is tiled
    twice. The loops outside the register tile (batch, chunk, head, ...)
    become one `scf.forall` with one iteration per index, which
    `scf-forall-to-parallel` and `convert-scf-to-openmp` share among threads
    (or `scf.for` with `distribute=false`, and for ops already inside an
    `scf.forall`, such as la-fuse-recurrence's tasks, where nested OpenMP
    regions would only add their cost). The register tile takes
    `lane-tile` iterations of the output's innermost loop (the vector lanes),
    `row-tile` iterations of an output loop that some input does not read
    (so each loaded vector is reused by every row) and `reduction-tile`
    iterations of each reduction loop; a tile size that does not divide its
    loop leaves a partial tile, which is peeled into its own loop.

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
    masked scores. Likewise `la.block_causal = array<i64: block, column,
    size>` (only entries with `column < block * size` are read later, as in
    the earlier-block part of a blocked channel-gate score product): when
    `block` is an outer loop, the column loop inside it (a register-tile
    loop, or an outer loop nested in the block's, as for element-wise ops,
    whose row tile is 1) stops at `min(block * size, C)`; with `distribute`
    the loops of one `scf.forall` are not cut.
  }];
  let dependentDialects = [
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

    A slice is prefetched when it is a `memref.subview` in the loop's body
    whose offsets depend on the induction variable, computed by pure ops,
    with a static shape, of a function argument that the function only
    reads (through views). `locality` is the prefetch's cache-level hint
    (3: all levels, 0: none); the default, 2, brings lines to L2, which
    holds a chunk of every input while L1 does not.
  }];
  let dependentDialects = [
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

def LaTileForGPUPass : Pass<"la-tile-for-gpu", "func::FuncOp"> {
  let summary = "Tile la's fused chunked program onto GPU blocks and threads";
  let description = [{
    The GPU schedule of the program that `la-fuse-recurrence` and
    `convert-la-to-linalg` produce, on tensors. Each outermost `scf.forall`
    (the (batch, value head[, value tile]) tasks, normalized, at most three
    dimensions) gets `#gpu.block<x/y/z>` mappings: one thread block per
    task, the chunk loop inside it. Each `linalg` op directly inside a task
    becomes an `scf.forall` over its non-unit parallel iterations, one output
    element per iteration (reductions stay inside), mapped with
    `#gpu.thread<linear_dim_*>` (the innermost iteration is the fastest
    varying, so consecutive threads write consecutive elements). An op whose
    parallel dimensions are all units gets a one-iteration loop.

    The result is still a valid program for the CPU (the mappings are
    attributes of ordinary loops), which is how the GPU tiling is checked
    against the reference without a GPU; `la-map-to-gpu` turns it, after
    bufferization, into a `gpu.launch`.

    Tensor cores (`tensor-cores`): a contraction (a mul-add `linalg` op with
    one reduction, f32 accumulator, f32/bf16/f16 inputs) whose row, column
    and reduction loops are multiples of 16, 8 and 16, the others units, is
    tiled instead into 16 x 8 output tiles over the whole reduction, in an
    `scf.forall` mapped with `#gpu.warp<linear_dim_*>`; `la-map-to-gpu`
    gives each tile to one warp as mma.sync instructions (see its
    `mma-precision`).

    Staging (`stage-inputs`): each static slice that a task reads from a
    tensor defined outside it (a chunk of q, k, v, the gates, ...) is first
    copied (`linalg.copy`, tiled onto threads like the other ops) into a
    task-local tensor, which ends in shared memory: the block reads each
    chunk of its inputs from global memory once, coalesced.
  }];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let options = [
    Option<"tensorCores", "tensor-cores", "bool", "false",
           "tile f32 contractions onto warps for mma.sync (tf32)">,
    Option<"stageInputs", "stage-inputs", "bool", "true",
           "copy each chunk of the inputs into task-local buffers (shared "
           "memory) before the ops read it">
  ];
}

def LaMapToGPUPass : Pass<"la-map-to-gpu", "func::FuncOp"> {
  let summary = "Turn la-tile-for-gpu's bufferized loops into GPU kernels";
  let description = [{
    Runs after bufferization on `la-tile-for-gpu`'s program. Each
    `scf.forall` mapped onto blocks (normalized, at most 3 dimensions, no
    results) becomes a `gpu.launch` over the same grid with
    `threads-per-block` threads:

    - the buffers allocated in a task (a chunk's intermediates, the carried
      state) move to the launch's dynamic shared memory. Their lifetimes
      (first to last use, through views, in program order) decide the
      packing: buffers never alive at the same time share bytes. More than
      `shared-memory-limit` bytes is an error that names the size;
    - each `scf.forall` mapped onto threads becomes a loop in which thread
      `t` runs the linearized iterations `t, t + threads, ...`, followed by
      a `gpu.barrier`; each `memref.copy` in a task likewise;
    - `memref.dealloc` in a task is dropped (shared memory is not freed);
    - each `scf.forall` mapped onto warps (la-tile-for-gpu's tensor-core
      tiles) becomes a loop of the block's warps over its tiles, each tile's
      16 x 8 x K contraction a chain of mma.sync steps over K on fragments
      loaded in PTX's layouts: `mma-precision=tf32` uses
      `nvgpu.mma.sync` m16n8k8 on tf32, `f16` `nvgpu.mma.sync` m16n8k16,
      `bf16` `nvvm.mma.sync` m16n8k16 (nvgpu has no bf16 lowering); the
      operands are converted to that type as they are loaded, the
      accumulator stays f32.

    Around the launches, an output buffer copied into a result
    (`copy(collapse_shape(alloc), %result)`) is replaced by a view of the
    result, other `memref.alloc`/`dealloc` become `gpu.alloc`/`gpu.dealloc`,
    and any other op that touches memory there (work that did not fuse into
    the tasks, e.g. padding when T is not a multiple of the chunk size) is
    an error with its location. The function's memrefs are then device
    memory: callers pass GPU pointers.
  }];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::NVVM::NVVMDialect",
    "::mlir::nvgpu::NVGPUDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect"
  ];
  let options = [
    Option<"threadsPerBlock", "threads-per-block", "int64_t", "128",
           "threads of each block, in [1, 1024]">,
    Option<"sharedMemoryLimit", "shared-memory-limit", "int64_t", "232448",
           "shared memory per block, in bytes (227 KB on sm_90)">,
    Option<"mmaPrecision", "mma-precision", "::mlir::la::MmaPrecision",
           "::mlir::la::MmaPrecision::TF32",
           "the tensor cores' input type: tf32 (m16n8k8), bf16 or f16 "
           "(m16n8k16); f32 accumulation in all",
           [{::llvm::cl::values(
             clEnumValN(::mlir::la::MmaPrecision::TF32, "tf32",
                        "tf32 operands (mma.sync m16n8k8)"),
             clEnumValN(::mlir::la::MmaPrecision::BF16, "bf16",
                        "bf16 operands (m16n8k16)"),
             clEnumValN(::mlir::la::MmaPrecision::F16, "f16",
                        "f16 operands (m16n8k16)"))}]>
  ];
}

def LaEmulateGPUPass : Pass<"la-emulate-gpu", "func::FuncOp"> {
  let summary = "Run la-map-to-gpu's kernels on the CPU (a test device)";
  let description = [{
    Checks the GPU path's kernels where there is no GPU. Each `gpu.launch`
    becomes loops over its grid (z, y, x), run by one thread; each loop of
    threads or warps that `la-map-to-gpu` made (marked `la.distributed`:
    `for i = tid to n step threads`) runs all n iterations, and barriers
    go. That is exact for these kernels: each such loop has independent
    iterations and a barrier after it, and every value outside them is the
    same in all threads. The dynamic shared memory becomes one host buffer
    per launch, viewed at the same offsets, so la-map-to-gpu's packing of
    buffers by lifetime runs as on the GPU; `gpu.alloc`/`gpu.dealloc`
    become `memref.alloc`/`memref.dealloc` and the `gpu.wait` ops go.

    Tensor cores: an mma.sync tile (a collective of the warp's 32 lanes;
    `nvgpu.mma.sync` for tf32 and f16, `nvvm.mma.sync` on i32-packed bf16)
    runs its per-lane code once per lane (the lane is la-map-to-gpu's
    `la.lane` value) into scratch fragments; each step's instruction is then
    computed in f32 on the matrices those fragments make up under the PTX
    ISA's fragment layouts (m16n8k8 tf32, m16n8k16 f16/bf16), written here
    apart from la-map-to-gpu's loads. tf32 rounding is not modelled (f16 and
    bf16 operands are rounded by the loads themselves).

    Not emulated: the order and timing of threads (races that a missing
    barrier would cause are not detected).
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect"
  ];
}

#endif // LA_DIALECT_LA_LAPASSES_TD
