// RUN: la-opt %s -split-input-file -la-derive-backward="checkpoint=16" | FileCheck %s
// RUN: la-opt %s -split-input-file -la-derive-backward="keep-forward=0 suffix=_bwd" | FileCheck %s --check-prefix=ONLY

// One layer: the gradient function takes the arguments, then one cotangent
// per result, and returns one f32 gradient per float argument; the forward
// stays (or, with keep-forward=0, is erased). Its attributes are copied.
!qk = tensor<1x16x2x8xf32>
!v = tensor<1x16x4x6xf32>
!h = tensor<1x16x2xf32>
!s = tensor<1x4x8x6xf32>

// CHECK-LABEL: func.func @gdn(
// CHECK: la.attention gated_deltanet
// CHECK-LABEL: func.func @gdn_grad(
// CHECK-SAME: %[[Q:[^:]*]]: tensor<1x16x2x8xf32>, %[[K:[^:]*]]: tensor<1x16x2x8xf32>, %[[V:[^:]*]]: tensor<1x16x4x6xf32>, %[[G:[^:]*]]: tensor<1x16x2xf32>, %[[B:[^:]*]]: tensor<1x16x2xf32>, %[[DO:[^:]*]]: tensor<1x16x4x6xf32>, %[[DS:[^:]*]]: tensor<1x4x8x6xf32>)
// CHECK-SAME: -> (tensor<1x16x2x8xf32>, tensor<1x16x2x8xf32>, tensor<1x16x4x6xf32>, tensor<1x16x2xf32>, tensor<1x16x2xf32>)
// CHECK-SAME: attributes {llvm.emit_c_interface}
// CHECK-NOT: la.attention gated_deltanet
// CHECK: %[[DQ:[^,]*]], %[[DK:[^,]*]], %[[DV:[^,]*]], %[[IG:.*]]:2 = la.attention_grad gated_deltanet %[[Q]], %[[K]], %[[V]] g(%[[G]] : tensor<1x16x2xf32>) beta(%[[B]] : tensor<1x16x2xf32>) d_o(%[[DO]] : tensor<1x16x4x6xf32>) d_final_state(%[[DS]] : tensor<1x4x8x6xf32>) {allow_neg_eigval, checkpoint = 16 : i64, qk_l2norm}
// CHECK-NEXT: return %[[DQ]], %[[DK]], %[[DV]], %[[IG]]#0, %[[IG]]#1

// ONLY-NOT: func.func @gdn(
// ONLY-LABEL: func.func @gdn_bwd(
// ONLY: la.attention_grad gated_deltanet {{.*}} {allow_neg_eigval, qk_l2norm}
func.func @gdn(%q: !qk, %k: !qk, %v: !v, %g: !h, %beta: !h) -> (!v, !s)
    attributes {llvm.emit_c_interface} {
  %o, %s = la.attention gated_deltanet %q, %k, %v g(%g : !h) beta(%beta : !h)
      {qk_l2norm, allow_neg_eigval} : !qk, !qk, !v -> !v, !s
  return %o, %s : !v, !s
}

// -----

// A chain: the second layer starts from the first one's final state and
// reads q twice. The first layer is recomputed (its state is the second
// one's input), the second's state gradient becomes the first's
// d_final_state with a zero d_o (its o is unused), and the gradients of q
// (three uses) and v (two) are summed.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<1x2x4x6xf32>

