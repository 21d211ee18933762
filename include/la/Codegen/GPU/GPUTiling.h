//===- GPUTiling.h - la's GPU schedule --------------------------*- C++ -*-===//
//
// The building blocks of `la-tile-for-gpu` and `la-map-to-gpu`.
//
//===----------------------------------------------------------------------===//

#ifndef LA_CODEGEN_GPU_GPUTILING_H
#define LA_CODEGEN_GPU_GPUTILING_H

#include "la/Dialect/La/LaPassOptions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <optional>

namespace mlir {
class RewriterBase;
namespace la {

/// Whether `forall` is mapped onto GPU blocks (#gpu.block), threads
/// (#gpu.thread) or warps (#gpu.warp), the levels of la-tile-for-gpu's
/// schedule.
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
/// With `stateInSharedMemory`, a loop-carried tensor (the running state)
/// whose initial value would be written into the task's slice of an output
/// (the final state) gets a task-local tensor instead, written to the
/// output once after the loop.
/// With `resultsInOutputs`, a tile that the task computes from a
/// `tensor.empty` and writes into an output is computed in the output's
/// slice instead (the chunk-parallel scan's per-chunk states).
LogicalResult tileForGPU(RewriterBase &rewriter, scf::ForallOp tasks,
                         bool tensorCores = false, bool stageInputs = false,
                         bool stateInSharedMemory = false,
                         bool resultsInOutputs = false);

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
/// the structured ops and copies outside them, and loops of those, become
/// kernels of their own; host allocations become device allocations, and an
/// output buffer copied to a result is replaced by the result. Reports an
/// error (with the op's location) on work outside the tasks that has no GPU
/// form.
LogicalResult mapToGPU(RewriterBase &rewriter, func::FuncOp func,
                       const GPUMappingOptions &options);

} // namespace la
} // namespace mlir

#endif // LA_CODEGEN_GPU_GPUTILING_H
