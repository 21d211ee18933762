//===- InitAllDialects.h - every dialect la-opt knows -----------*- C++ -*-===//

#ifndef LA_INITALLDIALECTS_H
#define LA_INITALLDIALECTS_H

#include "mlir/IR/DialectRegistry.h"

namespace mlir {
namespace la {

/// Registers the `la` dialect, its transform ops, and every upstream dialect,
/// extension and external interface model that la's passes and pipelines
/// build or use, with `registry`. Embedders call this (and registerPasses)
/// before parsing `la` IR; it is all an opt tool needs to run every la pass
/// and pipeline.
void registerAllDialects(DialectRegistry &registry);

/// registerAllDialects plus the translations to LLVM IR (host, OpenMP, GPU,
/// NVVM) that a compiler exporting LLVM IR or GPU binaries needs. la-opt,
/// la-run, la-fuzz and the C API use it.
void registerCompilerDialects(DialectRegistry &registry);

} // namespace la
} // namespace mlir

#endif // LA_INITALLDIALECTS_H
