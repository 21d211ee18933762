// RUN: la-opt %s -split-input-file -la-expand-recurrence-grad=transposed-reads=0 | FileCheck %s

// With transposed-reads=0 (the GPU pipeline's choice) a diagonal adjoint is
// three recurrences, G^T one of them; expand-recurrence-grad-transposed.mlir
// has the default, G read from both sides.

// A scalar decay with grouped value heads (HV = 2 H), T = 8: the adjoint is
// three la.recurrence ops. dq: S^T in forward time (keys v, values k widened
// to the value heads, query do, the initial state transposed), summed over
// each key head's value heads. dv: G, a `reverse` recurrence (keys q, values
// do, query k, the gates shifted by one token, from dS_T / scale, at the
// output scale `scale`: G = scale G', so no scaled copy of do); its final
// state times scale and alpha_0 is dS_0. dk: G^T, reverse too (keys do,
// values q widened, query v, from dS_T transposed / scale, output scale
// `scale`). f32 operands that need no widening are used as they are. dg: one
// loop over the tokens from the end, reading q, dq, k and dk, whose running
// sum of q . dq - k . dk starts from <S_T, dS_T>.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x4x6xf32>
!h = tensor<1x8x2xf32>
!s = tensor<1x4x4x6xf32>

// CHECK-DAG: #[[WIDEN:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2 floordiv 2, d3)>
// CHECK-DAG: #[[SWAP:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3, d2)>
// CHECK-LABEL: func.func @mamba2
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[S0:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}}, %[[DSF:[^:]*]]: {{.*}})
// CHECK-DAG: %[[HALF:.*]] = arith.constant 5.000000e-01 : f32
// CHECK-DAG: %[[INV:.*]] = arith.constant 2.000000e+00 : f32
// CHECK: %[[LATER:.*]] = tensor.extract_slice %[[G]][0, 1, 0] [1, 7, 2] [1, 1, 1]
// CHECK: %[[SHIFTED:.*]] = tensor.pad %[[LATER]] low[0, 0, 0] high[0, 1, 0]
// CHECK: %[[KW:.*]] = linalg.generic {indexing_maps = [#[[WIDEN]], {{.*}}]{{.*}} ins(%[[K]] :
// CHECK: %[[S0T:.*]] = linalg.generic {indexing_maps = [#[[SWAP]], {{.*}}]{{.*}} ins(%[[S0]] :
// CHECK: %[[O1:.*]], %[[SFT:.*]] = la.recurrence decay(scalar) low_rank(none) %[[DO]], %[[V]], %[[KW]] g(%{{.*}} : tensor<1x8x4xf32>) outs(%{{.*}}, %[[S0T]] : tensor<1x8x4x4xf32>, tensor<1x4x6x4xf32>) {scale = 5.000000e-01 : f32}
// CHECK: %[[DQ:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<1x8x2x2x4xf32>)
// CHECK: %[[DSFS:.*]] = linalg.generic {{.*}} ins(%[[DSF]] :
// CHECK: arith.mulf %{{.*}}, %[[INV]] : f32
// CHECK: %[[DV:.*]], %[[G0S:.*]] = la.recurrence decay(scalar) low_rank(none) %[[K]], %[[Q]], %[[DO]] g(%[[SHIFTED]] : tensor<1x8x2xf32>) outs(%{{.*}}, %[[DSFS]] : tensor<1x8x4x6xf32>, tensor<1x4x4x6xf32>) {reverse, scale = 5.000000e-01 : f32}
// CHECK: %[[G0:.*]] = linalg.generic {{.*}} ins(%[[G0S]] :
// CHECK: arith.mulf %{{.*}}, %[[HALF]] : f32
// CHECK: %[[G0GATE:.*]] = tensor.extract_slice %[[G]][0, 0, 0] [1, 1, 2]
// CHECK: %[[DS0:.*]] = linalg.generic {{.*}} ins(%[[G0GATE]], %[[G0]] :
// CHECK: math.exp
// CHECK: %[[QW:.*]] = linalg.generic {indexing_maps = [#[[WIDEN]], {{.*}}]{{.*}} ins(%[[Q]] :
// CHECK: %[[DSFT:.*]] = linalg.generic {indexing_maps = [#[[SWAP]], {{.*}}]{{.*}} ins(%[[DSF]] :
// CHECK: arith.mulf %{{.*}}, %[[INV]] : f32
// CHECK: %[[O3:.*]], %{{.*}} = la.recurrence decay(scalar) low_rank(none) %[[V]], %[[DO]], %[[QW]] {{.*}} outs(%{{.*}}, %[[DSFT]] : {{.*}}) {reverse, scale = 5.000000e-01 : f32} {{.*}} -> tensor<1x8x4x4xf32>, tensor<1x4x6x4xf32>
// CHECK: %[[SPLIT:.*]] = tensor.expand_shape %[[O3]]
// CHECK: %[[DK:.*]] = linalg.generic {{.*}} ins(%[[SPLIT]] :
// CHECK: %[[FINAL:.*]] = linalg.generic {{.*}} ins(%[[SFT]], %[[DSF]] :
// CHECK: %[[FINALH:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<1x2x2xf32>) outs(%{{.*}} : tensor<1x2xf32>)
// CHECK: %[[DG:.*]]:2 = scf.for %{{.*}} iter_args(%[[ACC:.*]] = %[[FINALH]], %{{.*}} = %{{.*}}) -> (tensor<1x2xf32>, tensor<1x8x2xf32>)
// CHECK: %[[T:.*]] = arith.subi
// CHECK: %[[QT:.*]] = tensor.extract_slice %[[Q]][0, %[[T]], 0, 0] [1, 1, 2, 4]
// CHECK: %[[DQT:.*]] = tensor.extract_slice %[[DQ]][0, %[[T]], 0, 0] [1, 1, 2, 4]
// CHECK: %[[KT:.*]] = tensor.extract_slice %[[K]][0, %[[T]], 0, 0] [1, 1, 2, 4]
// CHECK: %[[DKT:.*]] = tensor.extract_slice %[[DK]][0, %[[T]], 0, 0] [1, 1, 2, 4]
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[QT]], %[[DQT]], %[[KT]], %[[DKT]] : {{.*}}) outs(%[[ACC]] : tensor<1x2xf32>)
// CHECK: arith.subf
// CHECK: tensor.insert_slice %[[SUM]] into %{{.*}}[0, %[[T]], 0] [1, 1, 2]
// CHECK: return %[[DQ]], %[[DK]], %[[DV]], %[[DS0]], %[[DG]]#1
func.func @mamba2(%q: !qk, %k: !qk, %v: !v, %g: !h, %s0: !s, %do: !v,
                  %dsf: !s) -> (!qk, !qk, !v, !s, !h) {
  %dq, %dk, %dv, %ds0, %dg = la.recurrence_grad decay(scalar) low_rank(none)
      %q, %k, %v g(%g : !h) initial_state(%s0 : !s) d_o(%do : !v)
      d_final_state(%dsf : !s) {scale = 0.5 : f32}
      : !qk, !qk, !v -> !qk, !qk, !v, !s, !h
  return %dq, %dk, %dv, %ds0, %dg : !qk, !qk, !v, !s, !h
}

