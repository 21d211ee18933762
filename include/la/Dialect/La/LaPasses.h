//===- LaPasses.h - passes of the la dialect --------------------*- C++ -*-===//

#ifndef LA_DIALECT_LA_LAPASSES_H
#define LA_DIALECT_LA_LAPASSES_H

#include "la/Dialect/La/LaOps.h"
#include "la/Dialect/La/LaPassOptions.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
class RewritePatternSet;
namespace la {

#define GEN_PASS_DECL
#include "la/Dialect/La/LaPasses.h.inc"

/// Patterns rewriting `la.attention` into `la.recurrence`; grouped query
/// heads are repeated per state only with `expandQueryGroups` (see
/// la-lower-to-recurrence's `expand-query-groups`).
void populateLowerToRecurrencePatterns(RewritePatternSet &patterns,
                                       double l2normEps = 1e-6,
                                       bool expandQueryGroups = false);

/// The decomposition of `la.sliding_window_hybrid` (its
/// AggregatedOpInterface): an `la.recurrence` for the linear attention
/// outside the window and linalg ops on tensors for the window.
FailureOr<SmallVector<Value>>
decomposeSlidingWindowHybrid(OpBuilder &b, SlidingWindowHybridOp op);

/// Patterns replacing `la.sliding_window_hybrid` by its decomposition (part
/// of la-lower-to-recurrence).
void populateDecomposeSlidingWindowHybridPatterns(RewritePatternSet &patterns);

/// The gradients of an la.sliding_window_hybrid (f32, shaped like q, k, v,
/// the features and the initial state; no dInitialState without one).
struct SlidingWindowHybridGradients {
  Value dq, dk, dv, dFeatureQ, dFeatureK, dInitialState;
};

/// Builds the adjoint program of `op` for the cotangents `dO` (of o) and
/// `dFinalState` (f32, or null): the far part's la.recurrence_grad and the
/// window's block products in linalg, the forward's pieces recomputed
/// (la-derive-backward).
SlidingWindowHybridGradients
buildSlidingWindowHybridGradients(OpBuilder &b, SlidingWindowHybridOp op,
                                  Value dO, Value dFinalState);

/// Patterns reducing `la.recurrence` to a gate kind in {none, scalar,
/// channel} without a normaliser (see la-simplify-recurrence).
void populateSimplifyRecurrencePatterns(RewritePatternSet &patterns);

/// Patterns rewriting `la.recurrence_grad` with a scalar (or no) decay and
/// no low-rank part into adjoint `la.recurrence` ops (see
/// la-expand-recurrence-grad).
void populateExpandRecurrenceGradPatterns(RewritePatternSet &patterns,
                                          bool transposedReads = true);

/// Patterns rewriting an `la.recurrence` with `state_indices` into a gather
/// of the pool's rows, the recurrence on them, and a scatter of its final
/// states into the pool (only those with `cu_seqlens` when
/// `packedSequencesOnly`): the lowering of a state pool outside
/// la-fuse-recurrence's tasks, which slice the pool directly.
void populateDecomposeStateIndicesPatterns(RewritePatternSet &patterns,
                                           bool packedSequencesOnly = false);

/// The largest chunk size the passes accept: a chunk's score matrix has
/// C x C entries. (A chunk size above a static T is lowered as T.)
constexpr int64_t kMaxChunkSize = 65536;

/// Patterns rewriting `la.recurrence` (without a low-rank part) into the
/// chunked level-2 ops.
void populateChunkPatterns(RewritePatternSet &patterns, int64_t chunkSize);

/// "auto", "fused" or "materialized".
FailureOr<FusionMode> parseFusionMode(StringRef name);

/// The cost rule of la-fuse-recurrence: whether `op` gets the fused program.
/// With cu_seqlens the answer is `sequenceTasks`, whatever the mode: the
/// tasks are then (sequence, value head); else la-chunk handles them.
/// `valueTile` (0: none) splits V into tasks of that many columns.
bool shouldFuse(RecurrenceOp op, FusionMode mode, int64_t threads,
                int64_t valueTile = 0, bool sequenceTasks = false);

/// Patterns rewriting `la.recurrence` into the fused chunked program where
/// shouldFuse says so; with `fuseProducers`, the structured ops that compute
/// its operands (and nothing else) are computed per chunk inside the loop.
/// With `packInputs` each chunk of the other inputs is copied into a compact
/// tensor first. With `peelTail` a last, partial chunk (T not a multiple of
/// the chunk size) is peeled off the chunk loop; otherwise a static T is
/// padded and a dynamic T's partial chunk is padded in the loop. Without
/// `chunk` the recurrence is only tiled into tasks, each task's recurrence
/// left whole (for the token loop). With `splitSequences` (and `chunk`) a
/// recurrence over packed sequences becomes an scf.for over them, each a
/// recurrence that these patterns fuse; with `sequenceTasks` the sequences
/// are tasks instead: the forall runs over (sequence, value head[, value
/// tile]), each task the recurrence of its sequence's tokens.
void populateFuseRecurrencePatterns(
    RewritePatternSet &patterns, int64_t chunkSize, FusionMode mode,
    int64_t threads, bool fuseProducers = true, int64_t valueTile = 0,
    bool packInputs = true, bool peelTail = true, bool chunk = true,
    bool splitSequences = true, bool sequenceTasks = false);

#define GEN_PASS_REGISTRATION
#include "la/Dialect/La/LaPasses.h.inc"

} // namespace la
} // namespace mlir

#endif // LA_DIALECT_LA_LAPASSES_H
