// RUN: la-opt %s -split-input-file -la-lower-to-gpu="chunk-size=16 schedule=chunk-parallel" -verify-diagnostics

// Checkpoints of packed sequences under the chunk-parallel schedule: each
// sequence's last, partial segment has a run-time length, which that
// schedule's ops do not take (the fused schedule runs it:
// lower-to-gpu.mlir, @checkpoints).
func.func @packed_checkpoints(%q: tensor<1x64x1x16xf32>, %v: tensor<1x64x1x16xf32>,
                              %g: tensor<1x64x1xf32>, %cu: tensor<3xi32>)
    -> tensor<1x4x1x16x16xf32> {
  // expected-error @below {{needs static shapes for the chunk-parallel GPU schedule}}
  %o, %s, %c = la.attention mamba2 %q, %q, %v g(%g : tensor<1x64x1xf32>)
      cu_seqlens(%cu : tensor<3xi32>) {checkpoint_every = 16}
      : tensor<1x64x1x16xf32>, tensor<1x64x1x16xf32>, tensor<1x64x1x16xf32>
      -> tensor<1x64x1x16xf32>, tensor<2x1x16x16xf32>, tensor<1x4x1x16x16xf32>
  return %c : tensor<1x4x1x16x16xf32>
}