// -----

// A fixed decay becomes a gate tensor [B,T,H] for the three recurrences and
// gets no gradient.
!qk = tensor<1x4x2x4xf32>
!v = tensor<1x4x2x6xf32>
!s = tensor<1x2x4x6xf32>

// CHECK-LABEL: func.func @retention
// CHECK: %[[DECAY:.*]] = arith.constant dense<[-1.000000e-01, -5.000000e-01]> : tensor<2xf32>
// CHECK: %[[GATE:.*]] = linalg.generic {{.*}} ins(%[[DECAY]] : tensor<2xf32>)
// CHECK-COUNT-3: la.recurrence decay(scalar) low_rank(none)
// CHECK-NOT: la.recurrence_grad
// CHECK: return
func.func @retention(%q: !qk, %k: !qk, %v: !v, %s0: !s, %do: !v) -> (!qk, !qk, !v, !s) {
  %dq, %dk, %dv, %ds0 = la.recurrence_grad decay(fixed) low_rank(none)
      %q, %k, %v initial_state(%s0 : !s) d_o(%do : !v)
      {scale = 0.5 : f32, log_decay = array<f32: -0.1, -0.5>}
      : !qk, !qk, !v -> !qk, !qk, !v, !s
  return %dq, %dk, %dv, %ds0 : !qk, !qk, !v, !s
}

// -----

// A channel-wise gate (GLA) with grouped value heads: it decays the K side
// of the state, which is the value side of the transposed recurrences, so
// dq and dk take it as their value-side gate `gv` (widened to the value
// heads; dk's shifted by one token) while dv's recurrence keeps it as a
// channel gate. dS_0 is G_0 times alpha_0 per key channel, and the
// gate gradient stays per channel: q * dq - k * dk summed from the end, plus
// S_T * dS_T summed over V only.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x4x6xf32>
!s = tensor<1x4x4x6xf32>

