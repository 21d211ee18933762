// RUN: la-opt %s -split-input-file -la-expand-recurrence-grad -verify-diagnostics

// Packed sequences with a run-time B: the adjoint cannot be chunked (B must
// be 1); a clear error, not a silent pass failure.
func.func @packed_dynamic_batch(%q: tensor<?x?x2x16xf32>, %v: tensor<?x?x2x8xf32>, %cu: tensor<?xi32>, %s0: tensor<?x2x16x8xf32>, %do: tensor<?x?x2x8xf32>) -> tensor<?x?x2x16xf32> {
  // expected-error @+1 {{'la.recurrence_grad' op with 'cu_seqlens' needs a static B = 1 (packed sequences) to be chunked, got 'q' of type 'tensor<?x?x2x16xf32>'}}
  %dq, %dk, %dv, %ds0 = la.recurrence_grad decay(none) low_rank(none) %q, %q, %v cu_seqlens(%cu : tensor<?xi32>) initial_state(%s0 : tensor<?x2x16x8xf32>) d_o(%do : tensor<?x?x2x8xf32>) {scale = 2.500000e-01 : f32} : tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x8xf32> -> tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x8xf32>, tensor<?x2x16x8xf32>
  return %dq : tensor<?x?x2x16xf32>
}
