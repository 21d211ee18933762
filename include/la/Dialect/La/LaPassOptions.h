//===- LaPassOptions.h - enums of la's typed pass options -------*- C++ -*-===//
//
// The value types of la's enum pass and pipeline options, in a header of
// their own so that Pipelines.h and embedders need not include the passes.
//
//===----------------------------------------------------------------------===//

#ifndef LA_DIALECT_LA_LAPASSOPTIONS_H
#define LA_DIALECT_LA_LAPASSOPTIONS_H

namespace mlir {
namespace la {

/// How la-fuse-recurrence schedules a recurrence's chunked program.
enum class FusionMode {
  /// Fused when there are at least as many (batch, value head) tasks as
  /// threads, else left to la-chunk.
  Auto,
  /// Always one (batch, value head) per task, the state carried over chunks.
  Fused,
  /// Never: la-chunk builds the program with materialised per-chunk states.
  Materialized,
};

/// The GPU schedule of a recurrence's chunked program (la-lower-to-nvvm).
enum class GPUSchedule {
  /// One block per (batch, value head, value tile), the chunks of the
  /// sequence in order inside it (la-fuse-recurrence).
  Fused,
  /// la-chunk's level-2 ops as tasks of their own (la-distribute-chunks):
  /// every chunk in parallel, only the state scan in order.
  ChunkParallel,
};

/// The input type of the tensor-core instructions (f32 accumulation in all):
/// tf32 (mma.sync m16n8k8), f16 or bf16 (m16n8k16).
enum class MmaPrecision { TF32, F16, BF16 };

} // namespace la
} // namespace mlir

#endif // LA_DIALECT_LA_LAPASSOPTIONS_H
