// The backward as a transform schedule: derive the gradient function, lower
// it to level 1, expand the gradient into adjoint recurrences and chunk
// them, as the passes do: two adjoint recurrences (S^T, and G read from
// both sides), so two state scans.
// RUN: la-opt %s -la-derive-backward=keep-forward=0 --transform-interpreter -canonicalize -cse > %t.schedule
// RUN: la-opt %s -la-derive-backward=keep-forward=0 -la-lower-to-recurrence -la-expand-recurrence-grad -la-chunk=chunk-size=16 -canonicalize -cse > %t.passes
// RUN: diff %t.schedule %t.passes
// RUN: FileCheck %s < %t.schedule

// CHECK-LABEL: func.func @mamba2_grad
// CHECK-NOT: la.recurrence_grad
// CHECK-COUNT-2: la.chunk_state_scan
// CHECK-NOT: la.chunk_state_scan
// CHECK: return
func.func @mamba2(%q: tensor<1x32x2x16xf32>, %k: tensor<1x32x2x16xf32>,
                  %v: tensor<1x32x2x16xf32>, %g: tensor<1x32x2xf32>)
    -> tensor<1x32x2x16xf32> {
  %o = la.attention mamba2 %q, %k, %v g(%g : tensor<1x32x2xf32>)
      : tensor<1x32x2x16xf32>, tensor<1x32x2x16xf32>, tensor<1x32x2x16xf32>
      -> tensor<1x32x2x16xf32>
  return %o : tensor<1x32x2x16xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %f = transform.structured.match ops{["func.func"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %f {
      transform.apply_patterns.la.lower_to_recurrence
    } : !transform.any_op
    transform.apply_patterns to %f {
      transform.apply_patterns.la.expand_recurrence_grad
    } : !transform.any_op
    transform.apply_patterns to %f {
      transform.apply_patterns.la.chunk chunk_size = 16
    } : !transform.any_op
    transform.yield
  }
}
