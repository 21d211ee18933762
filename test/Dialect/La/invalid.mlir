// RUN: la-opt %s -split-input-file -verify-diagnostics

func.func @mixed_types(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf16>) {
  // expected-error @+1 {{expects 'q', 'k' and 'v' of one element type, got 'f32' and 'f16'}}
  %o = la.attention linear %q, %q, %v : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf16> -> tensor<1x8x2x6xf16>
  return
}

// -----

func.func @qk_types(%q: tensor<1x8x2x4xf32>, %k: tensor<1x8x2x4xf16>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{expects 'q' and 'k' of one element type}}
  %o = la.attention linear %q, %k, %v : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf16>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @int_q(%q: tensor<1x8x2x4xi32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of 32-bit float or 16-bit float or bfloat16 type values}}
  %o = la.attention linear %q, %q, %v : tensor<1x8x2x4xi32>, tensor<1x8x2x4xi32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @dynamic_k(%q: tensor<1x8x2x?xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{needs a static K to default 'scale' to K^-0.5; set 'scale'}}
  %o = la.attention linear %q, %q, %v : tensor<1x8x2x?xf32>, tensor<1x8x2x?xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @delta_without_beta(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{the delta rule requires a 'beta' operand}}
  %o = la.attention deltanet %q, %q, %v : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @beta_without_delta(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %b: tensor<1x8x2xf32>) {
  // expected-error @+1 {{'beta' is only valid with the delta rule}}
  %o = la.attention linear %q, %q, %v beta(%b : tensor<1x8x2xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @delta_normalizer(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %b: tensor<1x8x2xf32>) {
  // expected-error @+1 {{'normalizer' is only valid with the additive rule}}
  %o = la.attention deltanet %q, %q, %v beta(%b : tensor<1x8x2xf32>) {normalizer} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @rank_q(%q: tensor<8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{expects 'q' of rank 4 [B,T,H,K], got rank 3}}
  %o = la.attention linear %q, %q, %v {scale = 1.0 : f32} : tensor<8x2x4xf32>, tensor<8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @rank_v(%q: tensor<1x8x2x4xf32>, %v: tensor<8x2x6xf32>) {
  // expected-error @+1 {{expects 'v' of rank 4 [B,T,HV,V], got rank 3}}
  %o = la.attention linear %q, %q, %v : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @rank_k(%q: tensor<1x8x2x4xf32>, %k: tensor<8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{expects 'k' of rank 4 [B,T,H,K] like 'q', got rank 3}}
  %o = la.attention linear %q, %k, %v : tensor<1x8x2x4xf32>, tensor<8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @shape_k(%q: tensor<1x8x2x4xf32>, %k: tensor<1x8x2x8xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{expects 'k' of shape [1,8,2,4] [B,T,H,K] like 'q', got [1,8,2,8]}}
  %o = la.attention linear %q, %k, %v : tensor<1x8x2x4xf32>, tensor<1x8x2x8xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @time_v(%q: tensor<1x8x2x4xf32>, %v: tensor<1x9x2x6xf32>) {
  // expected-error @+1 {{expects 'v' to share B and T with 'q' [1,8,2,4], got [1,9,2,6]}}
  %o = la.attention linear %q, %q, %v : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x9x2x6xf32> -> tensor<1x9x2x6xf32>
  return
}

// -----

func.func @grouped_heads(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x3x6xf32>) {
  // expected-error @+1 {{expects the value heads (HV = 3) to be a multiple of the key heads (H = 2)}}
  %o = la.attention linear %q, %q, %v : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x3x6xf32> -> tensor<1x8x3x6xf32>
  return
}

// -----

func.func @gate_none_with_g(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %g: tensor<1x8x2xf32>) {
  // expected-error @+1 {{gate 'none' takes no 'g' operand}}
  %o = la.attention linear %q, %q, %v g(%g : tensor<1x8x2xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @gate_fixed_with_g(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %g: tensor<1x8x2xf32>) {
  // expected-error @+1 {{gate 'fixed' takes no 'g' operand}}
  %o = la.attention retention %q, %q, %v g(%g : tensor<1x8x2xf32>) {log_decay = array<f32: -1.0, -1.0>} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @scalar_without_g(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{gate 'scalar' requires a 'g' operand}}
  %o = la.attention mamba2 %q, %q, %v : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @scalar_gate_shape(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %g: tensor<1x8x2x4xf32>) {
  // expected-error @+1 {{expects 'g' of rank 3 [B,T,H] or [B,T,HV] for a scalar gate, got rank 4}}
  %o = la.attention mamba2 %q, %q, %v g(%g : tensor<1x8x2x4xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @channel_gate_shape(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %g: tensor<1x8x2x5xf32>) {
  // expected-error @+1 {{expects 'g' of shape [1,8,2,4] [B,T,H,K] or [B,T,HV,K] for a channel-wise gate, got [1,8,2,5]}}
  %o = la.attention gla %q, %q, %v g(%g : tensor<1x8x2x5xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @fixed_without_decay(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{gate 'fixed' requires the 'log_decay' attribute (one per head)}}
  %o = la.attention retention %q, %q, %v : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @fixed_decay_count(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{expects 'log_decay' to have one value per key head (H = 2), got 3}}
  %o = la.attention retention %q, %q, %v {log_decay = array<f32: -1.0, -1.0, -1.0>} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @fixed_decay_positive(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{expects every 'log_decay' to be finite and <= 0, got 5.000000e-01}}
  %o = la.attention retention %q, %q, %v {log_decay = array<f32: -1.0, 0.5>} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @decay_without_fixed(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %g: tensor<1x8x2xf32>) {
  // expected-error @+1 {{'log_decay' is only valid with gate 'fixed', not 'scalar'}}
  %o = la.attention mamba2 %q, %q, %v g(%g : tensor<1x8x2xf32>) {log_decay = array<f32: -1.0, -1.0>} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @beta_shape(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %b: tensor<1x8x4xf32>) {
  // expected-error @+1 {{expects 'beta' of shape [1,8,2] [B,T,H] or [B,T,HV], got [1,8,4]}}
  %o = la.attention deltanet %q, %q, %v beta(%b : tensor<1x8x4xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

// Gates per value head must have HV heads exactly (here H = 2, HV = 4).
func.func @value_head_gate_heads(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x4x6xf32>, %g: tensor<1x8x3xf32>) {
  // expected-error @+1 {{expects 'g' of shape [1,8,2] [B,T,H] or [B,T,HV] for a scalar gate, got [1,8,3]}}
  %o = la.attention mamba2 %q, %q, %v g(%g : tensor<1x8x3xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x4x6xf32> -> tensor<1x8x4x6xf32>
  return
}

// -----

func.func @value_head_erase_heads(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x4x6xf32>, %e: tensor<1x8x8x4xf32>) {
  // expected-error @+1 {{expects 'erase' of shape [1,8,2,4] [B,T,H,K] or [B,T,HV,K], got [1,8,8,4]}}
  %o = la.attention deltanet2 %q, %q, %v erase(%e : tensor<1x8x8x4xf32>) write(%v : tensor<1x8x4x6xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x4x6xf32> -> tensor<1x8x4x6xf32>
  return
}

// -----

func.func @varlen_batch(%q: tensor<2x8x2x4xf32>, %v: tensor<2x8x2x6xf32>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{expects B = 1 with 'cu_seqlens' (packed sequences), got B = 2}}
  %o = la.attention linear %q, %q, %v cu_seqlens(%cu : tensor<3xi32>) : tensor<2x8x2x4xf32>, tensor<2x8x2x4xf32>, tensor<2x8x2x6xf32> -> tensor<2x8x2x6xf32>
  return
}

// -----

func.func @varlen_offsets(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %cu: tensor<1xi32>) {
  // expected-error @+1 {{expects 'cu_seqlens' to hold N+1 >= 2 offsets, got 1}}
  %o = la.attention linear %q, %q, %v cu_seqlens(%cu : tensor<1xi32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @varlen_f32_offsets(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %cu: tensor<3xf32>) {
  // expected-error @+1 {{operand #3 must be 1D tensor of 32-bit signless integer values}}
  %o = la.attention linear %q, %q, %v cu_seqlens(%cu : tensor<3xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @varlen_state(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %cu: tensor<4xi32>, %s: tensor<1x2x4x6xf32>) {
  // expected-error @+1 {{expects 'initial_state' of shape [3,2,4,6] [N,HV,K,V] (N sequences), got [1,2,4,6]}}
  %o = la.attention linear %q, %q, %v initial_state(%s : tensor<1x2x4x6xf32>) cu_seqlens(%cu : tensor<4xi32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @state_shape(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %s: tensor<1x2x6x4xf32>) {
  // expected-error @+1 {{expects 'initial_state' of shape [1,2,4,6] [B,HV,K,V], got [1,2,6,4]}}
  %o = la.attention linear %q, %q, %v initial_state(%s : tensor<1x2x6x4xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @state_type(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %s: tensor<1x2x4x6xf16>) {
  // expected-error @+1 {{operand #3 must be ranked tensor of 32-bit float values}}
  %o = la.attention linear %q, %q, %v initial_state(%s : tensor<1x2x4x6xf16>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @final_state_shape(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{expects 'final_state' of shape [1,2,4,6] [B,HV,K,V], got [1,2,4,4]}}
  %o, %s = la.attention linear %q, %q, %v : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x4xf32>
  return
}

// -----

func.func @output_shape(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{expects 'o' of shape [1,8,2,6] [B,T,HV,V], got [1,8,2,4]}}
  %o = la.attention linear %q, %q, %v : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x4xf32>
  return
}

// -----

func.func @output_type(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{expects 'o' to have the element type of 'v' ('f32'), got 'bf16'}}
  %o = la.attention linear %q, %q, %v : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xbf16>
  return
}

// -----

func.func @negative_scale(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{expects 'scale' to be finite and > 0, got -1.000000e+00}}
  %o = la.attention linear %q, %q, %v {scale = -1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @eps_without_normalizer(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{'eps' is only valid with 'normalizer'}}
  %o = la.attention linear %q, %q, %v {eps = 1.0e-3 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @zero_eps(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{expects 'eps' to be finite and > 0, got 0.000000e+00}}
  %o = la.attention linear %q, %q, %v {normalizer, eps = 0.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @unknown_variant(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{unknown linear-attention variant 'softmax'; expected one of 'linear' 'retention' 'mamba2' 'gla' 'deltanet' 'decayed_deltanet' 'gated_deltanet' 'kda'}}
  %o = la.attention softmax %q, %q, %v : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @recurrence_unknown_decay(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %oi0 = tensor.empty() : tensor<1x8x2x6xf32>
  %zs0 = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{unknown gate kind 'linear'}}
  %o, %fs0 = la.recurrence decay(linear) low_rank(none) %q, %q, %v outs(%oi0, %zs0 : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) {scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return
}

// -----

func.func @recurrence_unknown_low_rank(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %oi1 = tensor.empty() : tensor<1x8x2x6xf32>
  %zs1 = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{unknown low_rank kind 'rank1'}}
  %o, %fs1 = la.recurrence decay(none) low_rank(rank1) %q, %q, %v outs(%oi1, %zs1 : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) {scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return
}

// -----

func.func @recurrence_missing_scale(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %oi2 = tensor.empty() : tensor<1x8x2x6xf32>
  %zs2 = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{requires attribute 'scale'}}
  %o, %fs2 = la.recurrence decay(none) low_rank(none) %q, %q, %v outs(%oi2, %zs2 : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return
}

// -----

// The level-1 recurrence takes gates per key head only (la-lower-to-recurrence
// repeats the key side for per-value-head gates).
func.func @recurrence_value_head_gate(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x4x6xf32>, %g: tensor<1x8x4xf32>) {
  %oi = tensor.empty() : tensor<1x8x4x6xf32>
  %zs = arith.constant dense<0.0> : tensor<1x4x4x6xf32>
  // expected-error @+1 {{expects 'g' of shape [1,8,2] [B,T,H] for a scalar gate, got [1,8,4]}}
  %o, %fs = la.recurrence decay(scalar) low_rank(none) %q, %q, %v g(%g : tensor<1x8x4xf32>) outs(%oi, %zs : tensor<1x8x4x6xf32>, tensor<1x4x4x6xf32>) {scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x4x6xf32> -> tensor<1x8x4x6xf32>, tensor<1x4x4x6xf32>
  return
}

// -----

func.func @recurrence_none_with_beta(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %b: tensor<1x8x2xf32>) {
  %oi3 = tensor.empty() : tensor<1x8x2x6xf32>
  %zs3 = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{low_rank 'none' takes no 'beta', 'a' or 'b' operand}}
  %o, %fs3 = la.recurrence decay(none) low_rank(none) %q, %q, %v beta(%b : tensor<1x8x2xf32>) outs(%oi3, %zs3 : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) {scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return
}

// -----

func.func @recurrence_delta_without_beta(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %oi4 = tensor.empty() : tensor<1x8x2x6xf32>
  %zs4 = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{low_rank 'delta' requires a 'beta' operand}}
  %o, %fs4 = la.recurrence decay(none) low_rank(delta) %q, %q, %v outs(%oi4, %zs4 : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) {scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return
}

// -----

func.func @recurrence_delta_with_a(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %b: tensor<1x8x2xf32>) {
  %oi5 = tensor.empty() : tensor<1x8x2x6xf32>
  %zs5 = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{low_rank 'delta' derives 'a' and 'b' from 'k'; remove them}}
  %o, %fs5 = la.recurrence decay(none) low_rank(delta) %q, %q, %v beta(%b : tensor<1x8x2xf32>) a(%q : tensor<1x8x2x4xf32>) outs(%oi5, %zs5 : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) {scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return
}

// -----

func.func @recurrence_general_without_b(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %oi6 = tensor.empty() : tensor<1x8x2x6xf32>
  %zs6 = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{low_rank 'general' requires 'a' and 'b' operands}}
  %o, %fs6 = la.recurrence decay(none) low_rank(general) %q, %q, %v a(%q : tensor<1x8x2x4xf32>) outs(%oi6, %zs6 : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) {scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return
}

// -----

func.func @recurrence_general_with_beta(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %b: tensor<1x8x2xf32>) {
  %oi7 = tensor.empty() : tensor<1x8x2x6xf32>
  %zs7 = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{low_rank 'general' takes no 'beta' operand}}
  %o, %fs7 = la.recurrence decay(none) low_rank(general) %q, %q, %v beta(%b : tensor<1x8x2xf32>) a(%q : tensor<1x8x2x4xf32>) b(%q : tensor<1x8x2x4xf32>) outs(%oi7, %zs7 : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) {scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return
}

// -----

func.func @recurrence_general_shape(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %a: tensor<1x8x2x6xf32>) {
  %oi8 = tensor.empty() : tensor<1x8x2x6xf32>
  %zs8 = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{expects 'a' of shape [1,8,2,4] [B,T,H,K] like 'k', got [1,8,2,6]}}
  %o, %fs8 = la.recurrence decay(none) low_rank(general) %q, %q, %v a(%a : tensor<1x8x2x6xf32>) b(%q : tensor<1x8x2x4xf32>) outs(%oi8, %zs8 : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) {scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return
}

// -----

func.func @recurrence_delta_normalizer(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %b: tensor<1x8x2xf32>) {
  %oi9 = tensor.empty() : tensor<1x8x2x6xf32>
  %zs9 = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{'normalizer' is only valid without a low-rank part}}
  %o, %fs9 = la.recurrence decay(none) low_rank(delta) %q, %q, %v beta(%b : tensor<1x8x2xf32>) outs(%oi9, %zs9 : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) {normalizer, scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return
}

// -----

func.func @recurrence_value_gate_delta(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %b: tensor<1x8x2xf32>) {
  %oi = tensor.empty() : tensor<1x8x2x6xf32>
  %zs = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{'gv' (the value-side gate) is only valid without a low-rank part and without the normaliser}}
  %o, %fs = la.recurrence decay(none) low_rank(delta) %q, %q, %v gv(%v : tensor<1x8x2x6xf32>) beta(%b : tensor<1x8x2xf32>) outs(%oi, %zs : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) {scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return
}

// -----

func.func @recurrence_value_gate_normalizer(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %oi = tensor.empty() : tensor<1x8x2x6xf32>
  %zs = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{'gv' (the value-side gate) is only valid without a low-rank part and without the normaliser}}
  %o, %fs = la.recurrence decay(none) low_rank(none) %q, %q, %v gv(%v : tensor<1x8x2x6xf32>) outs(%oi, %zs : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) {normalizer, scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return
}

// -----

func.func @recurrence_value_gate_shape(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %oi = tensor.empty() : tensor<1x8x2x6xf32>
  %zs = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{expects 'gv' of shape [1,8,2,6] [B,T,HV,V] like 'v', got [1,8,2,4]}}
  %o, %fs = la.recurrence decay(none) low_rank(none) %q, %q, %v gv(%q : tensor<1x8x2x4xf32>) outs(%oi, %zs : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) {scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return
}

// -----

func.func @recurrence_nan_scale(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %oi10 = tensor.empty() : tensor<1x8x2x6xf32>
  %zs10 = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{expects 'scale' to be finite and > 0, got nan}}
  %o, %fs10 = la.recurrence decay(none) low_rank(none) %q, %q, %v outs(%oi10, %zs10 : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) {scale = 0x7FC00000 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return
}

// -----

func.func @neg_eigval_additive(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{'allow_neg_eigval' is only valid with the delta rule}}
  %o = la.attention linear %q, %q, %v {allow_neg_eigval} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @erase_write_without_gates(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %g: tensor<1x8x2x4xf32>) {
  // expected-error @+1 {{the erase_write rule requires 'erase' and 'write' operands}}
  %o = la.attention gated_deltanet2 %q, %q, %v g(%g : tensor<1x8x2x4xf32>) erase(%q : tensor<1x8x2x4xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @erase_with_delta(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %b: tensor<1x8x2xf32>) {
  // expected-error @+1 {{'erase' and 'write' are only valid with the erase_write rule}}
  %o = la.attention deltanet %q, %q, %v beta(%b : tensor<1x8x2xf32>) erase(%q : tensor<1x8x2x4xf32>) write(%v : tensor<1x8x2x6xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @erase_shape(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %e: tensor<1x8x2xf32>) {
  // expected-error @+1 {{expects 'erase' of rank 4 [B,T,H,K] or [B,T,HV,K], got rank 3}}
  %o = la.attention deltanet2 %q, %q, %v erase(%e : tensor<1x8x2xf32>) write(%v : tensor<1x8x2x6xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @write_shape(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{expects 'write' of shape [1,8,2,6] [B,T,HV,V] like 'v', got [1,8,2,4]}}
  %o = la.attention deltanet2 %q, %q, %v erase(%q : tensor<1x8x2x4xf32>) write(%q : tensor<1x8x2x4xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @erase_write_normalizer(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{'normalizer' is only valid with the additive rule}}
  %o = la.attention deltanet2 %q, %q, %v erase(%q : tensor<1x8x2x4xf32>) write(%v : tensor<1x8x2x6xf32>) {normalizer} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

// Offsets known at compile time are checked (the kernels trust them).
func.func @varlen_constant_past_end(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %cu = arith.constant dense<[0, 9, 8]> : tensor<3xi32>
  // expected-error @+1 {{expects 'cu_seqlens' to go non-decreasing from 0 to T = 8, but offset 1 is 9}}
  %o = la.attention linear %q, %q, %v cu_seqlens(%cu : tensor<3xi32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @varlen_constant_decreasing(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %cu = arith.constant dense<[0, 5, 3, 8]> : tensor<4xi32>
  // expected-error @+1 {{expects 'cu_seqlens' to go non-decreasing from 0 to T = 8, but offset 2 is 3}}
  %o = la.attention linear %q, %q, %v cu_seqlens(%cu : tensor<4xi32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @varlen_constant_short(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %cu = arith.constant dense<[0, 5, 7]> : tensor<3xi32>
  // expected-error @+1 {{expects 'cu_seqlens' to go non-decreasing from 0 to T = 8, but offset 2 is 7}}
  %o = la.attention linear %q, %q, %v cu_seqlens(%cu : tensor<3xi32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @varlen_constant_negative(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %cu = arith.constant dense<[-1, 5, 8]> : tensor<3xi32>
  // expected-error @+1 {{expects 'cu_seqlens' to go non-decreasing from 0 to T = 8, but offset 0 is -1}}
  %o = la.attention linear %q, %q, %v cu_seqlens(%cu : tensor<3xi32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @varlen_constant_recurrence(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %cu = arith.constant dense<[0, 4, 2]> : tensor<3xi32>
  %oi11 = tensor.empty() : tensor<1x8x2x6xf32>
  %zs11 = arith.constant dense<0.0> : tensor<2x2x4x6xf32>
  // expected-error @+1 {{expects 'cu_seqlens' to go non-decreasing from 0 to T = 8, but offset 2 is 2}}
  %o, %fs11 = la.recurrence decay(none) low_rank(none) %q, %q, %v cu_seqlens(%cu : tensor<3xi32>) outs(%oi11, %zs11 : tensor<1x8x2x6xf32>, tensor<2x2x4x6xf32>) {scale = 0.5 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<2x2x4x6xf32>
  return
}

// -----

func.func @erase_read_key_without_erase(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %b: tensor<1x8x2xf32>) {
  // expected-error @+1 {{'erase_read_key' is only valid with the erase_write rule}}
  %o = la.attention deltanet %q, %q, %v beta(%b : tensor<1x8x2xf32>) {erase_read_key} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @query_heads_not_a_multiple(%q: tensor<1x8x3x4xf32>, %k: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{expects the query heads (3) to be a multiple of the key heads (H = 2)}}
  %o = la.attention linear %q, %k, %v : tensor<1x8x3x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x3x6xf32>
  return
}

// -----

func.func @query_groups_with_value_groups(%q: tensor<1x8x4x4xf32>, %k: tensor<1x8x2x4xf32>, %v: tensor<1x8x4x6xf32>) {
  // expected-error @+1 {{expects grouped query heads (4 query heads over H = 2 key heads) to share value heads with the keys (HV = H), got HV = 4}}
  %o = la.attention linear %q, %k, %v : tensor<1x8x4x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x4x6xf32> -> tensor<1x8x4x6xf32>
  return
}

// -----

func.func @query_groups_output_heads(%q: tensor<1x8x4x4xf32>, %k: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{expects 'o' of shape [1,8,4,6] [B,T,HQ,V] (HQ query heads), got [1,8,2,6]}}
  %o = la.attention linear %q, %k, %v : tensor<1x8x4x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

// la.recurrence's grouped query heads have one output per query head.
func.func @query_groups_in_recurrence(%q: tensor<1x8x4x4xf32>, %k: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %oi: tensor<1x8x2x6xf32>, %s: tensor<1x2x4x6xf32>) {
  // expected-error @+1 {{expects 'o' of shape [1,8,4,6] [B,T,HQ,V] (HQ query heads), got [1,8,2,6]}}
  %o, %f = la.recurrence decay(none) low_rank(none) %q, %k, %v outs(%oi, %s : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) {scale = 0.5 : f32} : tensor<1x8x4x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return
}

// -----

// Query heads that are neither one per key head nor whole groups per value
// head (state).
func.func @query_groups_not_whole(%q: tensor<1x8x3x4xf32>, %k: tensor<1x8x1x4xf32>, %v: tensor<1x8x2x6xf32>, %oi: tensor<1x8x3x6xf32>, %s: tensor<1x2x4x6xf32>) {
  // expected-error @+1 {{expects the query heads (3) to be H = 1 (one per key head) or a multiple of the value heads (HV = 2: grouped query heads, each group reading one state)}}
  %o, %f = la.recurrence decay(none) low_rank(none) %q, %k, %v outs(%oi, %s : tensor<1x8x3x6xf32>, tensor<1x2x4x6xf32>) {scale = 0.5 : f32} : tensor<1x8x3x4xf32>, tensor<1x8x1x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x3x6xf32>, tensor<1x2x4x6xf32>
  return
}

// -----

func.func @query_groups_dynamic_value_heads(%q: tensor<1x8x4x4xf32>, %k: tensor<1x8x2x4xf32>, %v: tensor<1x8x?x6xf32>, %oi: tensor<1x8x4x6xf32>, %s: tensor<1x?x4x6xf32>) {
  // expected-error @+1 {{expects static value heads (HV) with grouped query heads (4 query heads over H = 2 key heads)}}
  %o, %f = la.recurrence decay(none) low_rank(none) %q, %k, %v outs(%oi, %s : tensor<1x8x4x6xf32>, tensor<1x?x4x6xf32>) {scale = 0.5 : f32} : tensor<1x8x4x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x?x6xf32> -> tensor<1x8x4x6xf32>, tensor<1x?x4x6xf32>
  return
}



// -----

func.func @dplr_without_b(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{the dplr rule requires 'a' and 'b' operands}}
  %o = la.attention dplr %q, %q, %v a(%q : tensor<1x8x2x4xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @low_rank_with_delta(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %b: tensor<1x8x2xf32>) {
  // expected-error @+1 {{'a' and 'b' are only valid with the dplr rule}}
  %o = la.attention deltanet %q, %q, %v beta(%b : tensor<1x8x2xf32>) a(%q : tensor<1x8x2x4xf32>) b(%q : tensor<1x8x2x4xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @dplr_b_shape(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x4x6xf32>, %b: tensor<1x8x4x4xf32>) {
  // expected-error @+1 {{expects 'b' of shape [1,8,2,4] [B,T,H,K] like 'k', got [1,8,4,4]}}
  %o = la.attention dplr %q, %q, %v a(%q : tensor<1x8x2x4xf32>) b(%b : tensor<1x8x4x4xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x4x6xf32> -> tensor<1x8x4x6xf32>
  return
}

// -----

func.func @dplr_normalizer(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{'normalizer' is only valid with the additive rule}}
  %o = la.attention dplr %q, %q, %v a(%q : tensor<1x8x2x4xf32>) b(%q : tensor<1x8x2x4xf32>) {normalizer} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @value_gate_with_delta(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %b: tensor<1x8x2xf32>) {
  // expected-error @+1 {{'gv' (the value-side gate) is only valid with the additive rule and without 'normalizer'}}
  %o = la.attention deltanet %q, %q, %v gv(%v : tensor<1x8x2x6xf32>) beta(%b : tensor<1x8x2xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @value_gate_with_normalizer(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  // expected-error @+1 {{'gv' (the value-side gate) is only valid with the additive rule and without 'normalizer'}}
  %o = la.attention linear %q, %q, %v gv(%v : tensor<1x8x2x6xf32>) {normalizer} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @value_gate_shape(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %gv: tensor<1x8x2x4xf32>) {
  // expected-error @+1 {{expects 'gv' of shape [1,8,2,6] [B,T,HV,V] like 'v', got [1,8,2,4]}}
  %o = la.attention linear %q, %q, %v gv(%gv : tensor<1x8x2x4xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return
}

// -----

func.func @recurrence_transposed_query_normalizer(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %oi = tensor.empty() : tensor<1x8x2x6xf32>
  %ti = tensor.empty() : tensor<1x8x2x4xf32>
  %zs = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{'transposed_query' is only valid without the normaliser and grouped query heads}}
  %o, %fs, %t = la.recurrence decay(none) low_rank(none) %q, %q, %v transposed_query(%v : tensor<1x8x2x6xf32>) outs(%oi, %zs, %ti : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>, tensor<1x8x2x4xf32>) {normalizer, scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>, tensor<1x8x2x4xf32>
  return
}

// -----

func.func @recurrence_transposed_query_shape(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %oi = tensor.empty() : tensor<1x8x2x6xf32>
  %ti = tensor.empty() : tensor<1x8x2x4xf32>
  %zs = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{expects 'transposed_query' of shape [1,8,2,6] [B,T,HV,V] like 'v', got [1,8,2,4]}}
  %o, %fs, %t = la.recurrence decay(none) low_rank(none) %q, %q, %v transposed_query(%q : tensor<1x8x2x4xf32>) outs(%oi, %zs, %ti : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>, tensor<1x8x2x4xf32>) {scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>, tensor<1x8x2x4xf32>
  return
}

// -----

func.func @recurrence_transposed_output_shape(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %oi = tensor.empty() : tensor<1x8x2x6xf32>
  %zs = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{expects 'transposed_o' of shape [1,8,2,4] [B,T,HV,K], got [1,8,2,6]}}
  %o, %fs, %t = la.recurrence decay(none) low_rank(none) %q, %q, %v transposed_query(%v : tensor<1x8x2x6xf32>) outs(%oi, %zs, %oi : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>, tensor<1x8x2x6xf32>) {scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>, tensor<1x8x2x6xf32>
  return
}

// -----

func.func @recurrence_transposed_query_two_inits(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %oi = tensor.empty() : tensor<1x8x2x6xf32>
  %zs = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{expects three inits, outs(o_init, state, transposed_o_init), got 2}}
  %o, %fs = la.recurrence decay(none) low_rank(none) %q, %q, %v transposed_query(%v : tensor<1x8x2x6xf32>) outs(%oi, %zs : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) {scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return
}

// -----

func.func @recurrence_third_init_without_query(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) {
  %oi = tensor.empty() : tensor<1x8x2x6xf32>
  %ti = tensor.empty() : tensor<1x8x2x4xf32>
  %zs = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  // expected-error @+1 {{expects two inits, outs(o_init, state), got 3}}
  %o, %fs, %t = la.recurrence decay(none) low_rank(none) %q, %q, %v outs(%oi, %zs, %ti : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>, tensor<1x8x2x4xf32>) {scale = 1.0 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>, tensor<1x8x2x4xf32>
  return
}
