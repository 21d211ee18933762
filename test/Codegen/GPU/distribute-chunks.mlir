// RUN: la-opt %s -split-input-file -la-distribute-chunks=value-tile=8 | FileCheck %s
// RUN: la-opt %s -split-input-file -la-distribute-chunks=value-tile=0 | FileCheck %s --check-prefix=WHOLE

// Gated DeltaNet, one key head with two value heads (HV = 2), two chunks of
// 16: every level-2 op becomes a forall of tasks mapped with #la.task. The
// per-chunk ops run over (batch, chunk, key head) on [1,1,16,...] slices, a
// key head's task taking both of its value heads; the scan runs over
// (batch, key head, value tile), on the whole sequence of its head and its
// 8 value columns (U, the initial state, the states, the final state and the
// corrected values), the keys and gates whole. Offsets derived from a task's
// indices are computed once, first.
// CHECK-LABEL: func.func @gated_deltanet
// CHECK-SAME: (%{{[^:]*}}: tensor<1x2x16x1x8xf32>, %[[K:[^:]*]]: tensor<1x2x16x1x8xf32>, %[[V:[^:]*]]: tensor<1x2x16x2x16xf32>, %[[G:[^:]*]]: tensor<1x2x16x1xf32>, %[[BETA:[^:]*]]: tensor<1x2x16x1xf32>, %[[S0:[^:]*]]: tensor<1x2x8x16xf32>)
// CHECK: %[[GI:.*]] = bufferization.alloc_tensor() : tensor<1x2x16x1xf32>
// CHECK: %[[CUM:.*]] = scf.forall (%[[B:.*]], %[[N:.*]], %[[H:.*]]) in (1, 2, 1) shared_outs(%[[CO:.*]] = %[[GI]])
// CHECK: %[[GS:.*]] = tensor.extract_slice %[[G]][%[[B]], %[[N]], 0, %[[H]]] [1, 1, 16, 1] [1, 1, 1, 1]
// CHECK: %[[CT:.*]] = la.chunk_cumsum %[[GS]] : tensor<1x1x16x1xf32> -> tensor<1x1x16x1xf32>
// CHECK: tensor.parallel_insert_slice %[[CT]] into %[[CO]][%[[B]], %[[N]], 0, %[[H]]] [1, 1, 16, 1]
// CHECK: } {mapping = [#la.task<0>, #la.task<1>, #la.task<2>]}
// CHECK: %[[WY:.*]]:2 = scf.forall (%[[B1:.*]], %[[N1:.*]], %[[H1:.*]]) in (1, 2, 1)
// CHECK: %[[C2:.*]] = arith.constant 2 : index
// CHECK: %[[VH:.*]] = arith.muli %[[H1]], %[[C2]] : index
// CHECK: %[[VS:.*]] = tensor.extract_slice %[[V]][%[[B1]], %[[N1]], 0, %[[VH]], 0] [1, 1, 16, 2, 16]
// CHECK: la.chunk_wy {{.*}} : tensor<1x1x16x1x8xf32>, tensor<1x1x16x2x16xf32> -> tensor<1x1x16x1x8xf32>, tensor<1x1x16x2x16xf32>
// CHECK: } {mapping = [#la.task<0>, #la.task<1>, #la.task<2>]}
// CHECK: %[[SCAN:.*]]:3 = scf.forall (%[[B2:.*]], %[[H2:.*]], %[[J:.*]]) in (1, 1, 2)
// CHECK: %[[VH2:.*]] = arith.muli %[[H2]], %{{.*}} : index
// CHECK: %[[COL:.*]] = arith.muli %[[J]], %{{.*}} : index
// CHECK: %[[KS:.*]] = tensor.extract_slice %[[K]][%[[B2]], 0, 0, %[[H2]], 0] [1, 2, 16, 1, 8]
// CHECK: %[[US:.*]] = tensor.extract_slice %[[WY]]#1[%[[B2]], 0, 0, %[[VH2]], %[[COL]]] [1, 2, 16, 2, 8]
// CHECK: %[[S0S:.*]] = tensor.extract_slice %[[S0]][%[[B2]], %[[VH2]], 0, %[[COL]]] [1, 2, 8, 8]
// CHECK: %[[WS:.*]] = tensor.extract_slice %[[WY]]#0[%[[B2]], 0, 0, %[[H2]], 0] [1, 2, 16, 1, 8]
// CHECK: %[[STATES:.*]], %[[FINAL:.*]], %[[CORR:.*]] = la.chunk_state_scan %[[KS]], %[[US]] gates({{.*}}) initial_state(%[[S0S]] : tensor<1x2x8x8xf32>) correction(%[[WS]] : tensor<1x2x16x1x8xf32>) : tensor<1x2x16x1x8xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x16x2x8xf32>
// CHECK: tensor.parallel_insert_slice %[[STATES]] into %{{.*}}[%[[B2]], 0, %[[VH2]], 0, %[[COL]]] [1, 2, 2, 8, 8]
// CHECK: tensor.parallel_insert_slice %[[FINAL]] into %{{.*}}[%[[B2]], %[[VH2]], 0, %[[COL]]] [1, 2, 8, 8]
// CHECK: tensor.parallel_insert_slice %[[CORR]] into %{{.*}}[%[[B2]], 0, 0, %[[VH2]], %[[COL]]] [1, 2, 16, 2, 8]
// CHECK: } {mapping = [#la.task<0>, #la.task<1>, #la.task<2>]}
// The intra-chunk product, read only by the output, runs in the output's
// tasks: its tile feeds la.chunk_inter directly and only the output leaves.
// CHECK: %[[OUT:.*]] = scf.forall (%[[B3:.*]], %[[N3:.*]], %[[H3:.*]]) in (1, 2, 1) shared_outs(%[[O:.*]] = %{{.*}}) -> (tensor<1x2x16x2x16xf32>)
// CHECK: %[[INTRA:.*]] = la.chunk_intra
// CHECK: %[[SS:.*]] = tensor.extract_slice %[[SCAN]]#0[%[[B3]], %[[N3]], %{{.*}}, 0, 0] [1, 1, 2, 8, 16]
// CHECK: %[[OT:.*]] = la.chunk_inter %{{.*}}, %[[SS]], %[[INTRA]] gates({{.*}}) {{.*}} : tensor<1x1x16x1x8xf32>, tensor<1x1x2x8x16xf32>, tensor<1x1x16x2x16xf32> -> tensor<1x1x16x2x16xf32>
// CHECK: tensor.parallel_insert_slice %[[OT]] into %[[O]]
// CHECK: return %[[OUT]], %[[SCAN]]#1
// With value-tile=0 the scan has one task per (batch, key head), all of V.
// WHOLE-LABEL: func.func @gated_deltanet
// WHOLE: scf.forall (%{{.*}}, %{{.*}}) in (1, 1)
// WHOLE: la.chunk_state_scan {{.*}} -> tensor<1x2x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x16x2x16xf32>
// WHOLE: } {mapping = [#la.task<0>, #la.task<1>]}
func.func @gated_deltanet(%q: tensor<1x2x16x1x8xf32>, %k: tensor<1x2x16x1x8xf32>, %v: tensor<1x2x16x2x16xf32>, %g: tensor<1x2x16x1xf32>, %beta: tensor<1x2x16x1xf32>, %s0: tensor<1x2x8x16xf32>) -> (tensor<1x2x16x2x16xf32>, tensor<1x2x8x16xf32>) {
  %0 = la.chunk_cumsum %g : tensor<1x2x16x1xf32> -> tensor<1x2x16x1xf32>
  %w, %u = la.chunk_wy %k, %v beta(%beta : tensor<1x2x16x1xf32>) gates(%0 : tensor<1x2x16x1xf32>) : tensor<1x2x16x1x8xf32>, tensor<1x2x16x2x16xf32> -> tensor<1x2x16x1x8xf32>, tensor<1x2x16x2x16xf32>
  %states, %final, %corrected = la.chunk_state_scan %k, %u gates(%0 : tensor<1x2x16x1xf32>) initial_state(%s0 : tensor<1x2x8x16xf32>) correction(%w : tensor<1x2x16x1x8xf32>) : tensor<1x2x16x1x8xf32>, tensor<1x2x16x2x16xf32> -> tensor<1x2x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x16x2x16xf32>
  %1 = la.chunk_intra %q, %k, %corrected gates(%0 : tensor<1x2x16x1xf32>) {scale = 0.35 : f32} : tensor<1x2x16x1x8xf32>, tensor<1x2x16x1x8xf32>, tensor<1x2x16x2x16xf32> -> tensor<1x2x16x2x16xf32>
  %2 = la.chunk_inter %q, %states, %1 gates(%0 : tensor<1x2x16x1xf32>) {scale = 0.35 : f32} : tensor<1x2x16x1x8xf32>, tensor<1x2x2x8x16xf32>, tensor<1x2x16x2x16xf32> -> tensor<1x2x16x2x16xf32>
  return %2, %final : tensor<1x2x16x2x16xf32>, tensor<1x2x8x16xf32>
}

