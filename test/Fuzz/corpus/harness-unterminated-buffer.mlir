

func.func @inter_intra(%q: tensor<1x2x16x2x4xf32>, %s: tensor<1x2x2x4x8xf32>, %intra: tensor<1x2x16x2xf32>) {
  // expected-er

func.funro