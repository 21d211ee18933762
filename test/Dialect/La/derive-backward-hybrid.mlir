// RUN: la-opt %s -split-input-file -la-derive-backward="keep-forward=0" -canonicalize -cse | FileCheck %s

// LoLCATs' hybrid: la-derive-backward builds its adjoint program from the
// recomputed forward pieces: the far part's la.recurrence_grad (the
// cotangent e^-c do / D in the value columns, -e^-c (do . o) / D in the
// normaliser's) and the window's block products (dP = dN . v, then dq, dk
// and dv), one f32 gradient per float argument.
// CHECK-LABEL: func.func @hybrid_grad
// CHECK-SAME: (%[[Q:.*]]: tensor<2x50x2x8xf32>, %[[K:.*]]: tensor<2x50x2x8xf32>, %[[V:.*]]: tensor<2x50x2x4xf32>, %[[FQ:.*]]: tensor<2x50x2x3xf32>, %[[FK:.*]]: tensor<2x50x2x3xf32>, %[[DO:.*]]: tensor<2x50x2x4xf32>)
// CHECK-SAME: -> (tensor<2x50x2x8xf32>, tensor<2x50x2x8xf32>, tensor<2x50x2x4xf32>, tensor<2x50x2x3xf32>, tensor<2x50x2x3xf32>)
// CHECK-NOT: la.sliding_window_hybrid
// The forward's far part, recomputed.
// CHECK: %[[FKS:.*]] = tensor.insert_slice %{{.*}} into %{{.*}}[0, 20, 0, 0] [2, 30, 2, 3]
// CHECK: %[[FAR:.*]], %{{.*}} = la.recurrence decay(none) low_rank(none) %[[FQ]], %[[FKS]], %[[VS:.*]] outs(
// CHECK: %[[DN:.*]] = linalg.generic {{.*}} ins(%[[DO]], %{{.*}} : tensor<2x50x2x4xf32>, tensor<2x50x2xf32>)
// CHECK: %[[COT:.*]] = tensor.insert_slice %{{.*}} into %{{.*}}[0, 0, 0, 4] [2, 50, 2, 1]
// CHECK: %[[DFQ:.*]], %[[DFKS:.*]], %[[DVS:.*]], %{{.*}} = la.recurrence_grad decay(none) low_rank(none) %[[FQ]], %[[FKS]], %[[VS]] initial_state(%{{.*}}) d_o(%[[COT]] : tensor<2x50x2x5xf32>) {scale = 1.000000e+00 : f32}
// The moved tokens' gradients back to their source tokens.
// CHECK: %[[DFK20:.*]] = tensor.extract_slice %[[DFKS]][0, 20, 0, 0] [2, 30, 2, 3]
// CHECK: %[[DFK:.*]] = tensor.insert_slice %[[DFK20]] into %{{.*}}[0, 0, 0, 0] [2, 30, 2, 3]
// CHECK: tensor.extract_slice %[[DVS]][0, 20, 0, 0] [2, 30, 2, 4]
// The window: dP, dS, and the three products per block pair.
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<2x2x2x32x32xf32>)
// CHECK: return %{{.*}}, %{{.*}}, %{{.*}}, %[[DFQ]], %[[DFK]]
func.func @hybrid(%q: tensor<2x50x2x8xf32>, %k: tensor<2x50x2x8xf32>, %v: tensor<2x50x2x4xf32>, %fq: tensor<2x50x2x3xf32>, %fk: tensor<2x50x2x3xf32>) -> tensor<2x50x2x4xf32> {
  %o = la.sliding_window_hybrid %q, %k, %v features(%fq : tensor<2x50x2x3xf32>, %fk : tensor<2x50x2x3xf32>) {window = 20 : i64} : tensor<2x50x2x8xf32>, tensor<2x50x2x8xf32>, tensor<2x50x2x4xf32> -> tensor<2x50x2x4xf32>
  return %o : tensor<2x50x2x4xf32>
}

// -----

// With context, an initial state and the final state: the early context
// tokens' gradients come through their contraction into the state, the
// initial state's is the recurrence's, and the final state's cotangent is
// the recurrence_grad's d_final_state.
// CHECK-LABEL: func.func @stateful_grad
// CHECK-SAME: %[[DS:[a-z0-9]*]]: tensor<1x2x4x9xf32>) -> (tensor<1x8x2x16xf32>, tensor<1x24x2x16xf32>, tensor<1x24x2x8xf32>, tensor<1x8x2x4xf32>, tensor<1x24x2x4xf32>, tensor<1x2x4x9xf32>)
// CHECK: %{{.*}}, %{{.*}}, %{{.*}}, %[[DS0:.*]] = la.recurrence_grad decay(none) low_rank(none) {{.*}} d_final_state(%[[DS]] : tensor<1x2x4x9xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[DS0]], %{{.*}} : tensor<1x2x4x9xf32>, tensor<1x16x2x9xf32>) outs(%{{.*}} : tensor<1x16x2x4xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[DS0]], %{{.*}} : tensor<1x2x4x9xf32>, tensor<1x16x2x4xf32>) outs(%{{.*}} : tensor<1x16x2x9xf32>)
// CHECK: return {{.*}}, %[[DS0]] :
func.func @stateful(%q: tensor<1x8x2x16xf32>, %k: tensor<1x24x2x16xf32>, %v: tensor<1x24x2x8xf32>, %fq: tensor<1x8x2x4xf32>, %fk: tensor<1x24x2x4xf32>, %s0: tensor<1x2x4x9xf32>) -> (tensor<1x8x2x8xf32>, tensor<1x2x4x9xf32>) {
  %o, %s = la.sliding_window_hybrid %q, %k, %v features(%fq : tensor<1x8x2x4xf32>, %fk : tensor<1x24x2x4xf32>) initial_state(%s0 : tensor<1x2x4x9xf32>) {window = 10 : i64}
    : tensor<1x8x2x16xf32>, tensor<1x24x2x16xf32>, tensor<1x24x2x8xf32> -> tensor<1x8x2x8xf32>, tensor<1x2x4x9xf32>
  return %o, %s : tensor<1x8x2x8xf32>, tensor<1x2x4x9xf32>
}