// CHECK-DAG: #[[CWIDEN:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2 floordiv 2, d3)>
// CHECK-DAG: #[[CID:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-DAG: #[[CFIRST:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1 floordiv 2, d2)>
// CHECK-DAG: #[[CROWS:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @gla
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[S0:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}}, %[[DSF:[^:]*]]: {{.*}})
// CHECK: %[[LATER:.*]] = tensor.extract_slice %[[G]][0, 1, 0, 0] [1, 7, 2, 4] [1, 1, 1, 1]
// CHECK: %[[SHIFTED:.*]] = tensor.pad %[[LATER]] low[0, 0, 0, 0] high[0, 1, 0, 0]
// CHECK: %[[GW:.*]] = linalg.generic {indexing_maps = [#[[CWIDEN]], {{.*}}]{{.*}} ins(%[[G]] :
// CHECK: %[[O1:.*]], %[[SFT:.*]] = la.recurrence decay(none) low_rank(none) %[[DO]], %[[V]], %{{.*}} gv(%[[GW]] : tensor<1x8x4x4xf32>) outs(%{{.*}}, %{{.*}} : tensor<1x8x4x4xf32>, tensor<1x4x6x4xf32>) {scale = 5.000000e-01 : f32}
// CHECK: %[[DQ:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<1x8x2x2x4xf32>)
// CHECK: %[[DV:.*]], %[[G0S:.*]] = la.recurrence decay(channel) low_rank(none) %[[K]], %[[Q]], %[[DO]] g(%[[SHIFTED]] : tensor<1x8x2x4xf32>) outs(%{{.*}}, %{{.*}} : tensor<1x8x4x6xf32>, tensor<1x4x4x6xf32>) {reverse, scale = 5.000000e-01 : f32}
// CHECK: %[[G0:.*]] = linalg.generic {{.*}} ins(%[[G0S]] :
// CHECK: %[[G0GATE:.*]] = tensor.extract_slice %[[G]][0, 0, 0, 0] [1, 1, 2, 4]
// CHECK: %[[DS0:.*]] = linalg.generic {indexing_maps = [#[[CFIRST]], {{.*}}]{{.*}} ins(%[[G0GATE]], %[[G0]] :
// CHECK: %[[GRW:.*]] = linalg.generic {indexing_maps = [#[[CWIDEN]], {{.*}}]{{.*}} ins(%[[SHIFTED]] :
// CHECK: %[[O3:.*]], %{{.*}} = la.recurrence decay(none) low_rank(none) %[[V]], %[[DO]], %{{.*}} gv(%[[GRW]] : tensor<1x8x4x4xf32>) {{.*}} {reverse, scale = 5.000000e-01 : f32} {{.*}} -> tensor<1x8x4x4xf32>, tensor<1x4x6x4xf32>
// CHECK: %[[DK:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<1x8x2x2x4xf32>)
// CHECK: %[[FINAL:.*]] = linalg.generic {indexing_maps = [{{.*}}, #[[CID]], #[[CROWS]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[SFT]], %[[DSF]] :
// CHECK: %[[DG:.*]]:2 = scf.for {{.*}} -> (tensor<1x2x4xf32>, tensor<1x8x2x4xf32>)
// CHECK: linalg.generic {indexing_maps = [#[[RID:.*]], #[[RID]], #[[RID]], #[[RID]], #[[RID]]], iterator_types = ["parallel", "parallel", "parallel"]} ins(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>) outs(%{{.*}} : tensor<1x2x4xf32>)
// CHECK: arith.subf
// CHECK: return %[[DQ]], %[[DK]], %[[DV]], %[[DS0]], %[[DG]]#1
func.func @gla(%q: !qk, %k: !qk, %v: !v, %g: !qk, %s0: !s, %do: !v,
               %dsf: !s) -> (!qk, !qk, !v, !s, !qk) {
  %dq, %dk, %dv, %ds0, %dg = la.recurrence_grad decay(channel) low_rank(none)
      %q, %k, %v g(%g : !qk) initial_state(%s0 : !s) d_o(%do : !v)
      d_final_state(%dsf : !s) {scale = 0.5 : f32}
      : !qk, !qk, !v -> !qk, !qk, !v, !s, !qk
  return %dq, %dk, %dv, %ds0, %dg : !qk, !qk, !v, !s, !qk
}

// -----

// Packed sequences: the three recurrences take cu_seqlens; the shifted
// gates are zeroed at every non-empty sequence's last token (no decay
// across a sequence's end), dS_0 takes each sequence's first gate, and the
// gate gradient sums each sequence from its end, starting from that
// sequence's <S_T, dS_T>.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!h = tensor<1x8x2xf32>
!s2 = tensor<2x2x4x6xf32>

