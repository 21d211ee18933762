//===- TestDevices.cpp - la's test devices --------------------------------===//

#include "TestDevices.h"
#include "TestPasses.h"

#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

void mlir::la::test::buildLowerToGPUEmulatorPipeline(
    OpPassManager &pm, const LowerToNVVMOptions &options) {
  buildLowerToGPUPipeline(pm, options);
  pm.addNestedPass<func::FuncOp>(createLaEmulateGPUPass());
  pm.addPass(createCanonicalizerPass());
  // The emulated tensor-core fragments are small vectors.
  buildLowerBuffersToLLVMPipeline(pm, /*parallel=*/false, /*vectors=*/true);
}

void mlir::la::test::buildGPUScheduleOnCPUPipeline(
    OpPassManager &pm, const LowerToNVVMOptions &options) {
  buildGPUScheduleOnTensorsPipeline(pm, options);
  buildBufferizationPipeline(pm, /*allowReturnAllocsFromLoops=*/true);
  bufferization::BufferDeallocationPipelineOptions deallocOptions;
  bufferization::buildBufferDeallocationPipeline(pm, deallocOptions);
  buildLowerBuffersToLLVMPipeline(pm, /*parallel=*/false, /*vectors=*/false);
}

void mlir::la::test::registerTestDevices() {
  registerLaTestPasses();
  registerGPUPipeline(
      "la-lower-to-gpu-emulator",
      "Lower la.attention through la-lower-to-gpu's kernels, then run them on "
      "the CPU (la-emulate-gpu): a test of the GPU path without a GPU",
      buildLowerToGPUEmulatorPipeline);
  registerGPUPipeline(
      "la-gpu-schedule-on-cpu",
      "Lower la.attention through the GPU's schedule on tensors "
      "(la-tile-for-gpu's block, thread and warp loops), then run it on the "
      "CPU sequentially: a test of the GPU tiling without a GPU",
      buildGPUScheduleOnCPUPipeline);
}
