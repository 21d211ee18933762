// GLA: channel-wise data-dependent decay, two heads, K = 64, V = 128.
func.func @gla(%q: tensor<2x512x2x64xf32>, %k: tensor<2x512x2x64xf32>,
               %v: tensor<2x512x2x128xf32>, %g: tensor<2x512x2x64xf32>)
    -> tensor<2x512x2x128xf32> {
  %o = la.attention gla %q, %k, %v g(%g : tensor<2x512x2x64xf32>)
      : tensor<2x512x2x64xf32>, tensor<2x512x2x64xf32>, tensor<2x512x2x128xf32>
      -> tensor<2x512x2x128xf32>
  return %o : tensor<2x512x2x128xf32>
}
