// The gradients of GLA and Gated DeltaNet at K = V = 128, T = 256 (the
// benchmark's head size): la-expand-recurrence-grad's adjoint recurrences
// and the kernels between them, as la-lower-to-nvvm builds them.
func.func @gla_grad(
    %q: tensor<1x256x2x128xf32>, %k: tensor<1x256x2x128xf32>,
    %v: tensor<1x256x2x128xf32>, %g: tensor<1x256x2x128xf32>,
    %s0: tensor<1x2x128x128xf32>, %do: tensor<1x256x2x128xf32>,
    %dsf: tensor<1x2x128x128xf32>)
    -> (tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32>,
        tensor<1x256x2x128xf32>, tensor<1x2x128x128xf32>,
        tensor<1x256x2x128xf32>) {
  %r:5 = la.recurrence_grad decay(channel) low_rank(none) %q, %k, %v
      g(%g : tensor<1x256x2x128xf32>)
      initial_state(%s0 : tensor<1x2x128x128xf32>)
      d_o(%do : tensor<1x256x2x128xf32>)
      d_final_state(%dsf : tensor<1x2x128x128xf32>)
      {scale = 0.0883883461 : f32, checkpoint = 32 : i64}
      : tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32>
      -> tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32>,
         tensor<1x256x2x128xf32>, tensor<1x2x128x128xf32>,
         tensor<1x256x2x128xf32>
  return %r#0, %r#1, %r#2, %r#3, %r#4
      : tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32>,
        tensor<1x256x2x128xf32>, tensor<1x2x128x128xf32>,
        tensor<1x256x2x128xf32>
}

func.func @gated_deltanet_grad(
    %q: tensor<1x256x2x128xf32>, %k: tensor<1x256x2x128xf32>,
    %v: tensor<1x256x2x128xf32>, %g: tensor<1x256x2xf32>,
    %beta: tensor<1x256x2xf32>, %s0: tensor<1x2x128x128xf32>,
    %do: tensor<1x256x2x128xf32>, %dsf: tensor<1x2x128x128xf32>)
    -> (tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32>,
        tensor<1x256x2x128xf32>, tensor<1x2x128x128xf32>,
        tensor<1x256x2xf32>, tensor<1x256x2xf32>) {
  %r:6 = la.recurrence_grad decay(scalar) low_rank(delta) %q, %k, %v
      g(%g : tensor<1x256x2xf32>) beta(%beta : tensor<1x256x2xf32>)
      initial_state(%s0 : tensor<1x2x128x128xf32>)
      d_o(%do : tensor<1x256x2x128xf32>)
      d_final_state(%dsf : tensor<1x2x128x128xf32>)
      {scale = 0.0883883461 : f32, checkpoint = 32 : i64}
      : tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32>
      -> tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32>,
         tensor<1x256x2x128xf32>, tensor<1x2x128x128xf32>,
         tensor<1x256x2xf32>, tensor<1x256x2xf32>
  return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5
      : tensor<1x256x2x128xf32>, tensor<1x256x2x128xf32>,
        tensor<1x256x2x128xf32>, tensor<1x2x128x128xf32>,
        tensor<1x256x2xf32>, tensor<1x256x2xf32>
}