// CHECK-LABEL: func.func @packed
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[S0:[^:]*]]: {{.*}}, %[[CU:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}}, %[[DSF:[^:]*]]: {{.*}})
// CHECK: %[[PADDED:.*]] = tensor.pad
// CHECK: %[[SHIFTED:.*]] = scf.for {{.*}} iter_args(%[[ACC:.*]] = %[[PADDED]]) -> (tensor<1x8x2xf32>)
// CHECK: scf.if
// CHECK: %[[EDGE:.*]] = tensor.extract_slice %[[ACC]][0, %[[LAST:.*]], 0] [1, 1, 2]
// CHECK: %[[ZERO:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[EDGE]] : tensor<1x2xf32>)
// CHECK: tensor.insert_slice %[[ZERO]] into %[[ACC]][0, %[[LAST]], 0] [1, 1, 2]
// CHECK: la.recurrence decay(scalar) low_rank(none) %[[DO]], %[[V]], %[[K]] g(%[[G]] : tensor<1x8x2xf32>) cu_seqlens(%[[CU]] : tensor<3xi32>) outs({{.*}}) {scale = 5.000000e-01 : f32}
// CHECK: %[[DV:.*]], %[[G0S:.*]] = la.recurrence decay(scalar) low_rank(none) %[[K]], %[[Q]], %[[DO]] g(%[[SHIFTED]] : tensor<1x8x2xf32>) cu_seqlens(%[[CU]] : tensor<3xi32>) outs(%{{.*}}, %{{.*}} : {{.*}}) {reverse, scale = 5.000000e-01 : f32}
// CHECK: %[[G0:.*]] = linalg.generic {{.*}} ins(%[[G0S]] :
// CHECK: %[[FIRST:.*]] = scf.for {{.*}} -> (tensor<2x2xf32>)
// CHECK: %[[DS0:.*]] = linalg.generic {{.*}} ins(%[[FIRST]], %[[G0]] :
// CHECK: la.recurrence decay(scalar) low_rank(none) %[[V]], %[[DO]], %[[Q]] g(%[[SHIFTED]] : tensor<1x8x2xf32>) cu_seqlens(%[[CU]] : tensor<3xi32>) {{.*}} {reverse, scale = 5.000000e-01 : f32}
// The gate's reverse sums per sequence carry their running sum in one row
// made before the loop over the sequences (no buffer per sequence).
// CHECK: %[[SUMROW:.*]] = tensor.empty() : tensor<1x2xf32>
// CHECK: %[[DG:.*]]:2 = scf.for {{.*}} iter_args(%{{.*}}, %[[ROW:.*]] = %[[SUMROW]]) -> (tensor<1x8x2xf32>, tensor<1x2xf32>)
// CHECK: scf.if
// CHECK: %[[FIRST_SUM:.*]] = linalg.copy ins(%{{.*}} : tensor<1x2xf32>) outs(%[[ROW]] : tensor<1x2xf32>)
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %[[FIRST_SUM]], %{{.*}} = %{{.*}})
// CHECK: tensor.extract_slice %[[Q]]
// CHECK: return %{{.*}}, %{{.*}}, %[[DV]], %[[DS0]], %[[DG]]#0
func.func @packed(%q: !qk, %k: !qk, %v: !v, %g: !h, %s2: !s2, %cu: tensor<3xi32>,
                  %do: !v, %dsf: !s2) -> (!qk, !qk, !v, !s2, !h) {
  %r:5 = la.recurrence_grad decay(scalar) low_rank(none) %q, %k, %v g(%g : !h)
      cu_seqlens(%cu : tensor<3xi32>) initial_state(%s2 : !s2) d_o(%do : !v)
      d_final_state(%dsf : !s2) {scale = 0.5 : f32}
      : !qk, !qk, !v -> !qk, !qk, !v, !s2, !h
  return %r#0, %r#1, %r#2, %r#3, %r#4 : !qk, !qk, !v, !s2, !h
}

// -----

// The delta rule: its reads p = a^T S_{t-1} (the forward on the inputs one
// token later, queried with a = alpha * k), the adjoint as a general
// low-rank recurrence in reverse time (a' = b, b' = a one token earlier,
// queried with b = beta k: dv), then four diagonal recurrences on the
// corrected values x = v - p.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!h = tensor<1x8x2xf32>
!s = tensor<1x2x4x6xf32>

