// RUN: la-opt %s -split-input-file -verify-diagnostics

func.func @window_zero(%q: tensor<1x16x2x8xf32>, %v: tensor<1x16x2x4xf32>, %f: tensor<1x16x2x3xf32>) {
  // expected-error @+1 {{expects 'window' in [1, 1048576] tokens, got 0}}
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) {window = 0 : i64} : tensor<1x16x2x8xf32>, tensor<1x16x2x8xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @window_huge(%q: tensor<1x16x2x8xf32>, %v: tensor<1x16x2x4xf32>, %f: tensor<1x16x2x3xf32>) {
  // expected-error @+1 {{expects 'window' in [1, 1048576] tokens, got 1048577}}
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) {window = 1048577 : i64} : tensor<1x16x2x8xf32>, tensor<1x16x2x8xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @q_rank(%q: tensor<16x2x8xf32>, %v: tensor<1x16x2x4xf32>, %f: tensor<1x16x2x3xf32>) {
  // expected-error @+1 {{expects 'q' of rank 4 [B,T,H,K], got rank 3}}
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) {window = 4 : i64} : tensor<16x2x8xf32>, tensor<16x2x8xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @k_shape(%q: tensor<1x16x2x8xf32>, %k: tensor<1x16x2x4xf32>, %v: tensor<1x16x2x4xf32>, %f: tensor<1x16x2x3xf32>) {
  // expected-error @+1 {{expects 'k' of shape [1,16,2,8] [B,S,H,K] (S >= T tokens), got [1,16,2,4]}}
  %o = la.sliding_window_hybrid %q, %k, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) {window = 4 : i64} : tensor<1x16x2x8xf32>, tensor<1x16x2x4xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @v_tokens(%q: tensor<1x16x2x8xf32>, %v: tensor<1x15x2x4xf32>, %f: tensor<1x16x2x3xf32>, %o0: tensor<1x16x2x4xf32>) {
  // expected-error @+1 {{expects 'v' of shape [1,16,2,4] [B,S,H,V] like 'k', got [1,15,2,4]}}
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) {window = 4 : i64} : tensor<1x16x2x8xf32>, tensor<1x16x2x8xf32>, tensor<1x15x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @feature_heads(%q: tensor<1x16x2x8xf32>, %v: tensor<1x16x2x4xf32>, %fq: tensor<1x16x2x3xf32>, %fk: tensor<1x16x1x3xf32>) {
  // expected-error @+1 {{expects 'feature_k' of shape [1,16,2,3] [B,S,H,F] like 'k' and 'feature_q', got [1,16,1,3]}}
  %o = la.sliding_window_hybrid %q, %q, %v features(%fq : tensor<1x16x2x3xf32>, %fk : tensor<1x16x1x3xf32>) {window = 4 : i64} : tensor<1x16x2x8xf32>, tensor<1x16x2x8xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @o_shape(%q: tensor<1x16x2x8xf32>, %v: tensor<1x16x2x4xf32>, %f: tensor<1x16x2x3xf32>) {
  // expected-error @+1 {{expects 'o' of shape [1,16,2,4] [B,T,H,V] like 'q' and 'v', got [1,16,2,8]}}
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) {window = 4 : i64} : tensor<1x16x2x8xf32>, tensor<1x16x2x8xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x8xf32>
  return
}

// -----

