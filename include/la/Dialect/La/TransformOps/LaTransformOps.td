//===- LaTransformOps.td - transform-dialect ops of la -----*- tablegen -*-===//
//
// `transform.la.*` ops and `transform.apply_patterns.la.*` pattern
// descriptors: la's chunking, lowering and CPU tiling as steps of a
// user-written transform schedule, next to `transform.structured.*`.
//
//===----------------------------------------------------------------------===//

#ifndef LA_DIALECT_LA_TRANSFORMOPS_LATRANSFORMOPS_TD
#define LA_DIALECT_LA_TRANSFORMOPS_LATRANSFORMOPS_TD

include "mlir/Dialect/Transform/IR/TransformDialect.td"
include "mlir/Dialect/Transform/Interfaces/TransformInterfaces.td"
include "mlir/Dialect/Transform/IR/TransformTypes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/OpBase.td"

def ApplyLaLowerToRecurrencePatternsOp : Op<Transform_Dialect,
    "apply_patterns.la.lower_to_recurrence",
    [DeclareOpInterfaceMethods<PatternDescriptorOpInterface>]> {
  let summary = "Patterns of la-lower-to-recurrence";
  let description = [{
    Rewrites each `la.attention` into the canonical `la.recurrence`, as the
    `la-lower-to-recurrence` pass does (with its default L2-norm epsilon).
  }];
  let assemblyFormat = "attr-dict";
}

def ApplyLaSimplifyRecurrencePatternsOp : Op<Transform_Dialect,
    "apply_patterns.la.simplify_recurrence",
    [DeclareOpInterfaceMethods<PatternDescriptorOpInterface>]> {
  let summary = "Patterns of la-simplify-recurrence";
  let description = [{
    Reduces each `la.recurrence` to a gate kind in {none, scalar, channel}
    without a normaliser, as the `la-simplify-recurrence` pass does: the
    forms that `transform.la.decompose` handles. (The chunk and fusion
    pattern descriptors include these patterns.)
  }];
  let assemblyFormat = "attr-dict";
}

def ApplyLaExpandRecurrenceGradPatternsOp : Op<Transform_Dialect,
    "apply_patterns.la.expand_recurrence_grad",
    [DeclareOpInterfaceMethods<PatternDescriptorOpInterface>]> {
  let summary = "Patterns of la-expand-recurrence-grad";
  let description = [{
    Rewrites each `la.recurrence_grad` into its adjoint `la.recurrence` ops
    (two for a diagonal decay, the adjoint read from both sides; four for
    the delta rule; five for the general low-rank form), as the
    `la-expand-recurrence-grad` pass does with its default options (after
    la-simplify-recurrence's rewrites), so that the chunking and fusion
    descriptors and `transform.structured.*` tiling apply to the backward.
  }];
  let assemblyFormat = "attr-dict";
}

def ApplyLaChunkPatternsOp : Op<Transform_Dialect, "apply_patterns.la.chunk",
    [DeclareOpInterfaceMethods<PatternDescriptorOpInterface>]> {
  let summary = "Patterns of la-chunk";
  let description = [{
    Rewrites each `la.recurrence` into the chunked level-2 ops with
    `chunk_size` tokens per chunk (after la-simplify-recurrence's
    rewrites), as the `la-chunk` pass does.
  }];
  let arguments = (ins DefaultValuedAttr<I64Attr, "64">:$chunk_size);
  let assemblyFormat = "(`chunk_size` `=` $chunk_size^)? attr-dict";
  let hasVerifier = 1;
}

def ApplyLaFuseRecurrencePatternsOp : Op<Transform_Dialect,
    "apply_patterns.la.fuse_recurrence",
    [DeclareOpInterfaceMethods<PatternDescriptorOpInterface>]> {
  let summary = "Patterns of la-fuse-recurrence";
  let description = [{
    Rewrites each `la.recurrence` that the cost rule (or `mode`) selects
    into the chunked program fused per (batch, value head), with
    `chunk_size` tokens per chunk, as the `la-fuse-recurrence` pass does.
    `mode` is "auto", "fused" or "materialized"; `threads` (> 0) is the
    thread count the cost rule plans for; `value_tile` (>= 0, 0: none) the
    value columns per task.
  }];
  let arguments = (ins DefaultValuedAttr<I64Attr, "64">:$chunk_size,
                   DefaultValuedAttr<StrAttr, "\"auto\"">:$mode,
                   DefaultValuedAttr<I64Attr, "1">:$threads,
                   DefaultValuedAttr<I64Attr, "0">:$value_tile);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def ApplyLaToLinalgPatternsOp : Op<Transform_Dialect,
    "apply_patterns.la.to_linalg",
    [DeclareOpInterfaceMethods<PatternDescriptorOpInterface>]> {
  let summary = "Patterns of convert-la-to-linalg";
  let description = [{
    Lowers the chunked level-2 ops to `linalg` and `scf` on tensors, and a
    remaining `la.recurrence` to its token loop.
  }];
  let assemblyFormat = "attr-dict";
}

def LaTileForCPUOp : Op<Transform_Dialect, "la.tile_for_cpu",
    [FunctionalStyleTransformOpTrait, MemoryEffectsOpInterface,
     TransformEachOpTrait, TransformOpInterface,
     ReportTrackingListenerFailuresOpTrait]> {
  let summary = "Tile one structured op into thread loops and register tiles";
  let description = [{
    The per-op step of `la-tile`: the loops outside the register tile become
    an `scf.forall` (or `scf.for` without `distribute`), the register tile
    takes `lane_tile` iterations of the output's innermost loop, `row_tile`
    of an output loop that some input does not read and `reduction_tile` of
    each reduction loop; partial tiles are peeled.

    Consumes `target`. A tensor `linalg` op with static loop ranges and
    projected-permutation maps is tiled: the results are the op on the first
    full register tile and the outermost loop produced (the op itself when
    it already is one register tile). A target of another form (dynamic
    shapes, grouped-head floordiv maps, the delta rule's triangular solve)
    is left as it is, as `la-tile` leaves it, and both results are the op
    itself; so a schedule matching every `LinalgOp` works for every variant.
    A tiling that fails is a silenceable failure naming the payload op.
  }];
  let arguments = (ins TransformHandleTypeInterface:$target,
                   DefaultValuedAttr<I64Attr, "8">:$row_tile,
                   DefaultValuedAttr<I64Attr, "32">:$lane_tile,
                   DefaultValuedAttr<I64Attr, "1">:$reduction_tile,
                   DefaultValuedAttr<BoolAttr, "true">:$distribute);
  let results = (outs TransformHandleTypeInterface:$tiled,
                      TransformHandleTypeInterface:$loop);
  let assemblyFormat =
      "$target attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::DiagnosedSilenceableFailure applyToOne(
        ::mlir::transform::TransformRewriter &rewriter,
        ::mlir::linalg::LinalgOp target,
        ::mlir::transform::ApplyToEachResultList &results,
        ::mlir::transform::TransformState &state);
  }];
}

