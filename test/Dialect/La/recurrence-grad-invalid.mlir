// RUN: la-opt %s -split-input-file -verify-diagnostics

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<1x2x4x6xf32>

func.func @missing_gate_gradient(%q: !qk, %v: !v, %g: tensor<1x8x2xf32>, %s: !s) {
  // expected-error @+1 {{expects 5 results (dq, dk, dv, d_initial_state and one per given g, gv, beta, a, b), got 4}}
  %r:4 = la.recurrence_grad decay(scalar) low_rank(none) %q, %q, %v g(%g : tensor<1x8x2xf32>) initial_state(%s : !s) d_o(%v : !v) {scale = 1.0 : f32} : !qk, !qk, !v -> !qk, !qk, !v, !s
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<1x2x4x6xf32>

func.func @wrong_gradient_shape(%q: !qk, %v: !v, %s: !s) {
  // expected-error @+1 {{expects 'dk' of shape [1,8,2,4] like its input, got [1,8,2,5]}}
  %r:4 = la.recurrence_grad decay(none) low_rank(none) %q, %q, %v initial_state(%s : !s) d_o(%v : !v) {scale = 1.0 : f32} : !qk, !qk, !v -> !qk, tensor<1x8x2x5xf32>, !v, !s
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<1x2x4x6xf32>

func.func @bad_checkpoint(%q: !qk, %v: !v, %s: !s) {
  // expected-error @+1 {{expects 'checkpoint' >= 1, got 0}}
  %r:4 = la.recurrence_grad decay(none) low_rank(none) %q, %q, %v initial_state(%s : !s) d_o(%v : !v) {scale = 1.0 : f32, checkpoint = 0 : i64} : !qk, !qk, !v -> !qk, !qk, !v, !s
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<1x2x4x6xf32>

func.func @bad_output_gradient(%q: !qk, %v: !v, %s: !s, %do: tensor<1x7x2x6xf32>) {
  // expected-error @+1 {{expects 'd_o' of shape [1,8,2,6] [B,T,HV,V], got [1,7,2,6]}}
  %r:4 = la.recurrence_grad decay(none) low_rank(none) %q, %q, %v initial_state(%s : !s) d_o(%do : tensor<1x7x2x6xf32>) {scale = 1.0 : f32} : !qk, !qk, !v -> !qk, !qk, !v, !s
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<1x2x4x6xf32>

func.func @delta_without_beta(%q: !qk, %v: !v, %s: !s) {
  // expected-error @+1 {{low_rank 'delta' requires a 'beta' operand}}
  %r:4 = la.recurrence_grad decay(none) low_rank(delta) %q, %q, %v initial_state(%s : !s) d_o(%v : !v) {scale = 1.0 : f32} : !qk, !qk, !v -> !qk, !qk, !v, !s
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<1x2x4x6xf32>

func.func @bad_final_state_gradient(%q: !qk, %v: !v, %s: !s, %ds: tensor<2x2x4x6xf32>) {
  // expected-error @+1 {{expects 'd_final_state' of shape [1,2,4,6] [B,HV,K,V], got [2,2,4,6]}}
  %r:4 = la.recurrence_grad decay(none) low_rank(none) %q, %q, %v initial_state(%s : !s) d_o(%v : !v) d_final_state(%ds : tensor<2x2x4x6xf32>) {scale = 1.0 : f32} : !qk, !qk, !v -> !qk, !qk, !v, !s
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<1x2x4x6xf32>

func.func @normalizer_with_low_rank(%q: !qk, %v: !v, %s: !s, %beta: tensor<1x8x2xf32>) {
  // expected-error @+1 {{'normalizer' is only valid without a low-rank part}}
  %r:5 = la.recurrence_grad decay(none) low_rank(delta) %q, %q, %v beta(%beta : tensor<1x8x2xf32>) initial_state(%s : !s) d_o(%v : !v) {scale = 1.0 : f32, normalizer} : !qk, !qk, !v -> !qk, !qk, !v, !s, tensor<1x8x2xf32>
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<1x2x4x6xf32>

func.func @eps_without_normalizer(%q: !qk, %v: !v, %s: !s) {
  // expected-error @+1 {{'eps' is only valid with 'normalizer'}}
  %r:4 = la.recurrence_grad decay(none) low_rank(none) %q, %q, %v initial_state(%s : !s) d_o(%v : !v) {scale = 1.0 : f32, eps = 1.0e-3 : f32} : !qk, !qk, !v -> !qk, !qk, !v, !s
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<1x2x4x6xf32>

func.func @value_gate_with_delta(%q: !qk, %v: !v, %s: !s, %beta: tensor<1x8x2xf32>) {
  // expected-error @+1 {{'gv' (the value-side gate) is only valid without a low-rank part and without the normaliser}}
  %r:6 = la.recurrence_grad decay(none) low_rank(delta) %q, %q, %v gv(%v : !v) beta(%beta : tensor<1x8x2xf32>) initial_state(%s : !s) d_o(%v : !v) {scale = 1.0 : f32} : !qk, !qk, !v -> !qk, !qk, !v, !s, !v, tensor<1x8x2xf32>
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<1x2x4x6xf32>

func.func @value_gate_without_its_gradient(%q: !qk, %v: !v, %s: !s) {
  // expected-error @+1 {{expects 5 results (dq, dk, dv, d_initial_state and one per given g, gv, beta, a, b), got 4}}
  %r:4 = la.recurrence_grad decay(none) low_rank(none) %q, %q, %v gv(%v : !v) initial_state(%s : !s) d_o(%v : !v) {scale = 1.0 : f32} : !qk, !qk, !v -> !qk, !qk, !v, !s
  return
}
