// RUN: la-opt %s -split-input-file | la-opt -split-input-file | FileCheck %s
// RUN: la-opt %s -split-input-file -mlir-print-op-generic | la-opt -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @chunked
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: tensor<2x3x16x2x4xbf16>, %[[S0:[^:]*]]: tensor<2x4x4x8xf32>)
// CHECK: %[[CUM:.*]] = la.chunk_cumsum %[[G]] : tensor<2x3x16x2x4xbf16> -> tensor<2x3x16x2x4xf32>
// CHECK: %[[INTRA:.*]] = la.chunk_intra %[[Q]], %[[K]], %[[V]] gates(%[[CUM]] : tensor<2x3x16x2x4xf32>) {scale = 5.000000e-01 : f32} : tensor<2x3x16x2x4xbf16>, tensor<2x3x16x2x4xbf16>, tensor<2x3x16x4x8xbf16> -> tensor<2x3x16x4x8xf32>
// CHECK: %[[STATES:.*]], %[[FINAL:.*]] = la.chunk_state_scan %[[K]], %[[V]] gates(%[[CUM]] : tensor<2x3x16x2x4xf32>) initial_state(%[[S0]] : tensor<2x4x4x8xf32>) : tensor<2x3x16x2x4xbf16>, tensor<2x3x16x4x8xbf16> -> tensor<2x3x4x4x8xf32>, tensor<2x4x4x8xf32>
// CHECK: %[[O:.*]] = la.chunk_inter %[[Q]], %[[STATES]], %[[INTRA]] gates(%[[CUM]] : tensor<2x3x16x2x4xf32>) {scale = 5.000000e-01 : f32} : tensor<2x3x16x2x4xbf16>, tensor<2x3x4x4x8xf32>, tensor<2x3x16x4x8xf32> -> tensor<2x3x16x4x8xbf16>
// CHECK: return %[[O]], %[[FINAL]]
func.func @chunked(%q: tensor<2x3x16x2x4xbf16>, %k: tensor<2x3x16x2x4xbf16>, %v: tensor<2x3x16x4x8xbf16>, %g: tensor<2x3x16x2x4xbf16>, %s0: tensor<2x4x4x8xf32>) -> (tensor<2x3x16x4x8xbf16>, tensor<2x4x4x8xf32>) {
  %cum = la.chunk_cumsum %g : tensor<2x3x16x2x4xbf16> -> tensor<2x3x16x2x4xf32>
  %intra = la.chunk_intra %q, %k, %v gates(%cum : tensor<2x3x16x2x4xf32>) {scale = 0.5 : f32} : tensor<2x3x16x2x4xbf16>, tensor<2x3x16x2x4xbf16>, tensor<2x3x16x4x8xbf16> -> tensor<2x3x16x4x8xf32>
  %states, %final = la.chunk_state_scan %k, %v gates(%cum : tensor<2x3x16x2x4xf32>) initial_state(%s0 : tensor<2x4x4x8xf32>) : tensor<2x3x16x2x4xbf16>, tensor<2x3x16x4x8xbf16> -> tensor<2x3x4x4x8xf32>, tensor<2x4x4x8xf32>
  %o = la.chunk_inter %q, %states, %intra gates(%cum : tensor<2x3x16x2x4xf32>) {scale = 0.5 : f32} : tensor<2x3x16x2x4xbf16>, tensor<2x3x4x4x8xf32>, tensor<2x3x16x4x8xf32> -> tensor<2x3x16x4x8xbf16>
  return %o, %final : tensor<2x3x16x4x8xbf16>, tensor<2x4x4x8xf32>
}

// -----

// CHECK-LABEL: func.func @ungated_dynamic
// CHECK: la.chunk_intra %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.000000e+00 : f32} : tensor<1x?x16x1x4xf32>
// CHECK: la.chunk_state_scan %{{.*}}, %{{.*}} : tensor<1x?x16x1x4xf32>, tensor<1x?x16x1x4xf32> -> tensor<1x?x1x4x4xf32>, tensor<1x1x4x4xf32>
func.func @ungated_dynamic(%q: tensor<1x?x16x1x4xf32>) -> (tensor<1x?x16x1x4xf32>, tensor<1x?x1x4x4xf32>) {
  %intra = la.chunk_intra %q, %q, %q {scale = 1.0 : f32} : tensor<1x?x16x1x4xf32>, tensor<1x?x16x1x4xf32>, tensor<1x?x16x1x4xf32> -> tensor<1x?x16x1x4xf32>
  %states, %final = la.chunk_state_scan %q, %q : tensor<1x?x16x1x4xf32>, tensor<1x?x16x1x4xf32> -> tensor<1x?x1x4x4xf32>, tensor<1x1x4x4xf32>
  return %intra, %states : tensor<1x?x16x1x4xf32>, tensor<1x?x1x4x4xf32>
}

// -----

