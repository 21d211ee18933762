//===- LaPasses.h - passes of the la dialect --------------------*- C++ -*-===//

#ifndef LA_DIALECT_LA_LAPASSES_H
#define LA_DIALECT_LA_LAPASSES_H

#include "la/Dialect/La/LaOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
class RewritePatternSet;
namespace la {

#define GEN_PASS_DECL
#include "la/Dialect/La/LaPasses.h.inc"

/// Patterns rewriting `la.attention` into `la.recurrence`.
void populateLowerToRecurrencePatterns(RewritePatternSet &patterns,
                                       double l2normEps = 1e-6);

#define GEN_PASS_REGISTRATION
#include "la/Dialect/La/LaPasses.h.inc"

} // namespace la
} // namespace mlir

#endif // LA_DIALECT_LA_LAPASSES_H
