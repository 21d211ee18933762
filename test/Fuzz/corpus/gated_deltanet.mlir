// Gated DeltaNet with in-kernel L2 normalisation of q and k, grouped value
// heads (2 key heads, 4 value heads) and a carried f32 state.
func.func @gated_deltanet(%q: tensor<1x256x2x64xf32>, %k: tensor<1x256x2x64xf32>,
                          %v: tensor<1x256x4x64xf32>, %g: tensor<1x256x2xf32>,
                          %beta: tensor<1x256x2xf32>, %s0: tensor<1x4x64x64xf32>)
    -> (tensor<1x256x4x64xf32>, tensor<1x4x64x64xf32>) {
  %o, %s = la.attention gated_deltanet %q, %k, %v
      g(%g : tensor<1x256x2xf32>) beta(%beta : tensor<1x256x2xf32>)
      initial_state(%s0 : tensor<1x4x64x64xf32>) {qk_l2norm}
      : tensor<1x256x2x64xf32>, tensor<1x256x2x64xf32>, tensor<1x256x4x64xf32>
      -> tensor<1x256x4x64xf32>, tensor<1x4x64x64xf32>
  return %o, %s : tensor<1x256x4x64xf32>, tensor<1x4x64x64xf32>
}
