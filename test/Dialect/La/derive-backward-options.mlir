// RUN: not la-opt %s -la-derive-backward="checkpoint=0" 2>&1 | FileCheck %s

// CHECK: error: la-derive-backward: 'checkpoint' must be >= 1, got 0
func.func @linear(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>)
    -> tensor<1x8x2x6xf32> {
  %o = la.attention linear %q, %q, %v
      : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32>
      -> tensor<1x8x2x6xf32>
  return %o : tensor<1x8x2x6xf32>
}
