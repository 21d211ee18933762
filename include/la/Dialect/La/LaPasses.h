//===- LaPasses.h - passes of the la dialect --------------------*- C++ -*-===//

#ifndef LA_DIALECT_LA_LAPASSES_H
#define LA_DIALECT_LA_LAPASSES_H

#include "la/Dialect/La/LaOps.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
class RewritePatternSet;
namespace la {

#define GEN_PASS_DECL
#include "la/Dialect/La/LaPasses.h.inc"

/// Patterns rewriting `la.attention` into `la.recurrence`.
void populateLowerToRecurrencePatterns(RewritePatternSet &patterns,
                                       double l2normEps = 1e-6);

/// Patterns reducing `la.recurrence` to a gate kind in {none, scalar,
/// channel} without a normaliser (see la-simplify-recurrence).
void populateSimplifyRecurrencePatterns(RewritePatternSet &patterns);

/// Patterns rewriting `la.recurrence` (without a low-rank part) into the
/// chunked level-2 ops.
void populateChunkPatterns(RewritePatternSet &patterns, int64_t chunkSize);

#define GEN_PASS_REGISTRATION
#include "la/Dialect/La/LaPasses.h.inc"

} // namespace la
} // namespace mlir

#endif // LA_DIALECT_LA_LAPASSES_H
