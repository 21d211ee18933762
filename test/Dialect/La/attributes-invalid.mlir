// RUN: la-opt %s -split-input-file -verify-diagnostics

// The discardable attributes that la's passes leave for one another are
// declared by the dialect and verified where they are placed.

func.func @lower_triangular_not_linalg(%a: f32, %b: f32) -> f32 {
  // expected-error @+1 {{'la.lower_triangular' is for structured (linalg) ops only}}
  %c = arith.addf %a, %b {la.lower_triangular = array<i64: 0, 1>} : f32
  return %c : f32
}

// -----

func.func @lower_triangular_size(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>,
                                 %c: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'la.lower_triangular' must be [row, column] (array<i64> of 2)}}
  %0 = linalg.matmul {la.lower_triangular = array<i64: 0, 1, 2>}
         ins(%a, %b : tensor<4x4xf32>, tensor<4x4xf32>)
         outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @lower_triangular_loop(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>,
                                 %c: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'la.lower_triangular' names loop 3, but the op has 3 loops}}
  %0 = linalg.matmul {la.lower_triangular = array<i64: 0, 3>}
         ins(%a, %b : tensor<4x4xf32>, tensor<4x4xf32>)
         outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @upper_triangular_size(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>,
                                 %c: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'la.upper_triangular' must be [row, column] (array<i64> of 2)}}
  %0 = linalg.matmul {la.upper_triangular = array<i64: 0>}
         ins(%a, %b : tensor<4x4xf32>, tensor<4x4xf32>)
         outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @lower_triangular_twice(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>,
                                  %c: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'la.lower_triangular' names loop 1 twice}}
  %0 = linalg.matmul {la.lower_triangular = array<i64: 1, 1>}
         ins(%a, %b : tensor<4x4xf32>, tensor<4x4xf32>)
         outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @block_causal_size(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>,
                             %c: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'la.block_causal' has block size 0, expected at least 1}}
  %0 = linalg.matmul {la.block_causal = array<i64: 0, 1, 0>}
         ins(%a, %b : tensor<4x4xf32>, tensor<4x4xf32>)
         outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @block_causal_not_array(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>,
                                  %c: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'la.block_causal' must be [block, column, size] (array<i64> of 3)}}
  %0 = linalg.matmul {la.block_causal = 3 : i64}
         ins(%a, %b : tensor<4x4xf32>, tensor<4x4xf32>)
         outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @chunk_loop_not_for(%a: index, %b: index) -> index {
  // expected-error @+1 {{'la.fused_chunk_loop' is for scf.for loops only}}
  %c = arith.addi %a, %b {la.fused_chunk_loop} : index
  return %c : index
}

// -----

func.func @distributed_not_unit(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{'la.distributed' must be a unit attribute}}
  scf.for %i = %c0 to %n step %c1 {
  } {la.distributed = 1 : i64}
  return
}

// -----

func.func @lane_not_integer(%a: f32, %b: f32) -> f32 {
  // expected-error @+1 {{'la.lane' is for ops with one integer result only}}
  %c = arith.addf %a, %b {la.lane} : f32
  return %c : f32
}

// -----

func.func @unknown(%a: f32, %b: f32) -> f32 {
  // expected-error @+1 {{unknown la attribute 'la.lower_triangle'}}
  %c = arith.addf %a, %b {la.lower_triangle = array<i64: 0, 1>} : f32
  return %c : f32
}
