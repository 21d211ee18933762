//===- LaTransformOps.h - transform-dialect ops of la -----------*- C++ -*-===//

#ifndef LA_DIALECT_LA_TRANSFORMOPS_LATRANSFORMOPS_H
#define LA_DIALECT_LA_TRANSFORMOPS_LATRANSFORMOPS_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Transform/IR/TransformDialect.h"
#include "mlir/Dialect/Transform/IR/TransformTypes.h"
#include "mlir/Dialect/Transform/Interfaces/TransformInterfaces.h"
#include "mlir/IR/OpImplementation.h"

#define GET_OP_CLASSES
#include "la/Dialect/La/TransformOps/LaTransformOps.h.inc"

namespace mlir {
class DialectRegistry;
namespace la {

/// Registers the `transform.la.*` ops with the transform dialect.
void registerTransformDialectExtension(DialectRegistry &registry);

} // namespace la
} // namespace mlir

#endif // LA_DIALECT_LA_TRANSFORMOPS_LATRANSFORMOPS_H
