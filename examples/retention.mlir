// Retention (RetNet): a fixed per-head decay log(1 - 2^(-5-h)).
func.func @retention(%q: tensor<1x1024x4x64xbf16>, %k: tensor<1x1024x4x64xbf16>,
                     %v: tensor<1x1024x4x64xbf16>) -> tensor<1x1024x4x64xbf16> {
  %o = la.attention retention %q, %k, %v
      {log_decay = array<f32: -0.0317486983, -0.0157483570, -0.0078431770, -0.0039138993>}
      : tensor<1x1024x4x64xbf16>, tensor<1x1024x4x64xbf16>, tensor<1x1024x4x64xbf16>
      -> tensor<1x1024x4x64xbf16>
  return %o : tensor<1x1024x4x64xbf16>
}
