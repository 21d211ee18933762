// RUN: la-opt %s -split-input-file -la-simplify-recurrence | FileCheck %s

// The normaliser becomes a value column of ones; the output divides the
// first V columns by the last one plus eps.
// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-DAG: #[[LAST:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
// CHECK-LABEL: func.func @normalizer
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: tensor<1x8x2x6xbf16>, %[[S0:[^:]*]]: tensor<1x2x4x6xf32>)
// CHECK-DAG: %[[EPS:.*]] = arith.constant 1.000000e-03 : f32
// CHECK-DAG: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK: %[[VF:.*]] = linalg.generic {{.*}} ins(%[[V]] : tensor<1x8x2x6xbf16>) outs(%{{.*}} : tensor<1x8x2x6xf32>)
// CHECK: %[[VA:.*]] = tensor.pad %[[VF]] low[0, 0, 0, 0] high[0, 0, 0, 1]
// CHECK: tensor.yield %[[ONE]] : f32
// CHECK: } : tensor<1x8x2x6xf32> to tensor<1x8x2x7xf32>
// CHECK: %[[SA:.*]] = tensor.pad %[[S0]] low[0, 0, 0, 0] high[0, 0, 0, 1]
// CHECK: tensor.yield %[[ZERO]] : f32
// CHECK: %[[O:.*]], %[[S:.*]] = la.recurrence decay(none) low_rank(none) %[[Q]], %[[K]], %[[VA]] outs(%{{.*}}, %[[SA]] : {{.*}}) {scale = 5.000000e-01 : f32} : {{.*}} -> tensor<1x8x2x7xf32>, tensor<1x2x4x7xf32>
// CHECK: %[[NUM:.*]] = tensor.extract_slice %[[O]][0, 0, 0, 0] [1, 8, 2, 6] [1, 1, 1, 1]
// CHECK: %[[DEN:.*]] = tensor.extract_slice %[[O]][0, 0, 0, 6] [1, 8, 2, 1] [1, 1, 1, 1]
// CHECK: %[[OUT:.*]] = linalg.generic {indexing_maps = [#[[ID]], #[[LAST]], #[[ID]]], {{.*}}} ins(%[[NUM]], %[[DEN]] : tensor<1x8x2x6xf32>, tensor<1x8x2x1xf32>) outs(%{{.*}} : tensor<1x8x2x6xbf16>)
// CHECK: %[[SHIFTED:.*]] = arith.addf %{{.*}}, %[[EPS]] : f32
// CHECK: %[[QUOT:.*]] = arith.divf %{{.*}}, %[[SHIFTED]] : f32
// CHECK: arith.truncf %[[QUOT]] : f32 to bf16
// CHECK: %[[FINAL:.*]] = tensor.extract_slice %[[S]][0, 0, 0, 0] [1, 2, 4, 6] [1, 1, 1, 1]
// CHECK: return %[[OUT]], %[[FINAL]]
func.func @normalizer(%q: tensor<1x8x2x4xf32>, %k: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xbf16>, %s0: tensor<1x2x4x6xf32>) -> (tensor<1x8x2x6xbf16>, tensor<1x2x4x6xf32>) {
  %oi0 = tensor.empty() : tensor<1x8x2x6xbf16>
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %k, %v outs(%oi0, %s0 : tensor<1x8x2x6xbf16>, tensor<1x2x4x6xf32>) {normalizer, eps = 1.0e-3 : f32, scale = 0.5 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xbf16> -> tensor<1x8x2x6xbf16>, tensor<1x2x4x6xf32>
  return %o, %s : tensor<1x8x2x6xbf16>, tensor<1x2x4x6xf32>
}

// -----

// A fixed per-head decay becomes a scalar gate broadcast over B and T.
// CHECK-DAG: #[[HEAD:.*]] = affine_map<(d0, d1, d2) -> (d2)>
// CHECK-DAG: #[[BTH:.*]] = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @fixed
// CHECK: %[[D:.*]] = arith.constant dense<[-1.000000e+00, -2.000000e+00]> : tensor<2xf32>
// CHECK: %[[G:.*]] = linalg.generic {indexing_maps = [#[[HEAD]], #[[BTH]]], iterator_types = ["parallel", "parallel", "parallel"]} ins(%[[D]] : tensor<2xf32>) outs(%{{.*}} : tensor<3x5x2xf32>)
// CHECK: la.recurrence decay(scalar) low_rank(delta) %{{.*}}, %{{.*}}, %{{.*}} g(%[[G]] : tensor<3x5x2xf32>) beta(%{{.*}} : tensor<3x5x2xf32>) outs({{.*}}) {scale = 5.000000e-01 : f32}
func.func @fixed(%q: tensor<3x5x2x4xf32>, %v: tensor<3x5x2x4xf32>, %b: tensor<3x5x2xf32>) -> tensor<3x5x2x4xf32> {
  %oi1 = tensor.empty() : tensor<3x5x2x4xf32>
  %zs1 = arith.constant dense<0.0> : tensor<3x2x4x4xf32>
  %o, %fs1 = la.recurrence decay(fixed) low_rank(delta) %q, %q, %v beta(%b : tensor<3x5x2xf32>) outs(%oi1, %zs1 : tensor<3x5x2x4xf32>, tensor<3x2x4x4xf32>) {log_decay = array<f32: -1.0, -2.0>, scale = 0.5 : f32} : tensor<3x5x2x4xf32>, tensor<3x5x2x4xf32>, tensor<3x5x2x4xf32> -> tensor<3x5x2x4xf32>, tensor<3x2x4x4xf32>
  return %o : tensor<3x5x2x4xf32>
}

// -----

// Already simple: unchanged.
// CHECK-LABEL: func.func @simple
// CHECK-NEXT: arith.constant
// CHECK-NEXT: tensor.empty
// CHECK-NEXT: la.recurrence decay(scalar) low_rank(none)
// CHECK-NEXT: return
func.func @simple(%q: tensor<1x5x2x4xf32>, %g: tensor<1x5x2xf32>) -> tensor<1x5x2x4xf32> {
  %oi2 = tensor.empty() : tensor<1x5x2x4xf32>
  %zs2 = arith.constant dense<0.0> : tensor<1x2x4x4xf32>
  %o, %fs2 = la.recurrence decay(scalar) low_rank(none) %q, %q, %q g(%g : tensor<1x5x2xf32>) outs(%oi2, %zs2 : tensor<1x5x2x4xf32>, tensor<1x2x4x4xf32>) {scale = 0.5 : f32} : tensor<1x5x2x4xf32>, tensor<1x5x2x4xf32>, tensor<1x5x2x4xf32> -> tensor<1x5x2x4xf32>, tensor<1x2x4x4xf32>
  return %o : tensor<1x5x2x4xf32>
}

// -----

// The normaliser's gradient: the forward on [v, 1] is recomputed for the
// numerator and the denominator, the cotangent of [num, den] is
// [d_o / (den + eps), -sum_V(d_o * num) / (den + eps)^2], and the gradient
// of the recurrence on [v, 1] loses its extra column.
// CHECK-LABEL: func.func @normalizer_grad
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[S0:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}}, %[[DSF:[^:]*]]: {{.*}})
// CHECK: %[[VA:.*]] = tensor.pad %[[V]] low[0, 0, 0, 0] high[0, 0, 0, 1]
// CHECK: %[[SA:.*]] = tensor.pad %[[S0]] low[0, 0, 0, 0] high[0, 0, 0, 1]
// CHECK: %[[O:.*]], %{{.*}} = la.recurrence decay(none) low_rank(none) %[[Q]], %[[K]], %[[VA]] outs(%{{.*}}, %[[SA]] : {{.*}}) {scale = 5.000000e-01 : f32}
// CHECK: %[[NUM:.*]] = tensor.extract_slice %[[O]][0, 0, 0, 0] [1, 8, 2, 6]
// CHECK: %[[DEN:.*]] = tensor.extract_slice %[[O]][0, 0, 0, 6] [1, 8, 2, 1]
// CHECK: %[[ROWDOT:.*]] = linalg.generic {{.*}} ins(%[[DO]], %[[NUM]] :
// CHECK: %[[DNUM:.*]] = linalg.generic {{.*}} ins(%[[DO]], %[[DEN]] :
// CHECK: arith.divf
// CHECK: %[[DDEN:.*]] = linalg.generic {{.*}} ins(%[[ROWDOT]], %[[DEN]] :
// CHECK: arith.negf
// CHECK: %[[DNUMA:.*]] = tensor.pad %[[DNUM]]
// CHECK: %[[DOA:.*]] = tensor.insert_slice %[[DDEN]] into %[[DNUMA]][0, 0, 0, 6] [1, 8, 2, 1]
// CHECK: %[[DSFA:.*]] = tensor.pad %[[DSF]]
// CHECK: %[[DQ:[^,]*]], %[[DK:[^,]*]], %[[DV:[^,]*]], %[[DS0:[^ ]*]] = la.recurrence_grad decay(none) low_rank(none) %[[Q]], %[[K]], %[[VA]] initial_state(%[[SA]] : tensor<1x2x4x7xf32>) d_o(%[[DOA]] : tensor<1x8x2x7xf32>) d_final_state(%[[DSFA]] : tensor<1x2x4x7xf32>) {checkpoint = 4 : i64, scale = 5.000000e-01 : f32}
// CHECK: %[[DVS:.*]] = tensor.extract_slice %[[DV]][0, 0, 0, 0] [1, 8, 2, 6]
// CHECK: %[[DS0S:.*]] = tensor.extract_slice %[[DS0]][0, 0, 0, 0] [1, 2, 4, 6]
// CHECK: return %[[DQ]], %[[DVS]], %[[DS0S]]
func.func @normalizer_grad(%q: tensor<1x8x2x4xf32>, %k: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %s0: tensor<1x2x4x6xf32>, %do: tensor<1x8x2x6xf32>, %dsf: tensor<1x2x4x6xf32>) -> (tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>) {
  %dq, %dk, %dv, %ds0 = la.recurrence_grad decay(none) low_rank(none) %q, %k, %v initial_state(%s0 : tensor<1x2x4x6xf32>) d_o(%do : tensor<1x8x2x6xf32>) d_final_state(%dsf : tensor<1x2x4x6xf32>) {normalizer, eps = 1.0e-3 : f32, scale = 0.5 : f32, checkpoint = 4 : i64} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
  return %dq, %dv, %ds0 : tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>
}

