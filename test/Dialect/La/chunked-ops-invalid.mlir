// RUN: la-opt %s -split-input-file -verify-diagnostics

func.func @cumsum_rank(%g: tensor<2x16x2xf32>) {
  // expected-error @+1 {{expects 'g' of rank 4 [B,NC,C,H] or 5 [B,NC,C,H,K], got rank 3}}
  %0 = la.chunk_cumsum %g : tensor<2x16x2xf32> -> tensor<2x16x2xf32>
  return
}

// -----

func.func @cumsum_result(%g: tensor<1x2x16x2xf32>) {
  // expected-error @+1 {{expects 'result' of shape [1,2,16,2] like 'g', got [1,2,8,2]}}
  %0 = la.chunk_cumsum %g : tensor<1x2x16x2xf32> -> tensor<1x2x8x2xf32>
  return
}

// -----

func.func @cumsum_result_type(%g: tensor<1x2x16x2xf32>) {
  // expected-error @+1 {{result #0 must be ranked tensor of 32-bit float values}}
  %0 = la.chunk_cumsum %g : tensor<1x2x16x2xf32> -> tensor<1x2x16x2xbf16>
  return
}

// -----

func.func @intra_key_rank(%q: tensor<1x2x16x2xf32>, %v: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{expects 'k' of rank 5 [B,NC,C,H,K], got rank 4}}
  %0 = la.chunk_intra %q, %q, %v {scale = 1.0 : f32} : tensor<1x2x16x2xf32>, tensor<1x2x16x2xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @intra_value_rank(%q: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2xf32>) {
  // expected-error @+1 {{expects 'v' of rank 5 [B,NC,C,HV,V], got rank 4}}
  %0 = la.chunk_intra %q, %q, %v {scale = 1.0 : f32} : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x4xf32>, tensor<1x2x16x2xf32> -> tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @intra_value_chunks(%q: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x8x2x8xf32>) {
  // expected-error @+1 {{expects 'v' of shape [1,2,16,2,8] [B,NC,C,HV,V], got [1,2,8,2,8]}}
  %0 = la.chunk_intra %q, %q, %v {scale = 1.0 : f32} : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x4xf32>, tensor<1x2x8x2x8xf32> -> tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @intra_groups(%q: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x3x8xf32>) {
  // expected-error @+1 {{expects the value heads (HV = 3) to be a multiple of the key heads (H = 2)}}
  %0 = la.chunk_intra %q, %q, %v {scale = 1.0 : f32} : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x4xf32>, tensor<1x2x16x3x8xf32> -> tensor<1x2x16x3x8xf32>
  return
}

// -----

func.func @intra_query(%q: tensor<1x2x16x2x8xf32>, %k: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{expects 'q' of shape [1,2,16,2,4] [B,NC,C,H,K] like 'k', got [1,2,16,2,8]}}
  %0 = la.chunk_intra %q, %k, %v {scale = 1.0 : f32} : tensor<1x2x16x2x8xf32>, tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @intra_scalar_gates(%q: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>, %g: tensor<1x2x16x3xf32>) {
  // expected-error @+1 {{expects 'gates' of shape [1,2,16,2] [B,NC,C,H] for a scalar gate, got [1,2,16,3]}}
  %0 = la.chunk_intra %q, %q, %v gates(%g : tensor<1x2x16x3xf32>) {scale = 1.0 : f32} : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @intra_channel_gates(%q: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>, %g: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{expects 'gates' of shape [1,2,16,2,4] [B,NC,C,H,K] for a channel-wise gate, got [1,2,16,2,8]}}
  %0 = la.chunk_intra %q, %q, %v gates(%g : tensor<1x2x16x2x8xf32>) {scale = 1.0 : f32} : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @intra_scale(%q: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{expects 'scale' to be finite and > 0, got 0.000000e+00}}
  %0 = la.chunk_intra %q, %q, %v {scale = 0.0 : f32} : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @intra_result(%q: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{expects 'result' of shape [1,2,16,2,8] [B,NC,C,HV,V], got [1,2,16,2,4]}}
  %0 = la.chunk_intra %q, %q, %v {scale = 1.0 : f32} : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x4xf32>
  return
}

// -----

func.func @scan_initial(%k: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>, %s: tensor<1x2x8x4xf32>) {
  // expected-error @+1 {{expects 'initial_state' of shape [1,2,4,8] [B,HV,K,V], got [1,2,8,4]}}
  %0:2 = la.chunk_state_scan %k, %v initial_state(%s : tensor<1x2x8x4xf32>) : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x2x4x8xf32>, tensor<1x2x4x8xf32>
  return
}

// -----

func.func @scan_final(%k: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{expects 'final_state' of shape [1,2,4,8] [B,HV,K,V], got [1,1,4,8]}}
  %0:2 = la.chunk_state_scan %k, %v : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x2x4x8xf32>, tensor<1x1x4x8xf32>
  return
}

// -----

func.func @scan_states(%k: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{expects 'states' of shape [1,2,2,4,8] [B,NC,HV,K,V], got [1,3,2,4,8]}}
  %0:2 = la.chunk_state_scan %k, %v : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x3x2x4x8xf32>, tensor<1x2x4x8xf32>
  return
}