// CHECK-LABEL: func.func @gated_delta
// CHECK-SAME: (%[[Q:.*]]: tensor<1x8x2x4xf32>, %[[K:.*]]: tensor<1x8x2x4xf32>, %[[V:.*]]: tensor<1x8x2x6xf32>, %[[G:.*]]: tensor<1x8x2xf32>, %[[BETA:.*]]: tensor<1x8x2xf32>, %[[S0:.*]]: tensor<1x2x4x6xf32>, %[[DO:.*]]: tensor<1x8x2x6xf32>)
// CHECK: %[[GNEXT:.*]] = tensor.pad %{{.*}} low[0, 0, 0] high[0, 1, 0]
// CHECK: %[[KPREV:.*]] = tensor.pad %{{.*}} low[0, 1, 0, 0] high[0, 0, 0, 0]
// CHECK: %[[VPREV:.*]] = tensor.pad %{{.*}} low[0, 1, 0, 0] high[0, 0, 0, 0]
// CHECK: %[[GPREV:.*]] = tensor.pad %{{.*}} low[0, 1, 0] high[0, 0, 0]
// CHECK: %[[BPREV:.*]] = tensor.pad %{{.*}} low[0, 1, 0] high[0, 0, 0]
// CHECK: %[[P:.*]], %{{.*}} = la.recurrence decay(scalar) low_rank(delta) %[[A:.*]], %[[KPREV]], %[[VPREV]] g(%[[GPREV]] : {{.*}}) beta(%[[BPREV]] : {{.*}}) outs(%{{.*}}, %[[S0]] : {{.*}}) {scale = 1.000000e+00 : f32}
// CHECK: %[[X:.*]] = linalg.generic {{.*}} ins(%[[V]], %[[P]] :
// CHECK: arith.subf
// CHECK: %[[DQ:.*]], %[[ST:.*]] = la.recurrence decay(scalar) low_rank(none) %[[DO]], %[[X]], %[[BW:.*]] g(%{{.*}} : {{.*}}) outs({{.*}}) {scale = 5.000000e-01 : f32}
// CHECK: %[[DV:.*]], %[[G0:.*]] = la.recurrence decay(scalar) low_rank(general) %[[BK:.*]], %[[Q]], %[[DO]] g(%[[GNEXT]] : {{.*}}) a(%{{.*}}) b(%{{.*}}) outs({{.*}}) {reverse, scale = 5.000000e-01 : f32}
// CHECK: la.recurrence decay(scalar) low_rank(none) %[[X]], %[[DO]], %[[Q]] g(%[[GNEXT]] : {{.*}}) outs({{.*}}) {reverse, scale = 5.000000e-01 : f32}
// CHECK: %[[DVNEXT:.*]] = tensor.pad %{{.*}} low[0, 0, 0, 0] high[0, 1, 0, 0]
// CHECK: la.recurrence decay(scalar) low_rank(none) %[[X]], %[[DVNEXT]], %{{.*}} g(%[[GNEXT]] : {{.*}}) outs({{.*}}) {reverse, scale = 1.000000e+00 : f32}
// CHECK: la.recurrence decay(scalar) low_rank(none) %[[DV]], %[[X]], %[[BW]] g(%{{.*}} : {{.*}}) outs({{.*}}) {scale = 1.000000e+00 : f32}
// CHECK-NOT: la.recurrence_grad
// CHECK: return %[[DQ]], %{{.*}}, %[[DV]], %{{.*}}, %{{.*}}, %{{.*}} :
func.func @gated_delta(%q: !qk, %k: !qk, %v: !v, %g: !h, %beta: !h, %s0: !s,
                       %do: !v) -> (!qk, !qk, !v, !s, !h, !h) {
  %b:6 = la.recurrence_grad decay(scalar) low_rank(delta) %q, %k, %v
      g(%g : !h) beta(%beta : !h) initial_state(%s0 : !s) d_o(%do : !v)
      {scale = 0.5 : f32} : !qk, !qk, !v -> !qk, !qk, !v, !s, !h, !h
  return %b#0, %b#1, %b#2, %b#3, %b#4, %b#5 : !qk, !qk, !v, !s, !h, !h
}

// -----

// The general low-rank form: the reads p_t = S_{t-1}^T a_t (the forward
// recurrence one token later, queried with a) and r_t = G_t^T b_t (the
// transposed transition in reverse time) are general recurrences; given
// them, S^T (reads r_t at S_{t-1} and do_t at S_t), G^T (reads p_t and v_t)
// and G (reads k_t) are diagonal ones over three or two steps per token.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<1x2x4x6xf32>
!g = tensor<1x8x2xf32>