// -----

// Value gates (the scan's value-side operand takes the task's columns) and
// a chunk op inside a host loop (one program per segment of checkpoints),
// distributed there: the loop launches its tasks.
// CHECK-LABEL: func.func @value_gates_and_loops
// CHECK-SAME: (%{{[^:]*}}: tensor<1x2x16x1x8xf32>, %{{[^:]*}}: tensor<1x2x16x1x16xf32>, %[[C:[^:]*]]: tensor<1x2x16x1x16xf32>
// CHECK: scf.forall (%{{.*}}, %{{.*}}, %[[J:.*]]) in (1, 1, 2)
// CHECK: %[[COL:.*]] = arith.muli %[[J]], %{{.*}} : index
// CHECK: %[[CS:.*]] = tensor.extract_slice %[[C]][%{{.*}}, 0, 0, %{{.*}}, %[[COL]]] [1, 2, 16, 1, 8]
// CHECK: la.chunk_state_scan %{{.*}}, %{{.*}} value_gates(%[[CS]] : tensor<1x2x16x1x8xf32>)
// CHECK: } {mapping = [#la.task<0>, #la.task<1>, #la.task<2>]}
// CHECK: scf.for
// CHECK-NEXT: scf.forall (%{{.*}}, %{{.*}}, %{{.*}}) in (1, 2, 1)
// CHECK: la.chunk_cumsum %{{.*}} : tensor<1x1x16x1xf32>
func.func @value_gates_and_loops(%k: tensor<1x2x16x1x8xf32>, %v: tensor<1x2x16x1x16xf32>, %c: tensor<1x2x16x1x16xf32>, %g: tensor<1x2x16x1xf32>, %n: index) -> tensor<1x2x1x8x16xf32> {
  %states, %final = la.chunk_state_scan %k, %v value_gates(%c : tensor<1x2x16x1x16xf32>) : tensor<1x2x16x1x8xf32>, tensor<1x2x16x1x16xf32> -> tensor<1x2x1x8x16xf32>, tensor<1x1x8x16xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    %0 = la.chunk_cumsum %g : tensor<1x2x16x1xf32> -> tensor<1x2x16x1xf32>
  }
  return %states : tensor<1x2x1x8x16xf32>
}
