// la-lower-to-cpu's schedule written with upstream tiling: each recurrence
// tiled into tasks over (batch, value head) by tile_using_forall and into
// chunks of 16 tokens by tile_using_for (the state carried as the chunk
// loop's accumulator), each chunk decomposed into the chunk program, then
// la's CPU register tiles.
module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op) {
    %func = transform.structured.match ops{["func.func"]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %func {
      transform.apply_patterns.la.lower_to_recurrence
    } : !transform.any_op
    transform.apply_patterns to %func {
      transform.apply_patterns.la.simplify_recurrence
    } : !transform.any_op
    %recurrence = transform.structured.match ops{["la.recurrence"]} in %func
        : (!transform.any_op) -> !transform.any_op
    %task, %tasks = transform.structured.tile_using_forall %recurrence
        tile_sizes [1, 0, 1]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %chunk, %chunks = transform.structured.tile_using_for %task
        tile_sizes [0, 16]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %program = transform.la.decompose %chunk
        : (!transform.any_op) -> !transform.any_op
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
