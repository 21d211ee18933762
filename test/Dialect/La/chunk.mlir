// RUN: la-opt %s -split-input-file -la-chunk=chunk-size=16 | FileCheck %s
// RUN: la-opt %s -split-input-file -la-chunk=chunk-size=16 | la-opt -split-input-file | FileCheck %s

// Scalar gate, T = 40 (two full chunks and a tail of 8), bf16 values.
// CHECK-LABEL: func.func @scalar_tail
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<2x40x2x8xf32>, %[[K:[^:]*]]: tensor<2x40x2x8xf32>, %[[V:[^:]*]]: tensor<2x40x4x16xbf16>, %[[G:[^:]*]]: tensor<2x40x2xf32>, %[[S0:[^:]*]]: tensor<2x4x8x16xf32>)
// CHECK-DAG: %[[ZBF:.*]] = arith.constant 0.000000e+00 : bf16
// CHECK-DAG: %[[ZF:.*]] = arith.constant 0.000000e+00 : f32
// The tail is zero-padded to 48 tokens, then split into 3 chunks of 16.
// CHECK: %[[QP:.*]] = tensor.pad %[[Q]] low[0, 0, 0, 0] high[0, 8, 0, 0]
// CHECK: tensor.yield %[[ZF]] : f32
// CHECK: %[[QC:.*]] = tensor.expand_shape %[[QP]] {{\[}}[0], [1, 2], [3], [4]] output_shape [2, 3, 16, 2, 8] : tensor<2x48x2x8xf32> into tensor<2x3x16x2x8xf32>
// CHECK: %[[KP:.*]] = tensor.pad %[[K]]
// CHECK: %[[KC:.*]] = tensor.expand_shape %[[KP]]
// CHECK: %[[VP:.*]] = tensor.pad %[[V]]
// CHECK: tensor.yield %[[ZBF]] : bf16
// CHECK: %[[VC:.*]] = tensor.expand_shape %[[VP]] {{.*}} into tensor<2x3x16x4x16xbf16>
// CHECK: %[[GP:.*]] = tensor.pad %[[G]] low[0, 0, 0] high[0, 8, 0]
// CHECK: %[[GC:.*]] = tensor.expand_shape %[[GP]] {{\[}}[0], [1, 2], [3]] output_shape [2, 3, 16, 2] : tensor<2x48x2xf32> into tensor<2x3x16x2xf32>
// CHECK: %[[CUM:.*]] = la.chunk_cumsum %[[GC]] : tensor<2x3x16x2xf32> -> tensor<2x3x16x2xf32>
// CHECK: %[[STATES:.*]], %[[FINAL:.*]] = la.chunk_state_scan %[[KC]], %[[VC]] gates(%[[CUM]] : tensor<2x3x16x2xf32>) initial_state(%[[S0]] : tensor<2x4x8x16xf32>) : {{.*}} -> tensor<2x3x4x8x16xf32>, tensor<2x4x8x16xf32>
// CHECK: %[[INTRA:.*]] = la.chunk_intra %[[QC]], %[[KC]], %[[VC]] gates(%[[CUM]] : tensor<2x3x16x2xf32>) {scale = 5.000000e-01 : f32} : {{.*}} -> tensor<2x3x16x4x16xf32>
// CHECK: %[[OC:.*]] = la.chunk_inter %[[QC]], %[[STATES]], %[[INTRA]] gates(%[[CUM]] : tensor<2x3x16x2xf32>) {scale = 5.000000e-01 : f32} : {{.*}} -> tensor<2x3x16x4x16xbf16>
// CHECK: %[[O48:.*]] = tensor.collapse_shape %[[OC]] {{\[}}[0], [1, 2], [3], [4]] : tensor<2x3x16x4x16xbf16> into tensor<2x48x4x16xbf16>
// CHECK: %[[O:.*]] = tensor.extract_slice %[[O48]][0, 0, 0, 0] [2, 40, 4, 16] [1, 1, 1, 1]
// CHECK: return %[[O]], %[[FINAL]]
func.func @scalar_tail(%q: tensor<2x40x2x8xf32>, %k: tensor<2x40x2x8xf32>, %v: tensor<2x40x4x16xbf16>, %g: tensor<2x40x2xf32>, %s0: tensor<2x4x8x16xf32>) -> (tensor<2x40x4x16xbf16>, tensor<2x4x8x16xf32>) {
  %oi0 = tensor.empty() : tensor<2x40x4x16xbf16>
  %o, %s = la.recurrence decay(scalar) low_rank(none) %q, %k, %v g(%g : tensor<2x40x2xf32>) outs(%oi0, %s0 : tensor<2x40x4x16xbf16>, tensor<2x4x8x16xf32>) {scale = 0.5 : f32} : tensor<2x40x2x8xf32>, tensor<2x40x2x8xf32>, tensor<2x40x4x16xbf16> -> tensor<2x40x4x16xbf16>, tensor<2x4x8x16xf32>
  return %o, %s : tensor<2x40x4x16xbf16>, tensor<2x4x8x16xf32>
}

