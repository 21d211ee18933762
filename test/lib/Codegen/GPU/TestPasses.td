//===- TestPasses.td - la's test devices -------------------*- tablegen -*-===//
//
// Passes that exist for la's tests, linked into la-opt and la-run but into
// no production library.
//
//===----------------------------------------------------------------------===//

#ifndef LA_TEST_CODEGEN_GPU_TESTPASSES_TD
#define LA_TEST_CODEGEN_GPU_TESTPASSES_TD

include "mlir/Pass/PassBase.td"

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
    "::mlir::la::LaDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect"
  ];
}

#endif // LA_TEST_CODEGEN_GPU_TESTPASSES_TD
