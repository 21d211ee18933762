// la-lower-to-recurrence replaces linalg.softmax (a feature map's softmax
// over features, as Hedgehog's) by its upstream decomposition: a max
// reduction, exp(x - max), a sum reduction and the division, which the
// rest of the pipeline tiles and lowers like other producers (a whole
// linalg.softmax has no lowering to loops).
// RUN: la-opt %s -split-input-file --la-lower-to-recurrence | FileCheck %s

// CHECK-LABEL: func.func @features_of_linear_attention
// CHECK-SAME: (%[[Q:.*]]: tensor<1x8x2x4xf32>, %[[K:.*]]: tensor<1x8x2x4xf32>
// CHECK-NOT: linalg.softmax
// CHECK: %[[MAX:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]{{.*}} ins(%[[Q]] : tensor<1x8x2x4xf32>) outs(%{{.*}} : tensor<1x8x2xf32>)
// CHECK: arith.maxnumf
// CHECK: %[[EXP:.*]] = linalg.generic {{.*}} ins(%[[Q]], %[[MAX]] : tensor<1x8x2x4xf32>, tensor<1x8x2xf32>)
// CHECK: math.exp
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]{{.*}} ins(%[[EXP]] : tensor<1x8x2x4xf32>)
// CHECK: arith.addf
// CHECK: %[[PHI:.*]] = linalg.generic {{.*}} ins(%[[EXP]], %[[SUM]] : tensor<1x8x2x4xf32>, tensor<1x8x2xf32>)
// CHECK: arith.divf
// CHECK: la.recurrence {{.*}}%[[PHI]], %[[K]]
func.func @features_of_linear_attention(%q: tensor<1x8x2x4xf32>, %k: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) -> tensor<1x8x2x6xf32> {
  %e = tensor.empty() : tensor<1x8x2x4xf32>
  %phi = linalg.softmax dimension(3) ins(%q : tensor<1x8x2x4xf32>) outs(%e : tensor<1x8x2x4xf32>) -> tensor<1x8x2x4xf32>
  %o = la.attention linear %phi, %k, %v : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return %o : tensor<1x8x2x6xf32>
}

// -----

// Dynamic B and T, as the Python package's kernels have them.
// CHECK-LABEL: func.func @dynamic
// CHECK-NOT: linalg.softmax
// CHECK: math.exp
// CHECK: arith.divf
// CHECK: la.recurrence decay(none) low_rank(none)
func.func @dynamic(%q: tensor<?x?x2x4xf32>, %k: tensor<?x?x2x4xf32>, %v: tensor<?x?x2x6xf32>, %fk: tensor<?x?x2x3xf32>, %b: index, %t: index) -> tensor<?x?x2x6xf32> {
  %e = tensor.empty(%b, %t) : tensor<?x?x2x3xf32>
  %fq0 = tensor.extract_slice %q[0, 0, 0, 0] [%b, %t, 2, 3] [1, 1, 1, 1] : tensor<?x?x2x4xf32> to tensor<?x?x2x3xf32>
  %fq = linalg.softmax dimension(3) ins(%fq0 : tensor<?x?x2x3xf32>) outs(%e : tensor<?x?x2x3xf32>) -> tensor<?x?x2x3xf32>
  %o = la.sliding_window_hybrid %q, %k, %v features(%fq : tensor<?x?x2x3xf32>, %fk : tensor<?x?x2x3xf32>) {window = 4 : i64}
    : tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32>, tensor<?x?x2x6xf32> -> tensor<?x?x2x6xf32>
  return %o : tensor<?x?x2x6xf32>
}
