// A user's transform script tiles la.recurrence and fuses its operands'
// producers into the tile loops with upstream transform.structured.fuse
// (scf::tileConsumerAndFuseProducersUsingSCF through TilingInterface): the
// feature map is computed per (batch, head, chunk) tile, the state carried
// through the chunk loop; the tile can then be decomposed into the chunk
// program.
// RUN: la-opt %s -split-input-file --transform-interpreter -canonicalize -cse | FileCheck %s

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>

// CHECK-LABEL: func.func @feature_map_fused
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x64x2x8xf32>, %[[K:[^:]*]]: tensor<2x64x2x8xf32>, %[[V:[^:]*]]: tensor<2x64x2x16xf32>, %[[G:[^:]*]]: tensor<2x64x2xf32>)
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C64:.*]] = arith.constant 64 : index
// CHECK-DAG: %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : tensor<2x2x8x16xf32>
// CHECK-DAG: %[[FE:.*]] = tensor.empty() : tensor<2x64x2x8xf32>
// CHECK-DAG: %[[OI:.*]] = tensor.empty() : tensor<2x64x2x16xf32>
// CHECK: %[[RES:.*]]:2 = scf.for %[[B:.*]] = {{.*}} iter_args(%[[O1:.*]] = %[[OI]], %[[S1:.*]] = %[[ZERO]])
// CHECK: scf.for %[[H:.*]] = {{.*}} iter_args(%[[O2:.*]] = %[[O1]], %[[S2:.*]] = %[[S1]])
// CHECK: scf.for %[[T:.*]] = %{{.*}} to %[[C64]] step %[[C16]] iter_args(%[[O3:.*]] = %[[O2]], %[[S3:.*]] = %[[S2]])
// CHECK: %[[XT:.*]] = tensor.extract_slice %[[X]][%[[B]], %[[T]], %[[H]], 0] [1, 16, 1, 8]
// CHECK: %[[FT:.*]] = tensor.extract_slice %[[FE]][%[[B]], %[[T]], %[[H]], 0] [1, 16, 1, 8]
// CHECK: %[[QT:.*]] = linalg.generic {{.*}} ins(%[[XT]] : tensor<1x16x1x8xf32>) outs(%[[FT]] : tensor<1x16x1x8xf32>)
// CHECK: math.exp
// CHECK: %[[ST:.*]] = tensor.extract_slice %[[S3]][%[[B]], %[[H]], 0, 0] [1, 1, 8, 16]
// CHECK: %[[O:.*]], %[[S:.*]] = la.recurrence decay(scalar) low_rank(none) %[[QT]], %{{.*}}, %{{.*}} g(%{{.*}} : tensor<1x16x1xf32>) outs(%{{.*}}, %[[ST]] : tensor<1x16x1x16xf32>, tensor<1x1x8x16xf32>)
// CHECK: %[[OW:.*]] = tensor.insert_slice %[[O]] into %[[O3]][%[[B]], %[[T]], %[[H]], 0] [1, 16, 1, 16]
// CHECK: %[[SW:.*]] = tensor.insert_slice %[[S]] into %[[S3]][%[[B]], %[[H]], 0, 0] [1, 1, 8, 16]
// CHECK: scf.yield %[[OW]], %[[SW]]
// CHECK: return %[[RES]]#0, %[[RES]]#1
func.func @feature_map_fused(%x: tensor<2x64x2x8xf32>, %k: tensor<2x64x2x8xf32>, %v: tensor<2x64x2x16xf32>, %g: tensor<2x64x2xf32>) -> (tensor<2x64x2x16xf32>, tensor<2x2x8x16xf32>) {
  %e = tensor.empty() : tensor<2x64x2x8xf32>
  %q = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%x : tensor<2x64x2x8xf32>) outs(%e : tensor<2x64x2x8xf32>) {
  ^bb0(%a: f32, %b: f32):
    %y = math.exp %a : f32
    linalg.yield %y : f32
  } -> tensor<2x64x2x8xf32>
  %oi = tensor.empty() : tensor<2x64x2x16xf32>
  %s0 = arith.constant dense<0.0> : tensor<2x2x8x16xf32>
  %o, %s = la.recurrence decay(scalar) low_rank(none) %q, %k, %v g(%g : tensor<2x64x2xf32>) outs(%oi, %s0 : tensor<2x64x2x16xf32>, tensor<2x2x8x16xf32>) {scale = 0.5 : f32} : tensor<2x64x2x8xf32>, tensor<2x64x2x8xf32>, tensor<2x64x2x16xf32> -> tensor<2x64x2x16xf32>, tensor<2x2x8x16xf32>
  return %o, %s : tensor<2x64x2x16xf32>, tensor<2x2x8x16xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %r = transform.structured.match ops{["la.recurrence"]} in %root : (!transform.any_op) -> !transform.any_op
    // Tasks (batch, value head) outside, chunks of 16 tokens inside.
    %tiled, %loops:3 = transform.structured.fuse %r tile_sizes [1, 16, 1, 0] interchange [0, 2, 1, 3] : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>

// Fused, then each chunk decomposed: the feature map and the chunk program
// share the chunk loop; the recurrence is now the chunk's level-2 ops.
// CHECK-LABEL: func.func @fused_then_decomposed
// CHECK: scf.for
// CHECK: scf.for
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(
// CHECK: math.exp
// CHECK-NOT: la.recurrence
// CHECK: la.chunk_cumsum
// CHECK: la.chunk_state_scan
// CHECK: la.chunk_intra
// CHECK: la.chunk_inter
// CHECK-NOT: la.recurrence
// CHECK: return
func.func @fused_then_decomposed(%x: tensor<2x64x2x8xf32>, %k: tensor<2x64x2x8xf32>, %v: tensor<2x64x2x16xf32>, %g: tensor<2x64x2xf32>) -> (tensor<2x64x2x16xf32>, tensor<2x2x8x16xf32>) {
  %e = tensor.empty() : tensor<2x64x2x8xf32>
  %q = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%x : tensor<2x64x2x8xf32>) outs(%e : tensor<2x64x2x8xf32>) {
  ^bb0(%a: f32, %b: f32):
    %y = math.exp %a : f32
    linalg.yield %y : f32
  } -> tensor<2x64x2x8xf32>
  %oi = tensor.empty() : tensor<2x64x2x16xf32>
  %s0 = arith.constant dense<0.0> : tensor<2x2x8x16xf32>
  %o, %s = la.recurrence decay(scalar) low_rank(none) %q, %k, %v g(%g : tensor<2x64x2xf32>) outs(%oi, %s0 : tensor<2x64x2x16xf32>, tensor<2x2x8x16xf32>) {scale = 0.5 : f32} : tensor<2x64x2x8xf32>, tensor<2x64x2x8xf32>, tensor<2x64x2x16xf32> -> tensor<2x64x2x16xf32>, tensor<2x2x8x16xf32>
  return %o, %s : tensor<2x64x2x16xf32>, tensor<2x2x8x16xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %r = transform.structured.match ops{["la.recurrence"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loops:3 = transform.structured.fuse %r tile_sizes [1, 16, 1, 0] interchange [0, 2, 1, 3] : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
    %program = transform.la.decompose %tiled : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}
