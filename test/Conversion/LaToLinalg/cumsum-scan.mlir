// RUN: la-opt %s -split-input-file -convert-la-to-linalg=cumsum-scan | FileCheck %s

// With cumsum-scan the inclusive sums are a running row: g[0] (in f32) is
// row 0 of the result, then a loop over rows 1..C-1 adds g[i] to the
// running row in place and inserts it as row i.
// CHECK-LABEL: func.func @cumsum
// CHECK-SAME: (%[[G:.*]]: tensor<1x2x16x2xbf16>)
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK: %[[G0:.*]] = tensor.extract_slice %[[G]][0, 0, %[[C0]], 0] [1, 2, 1, 2]
// CHECK: %[[ROW0:.*]] = linalg.generic {{.*}} ins(%[[G0]] : tensor<1x2x1x2xbf16>) outs(%{{.*}} : tensor<1x2x1x2xf32>)
// CHECK: arith.extf
// CHECK: %[[FIRST:.*]] = tensor.insert_slice %[[ROW0]] into %{{.*}}[0, 0, %[[C0]], 0] [1, 2, 1, 2]
// CHECK: %[[SUMS:.*]]:2 = scf.for %[[I:.*]] = %[[C1]] to %[[C16]] step %[[C1]] iter_args(%[[ACC:.*]] = %[[FIRST]], %[[RUNNING:.*]] = %[[ROW0]])
// CHECK: %[[GI:.*]] = tensor.extract_slice %[[G]][0, 0, %[[I]], 0] [1, 2, 1, 2]
// CHECK: %[[NEXT:.*]] = linalg.generic {{.*}} ins(%[[GI]] : tensor<1x2x1x2xbf16>) outs(%[[RUNNING]] : tensor<1x2x1x2xf32>)
// CHECK-NEXT: ^bb0(%[[X:.*]]: bf16, %[[R:.*]]: f32):
// CHECK-NEXT: %[[EXT:.*]] = arith.extf %[[X]]
// CHECK-NEXT: %[[FLOOR:.*]] = arith.constant -1.040000e+02 : f32
// CHECK-NEXT: %[[CLAMPED:.*]] = arith.maximumf %[[EXT]], %[[FLOOR]] : f32
// CHECK-NEXT: arith.addf %[[R]], %[[CLAMPED]] : f32
// CHECK: %[[WRITTEN:.*]] = tensor.insert_slice %[[NEXT]] into %[[ACC]][0, 0, %[[I]], 0] [1, 2, 1, 2]
// CHECK: scf.yield %[[WRITTEN]], %[[NEXT]]
// CHECK: return %[[SUMS]]#0
func.func @cumsum(%g: tensor<1x2x16x2xbf16>) -> tensor<1x2x16x2xf32> {
  %cum = la.chunk_cumsum %g : tensor<1x2x16x2xbf16> -> tensor<1x2x16x2xf32>
  return %cum : tensor<1x2x16x2xf32>
}

// -----

// The exclusive sums start from a zero row and add the previous row of g.
// CHECK-LABEL: func.func @exclusive
// CHECK-SAME: (%[[G:.*]]: tensor<1x1x8x1x4xf32>)
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK: %[[ZERO:.*]] = linalg.fill {{.*}} -> tensor<1x1x1x1x4xf32>
// CHECK: %[[FIRST:.*]] = tensor.insert_slice %[[ZERO]]
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %[[FIRST]], %[[RUNNING:.*]] = %[[ZERO]])
// CHECK: %[[PREV:.*]] = arith.subi %[[I]], %[[C1]]
// CHECK: %[[PREV_G:.*]] = tensor.extract_slice %[[G]][0, 0, %[[PREV]], 0, 0] [1, 1, 1, 1, 4]
// CHECK: %[[NEXT:.*]] = linalg.generic {{.*}} ins(%[[PREV_G]] : tensor<1x1x1x1x4xf32>) outs(%[[RUNNING]] : tensor<1x1x1x1x4xf32>)
// CHECK: tensor.insert_slice %[[NEXT]] into %[[ACC]][0, 0, %[[I]], 0, 0] [1, 1, 1, 1, 4]
func.func @exclusive(%g: tensor<1x1x8x1x4xf32>) -> tensor<1x1x8x1x4xf32> {
  %cum = la.chunk_cumsum %g {exclusive} : tensor<1x1x8x1x4xf32> -> tensor<1x1x8x1x4xf32>
  return %cum : tensor<1x1x8x1x4xf32>
}
