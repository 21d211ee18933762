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

/// How the chunked lowering builds the score products of channel-wise gates
/// (`Q K^T` with a decay per key channel).
struct ChannelGateProducts {
  /// Rows per block of the blocked form, in which only the diagonal blocks
  /// take an exponential per product term (0: every term takes one). The
  /// defaults here, of convert-la-to-linalg and of la-lower-to-cpu are the
  /// same; la-lower-to-gpu uses 16 (shared memory, see Pipelines.cpp).
  int64_t block = 8;
  /// Where every gate of a chunk lies within this distance (in log space) of
  /// the chunk's first row, checked at run time, the product is one plain
  /// product of rows pre-scaled against that row; elsewhere the blocked
  /// form runs. 0: never (la-lower-to-gpu's choice).
  double spreadLimit = 32;
};

/// Patterns lowering the chunked level-2 ops to linalg.generic and scf.for.
/// With `cumsumScan`, la.chunk_cumsum becomes a loop over the chunk's rows
/// (C additions per element) instead of one masked reduction (C^2).
void populateChunkedToLinalgPatterns(RewritePatternSet &patterns,
                                     bool cumsumScan = true,
                                     ChannelGateProducts gateProducts = {});

/// Patterns lowering `la.recurrence` (after la-simplify-recurrence) to a
/// sequential scf.for over tokens: the baseline and the decode path.
void populateRecurrenceToLoopsPatterns(RewritePatternSet &patterns);

/// Patterns lowering `la.recurrence_grad` to scf.for loops over tokens,
/// backward in time, with the forward states recomputed per checkpoint
/// block.
void populateRecurrenceGradToLoopsPatterns(RewritePatternSet &patterns);

#define GEN_PASS_REGISTRATION
#include "la/Conversion/Passes.h.inc"

} // namespace la
} // namespace mlir

#endif // LA_CONVERSION_LATOLINALG_H
