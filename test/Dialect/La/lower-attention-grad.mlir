// RUN: la-opt %s -split-input-file -la-lower-to-recurrence | FileCheck %s

// The delta rule with allow_neg_eigval: the recurrence's gradient is taken
// at 2 * beta, and its dbeta doubled on the way back.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x4x6xf32>
!h = tensor<1x8x2xf32>

// CHECK-LABEL: func.func @deltanet
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[BETA:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}})
// CHECK: %[[TWO:.*]] = arith.constant 2.0
// CHECK: %[[B2:.*]] = linalg.generic {{.*}} ins(%[[BETA]] : tensor<1x8x2xf32>)
// CHECK: arith.mulf %{{.*}}, %[[TWO]]
// CHECK: %[[S0:.*]] = linalg.fill
// CHECK: %[[DQ:[^,]*]], %[[DK:[^,]*]], %[[DV:[^,]*]], %{{[^,]*}}, %[[DB2:.*]] = la.recurrence_grad decay(none) low_rank(delta) %[[Q]], %[[K]], %[[V]] beta(%[[B2]] : tensor<1x8x2xf32>) initial_state(%[[S0]] : tensor<1x4x4x6xf32>) d_o(%[[DO]] : tensor<1x8x4x6xf32>) {checkpoint = 4 : i64, scale = 5.000000e-01 : f32}
// CHECK: %[[DB:.*]] = linalg.generic {{.*}} ins(%[[DB2]] : tensor<1x8x2xf32>)
// CHECK: arith.mulf %{{.*}}, %[[TWO]]
// CHECK: return %[[DQ]], %[[DK]], %[[DV]], %[[DB]]
func.func @deltanet(%q: !qk, %k: !qk, %v: !v, %beta: !h, %do: !v)
    -> (!qk, !qk, !v, !h) {
  %dq, %dk, %dv, %db = la.attention_grad deltanet %q, %k, %v beta(%beta : !h)
      d_o(%do : !v) {allow_neg_eigval, scale = 0.5 : f32, checkpoint = 4 : i64}
      : !qk, !qk, !v -> !qk, !qk, !v, !h
  return %dq, %dk, %dv, %db : !qk, !qk, !v, !h
}

// -----

// qk_l2norm: the forward normalises q and k; the backward maps dq and dk
// through the norm's adjoint r (dy - y sum_K(y dy)), which needs the
// per-row sums of x^2 and x dy.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

// CHECK-LABEL: func.func @linear_l2norm
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}})
// CHECK: %[[QN:.*]] = linalg.generic {{.*}} ins(%[[Q]], %{{.*}} : tensor<1x8x2x4xf32>, tensor<1x8x2xf32>)
// CHECK: math.rsqrt
// CHECK: %[[KN:.*]] = linalg.generic {{.*}} ins(%[[K]], %{{.*}} : tensor<1x8x2x4xf32>, tensor<1x8x2xf32>)
// CHECK: %[[DQN:[^,]*]], %[[DKN:[^,]*]], %[[DV:[^,]*]], %{{.*}} = la.recurrence_grad decay(none) low_rank(none) %[[QN]], %[[KN]], %[[V]]
// CHECK: %[[QSQ:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[Q]] : tensor<1x8x2x4xf32>)
// CHECK: %[[QDOT:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[Q]], %[[DQN]] : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>)
// CHECK: %[[DQ:.*]] = linalg.generic {{.*}} ins(%[[Q]], %[[DQN]], %[[QSQ]], %[[QDOT]] :
// CHECK: math.rsqrt
// CHECK: arith.subf
// CHECK: %[[DK:.*]] = linalg.generic {{.*}} ins(%[[K]], %[[DKN]], %{{.*}}, %{{.*}} :
// CHECK: return %[[DQ]], %[[DK]], %[[DV]]
func.func @linear_l2norm(%q: !qk, %k: !qk, %v: !v, %do: !v) -> (!qk, !qk, !v) {
  %dq, %dk, %dv = la.attention_grad linear %q, %k, %v d_o(%do : !v) {qk_l2norm}
      : !qk, !qk, !v -> !qk, !qk, !v
  return %dq, %dk, %dv : !qk, !qk, !v
}

// -----

// Gated DeltaNet-2 with a scalar gate lowers through the general form
// (a = alpha k, b = erase k, values write v); the chain rule adds
// alpha da + erase db to dk, sums alpha k da over K into dg, and splits the
// values' gradient into dv = write dvalues and dwrite = v dvalues.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x4x6xf32>
!h = tensor<1x8x2xf32>