// -----

// No gate, T a multiple of the chunk size: no padding, no cumsum.
// CHECK-LABEL: func.func @linear_exact
// CHECK-NOT: tensor.pad
// CHECK-NOT: la.chunk_cumsum
// CHECK: %[[STATES:.*]], %{{.*}} = la.chunk_state_scan %{{.*}}, %{{.*}} : tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x4xf32> -> tensor<1x2x1x4x4xf32>, tensor<1x1x4x4xf32>
// CHECK: %[[INTRA:.*]] = la.chunk_intra %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f32} : tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x4xf32> -> tensor<1x2x16x1x4xf32>
// CHECK: la.chunk_inter %{{.*}}, %[[STATES]], %[[INTRA]] {scale = 2.500000e-01 : f32}
// CHECK-NOT: tensor.extract_slice
func.func @linear_exact(%q: tensor<1x32x1x4xf32>, %k: tensor<1x32x1x4xf32>, %v: tensor<1x32x1x4xf32>) -> tensor<1x32x1x4xf32> {
  %oi1 = tensor.empty() : tensor<1x32x1x4xf32>
  %zs1 = arith.constant dense<0.0> : tensor<1x1x4x4xf32>
  %o, %fs1 = la.recurrence decay(none) low_rank(none) %q, %k, %v outs(%oi1, %zs1 : tensor<1x32x1x4xf32>, tensor<1x1x4x4xf32>) {scale = 0.25 : f32} : tensor<1x32x1x4xf32>, tensor<1x32x1x4xf32>, tensor<1x32x1x4xf32> -> tensor<1x32x1x4xf32>, tensor<1x1x4x4xf32>
  return %o : tensor<1x32x1x4xf32>
}

// -----

// Channel-wise gate: the cumulative gate keeps its K dim. T = 5 is below the
// chunk size: one chunk of 5 tokens, no padding.
// CHECK-LABEL: func.func @channel
// CHECK: %[[CUM:.*]] = la.chunk_cumsum %{{.*}} : tensor<1x1x5x2x4xf32> -> tensor<1x1x5x2x4xf32>
// CHECK: la.chunk_state_scan {{.*}} gates(%[[CUM]] : tensor<1x1x5x2x4xf32>)
// CHECK: la.chunk_intra {{.*}} gates(%[[CUM]] : tensor<1x1x5x2x4xf32>)
// CHECK: la.chunk_inter {{.*}} gates(%[[CUM]] : tensor<1x1x5x2x4xf32>)
func.func @channel(%q: tensor<1x5x2x4xf32>, %k: tensor<1x5x2x4xf32>, %v: tensor<1x5x2x4xf32>, %g: tensor<1x5x2x4xf32>) -> tensor<1x5x2x4xf32> {
  %oi2 = tensor.empty() : tensor<1x5x2x4xf32>
  %zs2 = arith.constant dense<0.0> : tensor<1x2x4x4xf32>
  %o, %fs2 = la.recurrence decay(channel) low_rank(none) %q, %k, %v g(%g : tensor<1x5x2x4xf32>) outs(%oi2, %zs2 : tensor<1x5x2x4xf32>, tensor<1x2x4x4xf32>) {scale = 0.5 : f32} : tensor<1x5x2x4xf32>, tensor<1x5x2x4xf32>, tensor<1x5x2x4xf32> -> tensor<1x5x2x4xf32>, tensor<1x2x4x4xf32>
  return %o : tensor<1x5x2x4xf32>
}