// CHECK-LABEL: func.func @general(
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<1x8x2x4xf32>, %[[K:[a-z0-9]+]]: tensor<1x8x2x4xf32>, %[[V:[a-z0-9]+]]: tensor<1x8x2x6xf32>, %[[G:[a-z0-9]+]]: tensor<1x8x2xf32>, %[[A:[a-z0-9]+]]: tensor<1x8x2x4xf32>, %[[B:[a-z0-9]+]]: tensor<1x8x2x4xf32>, %[[S0:[a-z0-9]+]]: tensor<1x2x4x6xf32>, %[[DO:[a-z0-9]+]]: tensor<1x8x2x6xf32>)
// CHECK: %[[P:[a-z0-9_]+]], %{{.*}} = la.recurrence decay(scalar) low_rank(general) %[[A]], %{{.*}}, %{{.*}} g(%{{.*}} : tensor<1x8x2xf32>) a(%{{.*}}) b(%{{.*}}) outs(%{{.*}}, %[[S0]] : {{.*}}) {scale = 1.000000e+00 : f32}
// CHECK: %[[R:[a-z0-9_]+]], %[[G0:[a-z0-9_]+]] = la.recurrence decay(scalar) low_rank(general) %[[B]], %{{.*}}, %[[DO]] g({{.*}}) a({{.*}}) b({{.*}}) outs({{.*}}) {reverse, scale = 1.000000e+00 : f32}
// CHECK: %[[ST:[a-z0-9_]+]], %[[SFINAL:[a-z0-9_]+]] = la.recurrence decay(scalar) low_rank(none) %{{.*}} g(%{{.*}} : tensor<1x24x2xf32>) outs({{.*}}) {scale = 1.000000e+00 : f32} : tensor<1x24x2x6xf32>, tensor<1x24x2x6xf32>, tensor<1x24x2x4xf32> -> tensor<1x24x2x4xf32>, tensor<1x2x6x4xf32>
// CHECK: %[[ST_STEPS:.*]] = tensor.expand_shape %[[ST]] {{\[}}[0], [1, 2], [3], [4]] output_shape [1, 8, 3, 2, 4]
// CHECK: %[[GT:[a-z0-9_]+]], %{{.*}} = la.recurrence decay(scalar) low_rank(none) %{{.*}} g(%{{.*}} : tensor<1x24x2xf32>) outs({{.*}}) {reverse, scale = 1.000000e+00 : f32} : tensor<1x24x2x6xf32>, tensor<1x24x2x6xf32>, tensor<1x24x2x4xf32>
// CHECK: %[[GV:[a-z0-9_]+]], %{{.*}} = la.recurrence decay(scalar) low_rank(none) %{{.*}} g(%{{.*}} : tensor<1x16x2xf32>) outs({{.*}}) {reverse, scale = 1.000000e+00 : f32} : tensor<1x16x2x4xf32>, tensor<1x16x2x4xf32>, tensor<1x16x2x6xf32>
// CHECK: %[[DV_STEPS:.*]] = tensor.expand_shape %[[GV]] {{\[}}[0], [1, 2], [3], [4]] output_shape [1, 8, 2, 2, 6]
// CHECK: %[[DV:.*]] = tensor.extract_slice %[[DV_STEPS]][0, 0, 0, 0, 0] [1, 8, 1, 2, 6] [1, 1, 1, 1, 1]
// CHECK-NOT: la.recurrence_grad
// CHECK: return %{{.*}}, %{{.*}}, %[[DV]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} :
func.func @general(%q: !qk, %k: !qk, %v: !v, %g: !g, %a: !qk, %b: !qk, %s0: !s,
                   %do: !v) -> (!qk, !qk, !v, !s, !g, !qk, !qk) {
  %r:7 = la.recurrence_grad decay(scalar) low_rank(general) %q, %k, %v
      g(%g : !g) a(%a : !qk) b(%b : !qk) initial_state(%s0 : !s) d_o(%do : !v)
      {scale = 0.5 : f32} : !qk, !qk, !v -> !qk, !qk, !v, !s, !g, !qk, !qk
  return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5, %r#6
      : !qk, !qk, !v, !s, !g, !qk, !qk
}

// -----

// A channel gate with grouped value heads and packed sequences: the gate
// decays the K side of S, the value side of S^T and G^T (their `gv`, per
// value head), and the offsets count sub-steps (times 3 and times 2).
!qk = tensor<1x8x1x4xf32>
!gk = tensor<1x8x1x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<2x2x4x6xf32>

// CHECK-LABEL: func.func @general_channel_packed(
// CHECK-DAG: %[[C3:.*]] = arith.constant 3 : i32
// CHECK-DAG: %[[C2:.*]] = arith.constant 2 : i32
// CHECK: arith.muli %{{.*}}, %[[C3]] : i32
// CHECK: la.recurrence decay(none) low_rank(none) %{{.*}} gv(%{{.*}} : tensor<1x24x2x4xf32>) cu_seqlens(%{{.*}} : tensor<3xi32>) outs({{.*}}) {scale = 1.000000e+00 : f32} : tensor<1x24x2x6xf32>, tensor<1x24x2x6xf32>, tensor<1x24x2x4xf32>
// CHECK: la.recurrence decay(none) low_rank(none) %{{.*}} gv(%{{.*}} : tensor<1x24x2x4xf32>) cu_seqlens(%{{.*}} : tensor<3xi32>) outs({{.*}}) {reverse, scale = 1.000000e+00 : f32}
// CHECK: arith.muli %{{.*}}, %[[C2]] : i32
// CHECK: la.recurrence decay(channel) low_rank(none) %{{.*}} g(%{{.*}} : tensor<1x16x1x4xf32>) cu_seqlens(%{{.*}} : tensor<3xi32>) outs({{.*}}) {reverse, scale = 1.000000e+00 : f32} : tensor<1x16x1x4xf32>, tensor<1x16x1x4xf32>, tensor<1x16x2x6xf32>
func.func @general_channel_packed(%q: !qk, %k: !qk, %v: !v, %g: !gk, %a: !qk,
                                  %b: !qk, %s0: !s, %do: !v,
                                  %cu: tensor<3xi32>)
    -> (!qk, !qk, !v, !s, !gk, !qk, !qk) {
  %r:7 = la.recurrence_grad decay(channel) low_rank(general) %q, %k, %v
      g(%g : !gk) a(%a : !qk) b(%b : !qk) cu_seqlens(%cu : tensor<3xi32>)
      initial_state(%s0 : !s) d_o(%do : !v)
      {scale = 0.5 : f32} : !qk, !qk, !v -> !qk, !qk, !v, !s, !gk, !qk, !qk
  return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5, %r#6
      : !qk, !qk, !v, !s, !gk, !qk, !qk
}

