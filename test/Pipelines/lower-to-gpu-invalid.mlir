// RUN: la-opt %s -split-input-file -la-lower-to-gpu="chunk-size=16" -verify-diagnostics
// RUN: la-opt %s -split-input-file -la-lower-to-gpu="chunk-size=16 schedule=chunk-parallel" -verify-diagnostics

// Checkpoints are a loop over segments outside the tasks that carries the
// state: no kernel form (reported where the op is, whose location the loop
// carries). Packed sequences are blocks of their own, forward and backward
// (lower-to-gpu.mlir, @packed and @packed_backward).
func.func @checkpoints(%q: tensor<1x64x1x16xf32>, %v: tensor<1x64x1x16xf32>,
                       %g: tensor<1x64x1xf32>)
    -> tensor<1x4x1x16x16xf32> {
  // expected-error @below {{checkpoints and token-by-token programs have no GPU form yet}}
  %o, %s, %c = la.attention mamba2 %q, %q, %v g(%g : tensor<1x64x1xf32>) {checkpoint_every = 16}
      : tensor<1x64x1x16xf32>, tensor<1x64x1x16xf32>, tensor<1x64x1x16xf32>
      -> tensor<1x64x1x16xf32>, tensor<1x1x16x16xf32>, tensor<1x4x1x16x16xf32>
  return %c : tensor<1x4x1x16x16xf32>
}