// -----

// A fixed decay becomes a broadcast scalar gate first.
// CHECK-LABEL: func.func @fixed
// CHECK: %[[DECAY:.*]] = arith.constant dense<[-5.000000e-01, -2.500000e-01]> : tensor<2xf32>
// CHECK: %[[G:.*]] = linalg.generic {{.*}} ins(%[[DECAY]] : tensor<2xf32>) outs(%{{.*}} : tensor<1x16x2xf32>)
// CHECK: %[[GC:.*]] = tensor.expand_shape %[[G]]
// CHECK: la.chunk_cumsum %[[GC]] : tensor<1x1x16x2xf32>
func.func @fixed(%q: tensor<1x16x2x4xf32>, %k: tensor<1x16x2x4xf32>, %v: tensor<1x16x2x4xf32>) -> tensor<1x16x2x4xf32> {
  %oi3 = tensor.empty() : tensor<1x16x2x4xf32>
  %zs3 = arith.constant dense<0.0> : tensor<1x2x4x4xf32>
  %o, %fs3 = la.recurrence decay(fixed) low_rank(none) %q, %k, %v outs(%oi3, %zs3 : tensor<1x16x2x4xf32>, tensor<1x2x4x4xf32>) {log_decay = array<f32: -0.5, -0.25>, scale = 0.5 : f32} : tensor<1x16x2x4xf32>, tensor<1x16x2x4xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>, tensor<1x2x4x4xf32>
  return %o : tensor<1x16x2x4xf32>
}

// -----

