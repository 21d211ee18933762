// GLA, Gated DeltaNet and KDA at K = V = 128 (the benchmark's head size),
// T = 256: the kernels of la-lower-to-nvvm's defaults that ptxas.test checks.
func.func @gla(
    %q: tensor<1x256x2x128xf32>,
    %k: tensor<1x256x2x128xf32>,
    %v: tensor<1x256x2x128xf32>,
    %g: tensor<1x256x2x128xf32>)
    -> tensor<1x256x2x128xf32> {
  %o = la.attention gla %q, %k, %v
      g(%g : tensor<1x256x2x128xf32>)
      : tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32> -> tensor<1x256x2x128xf32>
  return %o : tensor<1x256x2x128xf32>
}

func.func @gated_deltanet(
    %q: tensor<1x256x2x128xf32>,
    %k: tensor<1x256x2x128xf32>,
    %v: tensor<1x256x2x128xf32>,
    %g: tensor<1x256x2xf32>,
    %beta: tensor<1x256x2xf32>)
    -> tensor<1x256x2x128xf32> {
  %o = la.attention gated_deltanet %q, %k, %v
      g(%g : tensor<1x256x2xf32>) beta(%beta : tensor<1x256x2xf32>)
      : tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32> -> tensor<1x256x2x128xf32>
  return %o : tensor<1x256x2x128xf32>
}

func.func @kda(
    %q: tensor<1x256x2x128xf32>,
    %k: tensor<1x256x2x128xf32>,
    %v: tensor<1x256x2x128xf32>,
    %g: tensor<1x256x2x128xf32>,
    %beta: tensor<1x256x2xf32>)
    -> tensor<1x256x2x128xf32> {
  %o = la.attention kda %q, %k, %v
      g(%g : tensor<1x256x2x128xf32>) beta(%beta : tensor<1x256x2xf32>)
      : tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32> -> tensor<1x256x2x128xf32>
  return %o : tensor<1x256x2x128xf32>
}

