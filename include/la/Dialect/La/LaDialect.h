//===- LaDialect.h - the la dialect -----------------------------*- C++ -*-===//

#ifndef LA_DIALECT_LA_LADIALECT_H
#define LA_DIALECT_LA_LADIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Dialect.h"

#include "la/Dialect/La/LaOpsDialect.h.inc"

#endif // LA_DIALECT_LA_LADIALECT_H
