// RWKV-7 (la.attention rwkv7: a channel gate and explicit low-rank a, b) at
// K = V = 128, T = 256: the general low-rank form's kernel (ptxas.test).
func.func @rwkv7(
    %q: tensor<1x256x2x128xf32>,
    %k: tensor<1x256x2x128xf32>,
    %v: tensor<1x256x2x128xf32>,
    %g: tensor<1x256x2x128xf32>,
    %a: tensor<1x256x2x128xf32>,
    %b: tensor<1x256x2x128xf32>)
    -> tensor<1x256x2x128xf32> {
  %o = la.attention rwkv7 %q, %k, %v
      g(%g : tensor<1x256x2x128xf32>) a(%a : tensor<1x256x2x128xf32>)
      b(%b : tensor<1x256x2x128xf32>) {scale = 1.0 : f32}
      : tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32> -> tensor<1x256x2x128xf32>
  return %o : tensor<1x256x2x128xf32>
}
