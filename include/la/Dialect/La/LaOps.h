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

namespace mlir {
namespace la {
// Packed sequences' offsets, read where a tile of one sequence is built (the
// ops' TilingInterface) and where the passes loop over the sequences.

/// Element `index` of a 1-D integer tensor (e.g. cu_seqlens) as an index.
Value extractIndex(OpBuilder &b, Location loc, Value tensor, Value index);

/// The tokens [start, end) of packed sequence `n`: cu_seqlens[n] and
/// cu_seqlens[n+1] clamped so that 0 <= start <= end <= `tokens`. The
/// callers (la-run, Python) reject invalid offsets before a kernel runs; the
/// clamp keeps a kernel called with bad offsets inside its buffers.
std::pair<Value, Value> extractSequenceBounds(OpBuilder &b, Location loc,
                                              Value cuSeqlens, Value n,
                                              Value tokens);

} // namespace la
} // namespace mlir

#endif // LA_DIALECT_LA_LAOPS_H
