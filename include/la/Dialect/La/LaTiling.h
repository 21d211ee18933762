//===- LaTiling.h - CPU tiling of la's structured ops -----------*- C++ -*-===//
//
// The building blocks of `la-tile` and `la-tile-for-gpu`, shared with the
// transform-dialect ops `transform.la.tile_for_cpu` and
// `transform.la.vectorize_for_cpu`.
//
//===----------------------------------------------------------------------===//

#ifndef LA_DIALECT_LA_LATILING_H
#define LA_DIALECT_LA_LATILING_H

#include "la/Dialect/La/LaPassOptions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include "mlir/Interfaces/LoopLikeInterface.h"
#include <optional>

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

/// Whether `forall` is mapped onto GPU blocks (#gpu.block) or threads
/// (#gpu.thread), the two levels of la-tile-for-gpu's schedule.
bool isBlockForall(scf::ForallOp forall);
bool isThreadForall(scf::ForallOp forall);
bool isWarpForall(scf::ForallOp forall);

/// The loops of a contraction that a warp runs on tensor cores: `m` rows
/// (a multiple of 16), `n` columns (a multiple of 8) and one reduction `k`
/// (a multiple of 16, for every mma.sync shape la uses), an f32
/// accumulator, the other parallel loops of size 1.
struct MmaContraction {
  unsigned m, n, k;
  /// Inputs that the body negates before the product (`out + (-a) * b`,
  /// la's subtractions): the fragments are negated as they are loaded.
  bool negated[2] = {false, false};
};

/// The tensor-core form of `op`, if it has one: a mul-add contraction with
/// projected-permutation maps, static sizes, f32, bf16 or f16 inputs and an
/// f32 output, whose m, n and k loops (the innermost non-unit ones) divide
/// into 16 x 8 x 16 steps.
std::optional<MmaContraction> getMmaContraction(linalg::LinalgOp op);

/// la-tile-for-gpu on one task forall (normalized, at most 3 dimensions):
/// maps it onto blocks and tiles each linalg op directly inside it (on
/// tensors) into an scf.forall over its parallel iterations mapped onto
/// threads. Reports an error on an op it cannot tile.
/// With `tensorCores`, each contraction that getMmaContraction accepts is
/// tiled instead into 16 x 8 output tiles mapped onto warps (#gpu.warp),
/// which la-map-to-gpu turns into mma.sync instructions.
/// With `stageInputs`, each slice the task reads from outside (its chunk
/// of the inputs) is first copied into a task-local tensor (shared memory
/// after la-map-to-gpu).
LogicalResult tileForGPU(RewriterBase &rewriter, scf::ForallOp tasks,
                         bool tensorCores = false, bool stageInputs = false);

/// "tf32", "f16" or "bf16".
FailureOr<MmaPrecision> parseMmaPrecision(StringRef name);

/// A `[row, column]` pair of loop dims on a structured op where nothing with
/// column > row matters: a reduction column's terms vanish there (the first
/// input is causally masked or lower triangular), or a parallel column's
/// entries there are never read (scores masked later). la-tile stops the
/// column loop of each row tile at the tile's last row.
constexpr llvm::StringLiteral kLowerTriangularAttr = "la.lower_triangular";

/// A `[block, column, size]` triple of loop dims and a block size on a
/// structured op of a blocked causal product: only the entries with
/// column < block * size are read later, so la-tile stops the column loop
/// there.
constexpr llvm::StringLiteral kBlockCausalAttr = "la.block_causal";

/// The unit attribute on la-fuse-recurrence's loop over the chunks of a
/// task, which la-prefetch-chunks prefetches ahead of.
constexpr llvm::StringLiteral kChunkLoopAttr = "la.fused_chunk_loop";

/// The unit attribute on la-map-to-gpu's loops of threads (`for i = tid to
/// n step threads`) and of warps (`for w = warp to n step warps`), which
/// la-emulate-gpu runs as whole loops.
constexpr llvm::StringLiteral kDistributedLoopAttr = "la.distributed";

/// The unit attribute on the op that computes a thread's lane in its warp
/// for la-map-to-gpu's tensor-core tiles (la-emulate-gpu runs the 32 lanes
/// of an mma.sync together).
constexpr llvm::StringLiteral kLaneAttr = "la.lane";

/// How la-map-to-gpu builds kernels.
struct GPUMappingOptions {
  /// Threads of each block (one dimension).
  int64_t threadsPerBlock = 128;
  /// Shared memory a block may use, in bytes (227 KB on sm_90).
  int64_t sharedMemoryLimit = 232448;
  /// The tensor cores' input type.
  MmaPrecision mmaPrecision = MmaPrecision::TF32;
};

/// la-map-to-gpu on one bufferized block forall: a gpu.launch over its grid,
/// its buffers in dynamic shared memory (packed by lifetime), its thread
/// foralls and copies as loops of the block's threads with barriers.
FailureOr<gpu::LaunchOp> mapTasksToLaunch(RewriterBase &rewriter,
                                          scf::ForallOp tasks,
                                          const GPUMappingOptions &options);

/// la-map-to-gpu on a function: every block forall becomes a kernel launch;
/// host allocations become device allocations, and an output buffer copied
/// to a result is replaced by the result. Reports an error (with the op's
/// location) on work outside the tasks that has no GPU form.
LogicalResult mapToGPU(RewriterBase &rewriter, func::FuncOp func,
                       const GPUMappingOptions &options);

} // namespace la
} // namespace mlir

#endif // LA_DIALECT_LA_LATILING_H
