//===- LaDialect.cpp - the la dialect -------------------------------------===//

#include "la/Dialect/La/LaDialect.h"
#include "la/Dialect/La/LaOps.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::la;

#include "la/Dialect/La/LaEnums.cpp.inc"
#include "la/Dialect/La/LaOpsDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "la/Dialect/La/LaAttrs.cpp.inc"

int64_t TaskMappingAttr::getMappingId() const { return getDim(); }

bool TaskMappingAttr::isLinearMapping() const { return false; }

int64_t TaskMappingAttr::getRelativeIndex() const { return getDim(); }

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

/// Checks that `dims` holds `count` entries whose first two are distinct loop
/// dims of `op` (a linalg op).
static LogicalResult verifyLoopDims(Operation *op, StringAttr name,
                                    Attribute value, size_t count,
                                    StringRef meaning) {
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  if (!linalgOp)
    return op->emitOpError()
           << "'" << name.getValue() << "' is for structured (linalg) ops only";
  auto dims = dyn_cast<DenseI64ArrayAttr>(value);
  if (!dims || dims.asArrayRef().size() != count)
    return op->emitOpError() << "'" << name.getValue() << "' must be "
                             << meaning << " (array<i64> of " << count << ")";
  int64_t numLoops = linalgOp.getNumLoops();
  for (int64_t dim : dims.asArrayRef().take_front(2))
    if (dim < 0 || dim >= numLoops)
      return op->emitOpError()
             << "'" << name.getValue() << "' names loop " << dim
             << ", but the op has " << numLoops << " loops";
  if (dims[0] == dims[1])
    return op->emitOpError()
           << "'" << name.getValue() << "' names loop " << dims[0] << " twice";
  return success();
}

LogicalResult LaDialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attribute) {
  StringAttr name = attribute.getName();
  Attribute value = attribute.getValue();
  if (name == getLowerTriangularAttrHelper().getName() ||
      name == getUpperTriangularAttrHelper().getName())
    return verifyLoopDims(op, name, value, 2, "[row, column]");
  if (name == getBlockCausalAttrHelper().getName()) {
    if (failed(verifyLoopDims(op, name, value, 3, "[block, column, size]")))
      return failure();
    if (int64_t size = cast<DenseI64ArrayAttr>(value)[2]; size < 1)
      return op->emitOpError() << "'" << name.getValue() << "' has block size "
                               << size << ", expected at least 1";
    return success();
  }
  auto requireUnit = [&](bool placed, StringRef where) -> LogicalResult {
    if (!isa<UnitAttr>(value))
      return op->emitOpError()
             << "'" << name.getValue() << "' must be a unit attribute";
    if (!placed)
      return op->emitOpError()
             << "'" << name.getValue() << "' is for " << where << " only";
    return success();
  };
  if (name == getFusedChunkLoopAttrHelper().getName() ||
      name == getDistributedAttrHelper().getName())
    return requireUnit(isa<scf::ForOp>(op), "scf.for loops");
  if (name == getLaneAttrHelper().getName())
    // An integer after the conversion to LLVM.
    return requireUnit(op->getNumResults() == 1 &&
                           op->getResult(0).getType().isIntOrIndex(),
                       "ops with one integer result");
  return op->emitOpError() << "unknown la attribute '" << name.getValue()
                           << "'";
}