// CHECK-LABEL: func.func @chain_grad(
// CHECK-SAME: %[[Q:[^:]*]]: tensor<1x8x2x4xf32>, %[[K:[^:]*]]: tensor<1x8x2x4xf32>, %[[V:[^:]*]]: tensor<1x8x2x6xf32>, %[[DO:[^:]*]]: tensor<1x8x2x6xf32>)
// CHECK: %{{.*}}, %[[S1:.*]] = la.attention linear %[[Q]], %[[K]], %[[V]]
// CHECK: %[[DQ2:[^,]*]], %[[DK2:[^,]*]], %[[DV2:[^,]*]], %[[DS1:.*]] = la.attention_grad linear %[[Q]], %[[Q]], %[[V]] initial_state(%[[S1]] : tensor<1x2x4x6xf32>) d_o(%[[DO]] : tensor<1x8x2x6xf32>)
// CHECK: %[[SUMQ:.*]] = linalg.generic {{.*}} ins(%[[DQ2]], %[[DK2]] :
// CHECK: arith.addf
// CHECK: %[[ZERO:.*]] = linalg.fill
// CHECK: %[[DQ1:[^,]*]], %[[DK1:[^,]*]], %[[DV1:[^,]*]] = la.attention_grad linear %[[Q]], %[[K]], %[[V]] d_o(%[[ZERO]] : tensor<1x8x2x6xf32>) d_final_state(%[[DS1]] : tensor<1x2x4x6xf32>)
// CHECK: %[[DQ:.*]] = linalg.generic {{.*}} ins(%[[SUMQ]], %[[DQ1]] :
// CHECK: %[[DV:.*]] = linalg.generic {{.*}} ins(%[[DV2]], %[[DV1]] :
// CHECK: return %[[DQ]], %[[DK1]], %[[DV]]
func.func @chain(%q: !qk, %k: !qk, %v: !v) -> !v {
  %o1, %s1 = la.attention linear %q, %k, %v : !qk, !qk, !v -> !v, !s
  %o2 = la.attention linear %q, %q, %v initial_state(%s1 : !s) : !qk, !qk, !v -> !v
  return %o2 : !v
}

// -----

// la.recurrence behind a tensor.cast, with a constant initial state and an
// integer argument: the cast passes the adjoint back (and casts it to the
// argument's type), the fill gets none, the i32 argument no gradient.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<1x2x4x6xf32>

