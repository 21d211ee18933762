// RUN: la-opt %s -split-input-file -la-lower-to-gpu="chunk-size=16" -verify-diagnostics

// T = 40 is not a multiple of the chunk size: the padding runs outside the
// tasks, which the GPU path reports (at the attention op, whose location
// the padding carries) instead of producing a wrong kernel.
func.func @padded(%q: tensor<1x40x1x16xf32>, %k: tensor<1x40x1x16xf32>,
                  %v: tensor<1x40x1x16xf32>) -> tensor<1x40x1x16xf32> {
  // expected-error @below {{runs outside the attention's GPU tasks}}
  %o = la.attention linear %q, %k, %v
      : tensor<1x40x1x16xf32>, tensor<1x40x1x16xf32>, tensor<1x40x1x16xf32>
      -> tensor<1x40x1x16xf32>
  return %o : tensor<1x40x1x16xf32>
}

// -----

// Packed sequences (cu_seqlens) stay with la-chunk, whose scan over chunks
// runs outside any task.
func.func @packed(%q: tensor<1x64x1x16xf32>, %k: tensor<1x64x1x16xf32>,
                  %v: tensor<1x64x1x16xf32>, %cu: tensor<3xi32>)
    -> tensor<1x64x1x16xf32> {
  // expected-error @below {{runs outside the attention's GPU tasks}}
  %o = la.attention linear %q, %k, %v cu_seqlens(%cu : tensor<3xi32>)
      : tensor<1x64x1x16xf32>, tensor<1x64x1x16xf32>, tensor<1x64x1x16xf32>
      -> tensor<1x64x1x16xf32>
  return %o : tensor<1x64x1x16xf32>
}