// -----

func.func @inter_intra(%q: tensor<1x2x16x2x4xf32>, %s: tensor<1x2x2x4x8xf32>, %intra: tensor<1x2x16x2xf32>) {
  // expected-error @+1 {{expects 'intra' of rank 5 [B,NC,C,HV,V], got rank 4}}
  %0 = la.chunk_inter %q, %s, %intra {scale = 1.0 : f32} : tensor<1x2x16x2x4xf32>, tensor<1x2x2x4x8xf32>, tensor<1x2x16x2xf32> -> tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @inter_states(%q: tensor<1x2x16x2x4xf32>, %s: tensor<1x1x2x4x8xf32>, %intra: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{expects 'states' of shape [1,2,2,4,8] [B,NC,HS,K,V] (HS dividing the output's heads), got [1,1,2,4,8]}}
  %0 = la.chunk_inter %q, %s, %intra {scale = 1.0 : f32} : tensor<1x2x16x2x4xf32>, tensor<1x1x2x4x8xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x8xf32>
  return
}

// -----

// Grouped query heads: each state serves a group of output heads, whose
// count it must divide.
func.func @inter_state_groups(%q: tensor<1x2x16x4x4xf32>, %s: tensor<1x2x3x4x8xf32>, %intra: tensor<1x2x16x4x8xf32>) {
  // expected-error @+1 {{expects the states' heads (3) to divide the output's heads (4)}}
  %0 = la.chunk_inter %q, %s, %intra {scale = 1.0 : f32} : tensor<1x2x16x4x4xf32>, tensor<1x2x3x4x8xf32>, tensor<1x2x16x4x8xf32> -> tensor<1x2x16x4x8xf32>
  return
}

// -----

func.func @inter_result(%q: tensor<1x2x16x2x4xf32>, %s: tensor<1x2x2x4x8xf32>, %intra: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{expects 'result' of shape [1,2,16,2,8] like 'intra', got [1,2,16,2,4]}}
  %0 = la.chunk_inter %q, %s, %intra {scale = 1.0 : f32} : tensor<1x2x16x2x4xf32>, tensor<1x2x2x4x8xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x4xf32>
  return
}

// -----

func.func @wy_block(%k: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>, %b: tensor<1x2x16x2xf32>) {
  // expected-error @+1 {{expects 'block_size' (6) to be > 0 and to divide the chunk size (16)}}
  %w, %u = la.chunk_wy %k, %v beta(%b : tensor<1x2x16x2xf32>) {block_size = 6} : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @wy_beta(%k: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>, %b: tensor<1x2x16x2x4xf32>) {
  // expected-error @+1 {{expects 'beta' of rank 4 [B,NC,C,H], got rank 5}}
  %w, %u = la.chunk_wy %k, %v beta(%b : tensor<1x2x16x2x4xf32>) : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @wy_u(%k: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>, %b: tensor<1x2x16x2xf32>) {
  // expected-error @+1 {{expects 'u' of shape [1,2,16,2,8] [B,NC,C,HV,V] like 'v', got [1,2,16,2,4]}}
  %w, %u = la.chunk_wy %k, %v beta(%b : tensor<1x2x16x2xf32>) : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x4xf32>
  return
}

// -----

func.func @wy_w(%k: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>, %b: tensor<1x2x16x2xf32>) {
  // expected-error @+1 {{expects 'w' of shape [1,2,16,2,4] [B,NC,C,H,K] like 'k', got [1,2,16,2,8]}}
  %w, %u = la.chunk_wy %k, %v beta(%b : tensor<1x2x16x2xf32>) : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x8xf32>, tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @scan_correction_without_result(%k: tensor<1x2x16x2x4xf32>, %u: tensor<1x2x16x2x8xf32>, %w: tensor<1x2x16x2x4xf32>) {
  // expected-error @+1 {{expects a 'corrected' result exactly when a 'correction' operand is given}}
  %0:2 = la.chunk_state_scan %k, %u correction(%w : tensor<1x2x16x2x4xf32>) : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x2x4x8xf32>, tensor<1x2x4x8xf32>
  return
}

// -----

func.func @scan_correction_shape(%k: tensor<1x2x16x2x4xf32>, %u: tensor<1x2x16x2x8xf32>, %w: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{expects 'correction' of shape [1,2,16,2,4] [B,NC,C,H,K] like 'k', got [1,2,16,2,8]}}
  %0:3 = la.chunk_state_scan %k, %u correction(%w : tensor<1x2x16x2x8xf32>) : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @scan_corrected_shape(%k: tensor<1x2x16x2x4xf32>, %u: tensor<1x2x16x2x8xf32>, %w: tensor<1x2x16x2x4xf32>) {
  // expected-error @+1 {{expects 'corrected' of shape [1,2,16,2,8] [B,NC,C,HV,V] like 'v', got [1,2,16,2,4]}}
  %0:3 = la.chunk_state_scan %k, %u correction(%w : tensor<1x2x16x2x4xf32>) : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x16x2x4xf32>
  return
}

// -----

func.func @wy_beta_and_general(%k: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>, %b: tensor<1x2x16x2xf32>) {
  // expected-error @+1 {{expects either 'beta' (the delta rule) or 'a' and 'b' (the general low-rank form)}}
  %w, %u = la.chunk_wy %k, %v beta(%b : tensor<1x2x16x2xf32>) a(%k : tensor<1x2x16x2x4xf32>) b(%k : tensor<1x2x16x2x4xf32>) : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @wy_a_only(%k: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{expects 'a' and 'b' together}}
  %w, %u = la.chunk_wy %k, %v a(%k : tensor<1x2x16x2x4xf32>) : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @wy_general_without_prev(%k: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>, %g: tensor<1x2x16x2xf32>) {
  // expected-error @+1 {{the general form with 'gates' requires 'prev_gates' (the exclusive cumulative gates)}}
  %w, %u = la.chunk_wy %k, %v a(%k : tensor<1x2x16x2x4xf32>) b(%k : tensor<1x2x16x2x4xf32>) gates(%g : tensor<1x2x16x2xf32>) : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @wy_prev_without_general(%k: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>, %b: tensor<1x2x16x2xf32>, %g: tensor<1x2x16x2xf32>) {
  // expected-error @+1 {{'prev_gates' is only valid with 'gates' and the general form}}
  %w, %u = la.chunk_wy %k, %v beta(%b : tensor<1x2x16x2xf32>) gates(%g : tensor<1x2x16x2xf32>) prev_gates(%g : tensor<1x2x16x2xf32>) : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @intra_extra_keys_only(%q: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{expects 'extra_values' of shape [1,2,16,2,8] [B,NC,C,HV,V] like 'v', got [1,2,16,2,4]}}
  %0 = la.chunk_intra %q, %q, %v extra(%q, %q : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x4xf32>) {scale = 1.0 : f32} : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @scan_extra_keys(%k: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{expects 'extra_keys' of shape [1,2,16,2,4] [B,NC,C,H,K] like 'k', got [1,2,16,2,8]}}
  %0:2 = la.chunk_state_scan %k, %v extra(%v, %v : tensor<1x2x16x2x8xf32>, tensor<1x2x16x2x8xf32>) : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x2x4x8xf32>, tensor<1x2x4x8xf32>
  return
}

// -----

func.func @intra_extra_keys_without_values(%q: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{expects 'extra' keys and values together}}
  %0 = "la.chunk_intra"(%q, %q, %v, %q) <{operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 1, 0>, scale = 1.0 : f32}> : (tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32>, tensor<1x2x16x2x4xf32>) -> tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @wy_a_shape(%k: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{expects 'a' of shape [1,2,16,2,4] [B,NC,C,H,K] like 'k', got [1,2,16,2,8]}}
  %w, %u = la.chunk_wy %k, %v a(%v : tensor<1x2x16x2x8xf32>) b(%k : tensor<1x2x16x2x4xf32>) : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @wy_prev_shape(%k: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>, %g: tensor<1x2x16x2xf32>, %p: tensor<1x2x16x2x4xf32>) {
  // expected-error @+1 {{expects 'prev_gates' of rank 4 like 'gates', got rank 5}}
  %w, %u = la.chunk_wy %k, %v a(%k : tensor<1x2x16x2x4xf32>) b(%k : tensor<1x2x16x2x4xf32>) gates(%g : tensor<1x2x16x2xf32>) prev_gates(%p : tensor<1x2x16x2x4xf32>) : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @intra_value_gates_shape(%q: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{expects 'value_gates' of shape [1,2,16,2,8] [B,NC,C,HV,V], got [1,2,16,2,4]}}
  %0 = la.chunk_intra %q, %q, %v value_gates(%q : tensor<1x2x16x2x4xf32>) {scale = 1.0 : f32} : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @intra_value_gates_extra(%q: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{'value_gates' is not valid with an 'extra' pair}}
  %0 = la.chunk_intra %q, %q, %v value_gates(%v : tensor<1x2x16x2x8xf32>) extra(%q, %v : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32>) {scale = 1.0 : f32} : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @scan_value_gates_correction(%k: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x2x8xf32>) {
  // expected-error @+1 {{'value_gates' is not valid with a 'correction' or an 'extra' pair}}
  %0:3 = la.chunk_state_scan %k, %v value_gates(%v : tensor<1x2x16x2x8xf32>) correction(%k : tensor<1x2x16x2x4xf32>) : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @inter_value_gates_shape(%q: tensor<1x2x16x2x4xf32>, %s: tensor<1x2x2x4x8xf32>, %i: tensor<1x2x16x2x8xf32>, %c: tensor<1x2x16x2x4xf32>) {
  // expected-error @+1 {{expects 'value_gates' of shape [1,2,16,2,8] [B,NC,C,HV,V], got [1,2,16,2,4]}}
  %0 = la.chunk_inter %q, %s, %i value_gates(%c : tensor<1x2x16x2x4xf32>) {scale = 1.0 : f32} : tensor<1x2x16x2x4xf32>, tensor<1x2x2x4x8xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x8xf32>
  return
}

// -----

func.func @inter_transposed_states_shape(%q: tensor<1x2x16x2x4xf32>, %s: tensor<1x2x2x4x8xf32>, %intra: tensor<1x2x16x2x8xf32>) -> tensor<1x2x16x2x8xf32> {
  // expected-error @+1 {{expects 'states' of shape [1,2,2,8,4] [B,NC,HS,O,K] (transposed; HS dividing the output's heads), got [1,2,2,4,8]}}
  %0 = la.chunk_inter %q, %s, %intra {scale = 1.0 : f32, transposed_states} : tensor<1x2x16x2x4xf32>, tensor<1x2x2x4x8xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x8xf32>
  return %0 : tensor<1x2x16x2x8xf32>
}
