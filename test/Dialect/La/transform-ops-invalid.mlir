// RUN: la-opt %s -split-input-file -transform-interpreter -verify-diagnostics

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op) {
    transform.apply_patterns to %root {
      // expected-error @below {{chunk_size must be > 0, got 0}}
      transform.apply_patterns.la.chunk chunk_size = 0
    } : !transform.any_op
    transform.yield
  }
}

// -----

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op) {
    transform.apply_patterns to %root {
      // expected-error @below {{mode must be auto, fused or materialized, got 'often'}}
      transform.apply_patterns.la.fuse_recurrence {mode = "often"}
    } : !transform.any_op
    transform.yield
  }
}

// -----

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op) {
    transform.apply_patterns to %root {
      // expected-error @below {{threads must be > 0, got 0}}
      transform.apply_patterns.la.fuse_recurrence {threads = 0}
    } : !transform.any_op
    transform.yield
  }
}

// -----

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op) {
    // expected-error @below {{tile sizes must be >= 1}}
    %t, %l = transform.la.tile_for_cpu %root {lane_tile = 0}
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// An op of another form (dynamic shapes) is left as it is, as la-tile
// leaves it: both results are the op itself, and the schedule goes on.
func.func @dynamic(%d: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // expected-remark @below {{tiled: left as it is}}
  // expected-remark @below {{loop: left as it is}}
  %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]} ins(%d : tensor<?x8xf32>) outs(%d : tensor<?x8xf32>) {
  ^bb0(%x: f32, %y: f32):
    %z = arith.addf %x, %x : f32
    linalg.yield %z : f32
  } -> tensor<?x8xf32>
  return %s : tensor<?x8xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op) {
    %op = transform.structured.match ops{["linalg.generic"]} in %root
        : (!transform.any_op) -> !transform.any_op
    %t, %l = transform.la.tile_for_cpu %op
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.debug.emit_remark_at %t, "tiled: left as it is" : !transform.any_op
    transform.debug.emit_remark_at %l, "loop: left as it is" : !transform.any_op
    transform.yield
  }
}
