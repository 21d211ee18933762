// RUN: la-opt %s -split-input-file -verify-diagnostics

func.func @attribute_without_result(%q: tensor<1x8x2x4xf32>) {
  // expected-error @+1 {{expects a 'checkpoints' result exactly when 'checkpoint_every' is given}}
  %o, %s = la.attention linear %q, %q, %q {checkpoint_every = 4} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<1x2x4x4xf32>
  return
}

// -----

func.func @result_without_attribute(%q: tensor<1x8x2x4xf32>) {
  // expected-error @+1 {{expects a 'checkpoints' result exactly when 'checkpoint_every' is given}}
  %o, %c = la.attention linear %q, %q, %q : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<1x2x2x4x4xf32>
  return
}

// -----

func.func @zero_interval(%q: tensor<1x8x2x4xf32>) {
  // expected-error @+1 {{expects 'checkpoint_every' >= 1, got 0}}
  %o, %c = la.attention linear %q, %q, %q {checkpoint_every = 0} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<1x0x2x4x4xf32>
  return
}

// -----

func.func @count_rounds_down(%q: tensor<1x8x2x4xf32>) {
  // expected-error @+1 {{expects 'checkpoints' of shape [1,2,2,4,4] [B,T/n,HV,K,V] (the state after every n tokens), got [1,3,2,4,4]}}
  %o, %c = la.attention linear %q, %q, %q {checkpoint_every = 3} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<1x3x2x4x4xf32>
  return
}

// -----

func.func @packed_rows(%q: tensor<1x8x2x4xf32>) {
  %cu = arith.constant dense<[0, 3, 8]> : tensor<3xi32>
  // expected-error @+1 {{expects 'checkpoints' of shape [1,1,2,4,4] [1,C,HV,K,V] (C = sum of len_i/n over the packed sequences), got [1,2,2,4,4]}}
  %o, %c = la.attention linear %q, %q, %q cu_seqlens(%cu : tensor<3xi32>) {checkpoint_every = 4} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<1x2x2x4x4xf32>
  return
}

// -----

func.func @packed_batch_of_one(%q: tensor<1x8x2x4xf32>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{expects 'checkpoints' of shape [1,?,2,4,4] [1,C,HV,K,V] (C = sum of len_i/n over the packed sequences), got [2,2,2,4,4]}}
  %o, %c = la.attention linear %q, %q, %q cu_seqlens(%cu : tensor<3xi32>) {checkpoint_every = 4} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<2x2x2x4x4xf32>
  return
}

// -----

func.func @pool(%q: tensor<1x8x2x4xf32>, %pool: tensor<3x2x4x4xf32>, %idx: tensor<1xi32>) {
  // expected-error @+1 {{'checkpoint_every' does not take 'state_indices'}}
  %o, %s, %c = la.attention linear %q, %q, %q initial_state(%pool : tensor<3x2x4x4xf32>) state_indices(%idx : tensor<1xi32>) {checkpoint_every = 4} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<3x2x4x4xf32>, tensor<1x2x2x4x4xf32>
  return
}

// -----

func.func @reverse(%q: tensor<1x8x2x4xf32>) {
  // expected-error @+1 {{'checkpoint_every' does not take 'reverse'}}
  %o, %c = la.attention linear %q, %q, %q {checkpoint_every = 4, reverse} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<1x2x2x4x4xf32>
  return
}

// -----

func.func @normalizer(%q: tensor<1x8x2x4xf32>) {
  // expected-error @+1 {{'checkpoint_every' does not take 'normalizer' (its sum is not part of the checkpointed state)}}
  %o, %c = la.attention linear %q, %q, %q {checkpoint_every = 4, normalizer} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<1x2x2x4x4xf32>
  return
}

// -----

func.func @query_groups(%q: tensor<1x8x4x4xf32>, %k: tensor<1x8x2x4xf32>) {
  // expected-error @+1 {{'checkpoint_every' does not take grouped query heads}}
  %o, %c = la.attention linear %q, %k, %k {checkpoint_every = 4} : tensor<1x8x4x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x4x4xf32>, tensor<1x2x2x4x4xf32>
  return
}

// -----

func.func @two_checkpoints(%q: tensor<1x8x2x4xf32>) {
  // expected-error @+1 {{expects at most one final state ([N,HV,K,V]) and one checkpoints result ([B,T/n,HV,K,V]) after o}}
  %o, %c, %d = la.attention linear %q, %q, %q {checkpoint_every = 4} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<1x2x2x4x4xf32>, tensor<1x2x2x4x4xf32>
  return
}

// -----

func.func @state_after_checkpoints(%q: tensor<1x8x2x4xf32>) {
  // expected-error @+1 {{expects the final state before the checkpoints}}
  %o, %c, %s = la.attention linear %q, %q, %q {checkpoint_every = 4} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<1x2x2x4x4xf32>, tensor<1x2x4x4xf32>
  return
}
