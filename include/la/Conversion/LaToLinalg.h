//===- LaToLinalg.h - la ops to linalg, tensor and scf ----------*- C++ -*-===//

#ifndef LA_CONVERSION_LATOLINALG_H
#define LA_CONVERSION_LATOLINALG_H

#include "la/Dialect/La/LaOps.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
class RewritePatternSet;
namespace la {

#define GEN_PASS_DECL
#include "la/Conversion/Passes.h.inc"

/// Patterns lowering the chunked level-2 ops to linalg.generic and scf.for.
/// With `cumsumScan`, la.chunk_cumsum becomes a loop over the chunk's rows
/// (C additions per element) instead of one masked reduction (C^2).
/// `gateBlock` is the row block of channel-gate score products (0: none).
void populateChunkedToLinalgPatterns(RewritePatternSet &patterns,
                                     bool cumsumScan = false,
                                     int64_t gateBlock = 16);

/// Patterns lowering `la.recurrence` (after la-simplify-recurrence) to a
/// sequential scf.for over tokens: the baseline and the decode path.
void populateRecurrenceToLoopsPatterns(RewritePatternSet &patterns);

#define GEN_PASS_REGISTRATION
#include "la/Conversion/Passes.h.inc"

} // namespace la
} // namespace mlir

#endif // LA_CONVERSION_LATOLINALG_H
