//===- InitAll.cpp - registration API for embedders -----------------------===//

#include "la/InitAllDialects.h"
#include "la/InitAllPasses.h"

#include "la/Codegen/CPU/Passes.h"
#include "la/Codegen/GPU/Passes.h"
#include "la/Conversion/LaToLinalg.h"
#include "la/Dialect/La/AggregatedOpInterfaceImpl.h"
#include "la/Dialect/La/LaDialect.h"
#include "la/Dialect/La/LaPasses.h"
#include "la/Dialect/La/TransformOps/LaTransformOps.h"
#include "la/Pipelines/Pipelines.h"

#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/OpenMP/OpenMPToLLVMIRTranslation.h"

void mlir::la::registerAllDialects(DialectRegistry &registry) {
  // la's passes build ops of many upstream dialects and rely on their
  // external interface models (TilingInterface of linalg, bufferization of
  // tensor, scf and arith, ...): an embedder that registered only la's own
  // dialects would crash in la-tile. Registering them is idempotent.
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  registry.insert<LaDialect>();
  registerAggregatedOpInterfaceExternalModels(registry);
  registerTransformDialectExtension(registry);
}

void mlir::la::registerCompilerDialects(DialectRegistry &registry) {
  mlir::la::registerAllDialects(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerOpenMPDialectTranslation(registry);
  // The GPU path: gpu.module to PTX/cubin, and the host's gpu.binary.
  registerGPUDialectTranslation(registry);
  gpu::registerOffloadingLLVMTranslationInterfaceExternalModels(registry);
  registerNVVMDialectTranslation(registry);
}

void mlir::la::registerPasses() {
  registerLaPasses();
  registerLaCPUPasses();
  registerLaGPUPasses();
  registerLaConversionPasses();
  registerPipelines();
}
