//===- InitAllDialects.h - every dialect la-opt knows -----------*- C++ -*-===//

#ifndef LA_INITALLDIALECTS_H
#define LA_INITALLDIALECTS_H

#include "mlir/IR/DialectRegistry.h"

namespace mlir {
namespace la {

/// Registers the `la` dialect (and the dialects its ops lower to) with
/// `registry`. Embedders call this before parsing `la` IR.
void registerAllDialects(DialectRegistry &registry);

/// Registers everything a whole compiler built on `la` needs: every upstream
/// dialect and extension, la's dialects, and the translations to LLVM IR.
/// la-opt, la-run, la-fuzz and the C API use it.
void registerCompilerDialects(DialectRegistry &registry);

} // namespace la
} // namespace mlir

#endif // LA_INITALLDIALECTS_H
