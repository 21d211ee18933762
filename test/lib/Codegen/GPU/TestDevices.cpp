//===- TestDevices.cpp - la's test devices --------------------------------===//

#include "TestDevices.h"
#include "TestPasses.h"

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

void mlir::la::test::registerTestDevices() {
  registerLaTestPasses();
  registerGPUPipeline(
      "la-lower-to-gpu-emulator",
      "Lower la.attention through la-lower-to-gpu's kernels, then run them on "
      "the CPU (la-emulate-gpu): a test of the GPU path without a GPU",
      buildLowerToGPUEmulatorPipeline);
}
