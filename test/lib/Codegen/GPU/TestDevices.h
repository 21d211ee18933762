//===- TestDevices.h - la's test devices ------------------------*- C++ -*-===//
//
// The GPU emulator: la-emulate-gpu runs la-map-to-gpu's kernels on the CPU,
// and la-lower-to-gpu-emulator is la-lower-to-gpu followed by it and the
// CPU's lowering to LLVM. Tests use it to check the GPU path's numbers on
// a machine without a GPU; it is linked into la-opt and la-run, into no
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

/// Registers la-emulate-gpu and la-lower-to-gpu-emulator.
void registerTestDevices();

} // namespace test
} // namespace la
} // namespace mlir

#endif // LA_TEST_CODEGEN_GPU_TESTDEVICES_H
