// RUN: la-opt %s -split-input-file -convert-la-to-linalg -verify-diagnostics | FileCheck %s

// The delta rule token by token, scalar gate, grouped value heads:
// S' = exp(g_t) S; u = k^T S'; S = S' + beta k (v - u)^T; o_t = S^T (scale q).
// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-DAG: #[[HEAD:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1 floordiv 2)>
// CHECK-LABEL: func.func @delta
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[B:[^:]*]]: tensor<1x8x1xf32>)
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK: %[[S0:.*]] = linalg.fill {{.*}} -> tensor<1x2x4x6xf32>
// CHECK: %[[C8:.*]] = arith.constant 8 : index
// CHECK: %[[LOOP:.*]]:2 = scf.for %[[T:.*]] = %[[C0]] to %[[C8]] step %[[C1]] iter_args(%[[S:.*]] = %[[S0]], %[[O:.*]] = %{{.*}})
// CHECK: %[[QT:.*]] = tensor.extract_slice %[[Q]][0, %[[T]], 0, 0] [1, 1, 1, 4]
// CHECK: %[[KT:.*]] = tensor.extract_slice %[[K]][0, %[[T]], 0, 0]
// CHECK: %[[VT:.*]] = tensor.extract_slice %[[V]][0, %[[T]], 0, 0]
// CHECK: %[[GT:.*]] = tensor.extract_slice %[[G]][0, %[[T]], 0]
// CHECK: %[[DECAYED:.*]] = linalg.generic {indexing_maps = [#[[ID]], #[[HEAD]], #[[ID]]], {{.*}}} ins(%[[S]], %[[GT]] : {{.*}})
// CHECK: math.exp
// CHECK: %[[U:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[KT]], %[[DECAYED]] : {{.*}})
// CHECK: %[[BT:.*]] = tensor.extract_slice %[[B]][0, %[[T]], 0]
// CHECK: %[[NEXT:.*]] = linalg.generic {{.*}} ins(%[[DECAYED]], %[[KT]], %[[VT]], %[[U]], %[[BT]] : {{.*}})
// CHECK: %[[ERR:.*]] = arith.subf
// CHECK: %[[BK:.*]] = arith.mulf
// CHECK: %[[UPD:.*]] = arith.mulf %[[BK]], %[[ERR]]
// CHECK: arith.addf %{{.*}}, %[[UPD]]
// CHECK: %[[OT:.*]] = linalg.generic {{.*}} ins(%[[QT]], %[[NEXT]] : {{.*}})
// CHECK: %[[OW:.*]] = tensor.insert_slice %[[OT]] into %[[O]][0, %[[T]], 0, 0] [1, 1, 2, 6]
// CHECK: scf.yield %[[NEXT]], %[[OW]]
// CHECK: return %[[LOOP]]#1
func.func @delta(%q: tensor<1x8x1x4xf32>, %k: tensor<1x8x1x4xf32>, %v: tensor<1x8x2x6xf32>, %g: tensor<1x8x1xf32>, %b: tensor<1x8x1xf32>) -> tensor<1x8x2x6xf32> {
  %oi0 = tensor.empty() : tensor<1x8x2x6xf32>
  %zs0 = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  %o, %fs0 = la.recurrence decay(scalar) low_rank(delta) %q, %k, %v g(%g : tensor<1x8x1xf32>) beta(%b : tensor<1x8x1xf32>) outs(%oi0, %zs0 : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) {scale = 0.5 : f32} : tensor<1x8x1x4xf32>, tensor<1x8x1x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return %o : tensor<1x8x2x6xf32>
}

// -----

