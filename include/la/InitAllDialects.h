//===- InitAllDialects.h - every dialect la-opt knows -----------*- C++ -*-===//

#ifndef LA_INITALLDIALECTS_H
#define LA_INITALLDIALECTS_H

#include "mlir/IR/DialectRegistry.h"

namespace mlir {
namespace la {

/// Registers the `la` dialect (and the dialects its ops lower to) with
/// `registry`. Embedders call this before parsing `la` IR.
void registerAllDialects(DialectRegistry &registry);

} // namespace la
} // namespace mlir

#endif // LA_INITALLDIALECTS_H
