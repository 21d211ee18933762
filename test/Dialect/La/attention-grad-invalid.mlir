// RUN: la-opt %s -split-input-file -verify-diagnostics

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

func.func @missing_gate_gradient(%q: !qk, %v: !v, %g: tensor<1x8x2xf32>) {
  // expected-error @+1 {{expects 4 results (dq, dk, dv and one per given g, gv, beta, erase, write, a, b, initial_state), got 3}}
  %r:3 = la.attention_grad mamba2 %q, %q, %v g(%g : tensor<1x8x2xf32>) d_o(%v : !v) : !qk, !qk, !v -> !qk, !qk, !v
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

func.func @wrong_gradient_shape(%q: !qk, %v: !v, %beta: tensor<1x8x2xf32>) {
  // expected-error @+1 {{expects 'dbeta' of shape [1,8,2] like its input, got [1,8,3]}}
  %r:4 = la.attention_grad deltanet %q, %q, %v beta(%beta : tensor<1x8x2xf32>) d_o(%v : !v) : !qk, !qk, !v -> !qk, !qk, !v, tensor<1x8x3xf32>
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

func.func @bad_d_o_shape(%q: !qk, %v: !v) {
  // expected-error @+1 {{expects 'd_o' of shape [1,8,2,6] [B,T,HV,V], got [1,8,2,4]}}
  %r:3 = la.attention_grad linear %q, %q, %v d_o(%q : !qk) : !qk, !qk, !v -> !qk, !qk, !v
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

func.func @bad_d_o_type(%q: !qk, %v: !v, %do: tensor<1x8x2x6xbf16>) {
  // expected-error @+1 {{expects 'd_o' to have the element type of 'v' ('f32'), got 'bf16'}}
  %r:3 = la.attention_grad linear %q, %q, %v d_o(%do : tensor<1x8x2x6xbf16>) : !qk, !qk, !v -> !qk, !qk, !v
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

func.func @bad_d_final_state(%q: !qk, %v: !v, %dsf: tensor<1x2x4x5xf32>) {
  // expected-error @+1 {{expects 'd_final_state' of shape [1,2,4,6] [B,HV,K,V], got [1,2,4,5]}}
  %r:3 = la.attention_grad linear %q, %q, %v d_o(%v : !v) d_final_state(%dsf : tensor<1x2x4x5xf32>) : !qk, !qk, !v -> !qk, !qk, !v
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

func.func @bad_checkpoint(%q: !qk, %v: !v) {
  // expected-error @+1 {{expects 'checkpoint' >= 1, got 0}}
  %r:3 = la.attention_grad linear %q, %q, %v d_o(%v : !v) {checkpoint = 0 : i64} : !qk, !qk, !v -> !qk, !qk, !v
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

func.func @beta_without_delta(%q: !qk, %v: !v, %beta: tensor<1x8x2xf32>) {
  // expected-error @+1 {{'beta' is only valid with the delta rule}}
  %r:4 = la.attention_grad linear %q, %q, %v beta(%beta : tensor<1x8x2xf32>) d_o(%v : !v) : !qk, !qk, !v -> !qk, !qk, !v, tensor<1x8x2xf32>
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

func.func @missing_state_gradient(%q: !qk, %v: !v, %s: tensor<1x2x4x6xf32>) {
  // expected-error @+1 {{expects 4 results (dq, dk, dv and one per given g, gv, beta, erase, write, a, b, initial_state), got 3}}
  %r:3 = la.attention_grad linear %q, %q, %v initial_state(%s : tensor<1x2x4x6xf32>) d_o(%v : !v) : !qk, !qk, !v -> !qk, !qk, !v
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!h = tensor<1x8x2xf32>

func.func @normalizer_with_delta(%q: !qk, %v: !v, %beta: !h) {
  // expected-error @+1 {{'normalizer' is only valid with the additive rule}}
  %r:4 = la.attention_grad deltanet %q, %q, %v beta(%beta : !h) d_o(%v : !v) {normalizer} : !qk, !qk, !v -> !qk, !qk, !v, !h
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

func.func @missing_low_rank_gradient(%q: !qk, %v: !v) {
  // expected-error @+1 {{expects 5 results (dq, dk, dv and one per given g, gv, beta, erase, write, a, b, initial_state), got 4}}
  %r:4 = la.attention_grad dplr %q, %q, %v a(%q : !qk) b(%q : !qk) d_o(%v : !v) : !qk, !qk, !v -> !qk, !qk, !v, !qk
  return
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

func.func @value_gate_gradient_shape(%q: !qk, %v: !v) {
  // expected-error @+1 {{expects 'dgv' of shape [1,8,2,6] like its input, got [1,8,2,4]}}
  %r:4 = la.attention_grad linear %q, %q, %v gv(%v : !v) d_o(%v : !v) : !qk, !qk, !v -> !qk, !qk, !v, !qk
  return
}
