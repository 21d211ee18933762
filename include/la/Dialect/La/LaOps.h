//===- LaOps.h - operations of the la dialect -------------------*- C++ -*-===//

#ifndef LA_DIALECT_LA_LAOPS_H
#define LA_DIALECT_LA_LAOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/DestinationStyleOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/TilingInterface.h"

#include "la/Dialect/La/LaDialect.h"
#include "la/Dialect/La/LaEnums.h.inc"
#include "mlir/Dialect/SCF/IR/DeviceMappingInterface.h"

#define GET_ATTRDEF_CLASSES
#include "la/Dialect/La/LaAttrs.h.inc"

#define GET_OP_CLASSES
#include "la/Dialect/La/LaOps.h.inc"

#endif // LA_DIALECT_LA_LAOPS_H