// CHECK-LABEL: func.func @scalar_gated_deltanet2
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[E:[^:]*]]: {{.*}}, %[[W:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}})
// CHECK: %[[A:.*]] = linalg.generic {{.*}} ins(%[[K]], %[[G]] :
// CHECK: %[[B:.*]] = linalg.generic {{.*}} ins(%[[E]], %[[K]] :
// CHECK: %[[VALUES:.*]] = linalg.generic {{.*}} ins(%[[W]], %[[V]] :
// CHECK: %[[DQ:[^,]*]], %[[DK0:[^,]*]], %[[DVALUES:[^,]*]], %{{[^,]*}}, %[[IG:.*]]:3 = la.recurrence_grad decay(scalar) low_rank(general) %[[Q]], %[[K]], %[[VALUES]] g(%[[G]] : tensor<1x8x2xf32>) a(%[[A]] : tensor<1x8x2x4xf32>) b(%[[B]] : tensor<1x8x2x4xf32>)
// CHECK: %[[DK:.*]] = linalg.generic {{.*}} ins(%[[K]], %[[IG]]#1, %[[IG]]#2, %[[E]], %[[DK0]], %[[G]] :
// CHECK: %[[DE:.*]] = linalg.generic {{.*}} ins(%[[K]], %[[IG]]#2 :
// CHECK: %[[DG:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[K]], %[[IG]]#1, %[[G]] : {{.*}}) outs(%[[IG]]#0 : tensor<1x8x2xf32>)
// CHECK: %[[DW:.*]] = linalg.generic {{.*}} ins(%[[V]], %[[DVALUES]] :
// CHECK: %[[DV:.*]] = linalg.generic {{.*}} ins(%[[W]], %[[DVALUES]] :
// CHECK: return %[[DQ]], %[[DK]], %[[DV]], %[[DG]], %[[DE]], %[[DW]]
func.func @scalar_gated_deltanet2(%q: !qk, %k: !qk, %v: !v, %g: !h, %e: !qk,
                                  %w: !v, %do: !v)
    -> (!qk, !qk, !v, !h, !qk, !v) {
  %dq, %dk, %dv, %dg, %de, %dw = la.attention_grad scalar_gated_deltanet2
      %q, %k, %v g(%g : !h) erase(%e : !qk) write(%w : !v) d_o(%do : !v)
      : !qk, !qk, !v -> !qk, !qk, !v, !h, !qk, !v
  return %dq, %dk, %dv, %dg, %de, %dw : !qk, !qk, !v, !h, !qk, !v
}

// -----

// Gates per value head: the gradients of the operands that were repeated to
// one head per value head (q, k, a per-key-head beta) are summed back over
// each key head's value heads; the per-value-head gate's is the recurrence's.
// CHECK-LABEL: func.func @gated_deltanet_value_head_gate
// CHECK: %[[DQ:[^,]*]], %[[DK:[^,]*]], %[[DV:[^,]*]], %{{[^,]*}}, %[[IG:.*]]:2 = la.recurrence_grad decay(scalar) low_rank(delta) {{.*}} g(%{{.*}} : tensor<1x8x4xf32>) beta(%{{.*}} : tensor<1x8x4xf32>)
// CHECK: %[[DQS:.*]] = tensor.expand_shape %[[DQ]] {{\[}}[0], [1], [2, 3], [4]] output_shape [1, 8, 2, 2, 16]
// CHECK: %[[DQH:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%[[DQS]] : tensor<1x8x2x2x16xf32>) outs(%{{.*}} : tensor<1x8x2x16xf32>)
// CHECK: %[[DKS:.*]] = tensor.expand_shape %[[DK]]
// CHECK: %[[DKH:.*]] = linalg.generic {{.*}} ins(%[[DKS]] :
// CHECK: %[[DBS:.*]] = tensor.expand_shape %[[IG]]#1 {{\[}}[0], [1], [2, 3]] output_shape [1, 8, 2, 2]
// CHECK: %[[DBH:.*]] = linalg.generic {{.*}} ins(%[[DBS]] : tensor<1x8x2x2xf32>) outs(%{{.*}} : tensor<1x8x2xf32>)
// CHECK: return %[[DQH]], %[[DKH]], %[[DV]], %[[IG]]#0, %[[DBH]]
func.func @gated_deltanet_value_head_gate(
    %q: tensor<1x8x2x16xf32>, %k: tensor<1x8x2x16xf32>, %v: tensor<1x8x4x32xf32>,
    %g: tensor<1x8x4xf32>, %beta: tensor<1x8x2xf32>, %do: tensor<1x8x4x32xf32>)
    -> (tensor<1x8x2x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x4x32xf32>,
        tensor<1x8x4xf32>, tensor<1x8x2xf32>) {
  %dq, %dk, %dv, %dg, %dbeta = la.attention_grad gated_deltanet %q, %k, %v
      g(%g : tensor<1x8x4xf32>) beta(%beta : tensor<1x8x2xf32>)
      d_o(%do : tensor<1x8x4x32xf32>)
      : tensor<1x8x2x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x4x32xf32>
      -> tensor<1x8x2x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x4x32xf32>,
         tensor<1x8x4xf32>, tensor<1x8x2xf32>
  return %dq, %dk, %dv, %dg, %dbeta : tensor<1x8x2x16xf32>, tensor<1x8x2x16xf32>,
      tensor<1x8x4x32xf32>, tensor<1x8x4xf32>, tensor<1x8x2xf32>
}