// Packed sequences: one chunked program per sequence in an scf.for, each on
// its own dynamic-length slice and state.
// CHECK-LABEL: func.func @varlen
// CHECK-SAME: %[[S0:[^:]*]]: tensor<3x1x4x4xf32>, %[[CU:[^:]*]]: tensor<4xi32>)
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[C3:.*]] = arith.constant 3 : index
// CHECK: %[[OUT0:.*]] = linalg.fill
// CHECK: %[[LOOP:.*]]:2 = scf.for %[[N:.*]] = %[[C0]] to %[[C3]] step %[[C1]] iter_args(%[[OACC:.*]] = %[[OUT0]], %[[SACC:.*]] = %{{.*}}) -> (tensor<1x50x1x4xf32>, tensor<3x1x4x4xf32>)
// The offsets are clamped to 0 <= begin <= end <= T = 50.
// CHECK: %[[NEXT:.*]] = arith.addi %[[N]], %[[C1]]
// CHECK: %[[B0:.*]] = tensor.extract %[[CU]][%[[N]]]
// CHECK: %[[B1:.*]] = arith.index_cast %[[B0]]
// CHECK: %[[E0:.*]] = tensor.extract %[[CU]][%[[NEXT]]]
// CHECK: %[[E1:.*]] = arith.index_cast %[[E0]]
// CHECK: %[[B2:.*]] = arith.maxsi %[[B1]], %[[C0]]
// CHECK: %[[BEGIN:.*]] = arith.minsi %[[B2]], %[[C50:.*]] : index
// CHECK: %[[E2:.*]] = arith.maxsi %[[E1]], %[[BEGIN]]
// CHECK: %[[END:.*]] = arith.minsi %[[E2]], %[[C50]] : index
// CHECK: %[[LEN:.*]] = arith.subi %[[END]], %[[BEGIN]]
// CHECK: %[[INIT:.*]] = tensor.extract_slice %[[S0]][%[[N]], 0, 0, 0] [1, 1, 4, 4]
// CHECK: tensor.extract_slice %{{.*}}[0, %[[BEGIN]], 0, 0] [1, %[[LEN]], 1, 4] [1, 1, 1, 1] : tensor<1x50x1x4xf32> to tensor<1x?x1x4xf32>
// CHECK: la.chunk_state_scan {{.*}} initial_state(%[[INIT]] : tensor<1x1x4x4xf32>) : tensor<1x?x16x1x4xf32>, tensor<1x?x16x1x4xf32>
// CHECK: %[[OW:.*]] = tensor.insert_slice %{{.*}} into %[[OACC]][0, %[[BEGIN]], 0, 0] [1, %[[LEN]], 1, 4]
// CHECK: %[[SW:.*]] = tensor.insert_slice %{{.*}} into %[[SACC]][%[[N]], 0, 0, 0] [1, 1, 4, 4]
// CHECK: scf.yield %[[OW]], %[[SW]]
// CHECK: return %[[LOOP]]#0, %[[LOOP]]#1
func.func @varlen(%q: tensor<1x50x1x4xf32>, %k: tensor<1x50x1x4xf32>, %v: tensor<1x50x1x4xf32>, %s0: tensor<3x1x4x4xf32>, %cu: tensor<4xi32>) -> (tensor<1x50x1x4xf32>, tensor<3x1x4x4xf32>) {
  %oi4 = tensor.empty() : tensor<1x50x1x4xf32>
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %k, %v cu_seqlens(%cu : tensor<4xi32>) outs(%oi4, %s0 : tensor<1x50x1x4xf32>, tensor<3x1x4x4xf32>) {scale = 0.5 : f32} : tensor<1x50x1x4xf32>, tensor<1x50x1x4xf32>, tensor<1x50x1x4xf32> -> tensor<1x50x1x4xf32>, tensor<3x1x4x4xf32>
  return %o, %s : tensor<1x50x1x4xf32>, tensor<3x1x4x4xf32>
}

// -----

// The delta rule: the UT transform gives W and U; the scan forms the
// corrected values V' = U - W S_n, which the intra-chunk product uses.
// CHECK-LABEL: func.func @delta
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[B:[^:]*]]: tensor<1x20x2xf32>)
// CHECK: %[[QC:.*]] = tensor.expand_shape
// CHECK: %[[KC:.*]] = tensor.expand_shape
// CHECK: %[[VC:.*]] = tensor.expand_shape
// CHECK: %[[GC:.*]] = tensor.expand_shape
// CHECK: %[[BP:.*]] = tensor.pad %[[B]] low[0, 0, 0] high[0, 12, 0]
// CHECK: %[[BC:.*]] = tensor.expand_shape %[[BP]] {{.*}} into tensor<1x2x16x2xf32>
// CHECK: %[[CUM:.*]] = la.chunk_cumsum %[[GC]]
// CHECK: %[[W:.*]], %[[U:.*]] = la.chunk_wy %[[KC]], %[[VC]] beta(%[[BC]] : tensor<1x2x16x2xf32>) gates(%[[CUM]] : tensor<1x2x16x2x4xf32>) : {{.*}} -> tensor<1x2x16x2x4xf32>, tensor<1x2x16x4x8xf32>
// CHECK: %[[STATES:.*]], %[[FINAL:.*]], %[[VNEW:.*]] = la.chunk_state_scan %[[KC]], %[[U]] gates(%[[CUM]] : {{.*}}) correction(%[[W]] : tensor<1x2x16x2x4xf32>) : {{.*}} -> tensor<1x2x4x4x8xf32>, tensor<1x4x4x8xf32>, tensor<1x2x16x4x8xf32>
// CHECK: %[[INTRA:.*]] = la.chunk_intra %[[QC]], %[[KC]], %[[VNEW]] gates(%[[CUM]]
// CHECK: la.chunk_inter %[[QC]], %[[STATES]], %[[INTRA]] gates(%[[CUM]]
func.func @delta(%q: tensor<1x20x2x4xf32>, %k: tensor<1x20x2x4xf32>, %v: tensor<1x20x4x8xf32>, %g: tensor<1x20x2x4xf32>, %b: tensor<1x20x2xf32>) -> (tensor<1x20x4x8xf32>, tensor<1x4x4x8xf32>) {
  %oi5 = tensor.empty() : tensor<1x20x4x8xf32>
  %zs5 = arith.constant dense<0.0> : tensor<1x4x4x8xf32>
  %o, %s = la.recurrence decay(channel) low_rank(delta) %q, %k, %v g(%g : tensor<1x20x2x4xf32>) beta(%b : tensor<1x20x2xf32>) outs(%oi5, %zs5 : tensor<1x20x4x8xf32>, tensor<1x4x4x8xf32>) {scale = 0.5 : f32} : tensor<1x20x2x4xf32>, tensor<1x20x2x4xf32>, tensor<1x20x4x8xf32> -> tensor<1x20x4x8xf32>, tensor<1x4x4x8xf32>
  return %o, %s : tensor<1x20x4x8xf32>, tensor<1x4x4x8xf32>
}

