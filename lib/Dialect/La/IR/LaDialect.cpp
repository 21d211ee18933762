//===- LaDialect.cpp - the la dialect -------------------------------------===//

#include "la/Dialect/La/LaDialect.h"
#include "la/Dialect/La/LaOps.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::la;

#include "la/Dialect/La/LaEnums.cpp.inc"
#include "la/Dialect/La/LaOpsDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "la/Dialect/La/LaAttrs.cpp.inc"

void LaDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "la/Dialect/La/LaAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "la/Dialect/La/LaOps.cpp.inc"
      >();
}