// -----

// erase_read_key (a = alpha * erase * k, b = k): dk += alpha * erase * da + db,
// derase = alpha * k * da, and alpha * erase * k * da into dg.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
// CHECK-LABEL: func.func @gated_deltanet2_read_key
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[E:[^:]*]]: {{.*}}, %[[W:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}})
// CHECK: %[[DQ:[^,]*]], %[[DK0:[^,]*]], %[[DVALUES:[^,]*]], %{{[^,]*}}, %[[IG:.*]]:3 = la.recurrence_grad decay(channel) low_rank(general)
// CHECK: %[[DK:.*]] = linalg.generic {{.*}} ins(%[[K]], %[[IG]]#1, %[[IG]]#2, %[[E]], %[[DK0]], %[[G]] :
// CHECK: %[[DE:.*]] = linalg.generic {{.*}} ins(%[[K]], %[[IG]]#1, %[[G]] :
// CHECK: %[[DG:.*]] = linalg.generic {{.*}} ins(%[[K]], %[[IG]]#1, %[[E]], %[[G]] : {{.*}}) outs(%[[IG]]#0 : tensor<1x8x2x4xf32>)
// CHECK: return %[[DQ]], %[[DK]], %{{.*}}, %[[DG]], %[[DE]], %{{.*}}
func.func @gated_deltanet2_read_key(%q: !qk, %k: !qk, %v: !v, %g: !qk, %e: !qk, %w: !v,
                                    %do: !v) -> (!qk, !qk, !v, !qk, !qk, !v) {
  %dq, %dk, %dv, %dg, %de, %dw = la.attention_grad gated_deltanet2
      %q, %k, %v g(%g : !qk) erase(%e : !qk) write(%w : !v) d_o(%do : !v) {erase_read_key}
      : !qk, !qk, !v -> !qk, !qk, !v, !qk, !qk, !v
  return %dq, %dk, %dv, %dg, %de, %dw : !qk, !qk, !v, !qk, !qk, !v
}

// -----

