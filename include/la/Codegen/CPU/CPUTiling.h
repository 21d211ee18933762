//===- CPUTiling.h - CPU tiling of la's structured ops ----------*- C++ -*-===//
//
// The building blocks of `la-tile`, shared with the transform-dialect ops
// `transform.la.tile_for_cpu` and `transform.la.vectorize_for_cpu`.
//
//===----------------------------------------------------------------------===//

#ifndef LA_CODEGEN_CPU_CPUTILING_H
#define LA_CODEGEN_CPU_CPUTILING_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Interfaces/LoopLikeInterface.h"

namespace mlir {
class RewriterBase;
namespace la {

/// Register-tile shape and thread distribution for the CPU.
struct CPUTilingOptions {
  /// Rows of the register tile (an output loop that some input does not
  /// read, so loaded vectors are reused across rows).
  int64_t rowTile = 8;
  /// Vector lanes: the output's innermost loop.
  int64_t laneTile = 32;
  /// Steps of each reduction loop per tile.
  int64_t reductionTile = 1;
  /// The outer parallel loops become scf.forall (threads) rather than
  /// scf.for, unless the op is already inside an scf.forall.
  bool distribute = true;
};

struct CPUTilingResult {
  /// Loops over batch, chunk, head, ... (scf.forall when distributed).
  SmallVector<LoopLikeOpInterface> outerLoops;
  /// Loops over register tiles (scf.for), before peeling.
  SmallVector<LoopLikeOpInterface> innerLoops;
  /// The op on one register tile.
  Operation *tiledOp = nullptr;
};

/// Ops inside an scf.for with fewer loop iterations than this keep their
/// outer loops sequential (an OpenMP region costs microseconds, about as
/// long as such an op's work, and the loop would enter one per iteration).
constexpr int64_t kMinDistributedWork = 16384;

/// Ops with more loop iterations than this are not vectorised by
/// vectorizeForCPU (they were not register-tiled).
constexpr int64_t kMaxVectorElements = 4096;

/// Whether tileForCPU handles `op`: tensors, one init, static loop ranges,
/// projected-permutation maps (a grouped-query floordiv map is not).
bool isTileableForCPU(linalg::LinalgOp op);

/// Tiles `op` (tensors, static loop ranges, projected-permutation maps) into
/// outer loops and register tiles; partial tiles are peeled. Fails without
/// changing the IR when the op is not of that form.
FailureOr<CPUTilingResult> tileForCPU(RewriterBase &rewriter,
                                      linalg::LinalgOp op,
                                      const CPUTilingOptions &options);

/// Vectorises the register-tile-sized structured ops under `root`
/// (contractions to vector.contract), folds tensor slices into the
/// transfers and hoists accumulators out of reduction loops.
LogicalResult vectorizeForCPU(RewriterBase &rewriter, Operation *root);

} // namespace la
} // namespace mlir

#endif // LA_CODEGEN_CPU_CPUTILING_H
