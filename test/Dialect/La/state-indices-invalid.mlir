// RUN: la-opt %s -split-input-file -verify-diagnostics

func.func @indices_per_batch(%q: tensor<2x16x2x4xf32>, %v: tensor<2x16x2x8xf32>, %idx: tensor<3xi32>, %pool: tensor<5x2x4x8xf32>) {
  // expected-error @+1 {{expects 'state_indices' to hold one index per sequence (B = 2), got 3}}
  %o, %s = la.attention linear %q, %q, %v initial_state(%pool : tensor<5x2x4x8xf32>) state_indices(%idx : tensor<3xi32>) : tensor<2x16x2x4xf32>, tensor<2x16x2x4xf32>, tensor<2x16x2x8xf32> -> tensor<2x16x2x8xf32>, tensor<5x2x4x8xf32>
  return
}

// -----

func.func @indices_need_pool(%q: tensor<2x16x2x4xf32>, %v: tensor<2x16x2x8xf32>, %idx: tensor<2xi32>) {
  // expected-error @+1 {{expects 'initial_state' (the pool that 'state_indices' index)}}
  %o = la.attention linear %q, %q, %v state_indices(%idx : tensor<2xi32>) : tensor<2x16x2x4xf32>, tensor<2x16x2x4xf32>, tensor<2x16x2x8xf32> -> tensor<2x16x2x8xf32>
  return
}

// -----

func.func @final_state_is_pool(%q: tensor<2x16x2x4xf32>, %v: tensor<2x16x2x8xf32>, %idx: tensor<2xi32>, %pool: tensor<5x2x4x8xf32>) {
  // expected-error @+1 {{expects 'final_state' of shape [5,2,4,8] [P,HV,K,V] (a pool of P states), got [2,2,4,8]}}
  %o, %s = la.attention linear %q, %q, %v initial_state(%pool : tensor<5x2x4x8xf32>) state_indices(%idx : tensor<2xi32>) : tensor<2x16x2x4xf32>, tensor<2x16x2x4xf32>, tensor<2x16x2x8xf32> -> tensor<2x16x2x8xf32>, tensor<2x2x4x8xf32>
  return
}

// -----

func.func @index_outside_pool(%q: tensor<2x16x2x4xf32>, %v: tensor<2x16x2x8xf32>, %pool: tensor<5x2x4x8xf32>) {
  %idx = arith.constant dense<[1, 5]> : tensor<2xi32>
  // expected-error @+1 {{expects 'state_indices' in [0, 5) (the pool's rows), but index 1 is 5}}
  %o, %s = la.attention linear %q, %q, %v initial_state(%pool : tensor<5x2x4x8xf32>) state_indices(%idx : tensor<2xi32>) : tensor<2x16x2x4xf32>, tensor<2x16x2x4xf32>, tensor<2x16x2x8xf32> -> tensor<2x16x2x8xf32>, tensor<5x2x4x8xf32>
  return
}

// -----

func.func @negative_index(%q: tensor<2x16x2x4xf32>, %v: tensor<2x16x2x8xf32>, %pool: tensor<?x2x4x8xf32>) {
  %idx = arith.constant dense<[-1, 0]> : tensor<2xi32>
  // expected-error @+1 {{expects 'state_indices' in [0, ?) (the pool's rows), but index 0 is -1}}
  %o, %s = la.attention linear %q, %q, %v initial_state(%pool : tensor<?x2x4x8xf32>) state_indices(%idx : tensor<2xi32>) : tensor<2x16x2x4xf32>, tensor<2x16x2x4xf32>, tensor<2x16x2x8xf32> -> tensor<2x16x2x8xf32>, tensor<?x2x4x8xf32>
  return
}

// -----

func.func @duplicate_index(%q: tensor<2x16x2x4xf32>, %v: tensor<2x16x2x8xf32>, %pool: tensor<5x2x4x8xf32>) {
  %idx = arith.constant dense<[3, 3]> : tensor<2xi32>
  // expected-error @+1 {{expects distinct 'state_indices', but row 3 appears twice}}
  %o, %s = la.attention linear %q, %q, %v initial_state(%pool : tensor<5x2x4x8xf32>) state_indices(%idx : tensor<2xi32>) : tensor<2x16x2x4xf32>, tensor<2x16x2x4xf32>, tensor<2x16x2x8xf32> -> tensor<2x16x2x8xf32>, tensor<5x2x4x8xf32>
  return
}

// -----

func.func @recurrence_indices_per_sequence(%q: tensor<2x16x2x4xf32>, %v: tensor<2x16x2x8xf32>, %idx: tensor<4xi32>, %pool: tensor<5x2x4x8xf32>) {
  %oi = tensor.empty() : tensor<2x16x2x8xf32>
  // expected-error @+1 {{expects 'state_indices' to hold one index per sequence (B = 2), got 4}}
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %q, %v state_indices(%idx : tensor<4xi32>) outs(%oi, %pool : tensor<2x16x2x8xf32>, tensor<5x2x4x8xf32>) {scale = 0.5 : f32} : tensor<2x16x2x4xf32>, tensor<2x16x2x4xf32>, tensor<2x16x2x8xf32> -> tensor<2x16x2x8xf32>, tensor<5x2x4x8xf32>
  return
}

// -----

func.func @index_type(%q: tensor<2x16x2x4xf32>, %v: tensor<2x16x2x8xf32>, %idx: tensor<2xi64>, %pool: tensor<5x2x4x8xf32>) {
  // expected-error @+1 {{operand #4 must be 1D tensor of 32-bit signless integer values}}
  %o, %s = la.attention linear %q, %q, %v initial_state(%pool : tensor<5x2x4x8xf32>) state_indices(%idx : tensor<2xi64>) : tensor<2x16x2x4xf32>, tensor<2x16x2x4xf32>, tensor<2x16x2x8xf32> -> tensor<2x16x2x8xf32>, tensor<5x2x4x8xf32>
  return
}
