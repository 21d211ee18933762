// RUN: la-opt %s -split-input-file -la-lower-to-gpu="chunk-size=16" -verify-diagnostics

// Packed sequences (cu_seqlens) stay with la-chunk, whose loop over the
// sequences runs outside any task and allocates by their run-time lengths:
// no kernel form (reported where the attention op is, whose location the
// loop carries).
func.func @packed(%q: tensor<1x64x1x16xf32>, %k: tensor<1x64x1x16xf32>,
                  %v: tensor<1x64x1x16xf32>, %cu: tensor<3xi32>)
    -> tensor<1x64x1x16xf32> {
  // expected-error @below {{runs in a loop outside the attention's GPU tasks}}
  %o = la.attention linear %q, %k, %v cu_seqlens(%cu : tensor<3xi32>)
      : tensor<1x64x1x16xf32>, tensor<1x64x1x16xf32>, tensor<1x64x1x16xf32>
      -> tensor<1x64x1x16xf32>
  return %o : tensor<1x64x1x16xf32>
}
