// RUN: la-opt %s -split-input-file | la-opt -split-input-file | FileCheck %s --check-prefix=ROUNDTRIP
// RUN: la-opt %s -split-input-file -la-chunk=chunk-size=4 -cse | FileCheck %s --check-prefix=CHUNK

// la.recurrence read from both sides (channel gate, value-side gate): the
// custom form round-trips, and la-chunk reads the value side with the
// roles of keys and values swapped: chunk_intra of the query x against the
// values, applied to the keys (x's channels take the value-side gates, the
// output's the key-side ones), and chunk_inter on the same chunk states
// read transposed; one state scan for both reads (reverse time: the inputs
// and the output are flipped).
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<1x2x4x6xf32>

// ROUNDTRIP-LABEL: func.func @both_sides
// ROUNDTRIP-SAME: (%{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}}, %[[X:[^:]*]]: {{.*}}, %[[S0:[^:]*]]: {{.*}})
// ROUNDTRIP: %[[TI:.*]] = tensor.empty() : tensor<1x8x2x4xf32>
// ROUNDTRIP: %{{.*}}, %{{.*}}, %[[T:.*]] = la.recurrence decay(channel) low_rank(none) {{.*}} transposed_query(%[[X]] : tensor<1x8x2x6xf32>) outs(%{{.*}}, %[[S0]], %[[TI]] : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>, tensor<1x8x2x4xf32>) {reverse, scale = 5.000000e-01 : f32}
// ROUNDTRIP-SAME: -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>, tensor<1x8x2x4xf32>
// ROUNDTRIP: return %[[T]]

// CHUNK-LABEL: func.func @both_sides
// CHUNK-SAME: (%{{[^:]*}}: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[GV:[^:]*]]: {{.*}}, %[[X:[^:]*]]: {{.*}}, %[[S0:[^:]*]]: {{.*}})
// CHUNK: %[[KR:.*]] = linalg.generic {{.*}} ins(%[[K]] : tensor<1x8x2x4xf32>)
// CHUNK: %[[VR:.*]] = linalg.generic {{.*}} ins(%[[V]] : tensor<1x8x2x6xf32>)
// CHUNK: %[[GR:.*]] = linalg.generic {{.*}} ins(%[[G]] : tensor<1x8x2x4xf32>)
// CHUNK: %[[GVR:.*]] = linalg.generic {{.*}} ins(%[[GV]] : tensor<1x8x2x6xf32>)
// CHUNK: %[[XR:.*]] = linalg.generic {{.*}} ins(%[[X]] : tensor<1x8x2x6xf32>)
// CHUNK: %[[KC:.*]] = tensor.expand_shape %[[KR]]
// CHUNK: %[[VC:.*]] = tensor.expand_shape %[[VR]]
// CHUNK: %[[GC:.*]] = tensor.expand_shape %[[GR]]
// CHUNK: %[[GVC:.*]] = tensor.expand_shape %[[GVR]]
// CHUNK: %[[XC:.*]] = tensor.expand_shape %[[XR]]
// CHUNK: %[[CG:.*]] = la.chunk_cumsum %[[GC]]
// CHUNK: %[[CC:.*]] = la.chunk_cumsum %[[GVC]]
// CHUNK: %[[STATES:.*]], %{{.*}} = la.chunk_state_scan %[[KC]], %[[VC]] gates(%[[CG]] : {{.*}}) value_gates(%[[CC]] : {{.*}}) initial_state(%[[S0]] : {{.*}})
// CHUNK-NOT: la.chunk_state_scan
// CHUNK: %[[TINTRA:.*]] = la.chunk_intra %[[XC]], %[[VC]], %[[KC]] gates(%[[CC]] : tensor<1x2x4x2x6xf32>) value_gates(%[[CG]] : tensor<1x2x4x2x4xf32>) {scale = 5.000000e-01 : f32}
// CHUNK: %[[TO:.*]] = la.chunk_inter %[[XC]], %[[STATES]], %[[TINTRA]] gates(%[[CC]] : {{.*}}) value_gates(%[[CG]] : {{.*}}) {scale = 5.000000e-01 : f32, transposed_states} : tensor<1x2x4x2x6xf32>, tensor<1x2x2x4x6xf32>, tensor<1x2x4x2x4xf32> -> tensor<1x2x4x2x4xf32>
// CHUNK: %[[TU:.*]] = tensor.collapse_shape %[[TO]]
// CHUNK: %[[TF:.*]] = linalg.generic {{.*}} ins(%[[TU]] : tensor<1x8x2x4xf32>)
// CHUNK: return %[[TF]]
func.func @both_sides(%q: !qk, %k: !qk, %v: !v, %g: !qk, %gv: !v, %x: !v, %s0: !s) -> tensor<1x8x2x4xf32> {
  %oi = tensor.empty() : !v
  %ti = tensor.empty() : tensor<1x8x2x4xf32>
  %o, %s, %t = la.recurrence decay(channel) low_rank(none) %q, %k, %v g(%g : !qk) gv(%gv : !v) transposed_query(%x : !v) outs(%oi, %s0, %ti : !v, !s, tensor<1x8x2x4xf32>) {reverse, scale = 0.5 : f32} : !qk, !qk, !v -> !v, !s, tensor<1x8x2x4xf32>
  return %t : tensor<1x8x2x4xf32>
}
