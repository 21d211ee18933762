//===- TestDevices.h - la's test devices ------------------------*- C++ -*-===//
//
// Two ways to run the GPU path on the CPU, so that tests check its numbers
// on a machine without a GPU: the GPU emulator (la-emulate-gpu runs
// la-map-to-gpu's kernels on the CPU; la-lower-to-gpu-emulator is
// la-lower-to-gpu followed by it and the CPU's lowering to LLVM) and the
// GPU's schedule on tensors run sequentially on the CPU
// (la-gpu-schedule-on-cpu: la-tile-for-gpu's block, thread and warp loops
// as plain loops). They are linked into la-opt and la-run, into no
// production library.
//
//===----------------------------------------------------------------------===//

#ifndef LA_TEST_CODEGEN_GPU_TESTDEVICES_H
#define LA_TEST_CODEGEN_GPU_TESTDEVICES_H

#include "la/Pipelines/Pipelines.h"

namespace mlir {
class OpPassManager;
namespace la {
namespace test {

/// la-lower-to-gpu, then la-emulate-gpu and the CPU's lowering to the LLVM
/// dialect: the GPU kernels (shared memory plan, thread and warp loops, host
/// buffers) run on the CPU, one block and one loop at a time. The tensor
/// cores' mma.sync is emulated in f32 (without tf32 rounding).
void buildLowerToGPUEmulatorPipeline(OpPassManager &pm,
                                     const LowerToNVVMOptions &options);

/// The GPU's schedule on tensors (buildGPUScheduleOnTensorsPipeline), then
/// bufferization and the CPU's lowering to the LLVM dialect, sequentially:
/// the tiling onto blocks, threads and warps (tensor cores: 16 x 8 warp
/// tiles) checked without la-map-to-gpu's kernels.
void buildGPUScheduleOnCPUPipeline(OpPassManager &pm,
                                   const LowerToNVVMOptions &options);

/// Registers la-emulate-gpu, la-lower-to-gpu-emulator and
/// la-gpu-schedule-on-cpu.
void registerTestDevices();

} // namespace test
} // namespace la
} // namespace mlir

#endif // LA_TEST_CODEGEN_GPU_TESTDEVICES_H