// Grouped query heads: the gradient of the op repeated per query head.
// d_final_state goes to the first state of each group (a strided insert
// into zeros: the other states of a group are not read), and the gradients
// of the repeated k, v, g and initial state are summed over each group
// (split [.., 2, 2, ..] and reduced).
// CHECK-LABEL: func.func @grouped_query_heads
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[S0:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}}, %[[DS:[^:]*]]: {{.*}})
// CHECK: %[[ZERO:.*]] = linalg.fill {{.*}} -> tensor<1x4x4x6xf32>
// CHECK: %[[DSR:.*]] = tensor.insert_slice %[[DS]] into %[[ZERO]][0, 0, 0, 0] [1, 2, 4, 6] [1, 2, 1, 1]
// CHECK: %[[DQ:[^,]*]], %[[DK:[^,]*]], %[[DV:[^,]*]], %[[DS0:[^,]*]], %[[DG:.*]] = la.recurrence_grad decay(scalar) low_rank(none) %[[Q]], {{.*}} d_final_state(%[[DSR]] : tensor<1x4x4x6xf32>)
// CHECK: %[[DKS:.*]] = tensor.expand_shape %[[DK]] {{.*}} into tensor<1x8x2x2x4xf32>
// CHECK: %[[DKG:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%[[DKS]] : tensor<1x8x2x2x4xf32>) outs(%{{.*}} : tensor<1x8x2x4xf32>)
// CHECK: %[[DVS:.*]] = tensor.expand_shape %[[DV]]
// CHECK: %[[DVG:.*]] = linalg.generic {{.*}} ins(%[[DVS]] : tensor<1x8x2x2x6xf32>)
// CHECK: %[[DGS:.*]] = tensor.expand_shape %[[DG]]
// CHECK: %[[DGG:.*]] = linalg.generic {{.*}} ins(%[[DGS]] : tensor<1x8x2x2xf32>)
// CHECK: %[[DSS:.*]] = tensor.expand_shape %[[DS0]]
// CHECK: %[[DSG:.*]] = linalg.generic {{.*}} ins(%[[DSS]] : tensor<1x2x2x4x6xf32>)
// CHECK: return %[[DQ]], %[[DKG]], %[[DVG]], %[[DGG]], %[[DSG]]
func.func @grouped_query_heads(%q: tensor<1x8x4x4xf32>, %k: tensor<1x8x2x4xf32>,
    %v: tensor<1x8x2x6xf32>, %g: tensor<1x8x2xf32>, %s0: tensor<1x2x4x6xf32>,
    %do: tensor<1x8x4x6xf32>, %ds: tensor<1x2x4x6xf32>)
    -> (tensor<1x8x4x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32>,
        tensor<1x8x2xf32>, tensor<1x2x4x6xf32>) {
  %dq, %dk, %dv, %dg, %ds0 = la.attention_grad mamba2 %q, %k, %v
      g(%g : tensor<1x8x2xf32>) initial_state(%s0 : tensor<1x2x4x6xf32>)
      d_o(%do : tensor<1x8x4x6xf32>) d_final_state(%ds : tensor<1x2x4x6xf32>)
      : tensor<1x8x4x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32>
      -> tensor<1x8x4x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32>,
         tensor<1x8x2xf32>, tensor<1x2x4x6xf32>
  return %dq, %dk, %dv, %dg, %ds0 : tensor<1x8x4x4xf32>, tensor<1x8x2x4xf32>,
      tensor<1x8x2x6xf32>, tensor<1x8x2xf32>, tensor<1x2x4x6xf32>
}

// -----

// The dplr rule with a gate per value head: q, k, a and b are repeated to
// one head per value head, and their gradients (da and db the level-1
// op's) summed back over each key head's value heads.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x4x6xf32>
!h = tensor<1x8x4xf32>

// CHECK-LABEL: func.func @scalar_gated_dplr_value_head_gate
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[A:[^:]*]]: {{.*}}, %[[B:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}})
// CHECK: %[[QR:.*]] = tensor.collapse_shape %{{.*}} : tensor<1x8x2x2x4xf32> into tensor<1x8x4x4xf32>
// CHECK: %[[KR:.*]] = tensor.collapse_shape %{{.*}} : tensor<1x8x2x2x4xf32> into tensor<1x8x4x4xf32>
// CHECK: %[[AR:.*]] = tensor.collapse_shape %{{.*}} : tensor<1x8x2x2x4xf32> into tensor<1x8x4x4xf32>
// CHECK: %[[BR:.*]] = tensor.collapse_shape %{{.*}} : tensor<1x8x2x2x4xf32> into tensor<1x8x4x4xf32>
// CHECK: %[[DQ:[^,]*]], %[[DK:[^,]*]], %[[DV:[^,]*]], %{{[^,]*}}, %[[IG:.*]]:3 = la.recurrence_grad decay(scalar) low_rank(general) %[[QR]], %[[KR]], %[[V]] g(%[[G]] : tensor<1x8x4xf32>) a(%[[AR]] : tensor<1x8x4x4xf32>) b(%[[BR]] : tensor<1x8x4x4xf32>)
// CHECK: %[[DAE:.*]] = tensor.expand_shape %[[IG]]#1
// CHECK: %[[DA:.*]] = linalg.generic {{.*}} ins(%[[DAE]] : tensor<1x8x2x2x4xf32>) outs(%{{.*}} : tensor<1x8x2x4xf32>)
// CHECK: %[[DBE:.*]] = tensor.expand_shape %[[IG]]#2
// CHECK: %[[DB:.*]] = linalg.generic {{.*}} ins(%[[DBE]] : tensor<1x8x2x2x4xf32>) outs(%{{.*}} : tensor<1x8x2x4xf32>)
// CHECK: return %{{.*}}, %{{.*}}, %[[DV]], %[[IG]]#0, %[[DA]], %[[DB]]
func.func @scalar_gated_dplr_value_head_gate(%q: !qk, %k: !qk, %v: !v, %g: !h,
                                             %a: !qk, %b: !qk, %do: !v)
    -> (!qk, !qk, !v, !h, !qk, !qk) {
  %dq, %dk, %dv, %dg, %da, %db = la.attention_grad scalar_gated_dplr %q, %k, %v
      g(%g : !h) a(%a : !qk) b(%b : !qk) d_o(%do : !v)
      : !qk, !qk, !v -> !qk, !qk, !v, !h, !qk, !qk
  return %dq, %dk, %dv, %dg, %da, %db : !qk, !qk, !v, !h, !qk, !qk
}