// -----

// A dynamic B and T: the shifted gates keep T - 1 tokens (an affine.apply
// of T read from q) and the gate's reverse sum runs T iterations, so one
// compiled gradient serves every sequence length.
!qk = tensor<?x?x2x4xf32>
!v = tensor<?x?x2x6xf32>
!h = tensor<?x?x2xf32>
!s = tensor<?x2x4x6xf32>

// CHECK-LABEL: func.func @dynamic_time
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}}, %[[G:[^:]*]]: {{.*}}, %{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}})
// CHECK: %[[T:.*]] = tensor.dim %[[Q]], %c1
// CHECK: %[[KEPT:.*]] = affine.apply #{{.*}}()[%[[T]]]
// CHECK: %[[LATER:.*]] = tensor.extract_slice %[[G]][0, 1, 0] [%{{.*}}, %[[KEPT]], 2] [1, 1, 1]
// CHECK: tensor.pad %[[LATER]] low[0, 0, 0] high[0, 1, 0]
// CHECK-COUNT-3: la.recurrence decay(scalar) low_rank(none)
// CHECK: scf.for %{{.*}} = %c0 to %[[T]] step %c1
func.func @dynamic_time(%q: !qk, %k: !qk, %v: !v, %g: !h, %s0: !s,
                        %do: !v) -> (!qk, !qk, !v, !s, !h) {
  %dq, %dk, %dv, %ds0, %dg = la.recurrence_grad decay(scalar) low_rank(none)
      %q, %k, %v g(%g : !h) initial_state(%s0 : !s) d_o(%do : !v)
      {scale = 0.5 : f32} : !qk, !qk, !v -> !qk, !qk, !v, !s, !h
  return %dq, %dk, %dv, %ds0, %dg : !qk, !qk, !v, !s, !h
}

// -----

// A value-side gate gv with a scalar decay and grouped value heads: gv
// decays the V side of S, the key side of the transposed recurrences (dq,
// dk), where the scalar decay is folded into it (a scalar commutes): a
// channel gate [B,T,HV,V]. dv's recurrence keeps both, shifted by one token.
// dS_0 takes gamma_0 too, and dgv (a reverse running sum of o . do - v . dv
// plus colsum(S_T dS_T)) needs o: a fourth recurrence, the forward itself.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x4x6xf32>
!h = tensor<1x8x2xf32>
!s = tensor<1x4x4x6xf32>

