// A state pool (`state_indices`): la-fuse-recurrence's tasks slice the
// pool's rows; la-chunk and the token loops gather and scatter them.
// RUN: la-opt %s -split-input-file | la-opt -split-input-file | FileCheck %s --check-prefix=ROUND
// RUN: la-opt %s -split-input-file -la-fuse-recurrence="chunk-size=16 threads=2 pack-inputs=0" -canonicalize -cse | FileCheck %s
// RUN: la-opt %s -split-input-file -la-fuse-recurrence="mode=materialized" -la-chunk="chunk-size=16" -canonicalize -cse | FileCheck %s --check-prefix=MAT
// RUN: la-opt %s -split-input-file -la-lower-to-recurrence | FileCheck %s --check-prefix=LOWER

// ROUND-LABEL: func.func @pool_tasks
// ROUND: la.recurrence decay(scalar) low_rank(delta) %{{.*}}, %{{.*}}, %{{.*}} g(%{{.*}} : tensor<2x32x2xf32>) beta(%{{.*}} : tensor<2x32x2xf32>) state_indices(%{{.*}} : tensor<2xi32>) outs(

// Each (batch, value head) task reads its pool row at the batch's index and
// writes it back into the pool, the tasks' shared output.
// CHECK-LABEL: func.func @pool_tasks
// CHECK-SAME: %[[IDX:[^:]*]]: tensor<2xi32>, %[[POOL:[^:]*]]: tensor<5x4x4x8xf32>)
// CHECK: %[[RES:.*]]:2 = scf.forall (%[[B:.*]], %[[HV:.*]]) in (2, 4) shared_outs(%{{.*}} = %{{.*}}, %[[SH:.*]] = %[[POOL]])
// CHECK: %[[I:.*]] = tensor.extract %[[IDX]][%[[B]]] : tensor<2xi32>
// CHECK: %[[ROW:.*]] = arith.index_cast %[[I]] : i32 to index
// CHECK: %[[INIT:.*]] = tensor.extract_slice %[[SH]][%[[ROW]], %[[HV]], 0, 0] [1, 1, 4, 8]
// CHECK: %[[LOOP:.*]]:2 = scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %[[INIT]])
// CHECK: tensor.parallel_insert_slice %[[LOOP]]#1 into %[[SH]][%[[ROW]], %[[HV]], 0, 0] [1, 1, 4, 8]
// CHECK: return %[[RES]]#0, %[[RES]]#1

// MAT-LABEL: func.func @pool_tasks
// MAT-SAME: %[[IDX:[^:]*]]: tensor<2xi32>, %[[POOL:[^:]*]]: tensor<5x4x4x8xf32>)
// MAT: %[[GATHER:.*]] = scf.for %[[N:.*]] = {{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (tensor<2x4x4x8xf32>)
// MAT: %[[I:.*]] = tensor.extract %[[IDX]][%[[N]]]
// MAT: %[[ROW:.*]] = arith.index_cast %[[I]]
// MAT: tensor.extract_slice %[[POOL]][%[[ROW]], 0, 0, 0] [1, 4, 4, 8]
// MAT: la.chunk_state_scan
// MAT: %[[SCATTER:.*]] = scf.for %[[M:.*]] = {{.*}} iter_args(%[[P:.*]] = %[[POOL]]) -> (tensor<5x4x4x8xf32>)
// MAT: %[[J:.*]] = tensor.extract %[[IDX]][%[[M]]]
// MAT: %[[ROW2:.*]] = arith.index_cast %[[J]]
// MAT: tensor.insert_slice %{{.*}} into %[[P]][%[[ROW2]], 0, 0, 0] [1, 4, 4, 8]
// MAT: return %{{.*}}, %[[SCATTER]]
func.func @pool_tasks(%q: tensor<2x32x2x4xf32>, %k: tensor<2x32x2x4xf32>, %v: tensor<2x32x4x8xf32>, %g: tensor<2x32x2xf32>, %idx: tensor<2xi32>, %pool: tensor<5x4x4x8xf32>) -> (tensor<2x32x4x8xf32>, tensor<5x4x4x8xf32>) {
  %oi = tensor.empty() : tensor<2x32x4x8xf32>
  %o, %s = la.recurrence decay(scalar) low_rank(delta) %q, %k, %v g(%g : tensor<2x32x2xf32>) beta(%g : tensor<2x32x2xf32>) state_indices(%idx : tensor<2xi32>) outs(%oi, %pool : tensor<2x32x4x8xf32>, tensor<5x4x4x8xf32>) {scale = 0.5 : f32} : tensor<2x32x2x4xf32>, tensor<2x32x2x4xf32>, tensor<2x32x4x8xf32> -> tensor<2x32x4x8xf32>, tensor<5x4x4x8xf32>
  return %o, %s : tensor<2x32x4x8xf32>, tensor<5x4x4x8xf32>
}

// -----

// ROUND-LABEL: func.func @attention_pool
// ROUND: la.attention gla %{{.*}}, %{{.*}}, %{{.*}} g(%{{.*}} : tensor<?x?x2x4xf32>) initial_state(%{{.*}} : tensor<?x2x4x8xf32>) state_indices(%{{.*}} : tensor<?xi32>)

// la.attention passes the pool and its indices to the recurrence.
// LOWER-LABEL: func.func @attention_pool
// LOWER-SAME: %[[IDX:[^:]*]]: tensor<?xi32>, %[[POOL:[^:]*]]: tensor<?x2x4x8xf32>)
// LOWER: la.recurrence decay(channel) low_rank(none) {{.*}} state_indices(%[[IDX]] : tensor<?xi32>) outs(%{{.*}}, %[[POOL]] :
func.func @attention_pool(%q: tensor<?x?x2x4xf32>, %k: tensor<?x?x2x4xf32>, %v: tensor<?x?x2x8xf32>, %g: tensor<?x?x2x4xf32>, %idx: tensor<?xi32>, %pool: tensor<?x2x4x8xf32>) -> (tensor<?x?x2x8xf32>, tensor<?x2x4x8xf32>) {
  %o, %s = la.attention gla %q, %k, %v g(%g : tensor<?x?x2x4xf32>) initial_state(%pool : tensor<?x2x4x8xf32>) state_indices(%idx : tensor<?xi32>) : tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32>, tensor<?x?x2x8xf32> -> tensor<?x?x2x8xf32>, tensor<?x2x4x8xf32>
  return %o, %s : tensor<?x?x2x8xf32>, tensor<?x2x4x8xf32>
}
