//===- Passes.td - GPU code generation passes of la --------*- tablegen -*-===//
//
// The GPU half of la's code generation: the fused chunked program tiled
// onto blocks, warps and threads, then mapped onto gpu.launch kernels.
//
//===----------------------------------------------------------------------===//

#ifndef LA_CODEGEN_GPU_PASSES_TD
#define LA_CODEGEN_GPU_PASSES_TD

include "mlir/Pass/PassBase.td"

def LaDistributeChunksPass : Pass<"la-distribute-chunks", "func::FuncOp"> {
  let summary = "Run la-chunk's level-2 ops as chunk-parallel tasks";
  let description = [{
    The chunk-parallel GPU schedule, on tensors, between `la-chunk` and
    `convert-la-to-linalg`. Each level-2 op in the function's body (not in
    the loop over packed sequences) becomes an `scf.forall` of tasks mapped
    with `#la.task`, each task running the same op on its slices:

    - `la.chunk_cumsum`, `la.chunk_wy`, `la.chunk_intra` and
      `la.chunk_inter` over (batch, chunk, key head): every chunk of every
      head in parallel, on `[1,1,C,...]` slices;
    - `la.chunk_state_scan` over (batch, key head, value tile): the chunks
      of a sequence in order inside the task, on the sequence's slices
      (`value-tile` columns of the values, the states and the corrected
      values; all of V when it does not divide V).

    A key head's task takes all of its HV / H value heads. The per-chunk
    states (`[B,NC,HV,K,V]`, f32) are written by the scan and read by the
    output's tasks, in global memory on the GPU. `la-tile-for-gpu` then maps
    each forall onto blocks, as it does the fused schedule's tasks. Static
    shapes only: a dynamic one is an error.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let options = [
    Option<"valueTile", "value-tile", "int64_t", "16",
           "value columns per task of the state scan (0: all of V)">
  ];
}

def LaTileForGPUPass : Pass<"la-tile-for-gpu", "func::FuncOp"> {
  let summary = "Tile la's fused chunked program onto GPU blocks and threads";
  let description = [{
    The GPU schedule of the program that `la-fuse-recurrence` (or
    `la-distribute-chunks`) and `convert-la-to-linalg` produce, on tensors.
    Each outermost `scf.forall` (the (batch, value head[, value tile])
    tasks, or the chunk-parallel schedule's, normalized, at most three
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
    tensor defined outside it (a chunk of q, k, v, the gates, ...; not a
    slice that is only sliced further, such as the chunk-parallel scan's
    whole sequence, whose chunk slices are staged instead) is first
    copied (`linalg.copy`, tiled onto threads like the other ops) into a
    task-local tensor, which ends in shared memory: the block reads each
    chunk of its inputs from global memory once, coalesced.

    State in shared memory (`state-in-shared-memory`): a tensor that a loop
    of the task carries (the running state) is initialised by an op that
    writes the task's slice of an output (the final state) and does not
    read it (a fill, the copy of the initial state); that op writes a
    task-local tensor instead, so the state lives in shared memory and the
    output slice is written once, after the loop, instead of written and
    read back in global memory at every chunk. It costs the state's bytes of
    shared memory per block (8 KB at K = 128 and value tiles of 16); off by
    default until measured on a GPU.
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
           "memory) before the ops read it">,
    Option<"stateInSharedMemory", "state-in-shared-memory", "bool", "false",
           "keep each task's running state in a task-local buffer (shared "
           "memory) and write the final state once, instead of in the final "
           "state's slice of global memory">,
    Option<"resultsInOutputs", "results-in-outputs", "bool", "false",
           "compute each tile that a task writes into an output, when it "
           "starts from a tensor.empty, in the output's slice (global "
           "memory) instead of a buffer of the task (only that use of the "
           "tensor.empty is replaced)">
  ];
}

def LaAllowFPContractionPass : Pass<"la-allow-fp-contraction"> {
  let summary = "Let LLVM fuse the kernels' multiplies and adds into FMAs";
  let description = [{
    Adds `contract` to the fast-math flags of every arith op that takes them,
    in the op it runs on (la-lower-to-nvvm runs it on the outlined
    `gpu.module`s, `fp-contract=true`). Without it NVPTX issues a separate
    `mul.rn` and `add.rn` for each multiply-add of the kernels' scalar
    loops; with it LLVM may fuse them into `fma.rn` (one rounding instead
    of two). No other fast-math assumption is made.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
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
    result, other `memref.alloc`/`dealloc` become `gpu.alloc`/`gpu.dealloc`.
    Work that did not fuse into the tasks gets kernels of its own:

    - each structured op (`linalg`) or `memref.copy` in the function's body
      (the padding of a tail chunk, the backward's per-token products and
      sums) becomes a launch over its parallel iterations, one per thread
      and `threads-per-block` per block; each thread runs the op's
      TilingInterface tile at its iteration (the reductions whole);
    - each `scf.for` / `scf.if` of such ops (a reverse sum over tokens)
      becomes a launch of one block that runs it, its ops and copies split
      over the block's threads with a barrier after each.

    A loop that allocates or returns values, and any other op that touches
    memory outside the kernels, is an error with its location. The
    function's memrefs are then device memory: callers pass GPU pointers.
  }];
  let dependentDialects = [
    "::mlir::la::LaDialect",
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

#endif // LA_CODEGEN_GPU_PASSES_TD
