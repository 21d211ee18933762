// The schedule of la-lower-to-recurrence, la-fuse-recurrence{chunk-size=16 mode=fused},
// convert-la-to-linalg and la-tile, written with la's transform ops.
module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op) {
    %func = transform.structured.match ops{["func.func"]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %func {
      transform.apply_patterns.la.lower_to_recurrence
    } : !transform.any_op
    transform.apply_patterns to %func {
      transform.apply_patterns.la.fuse_recurrence {chunk_size = 16, mode = "fused"}
    } : !transform.any_op
    transform.apply_patterns to %func {
      transform.apply_patterns.la.to_linalg
    } : !transform.any_op
    transform.apply_patterns to %func {
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.apply_cse to %func : !transform.any_op
    %ops = transform.structured.match interface{LinalgOp} in %func
        : (!transform.any_op) -> !transform.any_op
    %tiled, %loops = transform.la.tile_for_cpu %ops
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %vectorized = transform.la.vectorize_for_cpu %func
        : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}