// General low rank: a^T reads the old state; S = alpha S - b u^T + k v^T.
// CHECK-LABEL: func.func @general
// CHECK-SAME: %[[A:[^:]*]]: tensor<1x4x1x4xf32>, %[[B:[^:]*]]: tensor<1x4x1x4xf32>)
// CHECK: scf.for %[[T:.*]] = {{.*}} iter_args(%[[S:.*]] = %{{.*}}, %{{.*}} = %{{.*}})
// CHECK: %[[AT:.*]] = tensor.extract_slice %[[A]][0, %[[T]], 0, 0]
// CHECK: %[[U:.*]] = linalg.generic {{.*}} ins(%[[AT]], %[[S]] : {{.*}})
// CHECK: %[[BT:.*]] = tensor.extract_slice %[[B]][0, %[[T]], 0, 0]
// CHECK: linalg.generic {{.*}} ins(%[[S]], %{{.*}}, %{{.*}}, %[[U]], %[[BT]], %{{.*}} : {{.*}})
// CHECK: math.exp
// CHECK: arith.subf
func.func @general(%q: tensor<1x4x1x4xf32>, %k: tensor<1x4x1x4xf32>, %v: tensor<1x4x1x4xf32>, %g: tensor<1x4x1x4xf32>, %a: tensor<1x4x1x4xf32>, %b: tensor<1x4x1x4xf32>) -> tensor<1x4x1x4xf32> {
  %oi1 = tensor.empty() : tensor<1x4x1x4xf32>
  %zs1 = arith.constant dense<0.0> : tensor<1x1x4x4xf32>
  %o, %fs1 = la.recurrence decay(channel) low_rank(general) %q, %k, %v g(%g : tensor<1x4x1x4xf32>) a(%a : tensor<1x4x1x4xf32>) b(%b : tensor<1x4x1x4xf32>) outs(%oi1, %zs1 : tensor<1x4x1x4xf32>, tensor<1x1x4x4xf32>) {scale = 0.5 : f32} : tensor<1x4x1x4xf32>, tensor<1x4x1x4xf32>, tensor<1x4x1x4xf32> -> tensor<1x4x1x4xf32>, tensor<1x1x4x4xf32>
  return %o : tensor<1x4x1x4xf32>
}

// -----

// Packed sequences: an outer loop over sequences, each time loop starting
// from its own initial state and bounded by cu_seqlens.
// CHECK-LABEL: func.func @varlen
// CHECK-SAME: %[[S0:[^:]*]]: tensor<2x1x4x4xf32>, %[[CU:[^:]*]]: tensor<3xi32>)
// CHECK: scf.for %[[N:.*]] = {{.*}} iter_args(%[[OACC:.*]] = %{{.*}}, %[[SACC:.*]] = %{{.*}})
// CHECK: %[[B0:.*]] = arith.index_cast
// CHECK: %[[E0:.*]] = arith.index_cast
// CHECK: %[[B1:.*]] = arith.maxsi %[[B0]]
// CHECK: %[[BEGIN:.*]] = arith.minsi %[[B1]]
// CHECK: %[[E1:.*]] = arith.maxsi %[[E0]], %[[BEGIN]]
// CHECK: %[[END:.*]] = arith.minsi %[[E1]]
// CHECK: %[[INIT:.*]] = tensor.extract_slice %[[S0]][%[[N]], 0, 0, 0] [1, 1, 4, 4]
// CHECK: %[[INNER:.*]]:2 = scf.for %{{.*}} = %[[BEGIN]] to %[[END]] {{.*}} iter_args(%{{.*}} = %[[INIT]], %{{.*}} = %[[OACC]])
// CHECK: %[[FINALS:.*]] = tensor.insert_slice %[[INNER]]#0 into %[[SACC]][%[[N]], 0, 0, 0]
// CHECK: scf.yield %[[INNER]]#1, %[[FINALS]]
func.func @varlen(%q: tensor<1x10x1x4xf32>, %k: tensor<1x10x1x4xf32>, %v: tensor<1x10x1x4xf32>, %s0: tensor<2x1x4x4xf32>, %cu: tensor<3xi32>) -> (tensor<1x10x1x4xf32>, tensor<2x1x4x4xf32>) {
  %oi2 = tensor.empty() : tensor<1x10x1x4xf32>
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %k, %v cu_seqlens(%cu : tensor<3xi32>) outs(%oi2, %s0 : tensor<1x10x1x4xf32>, tensor<2x1x4x4xf32>) {scale = 0.5 : f32} : tensor<1x10x1x4xf32>, tensor<1x10x1x4xf32>, tensor<1x10x1x4xf32> -> tensor<1x10x1x4xf32>, tensor<2x1x4x4xf32>
  return %o, %s : tensor<1x10x1x4xf32>, tensor<2x1x4x4xf32>
}

// -----

