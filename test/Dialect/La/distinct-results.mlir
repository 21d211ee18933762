// RUN: la-opt %s -split-input-file -la-distinct-results | FileCheck %s

// A tensor returned twice: the repeat becomes a copy, so that every result
// is a buffer of its own after bufferization.
// CHECK-LABEL: func.func @repeated
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x3xf32>, %[[Y:[^:]*]]: tensor<?xf32>)
// CHECK: %[[E:.*]] = tensor.empty() : tensor<2x3xf32>
// CHECK: %[[C:.*]] = linalg.copy ins(%[[X]] : tensor<2x3xf32>) outs(%[[E]] : tensor<2x3xf32>)
// CHECK: %[[D:.*]] = tensor.dim %[[Y]], %{{.*}} : tensor<?xf32>
// CHECK: %[[F:.*]] = tensor.empty(%[[D]]) : tensor<?xf32>
// CHECK: %[[CY:.*]] = linalg.copy ins(%[[Y]] : tensor<?xf32>) outs(%[[F]] : tensor<?xf32>)
// CHECK: return %[[X]], %[[C]], %[[Y]], %[[CY]]
func.func @repeated(%x: tensor<2x3xf32>, %y: tensor<?xf32>)
    -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<?xf32>, tensor<?xf32>) {
  return %x, %x, %y, %y : tensor<2x3xf32>, tensor<2x3xf32>, tensor<?xf32>, tensor<?xf32>
}

// -----

// Distinct results, and scalars, are left alone.
// CHECK-LABEL: func.func @distinct
// CHECK-NOT: linalg.copy
// CHECK: return %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} :
func.func @distinct(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>, %i: i32)
    -> (tensor<2x3xf32>, tensor<2x3xf32>, i32, i32) {
  return %x, %y, %i, %i : tensor<2x3xf32>, tensor<2x3xf32>, i32, i32
}
