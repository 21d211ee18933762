/*===- La.h - C API of la, the linear-attention compiler ----------*- C -*-===*\
|*                                                                            *|
|* In the style of MLIR's C API (mlir-c): values of the upstream handle types *|
|* (MlirContext, MlirModule, MlirStringRef, MlirLogicalResult), text out      *|
|* through MlirStringCallback. The library links Debian's libMLIR and does    *|
|* not need MLIR's C API archives.                                            *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef LA_C_LA_H
#define LA_C_LA_H

#include "mlir-c/IR.h"
#include "mlir-c/Support.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LA_CAPI_EXPORTED __attribute__((visibility("default")))

/// Registers la's dialect and the dialects its ops lower to.
LA_CAPI_EXPORTED void laRegisterAllDialects(MlirDialectRegistry registry);

/// Registers la's passes and pipelines (and all upstream passes) with the
/// global registry, so that textual pipelines can name them.
LA_CAPI_EXPORTED void laRegisterAllPasses(void);

/// A context with every upstream dialect and extension plus la's; owned by
/// the caller (laContextDestroy).
LA_CAPI_EXPORTED MlirContext laContextCreate(void);
LA_CAPI_EXPORTED void laContextDestroy(MlirContext context);

/// Parses and verifies `source`; on failure returns a null module and sends
/// the located diagnostics to `diagnostics`.
LA_CAPI_EXPORTED MlirModule laModuleParse(MlirContext context,
                                          MlirStringRef source,
                                          MlirStringCallback diagnostics,
                                          void *userData);
LA_CAPI_EXPORTED void laModuleDestroy(MlirModule module);
LA_CAPI_EXPORTED bool laModuleIsNull(MlirModule module);

/// Prints the module (generic form when `generic`).
LA_CAPI_EXPORTED void laModulePrint(MlirModule module, bool generic,
                                    MlirStringCallback callback,
                                    void *userData);

/// Runs a textual pass pipeline, e.g.
/// "builtin.module(la-lower-to-cpu{chunk-size=64})". Diagnostics, and with
/// `printIRAfterAll` the IR after every pass, go to `output`.
LA_CAPI_EXPORTED MlirLogicalResult laModuleRunPipeline(
    MlirModule module, MlirStringRef pipeline, bool printIRAfterAll,
    MlirStringCallback output, void *userData);

/// Marks `function` with llvm.emit_c_interface, so that lowering adds
/// `_mlir_ciface_<function>` taking memref descriptors by pointer.
LA_CAPI_EXPORTED MlirLogicalResult
laModuleEmitCInterface(MlirModule module, MlirStringRef function);

/// Translates a module in the LLVM dialect to LLVM IR text.
LA_CAPI_EXPORTED MlirLogicalResult laModuleTranslateToLLVMIR(
    MlirModule module, MlirStringCallback callback, void *userData);

/// A JIT-compiled module (MLIR's ExecutionEngine).
typedef struct {
  void *ptr;
} LaExecutionEngine;

/// JIT-compiles a module in the LLVM dialect at `optLevel` (0-3); errors go
/// to `diagnostics` and give a null engine. `sharedLibPaths` (may be empty)
/// are loaded for symbol resolution.
LA_CAPI_EXPORTED LaExecutionEngine
laExecutionEngineCreate(MlirModule module, int optLevel, int numSharedLibPaths,
                        const MlirStringRef *sharedLibPaths,
                        MlirStringCallback diagnostics, void *userData);
LA_CAPI_EXPORTED bool laExecutionEngineIsNull(LaExecutionEngine engine);
LA_CAPI_EXPORTED void laExecutionEngineDestroy(LaExecutionEngine engine);

/// Calls the packed wrapper of function `name` (for a C-interface function,
/// `_mlir_ciface_<f>`): `args[i]` points to the i-th argument.
LA_CAPI_EXPORTED MlirLogicalResult laExecutionEngineInvokePacked(
    LaExecutionEngine engine, MlirStringRef name, void **args);

#ifdef __cplusplus
}
#endif

#endif // LA_C_LA_H
