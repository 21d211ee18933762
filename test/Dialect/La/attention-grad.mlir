// RUN: la-opt %s -split-input-file | FileCheck %s
// RUN: la-opt %s -split-input-file | la-opt -split-input-file | FileCheck %s
// RUN: la-opt %s -split-input-file -mlir-print-op-generic | la-opt -split-input-file | FileCheck %s

// The gradient of a Gated DeltaNet layer: dq, dk, dv, then those of g and
// beta; the level-0 attributes are kept.
!qk = tensor<1x16x2x4xf32>
!v = tensor<1x16x4x6xf32>
!h = tensor<1x16x2xf32>

// CHECK-LABEL: func.func @gated_deltanet
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[B:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}})
// CHECK: %[[DQ:[^,]*]], %{{[^,]*}}, %{{[^,]*}}, %[[IG:.*]]:2 = la.attention_grad gated_deltanet %[[Q]], %[[K]], %[[V]] g(%[[G]] : tensor<1x16x2xf32>) beta(%[[B]] : tensor<1x16x2xf32>) d_o(%[[DO]] : tensor<1x16x4x6xf32>) {allow_neg_eigval, checkpoint = 8 : i64, qk_l2norm}
// CHECK-SAME: -> tensor<1x16x2x4xf32>, tensor<1x16x2x4xf32>, tensor<1x16x4x6xf32>, tensor<1x16x2xf32>, tensor<1x16x2xf32>
// CHECK: return %[[DQ]], %[[IG]]#1
func.func @gated_deltanet(%q: !qk, %k: !qk, %v: !v, %g: !h, %beta: !h,
                          %do: !v) -> (!qk, !h) {
  %dq, %dk, %dv, %dg, %dbeta = la.attention_grad gated_deltanet %q, %k, %v
      g(%g : !h) beta(%beta : !h) d_o(%do : !v)
      {qk_l2norm, allow_neg_eigval, checkpoint = 8 : i64}
      : !qk, !qk, !v -> !qk, !qk, !v, !h, !h
  return %dq, %dbeta : !qk, !h
}

// -----

// Gated DeltaNet-2 with packed sequences, a bf16 d_o, an initial state and
// the final state's gradient: the gradients of g, erase, write and the
// initial state follow dq, dk, dv in that order.
!qk = tensor<1x12x1x4xbf16>
!v = tensor<1x12x2x3xbf16>
!kf = tensor<1x12x1x4xf32>
!vf = tensor<1x12x2x3xf32>
!s = tensor<2x2x4x3xf32>

// CHECK-LABEL: func.func @gated_deltanet2
// CHECK: %{{.*}}, %{{.*}}, %{{.*}}, %[[IG:.*]]:4 = la.attention_grad gated_deltanet2 %{{.*}}, %{{.*}}, %{{.*}} g(%{{.*}} : tensor<1x12x1x4xf32>) erase(%{{.*}} : tensor<1x12x1x4xf32>) write(%{{.*}} : tensor<1x12x2x3xf32>) initial_state(%{{.*}} : tensor<2x2x4x3xf32>) cu_seqlens(%{{.*}} : tensor<3xi32>) d_o(%{{.*}} : tensor<1x12x2x3xbf16>) d_final_state(%{{.*}} : tensor<2x2x4x3xf32>) {scale = 5.000000e-01 : f32}
// CHECK: return %[[IG]]#3
func.func @gated_deltanet2(%q: !qk, %k: !qk, %v: !v, %g: !kf, %e: !kf,
                           %w: !vf, %s0: !s, %cu: tensor<3xi32>, %do: !v,
                           %dsf: !s) -> !s {
  %dq, %dk, %dv, %dg, %de, %dw, %ds0 = la.attention_grad gated_deltanet2
      %q, %k, %v g(%g : !kf) erase(%e : !kf) write(%w : !vf)
      initial_state(%s0 : !s) cu_seqlens(%cu : tensor<3xi32>) d_o(%do : !v)
      d_final_state(%dsf : !s) {scale = 0.5 : f32}
      : !qk, !qk, !v -> !kf, !kf, !vf, !kf, !kf, !vf, !s
  return %ds0 : !s
}

// -----

// GLA with fla's value-side gate gv: dgv follows dg.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

// CHECK-LABEL: func.func @gla_value_gate
// CHECK: %{{.*}}, %{{.*}}, %{{.*}}, %[[IG:.*]]:2 = la.attention_grad gla %{{.*}}, %{{.*}}, %{{.*}} g(%{{.*}} : tensor<1x8x2x4xf32>) gv(%{{.*}} : tensor<1x8x2x6xf32>) d_o(%{{.*}} : tensor<1x8x2x6xf32>)
// CHECK: return %[[IG]]#1
func.func @gla_value_gate(%q: !qk, %k: !qk, %v: !v, %g: !qk, %gv: !v,
                          %do: !v) -> !v {
  %dq, %dk, %dv, %dg, %dgv = la.attention_grad gla %q, %k, %v g(%g : !qk)
      gv(%gv : !v) d_o(%do : !v) : !qk, !qk, !v -> !qk, !qk, !v, !qk, !v
  return %dgv : !v
}
