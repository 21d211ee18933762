// RUN: la-opt %s -split-input-file -convert-la-to-linalg -canonicalize -cse | FileCheck %s

// Linear attention's gradient, checkpoint 4 over 16 tokens: pass 1 stores
// the state entering each of the 4 blocks; pass 2 takes the blocks in
// reverse, recomputes a block's 5 states, then runs its tokens backward:
// dS += q do^T, dq = S do, dv = dS^T k, dk = dS v. The state's loops start
// from a copy of the initial state: the kernel never writes its inputs.
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[S0:[^:]*]]: {{.*}})
// CHECK-DAG: %[[C3:.*]] = arith.constant 3 : index
// CHECK-DAG: %[[C4:.*]] = arith.constant 4 : index
// CHECK: %[[S0COPY:.*]] = linalg.copy ins(%[[S0]] : tensor<1x1x4x6xf32>)
// CHECK: %[[CKPT0:.*]] = tensor.empty() : tensor<4x1x1x4x6xf32>
// CHECK: %[[PASS1:.*]]:2 = scf.for %[[BLK:.*]] = %{{.*}} to %[[C4]] step %{{.*}} iter_args(%[[S:.*]] = %[[S0COPY]], %[[CK:.*]] = %[[CKPT0]])
// CHECK: %[[STORED:.*]] = tensor.insert_slice %[[S]] into %[[CK]][%[[BLK]], 0, 0, 0, 0]
// CHECK: %[[FWD:.*]] = scf.for
// CHECK: scf.yield %[[FWD]], %[[STORED]]
// CHECK: %[[PASS2:.*]]:4 = scf.for %[[R:.*]] = %{{.*}} to %[[C4]] step %{{.*}} iter_args(%[[DS:.*]] = %{{.*}}, %[[DQ:.*]] = %{{.*}}, %[[DK:.*]] = %{{.*}}, %[[DV:.*]] = %{{.*}})
// CHECK: %[[BLOCK:.*]] = arith.subi %[[C3]], %[[R]]
// CHECK: %[[START:.*]] = tensor.extract_slice %[[PASS1]]#1[%[[BLOCK]], 0, 0, 0, 0]
// CHECK: %[[BUF:.*]] = tensor.empty() : tensor<5x1x1x4x6xf32>
// CHECK: %[[RECOMPUTE:.*]]:2 = scf.for {{.*}} -> (tensor<1x1x4x6xf32>, tensor<5x1x1x4x6xf32>)
// CHECK: %[[BACK:.*]]:4 = scf.for {{.*}} iter_args(%[[DSI:.*]] = %[[DS]], %{{.*}} = %[[DQ]], %{{.*}} = %[[DK]], %{{.*}} = %[[DV]])
// CHECK: %[[AFTER:.*]] = tensor.extract_slice %[[RECOMPUTE]]#1
// CHECK: %[[DSN:.*]] = linalg.generic {{.*}} ins(%[[DSI]], %{{.*}}, %{{.*}} : {{.*}}) outs(%[[DSI]] : {{.*}})
// CHECK: %[[DQT:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[AFTER]], %{{.*}} : {{.*}})
// CHECK: tensor.insert_slice %[[DQT]]
// CHECK: scf.yield %[[DSN]],
// CHECK: scf.yield %[[BACK]]#0, %[[BACK]]#1, %[[BACK]]#2, %[[BACK]]#3
// CHECK: return %[[PASS2]]#1, %[[PASS2]]#0
func.func @linear(%q: tensor<1x16x1x4xf32>, %v: tensor<1x16x1x6xf32>, %s: tensor<1x1x4x6xf32>) -> (tensor<1x16x1x4xf32>, tensor<1x1x4x6xf32>) {
  %r:4 = la.recurrence_grad decay(none) low_rank(none) %q, %q, %v initial_state(%s : tensor<1x1x4x6xf32>) d_o(%v : tensor<1x16x1x6xf32>) {scale = 1.0 : f32, checkpoint = 4 : i64} : tensor<1x16x1x4xf32>, tensor<1x16x1x4xf32>, tensor<1x16x1x6xf32> -> tensor<1x16x1x4xf32>, tensor<1x16x1x4xf32>, tensor<1x16x1x6xf32>, tensor<1x1x4x6xf32>
  return %r#0, %r#3 : tensor<1x16x1x4xf32>, tensor<1x1x4x6xf32>
}

// -----

