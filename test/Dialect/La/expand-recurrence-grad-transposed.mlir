// RUN: la-opt %s -split-input-file -la-expand-recurrence-grad | FileCheck %s

// GLA's gradient (a channel gate, grouped value heads HV = 2 H, T = 8) with
// the default transposed-reads: two la.recurrence ops. dq: S^T in forward
// time (keys v, values k widened, the gate on its value side). dv and dk:
// one G in reverse time (keys q, values do, the gates shifted by one token)
// read from both sides: its output is G^T k = dv and its transposed_query v
// gives G v, [B,T,HV,K], summed over each key head's value heads into dk.
// No G^T recurrence.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x4x6xf32>
!s = tensor<1x4x4x6xf32>

// CHECK-LABEL: func.func @gla
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}})
// CHECK: %[[LATER:.*]] = tensor.extract_slice %[[G]][0, 1, 0, 0] [1, 7, 2, 4]
// CHECK: %[[SHIFT:.*]] = tensor.pad %[[LATER]] low[0, 0, 0, 0] high[0, 1, 0, 0]
// CHECK: %{{.*}}, %{{.*}} = la.recurrence decay(none) low_rank(none) %[[DO]], %[[V]], %{{.*}} gv(%{{.*}} : tensor<1x8x4x4xf32>) outs({{.*}}) {scale = 5.000000e-01 : f32}
// CHECK: %[[DV:.*]], %{{.*}}, %[[GV:.*]] = la.recurrence decay(channel) low_rank(none) %[[K]], %[[Q]], %[[DO]] g(%[[SHIFT]] : tensor<1x8x2x4xf32>) transposed_query(%[[V]] : tensor<1x8x4x6xf32>) outs(%{{.*}}, %{{.*}}, %{{.*}} : tensor<1x8x4x6xf32>, tensor<1x4x4x6xf32>, tensor<1x8x4x4xf32>) {reverse, scale = 5.000000e-01 : f32}
// CHECK-NOT: la.recurrence
// CHECK: %[[SPLIT:.*]] = tensor.expand_shape %[[GV]] {{\[}}[0], [1], [2, 3], [4]] output_shape [1, 8, 2, 2, 4]
// CHECK: %[[DK:.*]] = linalg.generic {{.*}} ins(%[[SPLIT]] : tensor<1x8x2x2x4xf32>) outs(%{{.*}} : tensor<1x8x2x4xf32>)
// CHECK: return %{{.*}}, %[[DK]], %[[DV]],
func.func @gla(%q: !qk, %k: !qk, %v: !v, %g: !qk, %do: !v) -> (!qk, !qk, !v, !s, !qk) {
  %s0 = arith.constant dense<0.0> : !s
  %dq, %dk, %dv, %ds0, %dg = la.recurrence_grad decay(channel) low_rank(none)
      %q, %k, %v g(%g : !qk) initial_state(%s0 : !s) d_o(%do : !v)
      {scale = 0.5 : f32} : !qk, !qk, !v -> !qk, !qk, !v, !s, !qk
  return %dq, %dk, %dv, %ds0, %dg : !qk, !qk, !v, !s, !qk
}

// -----

// The delta rule: four recurrences instead of six. The reads p = a^T S_{t-1}
// (the forward on the inputs one token later), S^T (dq), G (the general
// low-rank form in reverse, whose output is dv and whose value-side read of
// x = v - p is y = G x, summed per key head) and S^T again for S dv; no G^T.
// CHECK-LABEL: func.func @delta
// CHECK: la.recurrence decay(none) low_rank(delta)
// CHECK: la.recurrence decay(none) low_rank(none)
// CHECK: %[[DV:.*]], %{{.*}}, %[[Y:.*]] = la.recurrence decay(none) low_rank(general) {{.*}} transposed_query(%{{.*}} : tensor<1x8x2x6xf32>) outs({{.*}}) {reverse, scale = 5.000000e-01 : f32}
// CHECK: la.recurrence decay(none) low_rank(none) %[[DV]]
// CHECK-NOT: la.recurrence
// CHECK: return
func.func @delta(%q: tensor<1x8x2x4xf32>, %k: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %beta: tensor<1x8x2xf32>, %do: tensor<1x8x2x6xf32>) -> (tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>, tensor<1x8x2xf32>) {
  %s0 = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  %dq, %dk, %dv, %ds0, %db = la.recurrence_grad decay(none) low_rank(delta)
      %q, %k, %v beta(%beta : tensor<1x8x2xf32>) initial_state(%s0 : tensor<1x2x4x6xf32>) d_o(%do : tensor<1x8x2x6xf32>)
      {scale = 0.5 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>, tensor<1x8x2xf32>
  return %dq, %dk, %dv, %ds0, %db : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>, tensor<1x8x2xf32>
}