// CHECK-LABEL: func.func @mamba2_value_gate
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[GV:[^:]*]]: {{.*}}, %[[S0:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}}, %[[DSF:[^:]*]]: {{.*}})
// CHECK: %[[GVLATER:.*]] = tensor.extract_slice %[[GV]][0, 1, 0, 0] [1, 7, 4, 6] [1, 1, 1, 1]
// CHECK: %[[GVSHIFTED:.*]] = tensor.pad %[[GVLATER]] low[0, 0, 0, 0] high[0, 1, 0, 0]
// CHECK: %[[FOLDED:.*]] = linalg.generic {{.*}} ins(%[[GV]], %{{.*}} : tensor<1x8x4x6xf32>, tensor<1x8x4xf32>)
// CHECK: %{{.*}}, %[[SFT:.*]] = la.recurrence decay(channel) low_rank(none) %[[DO]], %[[V]], %{{.*}} g(%[[FOLDED]] : tensor<1x8x4x6xf32>) outs(
// CHECK-NOT: gv(
// CHECK-SAME: {scale = 5.000000e-01 : f32}
// CHECK: %[[DV:.*]], %[[G0S:.*]] = la.recurrence decay(scalar) low_rank(none) %[[K]], %[[Q]], %[[DO]] g(%{{.*}} : tensor<1x8x2xf32>) gv(%[[GVSHIFTED]] : tensor<1x8x4x6xf32>) outs(%{{.*}}, %{{.*}} : {{.*}}) {reverse, scale = 5.000000e-01 : f32}
// CHECK: %[[G0:.*]] = linalg.generic {{.*}} ins(%[[G0S]] :
// CHECK: %[[GV0:.*]] = tensor.extract_slice %[[GV]][0, 0, 0, 0] [1, 1, 4, 6]
// CHECK: linalg.generic {{.*}} ins(%[[GV0]], %[[G0]] :
// CHECK: la.recurrence decay(channel) low_rank(none) %[[V]], %[[DO]], %{{.*}} g(%{{.*}} : tensor<1x8x4x6xf32>) outs({{.*}}) {reverse, scale = 5.000000e-01 : f32}
// CHECK: %[[O:.*]], %{{.*}} = la.recurrence decay(scalar) low_rank(none) %[[Q]], %[[K]], %[[V]] g(%[[G]] : tensor<1x8x2xf32>) gv(%[[GV]] : tensor<1x8x4x6xf32>) outs(%{{.*}}, %[[S0]] : {{.*}}) {scale = 5.000000e-01 : f32}
// CHECK: %[[FINAL:.*]] = linalg.generic {{.*}} ins(%[[SFT]], %[[DSF]] : tensor<1x4x6x4xf32>, tensor<1x4x4x6xf32>) outs(%{{.*}} : tensor<1x4x6xf32>)
// CHECK: %[[DGV:.*]]:2 = scf.for %{{.*}} iter_args(%{{.*}} = %[[FINAL]], %{{.*}} = %{{.*}})
// CHECK: %[[DOT:.*]] = tensor.extract_slice %[[DO]]
// CHECK: %[[OT:.*]] = tensor.extract_slice %[[O]]
// CHECK: %[[VT:.*]] = tensor.extract_slice %[[V]]
// CHECK: %[[DVT:.*]] = tensor.extract_slice %[[DV]]
// CHECK: linalg.generic {{.*}} ins(%[[DOT]], %[[OT]], %[[VT]], %[[DVT]] :
// CHECK: arith.subf
// CHECK: return %{{.*}}, %{{.*}}, %[[DV]], %{{.*}}, %{{.*}}, %[[DGV]]#1
func.func @mamba2_value_gate(%q: !qk, %k: !qk, %v: !v, %g: !h, %gv: !v,
                             %s0: !s, %do: !v, %dsf: !s)
    -> (!qk, !qk, !v, !s, !h, !v) {
  %dq, %dk, %dv, %ds0, %dg, %dgv = la.recurrence_grad decay(scalar)
      low_rank(none) %q, %k, %v g(%g : !h) gv(%gv : !v)
      initial_state(%s0 : !s) d_o(%do : !v) d_final_state(%dsf : !s)
      {scale = 0.5 : f32} : !qk, !qk, !v -> !qk, !qk, !v, !s, !h, !v
  return %dq, %dk, %dv, %ds0, %dg, %dgv : !qk, !qk, !v, !s, !h, !v
}

// -----

// A channel gate with gv: each keeps its side, swapped in the transposed
// recurrences (gv as their key-side channel gate, g as their `gv`).
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<1x2x4x6xf32>

// CHECK-LABEL: func.func @gla_value_gate
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[GV:[^:]*]]: {{.*}}, %[[S0:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: {{.*}})
// CHECK: la.recurrence decay(channel) low_rank(none) %[[DO]], %[[V]], %[[K]] g(%[[GV]] : tensor<1x8x2x6xf32>) gv(%[[G]] : tensor<1x8x2x4xf32>)
// CHECK: la.recurrence decay(channel) low_rank(none) %[[K]], %[[Q]], %{{.*}} g(%{{.*}} : tensor<1x8x2x4xf32>) gv(%{{.*}} : tensor<1x8x2x6xf32>) {{.*}}reverse
// CHECK: la.recurrence decay(channel) low_rank(none) %[[V]], %[[DO]], %{{.*}} g(%{{.*}} : tensor<1x8x2x6xf32>) gv(%{{.*}} : tensor<1x8x2x4xf32>) {{.*}}reverse
// CHECK: la.recurrence decay(channel) low_rank(none) %[[Q]], %[[K]], %[[V]] g(%[[G]] : tensor<1x8x2x4xf32>) gv(%[[GV]] : tensor<1x8x2x6xf32>)
// CHECK-NOT: la.recurrence
// CHECK: return
func.func @gla_value_gate(%q: !qk, %k: !qk, %v: !v, %g: !qk, %gv: !v,
                          %s0: !s, %do: !v) -> (!qk, !v) {
  %dq, %dk, %dv, %ds0, %dg, %dgv = la.recurrence_grad decay(channel)
      low_rank(none) %q, %k, %v g(%g : !qk) gv(%gv : !v)
      initial_state(%s0 : !s) d_o(%do : !v) {scale = 0.5 : f32}
      : !qk, !qk, !v -> !qk, !qk, !v, !s, !qk, !v
  return %dg, %dgv : !qk, !v
}