// Grouped value heads (HV = 2 H): key-side gradients are split to
// [B,H,group,K] and summed over the group; the delta rule's transposed
// transition is exp(g) (dS + k du^T).
// CHECK-LABEL: func.func @grouped_delta
// CHECK: scf.for
// CHECK: scf.for
// CHECK: %[[SPLIT:.*]] = tensor.expand_shape %{{.*}} {{\[\[}}0], [1, 2], [3]] output_shape [1, 1, 2, 4] : tensor<1x2x4xf32> into tensor<1x1x2x4xf32>
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[SPLIT]] : tensor<1x1x2x4xf32>) outs(%{{.*}} : tensor<1x1x4xf32>)
// CHECK: math.exp
// CHECK: return
func.func @grouped_delta(%q: tensor<1x8x1x4xf32>, %v: tensor<1x8x2x6xf32>, %g: tensor<1x8x1xf32>, %beta: tensor<1x8x1xf32>, %s: tensor<1x2x4x6xf32>) -> tensor<1x8x1x4xf32> {
  %r:6 = la.recurrence_grad decay(scalar) low_rank(delta) %q, %q, %v g(%g : tensor<1x8x1xf32>) beta(%beta : tensor<1x8x1xf32>) initial_state(%s : tensor<1x2x4x6xf32>) d_o(%v : tensor<1x8x2x6xf32>) {scale = 1.0 : f32} : tensor<1x8x1x4xf32>, tensor<1x8x1x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x1x4xf32>, tensor<1x8x1x4xf32>, tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>, tensor<1x8x1xf32>, tensor<1x8x1xf32>
  return %r#1 : tensor<1x8x1x4xf32>
}

// -----

// A value-side gate gv: per token, dgv = colsum(dS * S_{t-1} * gamma) (a
// reduction over the key channels, the state read transposed), and the
// adjoint carried back is dS * gamma.
// CHECK-DAG: #[[VROW:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
// CHECK-DAG: #[[T:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3, d2)>
// CHECK-DAG: #[[HEAD:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @value_gate
// CHECK-SAME: (%{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}}, %[[GV:[^:]*]]: {{.*}}, %{{[^:]*}}: {{.*}})
// CHECK: %[[PASS2:.*]]:5 = scf.for
// CHECK: scf.for
// CHECK: %[[BACK:.*]]:5 = scf.for {{.*}} iter_args(%[[DSI:.*]] = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %[[DGV:.*]] = %{{.*}})
// CHECK: %[[GVT:.*]] = tensor.extract_slice %[[GV]][0, %{{.*}}, 0, 0] [1, 1, 1, 6]
// CHECK: %[[DS:.*]] = linalg.generic {{.*}} ins(%[[DSI]], %{{.*}}, %{{.*}} : {{.*}}) outs(%[[DSI]] : {{.*}})
// CHECK: %[[DGVT:.*]] = linalg.generic {indexing_maps = [#[[T]], #[[T]], #[[HEAD]], #[[HEAD]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[DS]], %{{.*}}, %[[GVT]] :
// CHECK: math.exp
// CHECK: tensor.insert_slice %[[DGVT]] into %[[DGV]]
// CHECK: %[[CARRIED:.*]] = linalg.generic {{.*}} ins(%[[DS]], %[[GVT]] : tensor<1x1x4x6xf32>, tensor<1x1x6xf32>) outs(%[[DS]] :
// CHECK: math.exp
// CHECK: scf.yield %[[CARRIED]],
// CHECK: return %[[PASS2]]#4
func.func @value_gate(%q: tensor<1x8x1x4xf32>, %v: tensor<1x8x1x6xf32>, %gv: tensor<1x8x1x6xf32>, %s: tensor<1x1x4x6xf32>) -> tensor<1x8x1x6xf32> {
  %r:5 = la.recurrence_grad decay(none) low_rank(none) %q, %q, %v gv(%gv : tensor<1x8x1x6xf32>) initial_state(%s : tensor<1x1x4x6xf32>) d_o(%v : tensor<1x8x1x6xf32>) {scale = 1.0 : f32, checkpoint = 4 : i64} : tensor<1x8x1x4xf32>, tensor<1x8x1x4xf32>, tensor<1x8x1x6xf32> -> tensor<1x8x1x4xf32>, tensor<1x8x1x4xf32>, tensor<1x8x1x6xf32>, tensor<1x1x4x6xf32>, tensor<1x8x1x6xf32>
  return %r#4 : tensor<1x8x1x6xf32>
}
