//===- LaDialect.h - the la dialect -----------------------------*- C++ -*-===//

#ifndef LA_DIALECT_LA_LADIALECT_H
#define LA_DIALECT_LA_LADIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Dialect.h"

#include "la/Dialect/La/LaOpsDialect.h.inc"

namespace mlir::la {
/// The la dialect in `op`'s context, for its discardable-attribute helpers.
/// Every pass that reads or writes those attributes lists the dialect among
/// its dependent dialects, so it is loaded.
inline LaDialect &getLaDialect(Operation *op) {
  auto *dialect = op->getContext()->getLoadedDialect<LaDialect>();
  assert(dialect && "the la dialect is not loaded");
  return *dialect;
}
} // namespace mlir::la

#endif // LA_DIALECT_LA_LADIALECT_H