// -----

// A general low-rank part: the (b, -U) pair is corrected by the scan and
// (k, v) rides along as an extra pair; the WY form uses the exclusive
// cumulative gates.
// CHECK-LABEL: func.func @general
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[A:[^:]*]]: {{.*}}, %[[B:[^:]*]]: tensor<1x16x1x4xf32>)
// CHECK: %[[GC:.*]] = tensor.expand_shape %[[G]]
// CHECK: %[[AC:.*]] = tensor.expand_shape %[[A]]
// CHECK: %[[BC:.*]] = tensor.expand_shape %[[B]]
// CHECK: %[[CUM:.*]] = la.chunk_cumsum %[[GC]] :
// CHECK: %[[PREV:.*]] = la.chunk_cumsum %[[GC]] {exclusive}
// CHECK: %[[W:.*]], %[[U:.*]] = la.chunk_wy %[[KC:.*]], %[[VC:[^ ]*]] a(%[[AC]] : {{.*}}) b(%[[BC]] : {{.*}}) gates(%[[CUM]] : {{.*}}) prev_gates(%[[PREV]] : {{.*}})
// CHECK: %[[STATES:.*]], %[[FINAL:.*]], %[[CORR:.*]] = la.chunk_state_scan %[[BC]], %[[U]] gates(%[[CUM]] : {{.*}}) correction(%[[W]] : {{.*}}) extra(%[[KC]], %[[VC]] : {{.*}})
// CHECK: la.chunk_intra %{{.*}}, %[[BC]], %[[CORR]] gates(%[[CUM]] : {{.*}}) extra(%[[KC]], %[[VC]] : {{.*}})
func.func @general(%q: tensor<1x16x1x4xf32>, %k: tensor<1x16x1x4xf32>, %v: tensor<1x16x1x4xf32>, %g: tensor<1x16x1x4xf32>, %a: tensor<1x16x1x4xf32>, %b: tensor<1x16x1x4xf32>) -> tensor<1x16x1x4xf32> {
  %oi6 = tensor.empty() : tensor<1x16x1x4xf32>
  %zs6 = arith.constant dense<0.0> : tensor<1x1x4x4xf32>
  %o, %fs6 = la.recurrence decay(channel) low_rank(general) %q, %k, %v g(%g : tensor<1x16x1x4xf32>) a(%a : tensor<1x16x1x4xf32>) b(%b : tensor<1x16x1x4xf32>) outs(%oi6, %zs6 : tensor<1x16x1x4xf32>, tensor<1x1x4x4xf32>) {scale = 0.5 : f32} : tensor<1x16x1x4xf32>, tensor<1x16x1x4xf32>, tensor<1x16x1x4xf32> -> tensor<1x16x1x4xf32>, tensor<1x1x4x4xf32>
  return %o : tensor<1x16x1x4xf32>
}

// -----