// Anything left at level 0 is an error.
func.func @attention_left(%q: tensor<1x4x1x4xf32>) -> tensor<1x4x1x4xf32> {
  // expected-error @+1 {{failed to legalize operation 'la.attention'}}
  %o = la.attention linear %q, %q, %q : tensor<1x4x1x4xf32>, tensor<1x4x1x4xf32>, tensor<1x4x1x4xf32> -> tensor<1x4x1x4xf32>
  return %o : tensor<1x4x1x4xf32>
}

// -----

// A reverse recurrence: iteration r of the token loop is token
// begin + end - 1 - r (7 - r here).
// CHECK-LABEL: func.func @reverse_tokens
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}})
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[C8:.*]] = arith.constant 8 : index
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK: scf.for %[[R:.*]] = %[[C0]] to %[[C8]] step %[[C1]]
// CHECK: %[[SUM:.*]] = arith.addi %[[C0]], %[[C8]] : index
// CHECK: %[[LAST:.*]] = arith.subi %[[SUM]], %[[C1]] : index
// CHECK: %[[T:.*]] = arith.subi %[[LAST]], %[[R]] : index
// CHECK: tensor.extract_slice %[[Q]][0, %[[T]], 0, 0] [1, 1, 1, 4]
func.func @reverse_tokens(%q: tensor<1x8x1x4xf32>, %v: tensor<1x8x1x4xf32>, %s0: tensor<1x1x4x4xf32>) -> (tensor<1x8x1x4xf32>, tensor<1x1x4x4xf32>) {
  %oi = tensor.empty() : tensor<1x8x1x4xf32>
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %q, %v outs(%oi, %s0 : tensor<1x8x1x4xf32>, tensor<1x1x4x4xf32>) {reverse, scale = 1.0 : f32} : tensor<1x8x1x4xf32>, tensor<1x8x1x4xf32>, tensor<1x8x1x4xf32> -> tensor<1x8x1x4xf32>, tensor<1x1x4x4xf32>
  return %o, %s : tensor<1x8x1x4xf32>, tensor<1x1x4x4xf32>
}

// -----

// Grouped query heads (HQ = 4 over HV = H = 2): the state [B,HV,K,V] is
// updated once per token; the read-out has one row per query head hq, which
// reads state hq floordiv 2.
// CHECK-DAG: #[[ROW:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
// CHECK-DAG: #[[READ:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1 floordiv 2, d3, d2)>
// CHECK-DAG: #[[OUT:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @grouped_query_heads
// CHECK: scf.for %[[T:.*]] = {{.*}} iter_args(%[[S:.*]] = %{{.*}}, %[[OA:.*]] = %{{.*}}) -> (tensor<1x2x8x16xf32>, tensor<1x8x4x16xf32>)
// CHECK: %[[NEXT:.*]] = linalg.generic {{.*}} ins(%[[S]], %{{.*}}, %{{.*}} : tensor<1x2x8x16xf32>, tensor<1x2x8xf32>, tensor<1x2x16xf32>) outs(%{{.*}} : tensor<1x2x8x16xf32>)
// CHECK: %[[ROWS:.*]] = linalg.generic {indexing_maps = [#[[ROW]], #[[READ]], #[[OUT]]], {{.*}} ins(%{{.*}}, %[[NEXT]] : tensor<1x4x8xf32>, tensor<1x2x8x16xf32>) outs(%{{.*}} : tensor<1x4x16xf32>)
// CHECK: tensor.insert_slice %[[ROWS]] into %[[OA]][0, %[[T]], 0, 0] [1, 1, 4, 16]
func.func @grouped_query_heads(%q: tensor<1x8x4x8xf32>, %k: tensor<1x8x2x8xf32>, %v: tensor<1x8x2x16xf32>, %s0: tensor<1x2x8x16xf32>) -> (tensor<1x8x4x16xf32>, tensor<1x2x8x16xf32>) {
  %oi = tensor.empty() : tensor<1x8x4x16xf32>
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %k, %v outs(%oi, %s0 : tensor<1x8x4x16xf32>, tensor<1x2x8x16xf32>) {scale = 0.5 : f32} : tensor<1x8x4x8xf32>, tensor<1x8x2x8xf32>, tensor<1x8x2x16xf32> -> tensor<1x8x4x16xf32>, tensor<1x2x8x16xf32>
  return %o, %s : tensor<1x8x4x16xf32>, tensor<1x2x8x16xf32>
}