// CHECK-LABEL: func.func @recurrence_grad(
// CHECK-SAME: %[[Q:[^:]*]]: tensor<?x8x2x4xf32>, %[[V:[^:]*]]: tensor<1x8x2x6xf32>, %{{[^:]*}}: tensor<3xi32>, %[[DO:[^:]*]]: tensor<1x8x2x6xf32>, %[[DS:[^:]*]]: tensor<1x2x4x6xf32>)
// CHECK-SAME: -> (tensor<?x8x2x4xf32>, tensor<1x8x2x6xf32>)
// CHECK: %[[QS:.*]] = tensor.cast %[[Q]]
// CHECK: %[[S0:.*]] = linalg.fill
// CHECK: %[[DQ:[^,]*]], %[[DK:[^,]*]], %[[DV:[^,]*]], %{{.*}} = la.recurrence_grad decay(none) low_rank(none) %[[QS]], %[[QS]], %[[V]] initial_state(%[[S0]] : tensor<1x2x4x6xf32>) d_o(%[[DO]] : tensor<1x8x2x6xf32>) d_final_state(%[[DS]] : tensor<1x2x4x6xf32>) {checkpoint = 16 : i64, scale = 5.000000e-01 : f32}
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} ins(%[[DQ]], %[[DK]] :
// CHECK: %[[CAST:.*]] = tensor.cast %[[SUM]] : tensor<1x8x2x4xf32> to tensor<?x8x2x4xf32>
// CHECK: return %[[CAST]], %[[DV]]
func.func @recurrence(%q: tensor<?x8x2x4xf32>, %v: !v, %n: tensor<3xi32>)
    -> (!v, !s) {
  %qs = tensor.cast %q : tensor<?x8x2x4xf32> to !qk
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : !s
  %s0 = linalg.fill ins(%zero : f32) outs(%e : !s) -> !s
  %oi = tensor.empty() : !v
  %o, %s = la.recurrence decay(none) low_rank(none) %qs, %qs, %v
      outs(%oi, %s0 : !v, !s) {scale = 0.5 : f32} : !qk, !qk, !v -> !v, !s
  return %o, %s : !v, !s
}

// -----

// bf16 inputs: the cotangent has the result's type, the gradients are f32;
// an argument that reaches no result gets a zero gradient; the final state
// returned twice sums its two cotangents.
!qk = tensor<1x8x1x4xbf16>
!v = tensor<1x8x1x6xbf16>
!s = tensor<1x1x4x6xf32>

// CHECK-LABEL: func.func @bf16_grad(
// CHECK-SAME: %[[Q:[^:]*]]: tensor<1x8x1x4xbf16>, %[[K:[^:]*]]: tensor<1x8x1x4xbf16>, %[[V:[^:]*]]: tensor<1x8x1x6xbf16>, %[[UNUSED:[^:]*]]: tensor<4xf32>, %[[DO:[^:]*]]: tensor<1x8x1x6xbf16>, %[[DS1:[^:]*]]: tensor<1x1x4x6xf32>, %[[DS2:[^:]*]]: tensor<1x1x4x6xf32>)
// CHECK-SAME: -> (tensor<1x8x1x4xf32>, tensor<1x8x1x4xf32>, tensor<1x8x1x6xf32>, tensor<4xf32>)
// CHECK: %[[DS:.*]] = linalg.generic {{.*}} ins(%[[DS1]], %[[DS2]] :
// CHECK: %[[DQ:[^,]*]], %[[DK:[^,]*]], %[[DV:[^,]*]] = la.attention_grad linear %[[Q]], %[[K]], %[[V]] d_o(%[[DO]] : tensor<1x8x1x6xbf16>) d_final_state(%[[DS]] : tensor<1x1x4x6xf32>)
// CHECK: %[[ZERO:.*]] = linalg.fill
// CHECK: return %[[DQ]], %[[DK]], %[[DV]], %[[ZERO]]
func.func @bf16(%q: !qk, %k: !qk, %v: !v, %unused: tensor<4xf32>)
    -> (!v, !s, !s) {
  %o, %s = la.attention linear %q, %k, %v : !qk, !qk, !v -> !v, !s
  return %o, %s, %s : !v, !s, !s
}

// -----

// The normaliser and its epsilon pass to the gradient op.
!qk = tensor<1x8x1x4xf32>
!v = tensor<1x8x1x6xf32>

// CHECK-LABEL: func.func @normalized_grad(
// CHECK: la.attention_grad gla {{.*}} {checkpoint = 16 : i64, eps = 1.000000e-03 : f32, normalizer}
func.func @normalized(%q: !qk, %k: !qk, %v: !v, %g: !qk) -> !v {
  %o = la.attention gla %q, %k, %v g(%g : !qk) {normalizer, eps = 1.0e-3 : f32}
      : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

// Gated DeltaNet-2 with the erase gate on the read key, gates per value
// head: erase_read_key is copied to the gradient op.
!qk = tensor<1x16x2x8xf32>
!hk = tensor<1x16x4x8xf32>
!v = tensor<1x16x4x6xf32>

// CHECK-LABEL: func.func @gdn2_read_key_grad(
// CHECK: la.attention_grad gated_deltanet2 {{.*}} g(%{{.*}} : tensor<1x16x4x8xf32>) erase(%{{.*}} : tensor<1x16x4x8xf32>) write(%{{.*}} : tensor<1x16x4x6xf32>) d_o(%{{.*}} : tensor<1x16x4x6xf32>) {checkpoint = 16 : i64, erase_read_key}
// ONLY-LABEL: func.func @gdn2_read_key_bwd(
// ONLY: la.attention_grad gated_deltanet2 {{.*}} {erase_read_key}
func.func @gdn2_read_key(%q: !qk, %k: !qk, %v: !v, %g: !hk, %e: !hk, %w: !v) -> !v {
  %o = la.attention gated_deltanet2 %q, %k, %v g(%g : !hk) erase(%e : !hk) write(%w : !v)
      {erase_read_key} : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

// RWKV-7 (the dplr rule): a and b are differentiable inputs; their
// gradients follow g's, before the initial state's.
!qk = tensor<1x16x2x8xf32>
!v = tensor<1x16x2x6xf32>
!s = tensor<1x2x8x6xf32>

// CHECK-LABEL: func.func @rwkv7_grad(
// CHECK-SAME: %[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[A:[^:]*]]: {{.*}}, %[[B:[^:]*]]: {{.*}}, %[[S0:[^:]*]]: {{.*}}, %[[DO:[^:]*]]: tensor<1x16x2x6xf32>)
// CHECK: %[[DQ:[^,]*]], %[[DK:[^,]*]], %[[DV:[^,]*]], %[[IG:.*]]:4 = la.attention_grad rwkv7 %[[Q]], %[[K]], %[[V]] g(%[[G]] : tensor<1x16x2x8xf32>) a(%[[A]] : tensor<1x16x2x8xf32>) b(%[[B]] : tensor<1x16x2x8xf32>) initial_state(%[[S0]] : tensor<1x2x8x6xf32>) d_o(%[[DO]] : tensor<1x16x2x6xf32>) {checkpoint = 16 : i64, scale = 1.000000e+00 : f32}
// CHECK-NEXT: return %[[DQ]], %[[DK]], %[[DV]], %[[IG]]#0, %[[IG]]#1, %[[IG]]#2, %[[IG]]#3
// ONLY-LABEL: func.func @rwkv7_bwd(
// ONLY: la.attention_grad rwkv7
func.func @rwkv7(%q: !qk, %k: !qk, %v: !v, %g: !qk, %a: !qk, %b: !qk, %s0: !s)
    -> !v {
  %o = la.attention rwkv7 %q, %k, %v g(%g : !qk) a(%a : !qk) b(%b : !qk)
      initial_state(%s0 : !s) {scale = 1.0 : f32} : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

// fla's value-side gate gv, at both levels: la.attention_grad and
// la.recurrence_grad take it and return its gradient after dg's.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<1x2x4x6xf32>

// CHECK-LABEL: func.func @gla_value_gate_grad(
// CHECK-SAME: %[[Q:[^:]*]]: tensor<1x8x2x4xf32>, %[[K:[^:]*]]: tensor<1x8x2x4xf32>, %[[V:[^:]*]]: tensor<1x8x2x6xf32>, %[[G:[^:]*]]: tensor<1x8x2x4xf32>, %[[GV:[^:]*]]: tensor<1x8x2x6xf32>, %[[DO:[^:]*]]: tensor<1x8x2x6xf32>)
// CHECK: %[[DQ:[^,]*]], %[[DK:[^,]*]], %[[DV:[^,]*]], %[[IG:.*]]:2 = la.attention_grad gla %[[Q]], %[[K]], %[[V]] g(%[[G]] : tensor<1x8x2x4xf32>) gv(%[[GV]] : tensor<1x8x2x6xf32>) d_o(%[[DO]] : tensor<1x8x2x6xf32>)
// CHECK: return %[[DQ]], %[[DK]], %[[DV]], %[[IG]]#0, %[[IG]]#1
func.func @gla_value_gate(%q: !qk, %k: !qk, %v: !v, %g: !qk, %gv: !v) -> !v {
  %o = la.attention gla %q, %k, %v g(%g : !qk) gv(%gv : !v) : !qk, !qk, !v -> !v
  return %o : !v
}

// CHECK-LABEL: func.func @recurrence_value_gate_grad(
// CHECK-SAME: %[[Q:[^:]*]]: tensor<1x8x2x4xf32>, %[[V:[^:]*]]: tensor<1x8x2x6xf32>, %[[GV:[^:]*]]: tensor<1x8x2x6xf32>, %[[S0:[^:]*]]: tensor<1x2x4x6xf32>, %[[DO:[^:]*]]: tensor<1x8x2x6xf32>)
// CHECK: %{{[^,]*}}, %{{[^,]*}}, %[[DV:[^,]*]], %[[DS0:[^,]*]], %[[DGV:.*]] = la.recurrence_grad decay(none) low_rank(none) %[[Q]], %[[Q]], %[[V]] gv(%[[GV]] : tensor<1x8x2x6xf32>) initial_state(%[[S0]] : tensor<1x2x4x6xf32>) d_o(%[[DO]] : tensor<1x8x2x6xf32>)
// CHECK: return %{{.*}}, %[[DV]], %[[DGV]], %[[DS0]]
func.func @recurrence_value_gate(%q: !qk, %v: !v, %gv: !v, %s0: !s) -> !v {
  %oi = tensor.empty() : !v
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %q, %v gv(%gv : !v)
      outs(%oi, %s0 : !v, !s) {scale = 0.5 : f32} : !qk, !qk, !v -> !v, !s
  return %o : !v
}

// -----

// A reverse recurrence is the forward one on its tokens flipped: its
// gradient is the forward la.recurrence_grad on the flipped operands, the
// token gradients flipped back. With packed sequences the flipped tokens
// hold the sequences in reverse order: offsets T - cu[N - i], and the
// states (and d_initial_state) flipped along N.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!s = tensor<3x2x4x6xf32>

// CHECK-DAG: #[[FLIPT:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, -d1 + 7, d2, d3)>
// CHECK-DAG: #[[FLIPN:.*]] = affine_map<(d0, d1, d2, d3) -> (-d0 + 2, d1, d2, d3)>
// CHECK-LABEL: func.func @reverse_grad(
// CHECK-SAME: %[[Q:[^:]*]]: tensor<1x8x2x4xf32>, %[[V:[^:]*]]: tensor<1x8x2x6xf32>, %[[S0:[^:]*]]: tensor<3x2x4x6xf32>, %[[CU:[^:]*]]: tensor<4xi32>, %[[DO:[^:]*]]: tensor<1x8x2x6xf32>)
// CHECK: %[[OFFSETS:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<4xi32>)
// CHECK: linalg.index 0
// CHECK: tensor.extract %[[CU]]
// CHECK: arith.subi
// CHECK: %[[QF:.*]] = linalg.generic {indexing_maps = [#[[FLIPT]], {{.*}}]{{.*}} ins(%[[Q]] :
// CHECK: %[[VF:.*]] = linalg.generic {indexing_maps = [#[[FLIPT]], {{.*}}]{{.*}} ins(%[[V]] :
// CHECK: %[[S0F:.*]] = linalg.generic {indexing_maps = [#[[FLIPN]], {{.*}}]{{.*}} ins(%[[S0]] :
// CHECK: %[[DOF:.*]] = linalg.generic {indexing_maps = [#[[FLIPT]], {{.*}}]{{.*}} ins(%[[DO]] :
// CHECK: %[[DQ:[^,]*]], %[[DK:[^,]*]], %[[DV:[^,]*]], %[[DS0:[^,]*]] = la.recurrence_grad decay(none) low_rank(none) %[[QF]], %{{.*}}, %[[VF]] cu_seqlens(%[[OFFSETS]] : tensor<4xi32>) initial_state(%[[S0F]] : tensor<3x2x4x6xf32>) d_o(%[[DOF]] : tensor<1x8x2x6xf32>)
// CHECK-NOT: reverse
// CHECK: linalg.generic {indexing_maps = [#[[FLIPT]], {{.*}}]{{.*}} ins(%[[DQ]] :
// CHECK: linalg.generic {indexing_maps = [#[[FLIPT]], {{.*}}]{{.*}} ins(%[[DV]] :
// CHECK: linalg.generic {indexing_maps = [#[[FLIPN]], {{.*}}]{{.*}} ins(%[[DS0]] :
// CHECK: return
func.func @reverse(%q: !qk, %v: !v, %s0: !s, %cu: tensor<4xi32>) -> !v {
  %oi = tensor.empty() : !v
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %q, %v
      cu_seqlens(%cu : tensor<4xi32>) outs(%oi, %s0 : !v, !s)
      {reverse, scale = 0.5 : f32} : !qk, !qk, !v -> !v, !s
  return %o : !v
}

// -----

// Element-wise producers (fla's in-kernel gate: g = -exp(A_log) *
// softplus(a + dt_bias), A_log and dt_bias per head, broadcast over B and
// T): each input's gradient is one generic over the producer's loops that
// recomputes its body and runs it backwards from the cotangent (here
// d(-x) = -dg, d(x*y), d exp, d log1p); a broadcast input's gradient is
// summed over the loops it does not index (reduction iterators). `a` feeds
// both the gate and beta, so its two gradients are added.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!g = tensor<1x8x2xf32>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#h = affine_map<(d0, d1, d2) -> (d2)>

// CHECK-DAG: #[[ID3:.*]] = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-DAG: #[[HEAD:.*]] = affine_map<(d0, d1, d2) -> (d2)>
// CHECK-LABEL: func.func @in_kernel_gate_grad(
// CHECK-SAME: %[[Q:[^:]*]]: tensor<1x8x2x4xf32>, %[[K:[^:]*]]: tensor<1x8x2x4xf32>, %[[V:[^:]*]]: tensor<1x8x2x6xf32>, %[[A:[^:]*]]: tensor<1x8x2xf32>, %[[ALOG:[^:]*]]: tensor<2xf32>, %[[BIAS:[^:]*]]: tensor<2xf32>, %[[DO:[^:]*]]: tensor<1x8x2x6xf32>)
// CHECK: %[[GATE:.*]] = linalg.generic {{.*}} ins(%[[A]], %[[ALOG]], %[[BIAS]] :
// CHECK: %{{.*}}, %{{.*}}, %{{.*}}, %[[IG:.*]]:2 = la.attention_grad gated_deltanet %[[Q]], %[[K]], %[[V]] g(%[[GATE]] : tensor<1x8x2xf32>) beta(%[[A]] : tensor<1x8x2xf32>)
// CHECK: %[[DA_GATE:.*]] = linalg.generic {indexing_maps = [#[[ID3]], #[[HEAD]], #[[HEAD]], #[[ID3]], #[[ID3]]], iterator_types = ["parallel", "parallel", "parallel"]} ins(%[[A]], %[[ALOG]], %[[BIAS]], %[[IG]]#0 :
// CHECK: ^bb0(%[[X:[^:]*]]: f32, %[[L:[^:]*]]: f32, %[[B:[^:]*]]: f32, %[[DG:[^:]*]]: f32, %[[ACC:[^:]*]]: f32):
// CHECK: %[[S:.*]] = arith.addf %[[X]], %[[B]] : f32
// CHECK: %[[E:.*]] = math.exp %[[S]] : f32
// CHECK: %[[SP:.*]] = math.log1p %[[E]] : f32
// CHECK: %[[EL:.*]] = math.exp %[[L]] : f32
// CHECK: %[[NDG:.*]] = arith.negf %[[DG]] : f32
// CHECK: %[[DSP:.*]] = arith.mulf %[[NDG]], %[[EL]] : f32
// CHECK: %[[ONEPLUS:.*]] = arith.addf %{{.*}}, %[[E]] : f32
// CHECK: %[[DE:.*]] = arith.divf %[[DSP]], %[[ONEPLUS]] : f32
// CHECK: %[[DS:.*]] = arith.mulf %[[DE]], %[[E]] : f32
// CHECK: %[[SUM:.*]] = arith.addf %[[ACC]], %[[DS]] : f32
// CHECK: linalg.yield %[[SUM]] : f32
// CHECK: %[[DA:.*]] = linalg.generic {{.*}} ins(%[[IG]]#1, %[[DA_GATE]] :
// CHECK: %[[DALOG:.*]] = linalg.generic {indexing_maps = [#[[ID3]], #[[HEAD]], #[[HEAD]], #[[ID3]], #[[HEAD]]], iterator_types = ["reduction", "reduction", "parallel"]} ins(%[[A]], %[[ALOG]], %[[BIAS]], %[[IG]]#0 :
// CHECK: %[[DBIAS:.*]] = linalg.generic {indexing_maps = [#[[ID3]], #[[HEAD]], #[[HEAD]], #[[ID3]], #[[HEAD]]], iterator_types = ["reduction", "reduction", "parallel"]} ins(%[[A]], %[[ALOG]], %[[BIAS]], %[[IG]]#0 :
// CHECK: return %{{.*}}, %{{.*}}, %{{.*}}, %[[DA]], %[[DALOG]], %[[DBIAS]]
func.func @in_kernel_gate(%q: !qk, %k: !qk, %v: !v, %a: !g, %alog: tensor<2xf32>, %dtb: tensor<2xf32>) -> !v {
  %eg = tensor.empty() : !g
  %g = linalg.generic {indexing_maps = [#id3, #h, #h, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%a, %alog, %dtb : !g, tensor<2xf32>, tensor<2xf32>) outs(%eg : !g) {
  ^bb0(%x: f32, %l: f32, %bias: f32, %out: f32):
    %s = arith.addf %x, %bias : f32
    %ex = math.exp %s : f32
    %sp = math.log1p %ex : f32
    %el = math.exp %l : f32
    %m = arith.mulf %el, %sp : f32
    %n = arith.negf %m : f32
    linalg.yield %n : f32
  } -> !g
  %o = la.attention gated_deltanet %q, %k, %v g(%g : !g) beta(%a : !g) : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

// A feature map with a branch (1 + elu(x)): select routes the cotangent to
// the branch taken, the comparison carries none.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>

// CHECK-LABEL: func.func @feature_map_grad(
// CHECK-SAME: %[[Q:[^:]*]]: tensor<1x8x2x4xf32>
// CHECK: %[[DQ:[^,]*]], %{{.*}}, %{{.*}} = la.attention_grad linear
// CHECK: %[[DPHI:.*]] = linalg.generic {{.*}} ins(%[[Q]], %[[DQ]] :
// CHECK: ^bb0(%[[X:[^:]*]]: f32, %[[D:[^:]*]]: f32, %[[ACC:[^:]*]]: f32):
// CHECK: %[[POS:.*]] = arith.cmpf ogt, %[[X]], %{{.*}} : f32
// CHECK: %[[E:.*]] = math.exp %[[X]] : f32
// CHECK: %[[TO_TRUE:.*]] = arith.select %[[POS]], %[[D]], %{{.*}} : f32
// CHECK: %[[TO_FALSE:.*]] = arith.select %[[POS]], %{{.*}}, %[[D]] : f32
// CHECK: %[[DEXP:.*]] = arith.mulf %[[TO_FALSE]], %[[E]] : f32
// CHECK: %[[DX:.*]] = arith.addf %[[DEXP]], %[[TO_TRUE]] : f32
// CHECK: arith.addf %[[ACC]], %[[DX]] : f32
// CHECK: return %[[DPHI]],
func.func @feature_map(%q: !qk, %k: !qk, %v: !v) -> !v {
  %e = tensor.empty() : !qk
  %phi = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q : !qk) outs(%e : !qk) {
  ^bb0(%x: f32, %out: f32):
    %zero = arith.constant 0.0 : f32
    %one = arith.constant 1.0 : f32
    %pos = arith.cmpf ogt, %x, %zero : f32
    %shifted = arith.addf %x, %one : f32
    %ex = math.exp %x : f32
    %y = arith.select %pos, %shifted, %ex : f32
    linalg.yield %y : f32
  } -> !qk
  %o = la.attention linear %phi, %k, %v : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

// Dynamic sizes: the producer's tensor.empty takes tensor.dim of an
// argument, which is on no gradient path (index results carry none); beta =
// sigmoid(b) as 1 / (1 + exp(-b)).
!qk = tensor<1x?x2x4xf32>
!v = tensor<1x?x2x6xf32>
!g = tensor<1x?x2xf32>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>

// CHECK-LABEL: func.func @dynamic_sigmoid_beta_grad(
// CHECK-SAME: %[[B:[^:]*]]: tensor<1x?x2xf32>, %[[DO:[^:]*]]: tensor<1x?x2x6xf32>)
// CHECK: %{{.*}}, %{{.*}}, %{{.*}}, %[[DBETA:.*]] = la.attention_grad deltanet
// CHECK: %[[DB:.*]] = linalg.generic {{.*}} ins(%[[B]], %[[DBETA]] :
// CHECK: math.exp
// CHECK: arith.divf
// CHECK: return %{{.*}}, %{{.*}}, %{{.*}}, %[[DB]]
func.func @dynamic_sigmoid_beta(%q: !qk, %k: !qk, %v: !v, %b: !g) -> !v {
  %c1 = arith.constant 1 : index
  %t = tensor.dim %b, %c1 : !g
  %e = tensor.empty(%t) : !g
  %beta = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%b : !g) outs(%e : !g) {
  ^bb0(%x: f32, %out: f32):
    %one = arith.constant 1.0 : f32
    %nx = arith.negf %x : f32
    %ex = math.exp %nx : f32
    %d = arith.addf %one, %ex : f32
    %y = arith.divf %one, %d : f32
    linalg.yield %y : f32
  } -> !g
  %o = la.attention deltanet %q, %k, %v beta(%beta : !g) : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

// Hedgehog's feature map: a contraction x W (an accumulation `out + a * b`
// with a reduction loop), a bias through the contraction's initial value,
// linalg.softmax and the two halves inserted into one tensor. The slices'
// adjoints are extract_slices of the features' (the destination's the rest,
// zeros inserted where the slice was); the softmax's is y * (dy - sum(y dy));
// each contraction input's is a contraction over the same loops, ordered as
// a matrix product's (the input's dims, then the ones it does not index: the
// weight's gradient reduces b and t last); the bias gets the contraction
// result's adjoint.
!x = tensor<1x8x2x4xf32>
!z = tensor<1x8x2x3xf32>
!f = tensor<1x8x2x6xf32>
!w = tensor<2x4x3xf32>
#x = affine_map<(b, t, h, f, d) -> (b, t, h, d)>
#w = affine_map<(b, t, h, f, d) -> (h, d, f)>
#z = affine_map<(b, t, h, f, d) -> (b, t, h, f)>
#id = affine_map<(b, t, h, f) -> (b, t, h, f)>
#bias = affine_map<(b, t, h, f) -> (h, f)>

// CHECK-LABEL: func.func @hedgehog_grad(
// CHECK-SAME: %[[Q:[^:]*]]: tensor<1x8x2x4xf32>, %{{[^:]*}}: tensor<1x8x2x6xf32>, %{{[^:]*}}: tensor<1x8x2x6xf32>, %[[W:[^:]*]]: tensor<2x4x3xf32>, %[[C:[^:]*]]: tensor<2x3xf32>, %[[DO:[^:]*]]: tensor<1x8x2x6xf32>)
// CHECK: %[[P:.*]] = linalg.softmax dimension(3)
// CHECK: %[[DPHI:[^,]*]], %{{.*}}, %{{.*}} = la.attention_grad linear
// CHECK: %[[DHIGH:.*]] = tensor.extract_slice %[[DPHI]][0, 0, 0, 3] [1, 8, 2, 3]
// CHECK: %[[REST:.*]] = tensor.insert_slice %{{.*}} into %[[DPHI]][0, 0, 0, 3] [1, 8, 2, 3]
// CHECK: %[[DLOW:.*]] = tensor.extract_slice %[[REST]][0, 0, 0, 0] [1, 8, 2, 3]
// CHECK: %[[DP:.*]] = linalg.generic {{.*}} ins(%[[DHIGH]], %[[DLOW]] :
// CHECK: %[[DOT:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]{{.*}} ins(%[[P]], %[[DP]] :
// CHECK: %[[DZ:.*]] = linalg.generic {{.*}} ins(%[[P]], %[[DP]], %[[DOT]] :
// CHECK: arith.subf
// CHECK: arith.mulf
// CHECK: %[[DX:.*]] = linalg.generic {indexing_maps = [#[[XX:.*]], #[[XW:.*]], #[[XZ:.*]], #[[XX]]], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]{{.*}} ins(%[[Q]], %[[W]], %[[DZ]] :
// CHECK: %[[DW:.*]] = linalg.generic {indexing_maps = [#[[WX:.*]], #[[WW:.*]], #[[WZ:.*]], #[[WW]]], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]{{.*}} ins(%[[Q]], %[[W]], %[[DZ]] :
// CHECK: %[[DC:.*]] = linalg.generic {{.*}}iterator_types = ["reduction", "reduction", "parallel", "parallel"]{{.*}} ins(%[[C]], %[[DZ]] :
// CHECK: return %[[DX]], %{{.*}}, %{{.*}}, %[[DW]], %[[DC]] :
func.func @hedgehog(%q: !x, %k: !f, %v: !f, %w: !w, %c: tensor<2x3xf32>) -> !f {
  %e = tensor.empty() : !z
  %z0 = linalg.generic {indexing_maps = [#bias, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%c : tensor<2x3xf32>) outs(%e : !z) {
  ^bb0(%b: f32, %out: f32):
    linalg.yield %b : f32
  } -> !z
  %z = linalg.generic {indexing_maps = [#x, #w, #z], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %w : !x, !w) outs(%z0 : !z) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> !z
  %p = linalg.softmax dimension(3) ins(%z : !z) outs(%e : !z) -> !z
  %e2 = tensor.empty() : !f
  %low = tensor.insert_slice %p into %e2[0, 0, 0, 0] [1, 8, 2, 3] [1, 1, 1, 1] : !z into !f
  %phi = tensor.insert_slice %p into %low[0, 0, 0, 3] [1, 8, 2, 3] [1, 1, 1, 1] : !z into !f
  %o = la.attention linear %phi, %k, %v : !f, !f, !f -> !f
  return %o : !f
}

// -----

// A slice of an argument on the path: its adjoint goes back into the
// argument's shape, zeros where the slice did not read.
// CHECK-LABEL: func.func @sliced_query_grad(
// CHECK-SAME: %[[QQ:[^:]*]]: tensor<1x8x2x6xf32>
// CHECK: %[[DQ:[^,]*]], %{{.*}}, %{{.*}} = la.attention_grad linear
// CHECK: %[[ZEROS:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<1x8x2x6xf32>)
// CHECK: %[[DQQ:.*]] = tensor.insert_slice %[[DQ]] into %[[ZEROS]][0, 0, 0, 2] [1, 8, 2, 4] [1, 1, 1, 1] : tensor<1x8x2x4xf32> into tensor<1x8x2x6xf32>
// CHECK: return %[[DQQ]],
func.func @sliced_query(%qq: tensor<1x8x2x6xf32>, %k: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>) -> tensor<1x8x2x6xf32> {
  %q = tensor.extract_slice %qq[0, 0, 0, 2] [1, 8, 2, 4] [1, 1, 1, 1] : tensor<1x8x2x6xf32> to tensor<1x8x2x4xf32>
  %o = la.attention linear %q, %k, %v : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return %o : tensor<1x8x2x6xf32>
}
