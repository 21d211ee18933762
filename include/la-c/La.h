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

/* The contract of every function below:
 * - A null handle (context, module, engine, registry) or a null string where
 *   text is required never crashes: functions returning MlirLogicalResult
 *   fail, functions returning a handle return a null one, the destroy
 *   functions do nothing; where there is a callback, it receives a line
 *   "la: <function>: <argument> is null".
 * - A null MlirStringCallback is allowed and discards the text.
 * - A handle must come from this library (or from MLIR's C API for the same
 *   libMLIR) and must not be used after it is destroyed; that cannot be
 *   checked. A module belongs to its context: destroy it first.
 * - laExecutionEngineInvokePacked's `args` must match the function's
 *   signature (one pointer per argument and result); it cannot be checked.
 */

/// One named variant of la.attention: its keyword, update rule (additive,
/// delta, erase_write, dplr), gate kind (none, fixed, scalar, channel) and a
/// summary, as static NUL-terminated strings.
typedef struct {
  const char *keyword;
  const char *update;
  const char *gate;
  const char *summary;
} LaVariantInfo;

/// The number of named variants (la's one registry of them).
LA_CAPI_EXPORTED intptr_t laGetNumVariants(void);

/// Fills `info` with the variant at `index`; false (and `info` untouched)
/// for an index outside [0, laGetNumVariants()) or a null `info`.
LA_CAPI_EXPORTED bool laGetVariant(intptr_t index, LaVariantInfo *info);

/// The vector width, in bits, of the machine this process runs on (512, 256
/// or 128): la-lower-to-cpu's `vector-bits` for kernels compiled for it.
LA_CAPI_EXPORTED intptr_t laHostVectorBits(void);

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

/// What laModuleRunPipelineWithOptions does besides running the pipeline.
/// Zero-initialise it (every field off), then set what you need.
typedef struct {
  /// The IR after every pass goes to the `output` callback.
  bool printIRAfterAll;
  /// Non-empty: the IR after every pass is written into a tree of files
  /// under this directory (as mlir-opt --mlir-print-ir-tree-dir).
  MlirStringRef irTreeDir;
  /// Non-empty: a failing or crashing pass writes a reproducer (the module
  /// before the pipeline and the pipeline) to this file.
  MlirStringRef crashReproducer;
  /// Non-empty: the module before (`captureBefore`) or after each run of
  /// the pass with this argument (e.g. "convert-la-to-linalg") goes to
  /// `capture`, one call per run, with the whole IR in one string.
  MlirStringRef capturePass;
  bool captureBefore;
  MlirStringCallback capture;
  void *captureUserData;
} LaPipelineRunOptions;

/// laModuleRunPipeline with the inspection options of `options` (may be
/// null: then it is laModuleRunPipeline without printing).
LA_CAPI_EXPORTED MlirLogicalResult laModuleRunPipelineWithOptions(
    MlirModule module, MlirStringRef pipeline,
    const LaPipelineRunOptions *options, MlirStringCallback output,
    void *userData);

/// Marks `function` with llvm.emit_c_interface, so that lowering adds
/// `_mlir_ciface_<function>` taking memref descriptors by pointer.
LA_CAPI_EXPORTED MlirLogicalResult
laModuleEmitCInterface(MlirModule module, MlirStringRef function);

/// Translates a module in the LLVM dialect to LLVM IR text, passed to
/// `callback`. On failure `callback` receives the translation's diagnostics
/// instead, each with its location.
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