func.func @qk_types(%q: tensor<1x16x2x8xf32>, %k: tensor<1x16x2x8xbf16>, %v: tensor<1x16x2x4xf32>, %f: tensor<1x16x2x3xf32>) {
  // expected-error @+1 {{expects 'q' and 'k' of one element type, got 'f32' and 'bf16'}}
  %o = la.sliding_window_hybrid %q, %k, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) {window = 4 : i64} : tensor<1x16x2x8xf32>, tensor<1x16x2x8xbf16>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @feature_types(%q: tensor<1x16x2x8xf32>, %v: tensor<1x16x2x4xf32>, %fq: tensor<1x16x2x3xf32>, %fk: tensor<1x16x2x3xf16>) {
  // expected-error @+1 {{expects 'feature_q' and 'feature_k' of one element type, got 'f32' and 'f16'}}
  %o = la.sliding_window_hybrid %q, %q, %v features(%fq : tensor<1x16x2x3xf32>, %fk : tensor<1x16x2x3xf16>) {window = 4 : i64} : tensor<1x16x2x8xf32>, tensor<1x16x2x8xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @o_type(%q: tensor<1x16x2x8xf32>, %v: tensor<1x16x2x4xbf16>, %f: tensor<1x16x2x3xf32>) {
  // expected-error @+1 {{expects 'o' to have the element type of 'v' ('bf16'), got 'f32'}}
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) {window = 4 : i64} : tensor<1x16x2x8xf32>, tensor<1x16x2x8xf32>, tensor<1x16x2x4xbf16> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @scale_not_finite(%q: tensor<1x16x2x8xf32>, %v: tensor<1x16x2x4xf32>, %f: tensor<1x16x2x3xf32>) {
  // expected-error @+1 {{expects a finite 'scale'}}
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) {window = 4 : i64, scale = 0x7F800000 : f32} : tensor<1x16x2x8xf32>, tensor<1x16x2x8xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @default_scale_dynamic_k(%q: tensor<1x16x2x?xf32>, %v: tensor<1x16x2x4xf32>, %f: tensor<1x16x2x3xf32>) {
  // expected-error @+1 {{needs a static K to default 'scale' to K^-0.5; set 'scale'}}
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) {window = 4 : i64} : tensor<1x16x2x?xf32>, tensor<1x16x2x?xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @missing_window(%q: tensor<1x16x2x8xf32>, %v: tensor<1x16x2x4xf32>, %f: tensor<1x16x2x3xf32>) {
  // expected-error @+1 {{requires attribute 'window'}}
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) : tensor<1x16x2x8xf32>, tensor<1x16x2x8xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @packed_batch(%q: tensor<2x16x2x8xf32>, %v: tensor<2x16x2x4xf32>, %f: tensor<2x16x2x3xf32>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{expects B = 1 with 'cu_seqlens' (packed sequences), got B = 2}}
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<2x16x2x3xf32>, %f : tensor<2x16x2x3xf32>) cu_seqlens(%cu : tensor<3xi32>) {window = 4 : i64} : tensor<2x16x2x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x2x4xf32> -> tensor<2x16x2x4xf32>
  return
}

// -----

func.func @packed_offsets(%q: tensor<1x16x2x8xf32>, %v: tensor<1x16x2x4xf32>, %f: tensor<1x16x2x3xf32>) {
  %cu = arith.constant dense<[0, 9, 7, 16]> : tensor<4xi32>
  // expected-error @+1 {{expects 'cu_seqlens' to go non-decreasing from 0 to T = 16, but offset 2 is 7}}
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) cu_seqlens(%cu : tensor<4xi32>) {window = 4 : i64} : tensor<1x16x2x8xf32>, tensor<1x16x2x8xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @packed_count(%q: tensor<1x16x2x8xf32>, %v: tensor<1x16x2x4xf32>, %f: tensor<1x16x2x3xf32>, %cu: tensor<1xi32>) {
  // expected-error @+1 {{expects 'cu_seqlens' to hold N+1 >= 2 offsets, got 1}}
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) cu_seqlens(%cu : tensor<1xi32>) {window = 4 : i64} : tensor<1x16x2x8xf32>, tensor<1x16x2x8xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @fewer_keys_than_queries(%q: tensor<1x16x2x8xf32>, %k: tensor<1x8x2x8xf32>, %v: tensor<1x8x2x4xf32>, %fq: tensor<1x16x2x3xf32>, %fk: tensor<1x8x2x3xf32>) {
  // expected-error @+1 {{expects at least as many key tokens as queries (S >= T), got S = 8 and T = 16}}
  %o = la.sliding_window_hybrid %q, %k, %v features(%fq : tensor<1x16x2x3xf32>, %fk : tensor<1x8x2x3xf32>) {window = 4 : i64} : tensor<1x16x2x8xf32>, tensor<1x8x2x8xf32>, tensor<1x8x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @initial_state_shape(%q: tensor<1x16x2x8xf32>, %v: tensor<1x16x2x4xf32>, %f: tensor<1x16x2x3xf32>, %s0: tensor<1x2x3x4xf32>) {
  // expected-error @+1 {{expects 'initial_state' of shape [1,2,3,5] [B,H,F,V+1] (the far part's state and normaliser), got [1,2,3,4]}}
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) initial_state(%s0 : tensor<1x2x3x4xf32>) {window = 4 : i64} : tensor<1x16x2x8xf32>, tensor<1x16x2x8xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @final_state_shape(%q: tensor<1x16x2x8xf32>, %v: tensor<1x16x2x4xf32>, %f: tensor<1x16x2x3xf32>) {
  // expected-error @+1 {{expects 'final_state' of shape [1,2,3,5] [B,H,F,V+1] (the far part's state and normaliser), got [1,3,2,5]}}
  %o, %s = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) {window = 4 : i64} : tensor<1x16x2x8xf32>, tensor<1x16x2x8xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>, tensor<1x3x2x5xf32>
  return
}

