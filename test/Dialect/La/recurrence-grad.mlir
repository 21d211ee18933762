// RUN: la-opt %s -split-input-file | FileCheck %s
// RUN: la-opt %s -split-input-file | la-opt -split-input-file | FileCheck %s
// RUN: la-opt %s -split-input-file -mlir-print-op-generic | la-opt -split-input-file | FileCheck %s

// The gradient of Gated DeltaNet's canonical recurrence: dq, dk, dv and the
// initial state's, then those of g and beta.
!qk = tensor<1x16x2x4xf32>
!v = tensor<1x16x4x6xf32>
!h = tensor<1x16x2xf32>
!s = tensor<1x4x4x6xf32>

// CHECK-LABEL: func.func @gated_delta
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[B:[^:]*]]: {{.*}}, %[[S:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}})
// CHECK: %[[DQ:[^,]*]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[IG:.*]]:2 = la.recurrence_grad decay(scalar) low_rank(delta) %[[Q]], %[[K]], %[[V]] g(%[[G]] : tensor<1x16x2xf32>) beta(%[[B]] : tensor<1x16x2xf32>) initial_state(%[[S]] : tensor<1x4x4x6xf32>) d_o(%[[DO]] : tensor<1x16x4x6xf32>) {checkpoint = 8 : i64, scale = 5.000000e-01 : f32}
// CHECK-SAME: -> tensor<1x16x2x4xf32>, tensor<1x16x2x4xf32>, tensor<1x16x4x6xf32>, tensor<1x4x4x6xf32>, tensor<1x16x2xf32>, tensor<1x16x2xf32>
// CHECK: return %[[DQ]], %[[IG]]#0
func.func @gated_delta(%q: !qk, %k: !qk, %v: !v, %g: !h, %beta: !h, %s: !s,
                       %do: !v) -> (!qk, !h) {
  %dq, %dk, %dv, %ds, %dg, %dbeta = la.recurrence_grad decay(scalar)
      low_rank(delta) %q, %k, %v g(%g : !h) beta(%beta : !h)
      initial_state(%s : !s) d_o(%do : !v)
      {scale = 0.5 : f32, checkpoint = 8 : i64}
      : !qk, !qk, !v -> !qk, !qk, !v, !s, !h, !h
  return %dq, %dg : !qk, !h
}

// -----

// The general low-rank form with packed sequences, a bf16 d_o and the final
// state's gradient; checkpoint takes its default.
!qk = tensor<1x16x2x4xbf16>
!g = tensor<1x16x2x4xf32>
!v = tensor<1x16x2x6xbf16>
!s = tensor<3x2x4x6xf32>

// CHECK-LABEL: func.func @general_packed
// CHECK: la.recurrence_grad decay(channel) low_rank(general) %{{.*}}, %{{.*}}, %{{.*}} g(%{{.*}} : tensor<1x16x2x4xf32>) a(%{{.*}} : tensor<1x16x2x4xf32>) b(%{{.*}} : tensor<1x16x2x4xf32>) cu_seqlens(%{{.*}} : tensor<4xi32>) initial_state(%{{.*}} : tensor<3x2x4x6xf32>) d_o(%{{.*}} : tensor<1x16x2x6xbf16>) d_final_state(%{{.*}} : tensor<3x2x4x6xf32>) {scale = 1.000000e+00 : f32}
func.func @general_packed(%q: !qk, %k: !qk, %v: !v, %g: !g, %a: !g, %b: !g,
                          %cu: tensor<4xi32>, %s: !s, %do: !v, %dsf: !s)
    -> tensor<1x16x2x4xf32> {
  %r:7 = la.recurrence_grad decay(channel) low_rank(general) %q, %k, %v
      g(%g : !g) a(%a : !g) b(%b : !g) cu_seqlens(%cu : tensor<4xi32>)
      initial_state(%s : !s) d_o(%do : !v) d_final_state(%dsf : !s)
      {scale = 1.0 : f32}
      : !qk, !qk, !v -> tensor<1x16x2x4xf32>, tensor<1x16x2x4xf32>,
        tensor<1x16x2x6xf32>, !s, !g, !g, !g
  return %r#0 : tensor<1x16x2x4xf32>
}

// -----

// A value-side gate: its gradient follows dg.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!h = tensor<1x8x2xf32>
!s = tensor<1x2x4x6xf32>

// CHECK-LABEL: func.func @value_gate
// CHECK: %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[IG:.*]]:2 = la.recurrence_grad decay(scalar) low_rank(none) %{{.*}}, %{{.*}}, %{{.*}} g(%{{.*}} : tensor<1x8x2xf32>) gv(%{{.*}} : tensor<1x8x2x6xf32>) initial_state(
// CHECK: return %[[IG]]#1
func.func @value_gate(%q: !qk, %k: !qk, %v: !v, %g: !h, %gv: !v, %s0: !s,
                      %do: !v) -> !v {
  %dq, %dk, %dv, %ds0, %dg, %dgv = la.recurrence_grad decay(scalar)
      low_rank(none) %q, %k, %v g(%g : !h) gv(%gv : !v)
      initial_state(%s0 : !s) d_o(%do : !v) {scale = 0.5 : f32}
      : !qk, !qk, !v -> !qk, !qk, !v, !s, !h, !v
  return %dgv : !v
}