// CHECK-LABEL: func.func @delta_chunked
// CHECK: %[[W:.*]], %[[U:.*]] = la.chunk_wy %{{.*}}, %{{.*}} beta(%{{.*}} : tensor<1x2x16x1xf32>) {block_size = 8 : i64} : tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32> -> tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32>
// CHECK: la.chunk_state_scan %{{.*}}, %[[U]] correction(%[[W]] : tensor<1x2x16x1x4xf32>) : tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32> -> tensor<1x2x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x2x16x1x8xf32>
func.func @delta_chunked(%k: tensor<1x2x16x1x4xf32>, %v: tensor<1x2x16x1x8xf32>, %b: tensor<1x2x16x1xf32>) -> tensor<1x2x16x1x8xf32> {
  %w, %u = la.chunk_wy %k, %v beta(%b : tensor<1x2x16x1xf32>) {block_size = 8} : tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32> -> tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32>
  %states, %final, %corrected = la.chunk_state_scan %k, %u correction(%w : tensor<1x2x16x1x4xf32>) : tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32> -> tensor<1x2x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x2x16x1x8xf32>
  return %corrected : tensor<1x2x16x1x8xf32>
}

// -----

// The general low-rank form: exclusive cumulative gates, chunk_wy with a and
// b, a scan and an intra product with an extra (uncorrected) pair.
// CHECK-LABEL: func.func @general_chunked
// CHECK: %[[P:.*]] = la.chunk_cumsum %{{.*}} {exclusive} : tensor<1x2x16x1x4xf32> -> tensor<1x2x16x1x4xf32>
// CHECK: la.chunk_wy %{{.*}}, %{{.*}} a(%{{.*}} : tensor<1x2x16x1x4xf32>) b(%{{.*}} : tensor<1x2x16x1x4xf32>) gates(%{{.*}} : tensor<1x2x16x1x4xf32>) prev_gates(%[[P]] : tensor<1x2x16x1x4xf32>)
// CHECK: la.chunk_state_scan {{.*}} correction(%{{.*}} : tensor<1x2x16x1x4xf32>) extra(%{{.*}}, %{{.*}} : tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32>)
// CHECK: la.chunk_intra {{.*}} extra(%{{.*}}, %{{.*}} : tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32>) {scale = 1.000000e+00 : f32}
func.func @general_chunked(%k: tensor<1x2x16x1x4xf32>, %v: tensor<1x2x16x1x8xf32>, %g: tensor<1x2x16x1x4xf32>) -> tensor<1x2x16x1x8xf32> {
  %cum = la.chunk_cumsum %g : tensor<1x2x16x1x4xf32> -> tensor<1x2x16x1x4xf32>
  %prev = la.chunk_cumsum %g {exclusive} : tensor<1x2x16x1x4xf32> -> tensor<1x2x16x1x4xf32>
  %w, %u = la.chunk_wy %k, %v a(%k : tensor<1x2x16x1x4xf32>) b(%k : tensor<1x2x16x1x4xf32>) gates(%cum : tensor<1x2x16x1x4xf32>) prev_gates(%prev : tensor<1x2x16x1x4xf32>) : tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32> -> tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32>
  %states, %final, %corrected = la.chunk_state_scan %k, %u gates(%cum : tensor<1x2x16x1x4xf32>) correction(%w : tensor<1x2x16x1x4xf32>) extra(%k, %v : tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32>) : tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32> -> tensor<1x2x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x2x16x1x8xf32>
  %intra = la.chunk_intra %k, %k, %corrected gates(%cum : tensor<1x2x16x1x4xf32>) extra(%k, %v : tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32>) {scale = 1.0 : f32} : tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32> -> tensor<1x2x16x1x8xf32>
  return %intra : tensor<1x2x16x1x8xf32>
}

// -----

// Value-side gates on the intra product, the scan and the inter product.
// CHECK-LABEL: func.func @value_gates
// CHECK-SAME: (%{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}}, %[[C:[^:]*]]: tensor<1x2x16x1x8xf32>)
// CHECK: %[[S:.*]], %{{.*}} = la.chunk_state_scan %{{.*}}, %{{.*}} value_gates(%[[C]] : tensor<1x2x16x1x8xf32>) :
// CHECK: %[[I:.*]] = la.chunk_intra %{{.*}}, %{{.*}}, %{{.*}} value_gates(%[[C]] : tensor<1x2x16x1x8xf32>) {scale = 5.000000e-01 : f32}
// CHECK: la.chunk_inter %{{.*}}, %[[S]], %[[I]] value_gates(%[[C]] : tensor<1x2x16x1x8xf32>) {scale = 5.000000e-01 : f32}
func.func @value_gates(%k: tensor<1x2x16x1x4xf32>, %v: tensor<1x2x16x1x8xf32>, %c: tensor<1x2x16x1x8xf32>) -> tensor<1x2x16x1x8xf32> {
  %states, %final = la.chunk_state_scan %k, %v value_gates(%c : tensor<1x2x16x1x8xf32>) : tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32> -> tensor<1x2x1x4x8xf32>, tensor<1x1x4x8xf32>
  %intra = la.chunk_intra %k, %k, %v value_gates(%c : tensor<1x2x16x1x8xf32>) {scale = 0.5 : f32} : tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32> -> tensor<1x2x16x1x8xf32>
  %o = la.chunk_inter %k, %states, %intra value_gates(%c : tensor<1x2x16x1x8xf32>) {scale = 0.5 : f32} : tensor<1x2x16x1x4xf32>, tensor<1x2x1x4x8xf32>, tensor<1x2x16x1x8xf32> -> tensor<1x2x16x1x8xf32>
  return %o : tensor<1x2x16x1x8xf32>
}