// -----

// A value-side gate passes to the level-1 gradient as it is (per value
// head already), and its gradient comes back unchanged.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x4x6xf32>
!h = tensor<1x8x2xf32>

// CHECK-LABEL: func.func @mamba2_value_gate
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[GV:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}})
// CHECK: %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[IG:.*]]:2 = la.recurrence_grad decay(scalar) low_rank(none) %[[Q]], %[[K]], %[[V]] g(%[[G]] : tensor<1x8x2xf32>) gv(%[[GV]] : tensor<1x8x4x6xf32>) initial_state(
// CHECK: return %{{.*}}, %{{.*}}, %{{.*}}, %[[IG]]#0, %[[IG]]#1
func.func @mamba2_value_gate(%q: !qk, %k: !qk, %v: !v, %g: !h, %gv: !v,
                             %do: !v) -> (!qk, !qk, !v, !h, !v) {
  %dq, %dk, %dv, %dg, %dgv = la.attention_grad mamba2 %q, %k, %v g(%g : !h)
      gv(%gv : !v) d_o(%do : !v) {scale = 0.5 : f32}
      : !qk, !qk, !v -> !qk, !qk, !v, !h, !v
  return %dq, %dk, %dv, %dg, %dgv : !qk, !qk, !v, !h, !v
}

// -----

// `reverse`: the gradient of the forward recurrence on the flipped tokens
// (the canonical operands and d_o flipped), its results flipped back before
// the level-0 maps.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!h = tensor<1x8x2xf32>

// CHECK-DAG: #[[FLIP:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, -d1 + 7, d2, d3)>
// CHECK-DAG: #[[FLIP3:.*]] = affine_map<(d0, d1, d2) -> (d0, -d1 + 7, d2)>
// CHECK-LABEL: func.func @reverse
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}})
// CHECK: %[[QF:.*]] = linalg.generic {indexing_maps = [#[[FLIP]], {{.*}}]{{.*}} ins(%[[Q]] :
// CHECK: %[[GF:.*]] = linalg.generic {indexing_maps = [#[[FLIP3]], {{.*}}]{{.*}} ins(%[[G]] :
// CHECK: %[[DOF:.*]] = linalg.generic {indexing_maps = [#[[FLIP]], {{.*}}]{{.*}} ins(%[[DO]] :
// CHECK: %[[DQ:[^,]*]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[DG:.*]] = la.recurrence_grad decay(scalar) low_rank(none) %[[QF]], %{{.*}}, %{{.*}} g(%[[GF]] : tensor<1x8x2xf32>) initial_state(%{{.*}}) d_o(%[[DOF]] :
// CHECK-NOT: reverse
// CHECK: %[[DQB:.*]] = linalg.generic {indexing_maps = [#[[FLIP]], {{.*}}]{{.*}} ins(%[[DQ]] :
// CHECK: %[[DGB:.*]] = linalg.generic {indexing_maps = [#[[FLIP3]], {{.*}}]{{.*}} ins(%[[DG]] :
// CHECK: return %[[DQB]], {{.*}}, %[[DGB]]
func.func @reverse(%q: !qk, %k: !qk, %v: !v, %g: !h, %do: !v)
    -> (!qk, !qk, !v, !h) {
  %dq, %dk, %dv, %dg = la.attention_grad mamba2 %q, %k, %v g(%g : !h)
      d_o(%do : !v) {reverse, scale = 0.5 : f32} : !qk, !qk, !v -> !qk, !qk, !v, !h
  return %dq, %dk, %dv, %dg : !qk, !qk, !v, !h
}