// A value-side gate: its own cumulative sums, passed to the scan, the intra
// and the inter products.
// CHECK-LABEL: func.func @value_gate
// CHECK: %[[C:.*]] = la.chunk_cumsum %{{.*}} : tensor<1x3x16x2x8xf32> -> tensor<1x3x16x2x8xf32>
// CHECK: %[[S:.*]], %{{.*}} = la.chunk_state_scan %{{.*}}, %{{.*}} value_gates(%[[C]] : tensor<1x3x16x2x8xf32>) initial_state
// CHECK: %[[I:.*]] = la.chunk_intra %{{.*}}, %{{.*}}, %{{.*}} value_gates(%[[C]] : tensor<1x3x16x2x8xf32>)
// CHECK: la.chunk_inter %{{.*}}, %[[S]], %[[I]] value_gates(%[[C]] : tensor<1x3x16x2x8xf32>)
func.func @value_gate(%q: tensor<1x40x2x16xf32>, %k: tensor<1x40x2x16xf32>, %v: tensor<1x40x2x8xf32>, %gv: tensor<1x40x2x8xf32>, %s0: tensor<1x2x16x8xf32>) -> (tensor<1x40x2x8xf32>, tensor<1x2x16x8xf32>) {
  %o0 = tensor.empty() : tensor<1x40x2x8xf32>
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %k, %v gv(%gv : tensor<1x40x2x8xf32>) outs(%o0, %s0 : tensor<1x40x2x8xf32>, tensor<1x2x16x8xf32>) {scale = 0.25 : f32} : tensor<1x40x2x16xf32>, tensor<1x40x2x16xf32>, tensor<1x40x2x8xf32> -> tensor<1x40x2x8xf32>, tensor<1x2x16x8xf32>
  return %o, %s : tensor<1x40x2x8xf32>, tensor<1x2x16x8xf32>
}

// -----

// A reverse recurrence: the forward chunk program on the tokens flipped in
// time, its output flipped back.
// CHECK-DAG: #[[RFLIP:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, -d1 + 39, d2, d3)>
// CHECK-LABEL: func.func @reverse
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}})
// CHECK: %[[QF:.*]] = linalg.generic {indexing_maps = [#[[RFLIP]], {{.*}}]{{.*}} ins(%[[Q]] : tensor<1x40x2x16xf32>)
// CHECK: la.chunk_inter
// CHECK: %[[O:.*]] = tensor.extract_slice
// CHECK: %[[OF:.*]] = linalg.generic {indexing_maps = [#[[RFLIP]], {{.*}}]{{.*}} ins(%[[O]] : tensor<1x40x2x8xf32>)
// CHECK: return %[[OF]]
func.func @reverse(%q: tensor<1x40x2x16xf32>, %k: tensor<1x40x2x16xf32>, %v: tensor<1x40x2x8xf32>, %s0: tensor<1x2x16x8xf32>) -> (tensor<1x40x2x8xf32>, tensor<1x2x16x8xf32>) {
  %o0 = tensor.empty() : tensor<1x40x2x8xf32>
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %k, %v outs(%o0, %s0 : tensor<1x40x2x8xf32>, tensor<1x2x16x8xf32>) {reverse, scale = 0.25 : f32} : tensor<1x40x2x16xf32>, tensor<1x40x2x16xf32>, tensor<1x40x2x8xf32> -> tensor<1x40x2x8xf32>, tensor<1x2x16x8xf32>
  return %o, %s : tensor<1x40x2x8xf32>, tensor<1x2x16x8xf32>
}

// -----