def LaDecomposeOp : Op<Transform_Dialect, "la.decompose",
    [FunctionalStyleTransformOpTrait, MemoryEffectsOpInterface,
     DeclareOpInterfaceMethods<TransformOpInterface>,
     ReportTrackingListenerFailuresOpTrait]> {
  let summary = "Decompose aggregated ops (la.recurrence, "
                "la.sliding_window_hybrid) into simpler ops";
  let description = [{
    Replaces each payload op by its decomposition (linalg's
    `AggregatedOpInterface`): an `la.recurrence` becomes the level-2 chunk
    program with one chunk spanning its tokens, so a T tile of size C
    (`transform.structured.tile_using_for`) decomposes into one chunk of C;
    an `la.sliding_window_hybrid` becomes its far part's `la.recurrence`
    and the window's linalg ops.

    `transform.structured.decompose_interface` does the same for ops whose
    results come from one op of the decomposition; a recurrence's output
    and final state come from two (the chunk program's output and its state
    scan), which that op's one-result-per-target form cannot return. The
    result handle holds every op that defines a result of a decomposition.
    Consumes `target`. A payload op without the interface, or one whose
    decomposition fails (a `fixed` gate or a normaliser: simplify first;
    packed sequences; a dynamic T without a constant bound), is a
    silenceable failure naming it.
  }];
  let arguments = (ins TransformHandleTypeInterface:$target);
  let results = (outs TransformHandleTypeInterface:$decomposed);
  let assemblyFormat =
      "$target attr-dict `:` functional-type(operands, results)";
}

def LaVectorizeForCPUOp : Op<Transform_Dialect, "la.vectorize_for_cpu",
    [FunctionalStyleTransformOpTrait, MemoryEffectsOpInterface,
     TransformEachOpTrait, TransformOpInterface,
     ReportTrackingListenerFailuresOpTrait]> {
  let summary = "Vectorise the register tiles under an op";
  let description = [{
    The second step of `la-tile` on everything under `target` (typically a
    function): canonicalises, vectorises each register-tile-sized
    structured op, folds tensor slices into vector transfers, hoists
    accumulators out of reduction loops and rewrites to FMAs and polynomial
    exp. Consumes `target` and returns it again.
  }];
  let arguments = (ins TransformHandleTypeInterface:$target);
  let results = (outs TransformHandleTypeInterface:$transformed);
  let assemblyFormat =
      "$target attr-dict `:` functional-type(operands, results)";
  let extraClassDeclaration = [{
    ::mlir::DiagnosedSilenceableFailure applyToOne(
        ::mlir::transform::TransformRewriter &rewriter,
        ::mlir::Operation *target,
        ::mlir::transform::ApplyToEachResultList &results,
        ::mlir::transform::TransformState &state);
  }];
}

#endif // LA_DIALECT_LA_TRANSFORMOPS_LATRANSFORMOPS_TD
