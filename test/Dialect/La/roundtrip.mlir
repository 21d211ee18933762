// RUN: la-opt %s -split-input-file | FileCheck %s
// RUN: la-opt %s -split-input-file | la-opt -split-input-file | FileCheck %s
// RUN: la-opt %s -split-input-file -mlir-print-op-generic | la-opt -split-input-file | FileCheck %s
// RUN: la-opt %s -split-input-file -mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC

!qk = tensor<2x8x2x4xf32>
!v = tensor<2x8x2x6xf32>
!s = tensor<2x2x4x6xf32>

// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[Q:.*]]: tensor<2x8x2x4xf32>, %[[K:.*]]: tensor<2x8x2x4xf32>, %[[V:.*]]: tensor<2x8x2x6xf32>)
// CHECK: %[[O:.*]] = la.attention linear %[[Q]], %[[K]], %[[V]] : tensor<2x8x2x4xf32>, tensor<2x8x2x4xf32>, tensor<2x8x2x6xf32> -> tensor<2x8x2x6xf32>
// CHECK: return %[[O]]
// GENERIC-LABEL: sym_name = "linear"
// GENERIC: "la.attention"
// GENERIC-SAME: gate = #la<gate none>
// GENERIC-SAME: update = #la<update additive>
func.func @linear(%q: !qk, %k: !qk, %v: !v) -> !v {
  %o = la.attention linear %q, %k, %v : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<2x8x2x4xf32>
!v = tensor<2x8x2x6xf32>
!s = tensor<2x2x4x6xf32>

// CHECK-LABEL: func.func @linear_normalized
// CHECK: la.attention linear %{{.*}}, %{{.*}}, %{{.*}} initial_state(%{{.*}} : tensor<2x2x4x6xf32>) {eps = 1.000000e-03 : f32, normalizer, scale = 5.000000e-01 : f32}
// CHECK-SAME: -> tensor<2x8x2x6xf32>, tensor<2x2x4x6xf32>
// GENERIC-LABEL: sym_name = "linear_normalized"
// GENERIC: operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0>
func.func @linear_normalized(%q: !qk, %k: !qk, %v: !v, %s0: !s) -> (!v, !s) {
  %o, %s = la.attention linear %q, %k, %v initial_state(%s0 : !s) {normalizer, eps = 1.0e-3 : f32, scale = 0.5 : f32} : !qk, !qk, !v -> !v, !s
  return %o, %s : !v, !s
}

// -----

!qk = tensor<1x8x2x4xbf16>
!v = tensor<1x8x4x6xbf16>

// CHECK-LABEL: func.func @retention
// CHECK: la.attention retention %{{.*}}, %{{.*}}, %{{.*}} {log_decay = array<f32: -3.125000e-02, -1.562500e-02>} : tensor<1x8x2x4xbf16>, tensor<1x8x2x4xbf16>, tensor<1x8x4x6xbf16> -> tensor<1x8x4x6xbf16>
// GENERIC-LABEL: sym_name = "retention"
// GENERIC: gate = #la<gate fixed>
func.func @retention(%q: !qk, %k: !qk, %v: !v) -> !v {
  %o = la.attention retention %q, %k, %v {log_decay = array<f32: -0.03125, -0.015625>} : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x?x2x4xf16>
!v = tensor<1x?x2x6xf16>
!g = tensor<1x?x2xf32>

// CHECK-LABEL: func.func @mamba2
// CHECK: la.attention mamba2 %{{.*}}, %{{.*}}, %{{.*}} g(%{{.*}} : tensor<1x?x2xf32>) : tensor<1x?x2x4xf16>
func.func @mamba2(%q: !qk, %k: !qk, %v: !v, %g: !g) -> !v {
  %o = la.attention mamba2 %q, %k, %v g(%g : !g) : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<1x2x4x6xf32>

// CHECK-LABEL: func.func @gla
// CHECK: la.attention gla %{{.*}}, %{{.*}}, %{{.*}} g(%{{.*}} : tensor<1x8x2x4xf32>) initial_state(%{{.*}} : tensor<1x2x4x6xf32>)
// GENERIC-LABEL: sym_name = "gla"
// GENERIC: gate = #la<gate channel>
func.func @gla(%q: !qk, %k: !qk, %v: !v, %g: !qk, %s0: !s) -> (!v, !s) {
  %o, %s = la.attention gla %q, %k, %v g(%g : !qk) initial_state(%s0 : !s) : !qk, !qk, !v -> !v, !s
  return %o, %s : !v, !s
}

// -----

// fla's value-side gate gv, with and without a key-side gate.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

// CHECK-LABEL: func.func @value_gate
// CHECK: la.attention gla %{{.*}}, %{{.*}}, %{{.*}} g(%{{.*}} : tensor<1x8x2x4xf32>) gv(%{{.*}} : tensor<1x8x2x6xf32>) :
// CHECK: la.attention linear %{{.*}}, %{{.*}}, %{{.*}} gv(%{{.*}} : tensor<1x8x2x6xf32>) :
// GENERIC-LABEL: sym_name = "value_gate"
// GENERIC: operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0>
func.func @value_gate(%q: !qk, %k: !qk, %v: !v, %g: !qk, %gv: !v) -> (!v, !v) {
  %o = la.attention gla %q, %k, %v g(%g : !qk) gv(%gv : !v) : !qk, !qk, !v -> !v
  %p = la.attention linear %q, %k, %v gv(%gv : !v) : !qk, !qk, !v -> !v
  return %o, %p : !v, !v
}

// -----

// Backward in time.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

// CHECK-LABEL: func.func @reverse
// CHECK: la.attention linear %{{.*}}, %{{.*}}, %{{.*}} {reverse} :
// GENERIC-LABEL: sym_name = "reverse"
// GENERIC: reverse
func.func @reverse(%q: !qk, %k: !qk, %v: !v) -> !v {
  %o = la.attention linear %q, %k, %v {reverse} : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!b = tensor<1x8x2xf32>

// CHECK-LABEL: func.func @deltanet
// CHECK: la.attention deltanet %{{.*}}, %{{.*}}, %{{.*}} beta(%{{.*}} : tensor<1x8x2xf32>) {allow_neg_eigval, qk_l2norm}
// GENERIC-LABEL: sym_name = "deltanet"
// GENERIC: update = #la<update delta>
func.func @deltanet(%q: !qk, %k: !qk, %v: !v, %beta: !b) -> !v {
  %o = la.attention deltanet %q, %k, %v beta(%beta : !b) {qk_l2norm, allow_neg_eigval} : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!b = tensor<1x8x2xf32>

// CHECK-LABEL: func.func @decayed_deltanet
// CHECK: la.attention decayed_deltanet %{{.*}}, %{{.*}}, %{{.*}} beta(%{{.*}} : tensor<1x8x2xf32>) {log_decay = array<f32: -1.000000e+00, -2.000000e+00>}
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
// CHECK: la.attention gated_deltanet %{{.*}}, %{{.*}}, %{{.*}} g(%{{.*}} : tensor<1x8x2xf32>) beta(%{{.*}} : tensor<1x8x2xf32>) initial_state(%{{.*}} : tensor<3x2x4x6xf32>) cu_seqlens(%{{.*}} : tensor<4xi32>)
func.func @gated_deltanet_varlen(%q: !qk, %k: !qk, %v: !v, %g: !b, %beta: !b, %s0: !s, %cu: !cu) -> (!v, !s) {
  %o, %s = la.attention gated_deltanet %q, %k, %v g(%g : !b) beta(%beta : !b) initial_state(%s0 : !s) cu_seqlens(%cu : !cu) : !qk, !qk, !v -> !v, !s
  return %o, %s : !v, !s
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!b = tensor<1x8x2xf32>

// CHECK-LABEL: func.func @kda
// CHECK: la.attention kda %{{.*}}, %{{.*}}, %{{.*}} g(%{{.*}} : tensor<1x8x2x4xf32>) beta(%{{.*}} : tensor<1x8x2xf32>)
func.func @kda(%q: !qk, %k: !qk, %v: !v, %g: !qk, %beta: !b) -> !v {
  %o = la.attention kda %q, %k, %v g(%g : !qk) beta(%beta : !b) : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xbf16>
!b = tensor<1x8x2xf32>
!s = tensor<1x2x4x6xf32>

// CHECK-LABEL: func.func @recurrence_delta
// CHECK: %{{.*}}, %{{.*}} = la.recurrence decay(channel) low_rank(delta) %{{.*}}, %{{.*}}, %{{.*}} g(%{{.*}} : tensor<1x8x2x4xf32>) beta(%{{.*}} : tensor<1x8x2xf32>) outs({{.*}}) {scale = 5.000000e-01 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xbf16> -> tensor<1x8x2x6xbf16>, tensor<1x2x4x6xf32>
// GENERIC-LABEL: sym_name = "recurrence_delta"
// GENERIC: "la.recurrence"
// GENERIC-SAME: low_rank = #la<low_rank delta>
func.func @recurrence_delta(%q: !qk, %k: !qk, %v: !v, %g: !qk, %beta: !b) -> (!v, !s) {
  %oi0 = tensor.empty() : !v
  %zs0 = arith.constant dense<0.0> : !s
  %o, %s = la.recurrence decay(channel) low_rank(delta) %q, %k, %v g(%g : !qk) beta(%beta : !b) outs(%oi0, %zs0 : !v, !s) {scale = 0.5 : f32} : !qk, !qk, !v -> !v, !s
  return %o, %s : !v, !s
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

// CHECK-LABEL: func.func @recurrence_general
// CHECK: la.recurrence decay(none) low_rank(general) %{{.*}}, %{{.*}}, %{{.*}} a(%{{.*}} : tensor<1x8x2x4xf32>) b(%{{.*}} : tensor<1x8x2x4xf32>) outs({{.*}}) {scale = 1.000000e+00 : f32}
func.func @recurrence_general(%q: !qk, %k: !qk, %v: !v, %a: !qk, %b: !qk) -> !v {
  %oi1 = tensor.empty() : !v
  %zs1 = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  %o, %fs1 = la.recurrence decay(none) low_rank(general) %q, %k, %v a(%a : !qk) b(%b : !qk) outs(%oi1, %zs1 : !v, tensor<1x2x4x6xf32>) {scale = 1.0 : f32} : !qk, !qk, !v -> !v, tensor<1x2x4x6xf32>
  return %o : !v
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

// CHECK-LABEL: func.func @recurrence_fixed_normalizer
// CHECK: la.recurrence decay(fixed) low_rank(none) %{{.*}}, %{{.*}}, %{{.*}} outs({{.*}}) {eps = 9.99999997E-7 : f32, log_decay = array<f32: -5.000000e-01, -2.500000e-01>, normalizer, scale = 5.000000e-01 : f32}
func.func @recurrence_fixed_normalizer(%q: !qk, %k: !qk, %v: !v) -> !v {
  %oi2 = tensor.empty() : !v
  %zs2 = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  %o, %fs2 = la.recurrence decay(fixed) low_rank(none) %q, %k, %v outs(%oi2, %zs2 : !v, tensor<1x2x4x6xf32>) {log_decay = array<f32: -0.5, -0.25>, normalizer, eps = 1.0e-6 : f32, scale = 0.5 : f32} : !qk, !qk, !v -> !v, tensor<1x2x4x6xf32>
  return %o : !v
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x4x6xf32>

// CHECK-LABEL: func.func @gated_deltanet2
// CHECK: la.attention gated_deltanet2 %{{.*}}, %{{.*}}, %{{.*}} g(%{{.*}} : tensor<1x8x2x4xf32>) erase(%{{.*}} : tensor<1x8x2x4xf32>) write(%{{.*}} : tensor<1x8x4x6xf32>) {qk_l2norm}
// GENERIC-LABEL: sym_name = "gated_deltanet2"
// GENERIC: update = #la<update erase_write>
func.func @gated_deltanet2(%q: !qk, %k: !qk, %v: !v, %g: !qk, %e: !qk, %w: !v) -> !v {
  %o = la.attention gated_deltanet2 %q, %k, %v g(%g : !qk) erase(%e : !qk) write(%w : !v) {qk_l2norm} : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

// The erase gate on the read key (flash-linear-attention's Gated DeltaNet-2),
// with the gates per value head.
!qk = tensor<1x8x2x4xf32>
!hvk = tensor<1x8x4x4xf32>
!v = tensor<1x8x4x6xf32>

// CHECK-LABEL: func.func @gated_deltanet2_read_key
// CHECK: la.attention gated_deltanet2 %{{.*}}, %{{.*}}, %{{.*}} g(%{{.*}} : tensor<1x8x4x4xf32>) erase(%{{.*}} : tensor<1x8x4x4xf32>) write(%{{.*}} : tensor<1x8x4x6xf32>) {erase_read_key}
// GENERIC-LABEL: sym_name = "gated_deltanet2_read_key"
// GENERIC: erase_read_key
func.func @gated_deltanet2_read_key(%q: !qk, %k: !qk, %v: !v, %g: !hvk, %e: !hvk, %w: !v) -> !v {
  %o = la.attention gated_deltanet2 %q, %k, %v g(%g : !hvk) erase(%e : !hvk) write(%w : !v) {erase_read_key} : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

// The task mapping of la-fuse-recurrence's forall.
// CHECK-LABEL: func.func @task_mapping
// CHECK: } {mapping = [#la.task<0>, #la.task<1>]}
func.func @task_mapping(%t: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %r = scf.forall (%i, %j) in (2, 3) shared_outs(%o = %t) -> tensor<2x3xf32> {
    scf.forall.in_parallel {
    }
  } {mapping = [#la.task<0>, #la.task<1>]}
  return %r : tensor<2x3xf32>
}

// -----

// Grouped query heads (ONNX's direction): q has 4 heads over k's and v's 2;
// o has q's heads, the states k's.
// CHECK-LABEL: func.func @grouped_query_heads
// CHECK: %[[O:.*]], %[[S:.*]] = la.attention gated_deltanet %{{.*}}, %{{.*}}, %{{.*}} g(%{{.*}} : tensor<1x8x2xf32>) beta(%{{.*}} : tensor<1x8x2xf32>) : tensor<1x8x4x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x4x6xf32>, tensor<1x2x4x6xf32>
// CHECK: return %[[O]], %[[S]]
// GENERIC-LABEL: sym_name = "grouped_query_heads"
// GENERIC: "la.attention"
func.func @grouped_query_heads(%q: tensor<1x8x4x4xf32>, %k: tensor<1x8x2x4xf32>,
    %v: tensor<1x8x2x6xf32>, %g: tensor<1x8x2xf32>, %b: tensor<1x8x2xf32>)
    -> (tensor<1x8x4x6xf32>, tensor<1x2x4x6xf32>) {
  %o, %s = la.attention gated_deltanet %q, %k, %v g(%g : tensor<1x8x2xf32>)
      beta(%b : tensor<1x8x2xf32>)
      : tensor<1x8x4x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32>
      -> tensor<1x8x4x6xf32>, tensor<1x2x4x6xf32>
  return %o, %s : tensor<1x8x4x6xf32>, tensor<1x2x4x6xf32>
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

// CHECK-LABEL: func.func @recurrence_value_gate
// CHECK-SAME: (%{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[GV:[^:]*]]: {{.*}})
// CHECK: la.recurrence decay(channel) low_rank(none) %{{.*}}, %{{.*}}, %{{.*}} g(%[[G]] : tensor<1x8x2x4xf32>) gv(%[[GV]] : tensor<1x8x2x6xf32>) outs({{.*}}) {scale = 1.000000e+00 : f32}
// GENERIC-LABEL: sym_name = "recurrence_value_gate"
// GENERIC: "la.recurrence"
// GENERIC-SAME: operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 2>
func.func @recurrence_value_gate(%q: !qk, %k: !qk, %v: !v, %g: !qk, %gv: !v) -> !v {
  %oi = tensor.empty() : !v
  %zs = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  %o, %s = la.recurrence decay(channel) low_rank(none) %q, %k, %v g(%g : !qk) gv(%gv : !v) outs(%oi, %zs : !v, tensor<1x2x4x6xf32>) {scale = 1.0 : f32} : !qk, !qk, !v -> !v, tensor<1x2x4x6xf32>
  return %o : !v
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

// CHECK-LABEL: func.func @recurrence_reverse
// CHECK: la.recurrence decay(none) low_rank(none) {{.*}} {reverse, scale = 1.000000e+00 : f32}
// GENERIC-LABEL: sym_name = "recurrence_reverse"
// GENERIC: "la.recurrence"
// GENERIC-SAME: reverse
func.func @recurrence_reverse(%q: !qk, %k: !qk, %v: !v) -> !v {
  %oi = tensor.empty() : !v
  %zs = arith.constant dense<0.0> : tensor<1x2x4x6xf32>
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %k, %v outs(%oi, %zs : !v, tensor<1x2x4x6xf32>) {reverse, scale = 1.0 : f32} : !qk, !qk, !v -> !v, tensor<1x2x4x6xf32>
  return %o : !v
}

// -----

// The dplr rule (RWKV-7 with a channel gate): explicit low-rank a and b.
!qk = tensor<1x8x2x4xbf16>
!v = tensor<1x8x4x6xbf16>

// CHECK-LABEL: func.func @rwkv7
// CHECK: la.attention rwkv7 %{{.*}}, %{{.*}}, %{{.*}} g(%{{.*}} : tensor<1x8x2x4xf32>) a(%{{.*}} : tensor<1x8x2x4xbf16>) b(%{{.*}} : tensor<1x8x2x4xbf16>) {scale = 1.000000e+00 : f32}
// GENERIC-LABEL: sym_name = "rwkv7"
// GENERIC: update = #la<update dplr>
func.func @rwkv7(%q: !qk, %k: !qk, %v: !v, %g: tensor<1x8x2x4xf32>, %a: !qk, %b: !qk) -> !v {
  %o = la.attention rwkv7 %q, %k, %v g(%g : tensor<1x8x2x4xf32>) a(%a : !qk) b(%b : !qk) {scale = 1.0 : f32} : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

// CHECK-LABEL: func.func @dplr_grad
// CHECK: la.attention_grad dplr %{{.*}}, %{{.*}}, %{{.*}} a(%{{.*}} : tensor<1x8x2x4xf32>) b(%{{.*}} : tensor<1x8x2x4xf32>) d_o(%{{.*}} : tensor<1x8x2x6xf32>)
// GENERIC-LABEL: sym_name = "dplr_grad"
// GENERIC: update = #la<update dplr>
func.func @dplr_grad(%q: !qk, %a: !qk, %b: !qk, %v: !v) -> (!qk, !qk) {
  %dq, %dk, %dv, %da, %db = la.attention_grad dplr %q, %q, %v a(%a : !qk) b(%b : !qk) d_o(%v : !v) : !qk, !qk, !v -> !qk, !qk, !v, !qk, !qk
  return %da, %db : !qk, !qk
}

// -----

// Grouped query heads at level 1 (HQ = 4 query heads over HV = 2 states
// over H = 1 key head) and a chunk_inter whose states serve two output
// heads each.
// CHECK-LABEL: func.func @grouped_query_heads
// CHECK: la.recurrence decay(none) low_rank(none) %{{.*}}, %{{.*}}, %{{.*}} outs(%{{.*}}, %{{.*}} : tensor<1x8x4x6xf32>, tensor<1x2x4x6xf32>) {scale = 5.000000e-01 : f32} : tensor<1x8x4x4xf32>, tensor<1x8x1x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x4x6xf32>, tensor<1x2x4x6xf32>
// CHECK: la.chunk_inter %{{.*}}, %{{.*}}, %{{.*}} {scale = 5.000000e-01 : f32} : tensor<1x2x16x4x4xf32>, tensor<1x2x2x4x8xf32>, tensor<1x2x16x4x8xf32> -> tensor<1x2x16x4x8xf32>
// GENERIC-LABEL: sym_name = "grouped_query_heads"
// GENERIC: "la.recurrence"
func.func @grouped_query_heads(%q: tensor<1x8x4x4xf32>, %k: tensor<1x8x1x4xf32>, %v: tensor<1x8x2x6xf32>, %oi: tensor<1x8x4x6xf32>, %s0: tensor<1x2x4x6xf32>, %qc: tensor<1x2x16x4x4xf32>, %states: tensor<1x2x2x4x8xf32>, %intra: tensor<1x2x16x4x8xf32>) -> (tensor<1x8x4x6xf32>, tensor<1x2x16x4x8xf32>) {
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %k, %v outs(%oi, %s0 : tensor<1x8x4x6xf32>, tensor<1x2x4x6xf32>) {scale = 0.5 : f32} : tensor<1x8x4x4xf32>, tensor<1x8x1x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x4x6xf32>, tensor<1x2x4x6xf32>
  %oc = la.chunk_inter %qc, %states, %intra {scale = 0.5 : f32} : tensor<1x2x16x4x4xf32>, tensor<1x2x2x4x8xf32>, tensor<1x2x16x4x8xf32> -> tensor<1x2x16x4x8xf32>
  return %o, %oc : tensor<1x8x4x6xf32>, tensor<1x2x16x4x8xf32>
}

// -----

// LoLCATs' hybrid at level 0, plain and over packed sequences (scripts/
// check-gcc.sh lowers these too: the decomposition's IR must not depend on
// the compiler that built la).
// CHECK-LABEL: func.func @sliding_window_hybrid
// CHECK: la.sliding_window_hybrid %{{.*}}, %{{.*}}, %{{.*}} features(%{{.*}} : tensor<2x40x2x3xf32>, %{{.*}} : tensor<2x40x2x3xf32>) {scale = 5.000000e-01 : f32, window = 20 : i64} : tensor<2x40x2x4xf32>, tensor<2x40x2x4xf32>, tensor<2x40x2x6xf32> -> tensor<2x40x2x6xf32>
// CHECK: la.sliding_window_hybrid %{{.*}}, %{{.*}}, %{{.*}} features(%{{.*}} : tensor<1x40x2x3xf32>, %{{.*}} : tensor<1x40x2x3xf32>) cu_seqlens(%{{.*}} : tensor<3xi32>) {window = 70 : i64}
// GENERIC-LABEL: sym_name = "sliding_window_hybrid"
// GENERIC: "la.sliding_window_hybrid"
func.func @sliding_window_hybrid(%q: tensor<2x40x2x4xf32>, %v: tensor<2x40x2x6xf32>, %f: tensor<2x40x2x3xf32>, %pq: tensor<1x40x2x4xf32>, %pv: tensor<1x40x2x6xf32>, %pf: tensor<1x40x2x3xf32>, %cu: tensor<3xi32>) -> (tensor<2x40x2x6xf32>, tensor<1x40x2x6xf32>) {
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<2x40x2x3xf32>, %f : tensor<2x40x2x3xf32>) {window = 20 : i64, scale = 0.5 : f32} : tensor<2x40x2x4xf32>, tensor<2x40x2x4xf32>, tensor<2x40x2x6xf32> -> tensor<2x40x2x6xf32>
  %po = la.sliding_window_hybrid %pq, %pq, %pv features(%pf : tensor<1x40x2x3xf32>, %pf : tensor<1x40x2x3xf32>) cu_seqlens(%cu : tensor<3xi32>) {window = 70 : i64} : tensor<1x40x2x4xf32>, tensor<1x40x2x4xf32>, tensor<1x40x2x6xf32> -> tensor<1x40x2x6xf32>
  return %o, %po : tensor<2x40x2x6xf32>, tensor<1x40x2x6xf32>
}

// -----

// The hybrid with context tokens (keys before the queries), an initial
// state and the final state.
// CHECK-LABEL: func.func @sliding_window_hybrid_state
// CHECK: %{{.*}}, %{{.*}} = la.sliding_window_hybrid %{{.*}}, %{{.*}}, %{{.*}} features(%{{.*}} : tensor<2x8x2x3xf32>, %{{.*}} : tensor<2x40x2x3xf32>) initial_state(%{{.*}} : tensor<2x2x3x7xf32>) {window = 32 : i64} : tensor<2x8x2x4xf32>, tensor<2x40x2x4xf32>, tensor<2x40x2x6xf32> -> tensor<2x8x2x6xf32>, tensor<2x2x3x7xf32>
// GENERIC-LABEL: sym_name = "sliding_window_hybrid_state"
// GENERIC: "la.sliding_window_hybrid"({{.*}}) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 1>, window = 32 : i64}>
func.func @sliding_window_hybrid_state(%q: tensor<2x8x2x4xf32>, %k: tensor<2x40x2x4xf32>, %v: tensor<2x40x2x6xf32>, %fq: tensor<2x8x2x3xf32>, %fk: tensor<2x40x2x3xf32>, %s0: tensor<2x2x3x7xf32>) -> (tensor<2x8x2x6xf32>, tensor<2x2x3x7xf32>) {
  %o, %s = la.sliding_window_hybrid %q, %k, %v features(%fq : tensor<2x8x2x3xf32>, %fk : tensor<2x40x2x3xf32>) initial_state(%s0 : tensor<2x2x3x7xf32>) {window = 32 : i64} : tensor<2x8x2x4xf32>, tensor<2x40x2x4xf32>, tensor<2x40x2x6xf32> -> tensor<2x8x2x6xf32>, tensor<2x2x3x7xf32>
  return %o, %s : tensor<2x8x2x6xf32>, tensor<2x2x3x7xf32>
}
