// RUN: la-opt %s -split-input-file -la-lower-to-recurrence | FileCheck %s
// RUN: la-opt %s -split-input-file -la-lower-to-recurrence=expand-query-groups=true | FileCheck %s --check-prefix=EXPAND

!qk = tensor<2x8x2x16xf32>
!v = tensor<2x8x4x6xf32>

// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[Q:.*]]: tensor<2x8x2x16xf32>, %[[K:.*]]: tensor<2x8x2x16xf32>, %[[V:.*]]: tensor<2x8x4x6xf32>)
// CHECK-NOT: la.attention
// CHECK: %[[O:[^ ,]*]], %{{.*}} = la.recurrence decay(none) low_rank(none) %[[Q]], %[[K]], %[[V]] outs({{.*}}) {scale = 2.500000e-01 : f32}
// CHECK: return %[[O]]
func.func @linear(%q: !qk, %k: !qk, %v: !v) -> !v {
  %o = la.attention linear %q, %k, %v : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<2x8x2x16xf32>
!v = tensor<2x8x4x6xf32>
!s = tensor<2x4x16x6xf32>

// CHECK-LABEL: func.func @linear_normalizer
// CHECK-SAME: %[[S0:[^:]*]]: tensor<2x4x16x6xf32>)
// CHECK: %[[O:.*]], %[[S:.*]] = la.recurrence decay(none) low_rank(none) %{{.*}}, %{{.*}}, %{{.*}} outs(%{{.*}}, %[[S0]] : {{.*}}) {eps = 9.99999997E-7 : f32, normalizer, scale = 5.000000e-01 : f32}
// CHECK: return %[[O]], %[[S]]
func.func @linear_normalizer(%q: !qk, %k: !qk, %v: !v, %s0: !s) -> (!v, !s) {
  %o, %s = la.attention linear %q, %k, %v initial_state(%s0 : !s) {normalizer, scale = 0.5 : f32} : !qk, !qk, !v -> !v, !s
  return %o, %s : !v, !s
}

// -----

!qk = tensor<1x8x2x16xbf16>
!v = tensor<1x8x2x6xbf16>

// CHECK-LABEL: func.func @retention
// CHECK: la.recurrence decay(fixed) low_rank(none) %{{.*}} outs({{.*}}) {log_decay = array<f32: -3.125000e-02, -1.562500e-02>, scale = 2.500000e-01 : f32} : tensor<1x8x2x16xbf16>, tensor<1x8x2x16xbf16>, tensor<1x8x2x6xbf16> -> tensor<1x8x2x6xbf16>
func.func @retention(%q: !qk, %k: !qk, %v: !v) -> !v {
  %o = la.attention retention %q, %k, %v {log_decay = array<f32: -0.03125, -0.015625>} : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x?x2x4xf32>
!v = tensor<1x?x2x6xf32>
!g = tensor<1x?x2xf32>

// CHECK-LABEL: func.func @mamba2
// CHECK-SAME: %[[G:[^:]*]]: tensor<1x?x2xf32>)
// CHECK: la.recurrence decay(scalar) low_rank(none) %{{.*}}, %{{.*}}, %{{.*}} g(%[[G]] : tensor<1x?x2xf32>) outs({{.*}}) {scale = 5.000000e-01 : f32}
func.func @mamba2(%q: !qk, %k: !qk, %v: !v, %g: !g) -> !v {
  %o = la.attention mamba2 %q, %k, %v g(%g : !g) : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

// CHECK-LABEL: func.func @gla
// CHECK-SAME: %[[G:[^:]*]]: tensor<1x8x2x4xf32>)
// CHECK: la.recurrence decay(channel) low_rank(none) %{{.*}}, %{{.*}}, %{{.*}} g(%[[G]] : tensor<1x8x2x4xf32>)
func.func @gla(%q: !qk, %k: !qk, %v: !v, %g: !qk) -> !v {
  %o = la.attention gla %q, %k, %v g(%g : !qk) : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!b = tensor<1x8x2xf32>

// The in-kernel L2 normalisation becomes a sum-of-squares reduction over K
// and a scaling by its reciprocal square root, for q and for k.
// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-DAG: #[[ROW:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @deltanet
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x8x2x4xf32>, %[[K:[^:]*]]: tensor<1x8x2x4xf32>, %[[V:[^:]*]]: tensor<1x8x2x6xf32>, %[[BETA:[^:]*]]: tensor<1x8x2xf32>)
// CHECK-DAG: %[[EPS:.*]] = arith.constant 9.99999997E-7 : f32
// CHECK-DAG: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[FILL:.*]] = linalg.fill ins(%[[ZERO]] : f32)
// CHECK: %[[QSUM:.*]] = linalg.generic {indexing_maps = [#[[ID]], #[[ROW]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[Q]] : tensor<1x8x2x4xf32>) outs(%[[FILL]] : tensor<1x8x2xf32>)
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: %[[QN:.*]] = linalg.generic {indexing_maps = [#[[ID]], #[[ROW]], #[[ID]]], {{.*}}} ins(%[[Q]], %[[QSUM]] : tensor<1x8x2x4xf32>, tensor<1x8x2xf32>)
// CHECK: %[[SHIFT:.*]] = arith.addf %{{.*}}, %[[EPS]] : f32
// CHECK: %[[RS:.*]] = math.rsqrt %[[SHIFT]] : f32
// CHECK: arith.mulf %{{.*}}, %[[RS]] : f32
// CHECK: %[[KSUM:.*]] = linalg.generic {{.*}} ins(%[[K]] : tensor<1x8x2x4xf32>)
// CHECK: %[[KN:.*]] = linalg.generic {{.*}} ins(%[[K]], %[[KSUM]] : tensor<1x8x2x4xf32>, tensor<1x8x2xf32>)
// CHECK: la.recurrence decay(none) low_rank(delta) %[[QN]], %[[KN]], %[[V]] beta(%[[BETA]] : tensor<1x8x2xf32>) outs({{.*}}) {scale = 5.000000e-01 : f32}
func.func @deltanet(%q: !qk, %k: !qk, %v: !v, %beta: !b) -> !v {
  %o = la.attention deltanet %q, %k, %v beta(%beta : !b) {qk_l2norm} : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!b = tensor<1x8x2xf32>

// CHECK-LABEL: func.func @decayed_deltanet
// CHECK: la.recurrence decay(fixed) low_rank(delta) {{.*}} beta(%{{.*}} : tensor<1x8x2xf32>) outs({{.*}}) {log_decay = array<f32: -1.000000e+00, -2.000000e+00>, scale = 5.000000e-01 : f32}
func.func @decayed_deltanet(%q: !qk, %k: !qk, %v: !v, %beta: !b) -> !v {
  %o = la.attention decayed_deltanet %q, %k, %v beta(%beta : !b) {log_decay = array<f32: -1.0, -2.0>} : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!b = tensor<1x8x2xf32>
!s = tensor<3x2x4x6xf32>
!cu = tensor<4xi32>

// CHECK-LABEL: func.func @gated_deltanet_varlen
// CHECK-SAME: %[[G:[^:]*]]: tensor<1x8x2xf32>, %[[BETA:[^:]*]]: tensor<1x8x2xf32>, %[[S0:[^:]*]]: tensor<3x2x4x6xf32>, %[[CU:[^:]*]]: tensor<4xi32>)
// CHECK: la.recurrence decay(scalar) low_rank(delta) {{.*}} g(%[[G]] : tensor<1x8x2xf32>) beta(%[[BETA]] : tensor<1x8x2xf32>) cu_seqlens(%[[CU]] : tensor<4xi32>) outs(%{{.*}}, %[[S0]] : {{.*}}) {scale = 5.000000e-01 : f32}
func.func @gated_deltanet_varlen(%q: !qk, %k: !qk, %v: !v, %g: !b, %beta: !b, %s0: !s, %cu: !cu) -> (!v, !s) {
  %o, %s = la.attention gated_deltanet %q, %k, %v g(%g : !b) beta(%beta : !b) initial_state(%s0 : !s) cu_seqlens(%cu : !cu) : !qk, !qk, !v -> !v, !s
  return %o, %s : !v, !s
}

// -----

!qk = tensor<1x8x2x4xbf16>
!v = tensor<1x8x2x6xbf16>
!b = tensor<1x8x2xbf16>

// Normalised bf16 q and k stay f32: no rounding before the recurrence.
// CHECK-LABEL: func.func @kda_bf16
// CHECK: arith.extf %{{.*}} : bf16 to f32
// CHECK: %[[QN:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<1x8x2x4xf32>)
// CHECK: arith.extf %{{.*}} : bf16 to f32
// CHECK: %[[KN:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<1x8x2x4xf32>)
// CHECK: la.recurrence decay(channel) low_rank(delta) %[[QN]], %[[KN]], %{{.*}} g(%{{.*}} : tensor<1x8x2x4xbf16>) beta(%{{.*}} : tensor<1x8x2xbf16>) outs({{.*}}) {scale = 5.000000e-01 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xbf16> -> tensor<1x8x2x6xbf16>
func.func @kda_bf16(%q: !qk, %k: !qk, %v: !v, %g: !qk, %beta: !b) -> !v {
  %o = la.attention kda %q, %k, %v g(%g : !qk) beta(%beta : !b) {qk_l2norm} : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!b = tensor<1x8x2xbf16>

// allow_neg_eigval doubles beta (in f32) before the recurrence.
// CHECK-LABEL: func.func @negative_eigenvalues
// CHECK-SAME: %[[BETA:[^:]*]]: tensor<1x8x2xbf16>)
// CHECK: %[[TWO:.*]] = arith.constant 2.000000e+00 : f32
// CHECK: %[[B2:.*]] = linalg.generic {{.*}} ins(%[[BETA]] : tensor<1x8x2xbf16>) outs(%{{.*}} : tensor<1x8x2xf32>)
// CHECK: %[[EXT:.*]] = arith.extf
// CHECK: arith.mulf %[[EXT]], %[[TWO]] : f32
// CHECK: la.recurrence decay(none) low_rank(delta) {{.*}} beta(%[[B2]] : tensor<1x8x2xf32>)
func.func @negative_eigenvalues(%q: !qk, %k: !qk, %v: !v, %beta: !b) -> !v {
  %o = la.attention deltanet %q, %k, %v beta(%beta : !b) {allow_neg_eigval} : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x8x2x4xbf16>
!v = tensor<1x8x4x6xbf16>

// Gated DeltaNet-2 in the general form: a = exp(g) * k, b = erase * k,
// values write * v, all f32.
// CHECK-LABEL: func.func @gated_deltanet2
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[E:[^:]*]]: {{.*}}, %[[W:[^:]*]]: tensor<1x8x4x6xbf16>)
// CHECK: %[[A:.*]] = linalg.generic {{.*}} ins(%[[K]], %[[G]] : {{.*}}) outs(%{{.*}} : tensor<1x8x2x4xf32>)
// CHECK: math.exp
// CHECK: %[[B:.*]] = linalg.generic {{.*}} ins(%[[E]], %[[K]] : {{.*}}) outs(%{{.*}} : tensor<1x8x2x4xf32>)
// CHECK: %[[WV:.*]] = linalg.generic {{.*}} ins(%[[W]], %[[V]] : {{.*}}) outs(%{{.*}} : tensor<1x8x4x6xf32>)
// CHECK: la.recurrence decay(channel) low_rank(general) %[[Q]], %[[K]], %[[WV]] g(%[[G]] : tensor<1x8x2x4xbf16>) a(%[[A]] : tensor<1x8x2x4xf32>) b(%[[B]] : tensor<1x8x2x4xf32>) outs({{.*}}) {scale = 5.000000e-01 : f32} : {{.*}}, tensor<1x8x4x6xf32> -> tensor<1x8x4x6xbf16>
func.func @gated_deltanet2(%q: !qk, %k: !qk, %v: !v, %g: !qk, %e: !qk, %w: !v) -> !v {
  %o = la.attention gated_deltanet2 %q, %k, %v g(%g : !qk) erase(%e : !qk) write(%w : !v) : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

// Gates per value head (fla's Gated DeltaNet and KDA with HV > H): q and k,
// and beta given per key head, are repeated to one head per value head
// (through a [B,T,H,group,...] tensor, collapsed), and the recurrence runs
// with H = HV on the per-value-head gate as given.
// CHECK-LABEL: func.func @gated_deltanet_value_head_gates
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[BETA:[^:]*]]: {{.*}})
// CHECK: %[[QS:.*]] = linalg.generic {{.*}} ins(%[[Q]] : tensor<1x8x2x16xf32>) outs(%{{.*}} : tensor<1x8x2x2x16xf32>)
// CHECK: %[[QR:.*]] = tensor.collapse_shape %[[QS]] {{\[}}[0], [1], [2, 3], [4]] : tensor<1x8x2x2x16xf32> into tensor<1x8x4x16xf32>
// CHECK: %[[KS:.*]] = linalg.generic {{.*}} ins(%[[K]] : tensor<1x8x2x16xf32>)
// CHECK: %[[KR:.*]] = tensor.collapse_shape %[[KS]]
// CHECK: %[[BS:.*]] = linalg.generic {{.*}} ins(%[[BETA]] : tensor<1x8x2xf32>) outs(%{{.*}} : tensor<1x8x2x2xf32>)
// CHECK: %[[BR:.*]] = tensor.collapse_shape %[[BS]] {{\[}}[0], [1], [2, 3]] : tensor<1x8x2x2xf32> into tensor<1x8x4xf32>
// CHECK: la.recurrence decay(scalar) low_rank(delta) %[[QR]], %[[KR]], %[[V]] g(%[[G]] : tensor<1x8x4xf32>) beta(%[[BR]] : tensor<1x8x4xf32>)
// CHECK-SAME: -> tensor<1x8x4x32xf32>, tensor<1x4x16x32xf32>
func.func @gated_deltanet_value_head_gates(
    %q: tensor<1x8x2x16xf32>, %k: tensor<1x8x2x16xf32>, %v: tensor<1x8x4x32xf32>,
    %g: tensor<1x8x4xf32>, %beta: tensor<1x8x2xf32>) -> tensor<1x8x4x32xf32> {
  %o = la.attention gated_deltanet %q, %k, %v g(%g : tensor<1x8x4xf32>)
      beta(%beta : tensor<1x8x2xf32>)
      : tensor<1x8x2x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x4x32xf32>
      -> tensor<1x8x4x32xf32>
  return %o : tensor<1x8x4x32xf32>
}

// -----

// A fixed decay with a per-value-head beta: log_decay is repeated per value
// head like the key-side operands.
// CHECK-LABEL: func.func @decayed_deltanet_value_head_beta
// CHECK: la.recurrence decay(fixed) low_rank(delta)
// CHECK-SAME: log_decay = array<f32: -1.000000e-01, -1.000000e-01, -2.000000e-01, -2.000000e-01>
func.func @decayed_deltanet_value_head_beta(
    %q: tensor<1x8x2x16xf32>, %k: tensor<1x8x2x16xf32>, %v: tensor<1x8x4x32xf32>,
    %beta: tensor<1x8x4xf32>) -> tensor<1x8x4x32xf32> {
  %o = la.attention decayed_deltanet %q, %k, %v beta(%beta : tensor<1x8x4xf32>)
      {log_decay = array<f32: -0.1, -0.2>}
      : tensor<1x8x2x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x4x32xf32>
      -> tensor<1x8x4x32xf32>
  return %o : tensor<1x8x4x32xf32>
}

// -----

// erase_read_key: (I - k (e * k)^T) Diag(alpha) = Diag(alpha) - k (alpha * e * k)^T,
// so a = e * (alpha * k) and b = k (in f32).
// CHECK-LABEL: func.func @gated_deltanet2_read_key
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[E:[^:]*]]: {{.*}}, %[[W:[^:]*]]: {{.*}})
// CHECK: %[[AK:.*]] = linalg.generic {{.*}} ins(%[[K]], %[[G]] :
// CHECK: math.exp
// CHECK: %[[A:.*]] = linalg.generic {{.*}} ins(%[[E]], %[[AK]] :
// CHECK: %[[B:.*]] = linalg.generic {{.*}} ins(%[[K]] : tensor<1x8x2x4xf32>) outs(%{{.*}} : tensor<1x8x2x4xf32>)
// CHECK: %[[WV:.*]] = linalg.generic {{.*}} ins(%[[W]], %[[V]] :
// CHECK: la.recurrence decay(channel) low_rank(general) %[[Q]], %[[K]], %[[WV]] g(%[[G]] : tensor<1x8x2x4xf32>) a(%[[A]] : tensor<1x8x2x4xf32>) b(%[[B]] : tensor<1x8x2x4xf32>)
func.func @gated_deltanet2_read_key(
    %q: tensor<1x8x2x4xf32>, %k: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>,
    %g: tensor<1x8x2x4xf32>, %e: tensor<1x8x2x4xf32>, %w: tensor<1x8x2x6xf32>)
    -> tensor<1x8x2x6xf32> {
  %o = la.attention gated_deltanet2 %q, %k, %v g(%g : tensor<1x8x2x4xf32>)
      erase(%e : tensor<1x8x2x4xf32>) write(%w : tensor<1x8x2x6xf32>) {erase_read_key}
      : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32>
      -> tensor<1x8x2x6xf32>
  return %o : tensor<1x8x2x6xf32>
}

// -----

// Grouped query heads (ONNX): q has 4 heads over 2 key/value heads. By
// default la.recurrence takes them as they are: k, v, the gate and the state
// keep 2 heads (the state's work is done once per head) and o has 4.
// With expand-query-groups (EXPAND) k, v, the gate and the initial state are
// repeated per query head (head h of the repeated tensors is head h floordiv
// 2), the recurrence runs on 4 heads, and the final state is the first state
// of each group (a slice with stride 2).
// CHECK-LABEL: func.func @grouped_query_heads
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x8x4x16xf32>, %[[K:[^:]*]]: tensor<1x8x2x16xf32>, %[[V:[^:]*]]: tensor<1x8x2x6xf32>, %[[G:[^:]*]]: tensor<1x8x2xf32>, %[[S0:[^:]*]]: tensor<1x2x16x6xf32>)
// CHECK: %[[OI:.*]] = tensor.empty() : tensor<1x8x4x6xf32>
// CHECK: %[[O:.*]], %[[FS:.*]] = la.recurrence decay(scalar) low_rank(none) %[[Q]], %[[K]], %[[V]] g(%[[G]] : tensor<1x8x2xf32>) outs(%[[OI]], %[[S0]] : tensor<1x8x4x6xf32>, tensor<1x2x16x6xf32>)
// CHECK-SAME: : tensor<1x8x4x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x4x6xf32>, tensor<1x2x16x6xf32>
// CHECK: return %[[O]], %[[FS]]
// EXPAND-LABEL: func.func @grouped_query_heads
// EXPAND-SAME: (%[[Q:[^:]*]]: tensor<1x8x4x16xf32>, %[[K:[^:]*]]: tensor<1x8x2x16xf32>, %[[V:[^:]*]]: tensor<1x8x2x6xf32>, %[[G:[^:]*]]: tensor<1x8x2xf32>, %[[S0:[^:]*]]: tensor<1x2x16x6xf32>)
// EXPAND: %[[KS:.*]] = linalg.generic {{.*}} ins(%[[K]] : tensor<1x8x2x16xf32>) outs(%{{.*}} : tensor<1x8x2x2x16xf32>)
// EXPAND: %[[KR:.*]] = tensor.collapse_shape %[[KS]] {{.*}} into tensor<1x8x4x16xf32>
// EXPAND: %[[VS:.*]] = linalg.generic {{.*}} ins(%[[V]] : tensor<1x8x2x6xf32>)
// EXPAND: %[[VR:.*]] = tensor.collapse_shape %[[VS]] {{.*}} into tensor<1x8x4x6xf32>
// EXPAND: %[[GS:.*]] = linalg.generic {{.*}} ins(%[[G]] : tensor<1x8x2xf32>)
// EXPAND: %[[GR:.*]] = tensor.collapse_shape %[[GS]] {{.*}} into tensor<1x8x4xf32>
// EXPAND: %[[SS:.*]] = linalg.generic {{.*}} ins(%[[S0]] : tensor<1x2x16x6xf32>)
// EXPAND: %[[SR:.*]] = tensor.collapse_shape %[[SS]] {{.*}} into tensor<1x4x16x6xf32>
// EXPAND: %[[O:.*]], %[[FS:.*]] = la.recurrence decay(scalar) low_rank(none) %[[Q]], %[[KR]], %[[VR]] g(%[[GR]] : tensor<1x8x4xf32>) outs(%{{.*}}, %[[SR]] : tensor<1x8x4x6xf32>, tensor<1x4x16x6xf32>)
// EXPAND: %[[F:.*]] = tensor.extract_slice %[[FS]][0, 0, 0, 0] [1, 2, 16, 6] [1, 2, 1, 1] : tensor<1x4x16x6xf32> to tensor<1x2x16x6xf32>
// EXPAND: return %[[O]], %[[F]]
func.func @grouped_query_heads(%q: tensor<1x8x4x16xf32>, %k: tensor<1x8x2x16xf32>,
    %v: tensor<1x8x2x6xf32>, %g: tensor<1x8x2xf32>, %s0: tensor<1x2x16x6xf32>)
    -> (tensor<1x8x4x6xf32>, tensor<1x2x16x6xf32>) {
  %o, %s = la.attention mamba2 %q, %k, %v g(%g : tensor<1x8x2xf32>)
      initial_state(%s0 : tensor<1x2x16x6xf32>)
      : tensor<1x8x4x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x2x6xf32>
      -> tensor<1x8x4x6xf32>, tensor<1x2x16x6xf32>
  return %o, %s : tensor<1x8x4x6xf32>, tensor<1x2x16x6xf32>
}

// -----

// The dplr rule (RWKV-7): a and b are the level-1 op's general low-rank
// vectors, widened to f32; q, k, v and the gate are used as they are.
!qk = tensor<1x8x2x4xbf16>
!v = tensor<1x8x4x6xbf16>

// CHECK-LABEL: func.func @rwkv7
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[A:[^:]*]]: {{.*}}, %[[B:[^:]*]]: {{.*}})
// CHECK: %[[AF:.*]] = linalg.generic {{.*}} ins(%[[A]] : tensor<1x8x2x4xbf16>) outs(%{{.*}} : tensor<1x8x2x4xf32>)
// CHECK: arith.extf
// CHECK: %[[BF:.*]] = linalg.generic {{.*}} ins(%[[B]] : tensor<1x8x2x4xbf16>) outs(%{{.*}} : tensor<1x8x2x4xf32>)
// CHECK: la.recurrence decay(channel) low_rank(general) %[[Q]], %[[K]], %[[V]] g(%[[G]] : tensor<1x8x2x4xf32>) a(%[[AF]] : tensor<1x8x2x4xf32>) b(%[[BF]] : tensor<1x8x2x4xf32>) outs({{.*}}) {scale = 1.000000e+00 : f32}
func.func @rwkv7(%q: !qk, %k: !qk, %v: !v, %g: tensor<1x8x2x4xf32>, %a: !qk, %b: !qk) -> !v {
  %o = la.attention rwkv7 %q, %k, %v g(%g : tensor<1x8x2x4xf32>) a(%a : !qk) b(%b : !qk) {scale = 1.0 : f32} : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

// fla's value-side gate gv becomes la.recurrence's gv.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

// CHECK-LABEL: func.func @gla_value_gate
// CHECK-SAME: (%{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[GV:[^:]*]]: {{.*}})
// CHECK: la.recurrence decay(channel) low_rank(none) %{{.*}}, %{{.*}}, %{{.*}} g(%[[G]] : tensor<1x8x2x4xf32>) gv(%[[GV]] : tensor<1x8x2x6xf32>) outs(
func.func @gla_value_gate(%q: !qk, %k: !qk, %v: !v, %g: !qk, %gv: !v) -> !v {
  %o = la.attention gla %q, %k, %v g(%g : !qk) gv(%gv : !v) : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

// `reverse` is la.recurrence's.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

// CHECK-LABEL: func.func @reverse
// CHECK: la.recurrence decay(channel) low_rank(none) {{.*}} {reverse, scale = 5.000000e-01 : f32}
func.func @reverse(%q: !qk, %k: !qk, %v: !v, %g: !qk) -> !v {
  %o = la.attention gla %q, %k, %v g(%g : !qk) {reverse} : !qk, !qk, !v -> !v
  return %o : !v
}