// -----

// The normaliser with grouped query heads (HQ = 4 over HV = 2 states): the
// z column rides in each state once, and each query head's output has its
// own denominator column z . q'.
// CHECK-LABEL: func.func @grouped_normalizer
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x8x4x4xf32>, %[[K:[^:]*]]: tensor<1x8x2x4xf32>, %[[V:[^:]*]]: tensor<1x8x2x6xf32>, %[[S0:[^:]*]]: tensor<1x2x4x6xf32>)
// CHECK: %[[VP:.*]] = tensor.pad %[[V]] low[0, 0, 0, 0] high[0, 0, 0, 1]
// CHECK: %[[SP:.*]] = tensor.pad %[[S0]] low[0, 0, 0, 0] high[0, 0, 0, 1]
// CHECK: %[[O:.*]], %[[F:.*]] = la.recurrence decay(none) low_rank(none) %[[Q]], %[[K]], %[[VP]] outs(%{{.*}}, %[[SP]] : tensor<1x8x4x7xf32>, tensor<1x2x4x7xf32>)
// CHECK-NOT: normalizer
// CHECK: %[[NUM:.*]] = tensor.extract_slice %[[O]][0, 0, 0, 0] [1, 8, 4, 6] [1, 1, 1, 1]
// CHECK: %[[DEN:.*]] = tensor.extract_slice %[[O]][0, 0, 0, 6] [1, 8, 4, 1] [1, 1, 1, 1]
// CHECK: %[[OUT:.*]] = linalg.generic {{.*}} ins(%[[NUM]], %[[DEN]] : tensor<1x8x4x6xf32>, tensor<1x8x4x1xf32>)
// CHECK: %[[FS:.*]] = tensor.extract_slice %[[F]][0, 0, 0, 0] [1, 2, 4, 6] [1, 1, 1, 1]
// CHECK: return %[[OUT]], %[[FS]]
func.func @grouped_normalizer(%q: tensor<1x8x4x4xf32>, %k: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %s0: tensor<1x2x4x6xf32>) -> (tensor<1x8x4x6xf32>, tensor<1x2x4x6xf32>) {
  %oi = tensor.empty() : tensor<1x8x4x6xf32>
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %k, %v outs(%oi, %s0 : tensor<1x8x4x6xf32>, tensor<1x2x4x6xf32>) {normalizer, scale = 0.5 : f32} : tensor<1x8x4x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x4x6xf32>, tensor<1x2x4x6xf32>
  return %o, %s : tensor<1x8x4x6xf32>, tensor<1x2x4x6xf32>
}