// Grouped query heads (HQ = 4 over H = HV = 2): the state scan runs on the
// 2 states; the intra-chunk product takes k, the gates and v repeated per
// query head (a [..,2,2,..] copy collapsed to 4 heads), and chunk_inter
// reads each of the 2 states for its 2 query heads.
// CHECK-LABEL: func.func @grouped_query_heads
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x32x4x8xf32>, %[[K:[^:]*]]: tensor<1x32x2x8xf32>, %[[V:[^:]*]]: tensor<1x32x2x16xf32>, %[[G:[^:]*]]: tensor<1x32x2x8xf32>, %[[S0:[^:]*]]: tensor<1x2x8x16xf32>)
// CHECK: %[[QC:.*]] = tensor.expand_shape %[[Q]] {{.*}} into tensor<1x2x16x4x8xf32>
// CHECK: %[[KC:.*]] = tensor.expand_shape %[[K]] {{.*}} into tensor<1x2x16x2x8xf32>
// CHECK: %[[VC:.*]] = tensor.expand_shape %[[V]] {{.*}} into tensor<1x2x16x2x16xf32>
// CHECK: %[[CUM:.*]] = la.chunk_cumsum
// CHECK: %[[STATES:.*]], %[[FINAL:.*]] = la.chunk_state_scan %[[KC]], %[[VC]] gates(%[[CUM]] : tensor<1x2x16x2x8xf32>) initial_state(%[[S0]] : tensor<1x2x8x16xf32>) : {{.*}} -> tensor<1x2x2x8x16xf32>, tensor<1x2x8x16xf32>
// CHECK: %[[KW:.*]] = linalg.generic {{.*}} ins(%[[KC]] : tensor<1x2x16x2x8xf32>) outs(%{{.*}} : tensor<1x2x16x2x2x8xf32>)
// CHECK: %[[KR:.*]] = tensor.collapse_shape %[[KW]] {{.*}} into tensor<1x2x16x4x8xf32>
// CHECK: %[[GW:.*]] = linalg.generic {{.*}} ins(%[[CUM]] : tensor<1x2x16x2x8xf32>)
// CHECK: %[[GR:.*]] = tensor.collapse_shape %[[GW]] {{.*}} into tensor<1x2x16x4x8xf32>
// CHECK: %[[VW:.*]] = linalg.generic {{.*}} ins(%[[VC]] : tensor<1x2x16x2x16xf32>)
// CHECK: %[[VR:.*]] = tensor.collapse_shape %[[VW]] {{.*}} into tensor<1x2x16x4x16xf32>
// CHECK: %[[INTRA:.*]] = la.chunk_intra %[[QC]], %[[KR]], %[[VR]] gates(%[[GR]] : tensor<1x2x16x4x8xf32>) {{.*}} -> tensor<1x2x16x4x16xf32>
// CHECK: %[[OC:.*]] = la.chunk_inter %[[QC]], %[[STATES]], %[[INTRA]] gates(%[[GR]] : tensor<1x2x16x4x8xf32>) {{.*}} : tensor<1x2x16x4x8xf32>, tensor<1x2x2x8x16xf32>, tensor<1x2x16x4x16xf32> -> tensor<1x2x16x4x16xf32>
// CHECK: %[[O:.*]] = tensor.collapse_shape %[[OC]] {{.*}} into tensor<1x32x4x16xf32>
// CHECK: return %[[O]], %[[FINAL]]
func.func @grouped_query_heads(%q: tensor<1x32x4x8xf32>, %k: tensor<1x32x2x8xf32>, %v: tensor<1x32x2x16xf32>, %g: tensor<1x32x2x8xf32>, %s0: tensor<1x2x8x16xf32>) -> (tensor<1x32x4x16xf32>, tensor<1x2x8x16xf32>) {
  %oi = tensor.empty() : tensor<1x32x4x16xf32>
  %o, %s = la.recurrence decay(channel) low_rank(none) %q, %k, %v g(%g : tensor<1x32x2x8xf32>) outs(%oi, %s0 : tensor<1x32x4x16xf32>, tensor<1x2x8x16xf32>) {scale = 0.5 : f32} : tensor<1x32x4x8xf32>, tensor<1x32x2x8xf32>, tensor<1x32x2x16xf32> -> tensor<1x32x4x16xf32>, tensor<1x2x8x16xf32>
  return %o, %s : tensor<1x32x4x16xf32>, tensor<1x2x8x16xf32>
}
