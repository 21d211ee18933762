//===- Pipelines.cpp - la's pass pipelines --------------------------------===//

#include "la/Pipelines/Pipelines.h"

#include "la/Conversion/LaToLinalg.h"
#include "la/Dialect/La/LaPasses.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace mlir::la;

void mlir::la::buildLowerToCPUPipeline(OpPassManager &pm,
                                       const LowerToCPUOptions &options) {
  // la to linalg and scf on tensors.
  pm.addPass(createLaLowerToRecurrencePass());
  if (!options.sequential) {
    LaChunkPassOptions chunkOptions;
    chunkOptions.chunkSize = options.chunkSize;
    pm.addPass(createLaChunkPass(chunkOptions));
  }
  pm.addPass(createConvertLaToLinalgPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());

  // Buffers: results become out-parameters so that callers own every output.
  bufferization::OneShotBufferizePassOptions bufferizeOptions;
  bufferizeOptions.bufferizeFunctionBoundaries = true;
  bufferizeOptions.allowReturnAllocsFromLoops = true;
  bufferizeOptions.functionBoundaryTypeConversion =
      bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(bufferization::createOneShotBufferizePass(bufferizeOptions));
  bufferization::BufferResultsToOutParamsPassOptions outParamsOptions;
  outParamsOptions.modifyPublicFunctions = true;
  outParamsOptions.hoistStaticAllocs = true;
  pm.addPass(
      bufferization::createBufferResultsToOutParamsPass(outParamsOptions));
  pm.addPass(createCanonicalizerPass());
  bufferization::BufferDeallocationPipelineOptions deallocOptions;
  bufferization::buildBufferDeallocationPipeline(pm, deallocOptions);

  // Loops and LLVM.
  if (options.parallel) {
    pm.addNestedPass<func::FuncOp>(createConvertLinalgToParallelLoopsPass());
    pm.addPass(createConvertSCFToOpenMPPass());
  } else {
    pm.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
  }
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  // With OpenMP, memref.alloca_scope (around each parallel body) must be
  // lowered while its region is still a single block, so memrefs go to LLVM
  // before scf goes to control flow.
  if (options.parallel)
    pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createSCFToControlFlowPass());
  if (options.parallel)
    pm.addPass(createConvertOpenMPToLLVMPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertIndexToLLVMPass());
  if (!options.parallel)
    pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(createCanonicalizerPass());
}

void mlir::la::registerPipelines() {
  PassPipelineRegistration<LowerToCPUOptions>(
      "la-lower-to-cpu",
      "Lower la.attention to the LLVM dialect for the CPU (chunked by "
      "default, or the sequential recurrence)",
      buildLowerToCPUPipeline);
}