// -----

func.func @initial_state_type(%q: tensor<1x16x2x8xf32>, %v: tensor<1x16x2x4xf32>, %f: tensor<1x16x2x3xf32>, %s0: tensor<1x2x3x5xbf16>) {
  // expected-error @+1 {{operand #5 must be ranked tensor of 32-bit float values}}
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) initial_state(%s0 : tensor<1x2x3x5xbf16>) {window = 4 : i64} : tensor<1x16x2x8xf32>, tensor<1x16x2x8xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @packed_with_state(%q: tensor<1x16x2x8xf32>, %v: tensor<1x16x2x4xf32>, %f: tensor<1x16x2x3xf32>, %cu: tensor<3xi32>, %s0: tensor<2x2x3x5xf32>) {
  // expected-error @+1 {{with 'cu_seqlens' takes no 'initial_state' and has no 'final_state' (packed sequences start from zero)}}
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) cu_seqlens(%cu : tensor<3xi32>) initial_state(%s0 : tensor<2x2x3x5xf32>) {window = 4 : i64} : tensor<1x16x2x8xf32>, tensor<1x16x2x8xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @packed_final_state(%q: tensor<1x16x2x8xf32>, %v: tensor<1x16x2x4xf32>, %f: tensor<1x16x2x3xf32>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{with 'cu_seqlens' takes no 'initial_state' and has no 'final_state' (packed sequences start from zero)}}
  %o, %s = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x16x2x3xf32>, %f : tensor<1x16x2x3xf32>) cu_seqlens(%cu : tensor<3xi32>) {window = 4 : i64} : tensor<1x16x2x8xf32>, tensor<1x16x2x8xf32>, tensor<1x16x2x4xf32> -> tensor<1x16x2x4xf32>, tensor<1x2x3x5xf32>
  return
}

// -----

func.func @packed_with_context(%q: tensor<1x16x2x8xf32>, %k: tensor<1x20x2x8xf32>, %v: tensor<1x20x2x4xf32>, %fq: tensor<1x16x2x3xf32>, %fk: tensor<1x20x2x3xf32>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{with 'cu_seqlens' expects the keys' tokens to be the queries' (S = T, no context), got 'k' of shape [1,20,2,8] and 'q' of shape [1,16,2,8]}}
  %o = la.sliding_window_hybrid %q, %k, %v features(%fq : tensor<1x16x2x3xf32>, %fk : tensor<1x20x2x3xf32>) cu_seqlens(%cu : tensor<3xi32>) {window = 4 : i64} : tensor<1x16x2x8xf32>, tensor<1x20x2x8xf32>, tensor<1x20x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}

// -----

func.func @packed_with_dynamic_context(%q: tensor<1x16x2x8xf32>, %k: tensor<1x?x2x8xf32>, %v: tensor<1x?x2x4xf32>, %fq: tensor<1x16x2x3xf32>, %fk: tensor<1x?x2x3xf32>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{with 'cu_seqlens' expects the keys' tokens to be the queries' (S = T, no context), got 'k' of shape [1,?,2,8] and 'q' of shape [1,16,2,8]}}
  %o = la.sliding_window_hybrid %q, %k, %v features(%fq : tensor<1x16x2x3xf32>, %fk : tensor<1x?x2x3xf32>) cu_seqlens(%cu : tensor<3xi32>) {window = 4 : i64} : tensor<1x16x2x8xf32>, tensor<1x?x2x8xf32>, tensor<1x?x2x4xf32> -> tensor<1x16x2x4xf32>
  return
}
