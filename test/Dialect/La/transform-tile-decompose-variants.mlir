// The CPU pipeline as a user's transform script for every variant
// (Inputs/cpu-tile-decompose-schedule.mlir): upstream tile_using_forall and
// tile_using_for on la.recurrence (TilingInterface), transform.la.decompose
// (AggregatedOpInterface) on each 16-token tile, then la's CPU register
// tiles. No la op is left; the chunk loop carries the state.
// python/tests/test_transform_pipeline.py runs the result against the fp64
// reference.
// RUN: la-opt %s -split-input-file --transform-preload-library=transform-library-paths=%p/Inputs/cpu-tile-decompose-schedule.mlir --transform-interpreter -canonicalize -cse | FileCheck %s

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x2x16xf32>
!h = tensor<1x32x2xf32>

// CHECK-LABEL: func.func @linear
// CHECK-NOT: la.
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: scf.forall (%{{.*}}) in (2) shared_outs(
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[C32]] step %[[C16]] iter_args(
// CHECK: vector.fma
// CHECK-NOT: la.
// CHECK: return
func.func @linear(%q: !qk, %k: !qk, %v: !v, %s0: tensor<1x2x16x16xf32>) -> (!v, tensor<1x2x16x16xf32>) {
  %o, %s = la.attention linear %q, %k, %v initial_state(%s0 : tensor<1x2x16x16xf32>) {scale = 0.25 : f32} : !qk, !qk, !v -> !v, tensor<1x2x16x16xf32>
  return %o, %s : !v, tensor<1x2x16x16xf32>
}

// -----

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x2x16xf32>
!h = tensor<1x32x2xf32>

// CHECK-LABEL: func.func @linear_normalized
// CHECK-NOT: la.
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: scf.forall (%{{.*}}) in (2) shared_outs(
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[C32]] step %[[C16]] iter_args(
// CHECK: vector.fma
// CHECK-NOT: la.
// CHECK: return
func.func @linear_normalized(%q: !qk, %k: !qk, %v: !v, %s0: tensor<1x2x16x16xf32>) -> (!v, tensor<1x2x16x16xf32>) {
  %o, %s = la.attention linear %q, %k, %v initial_state(%s0 : tensor<1x2x16x16xf32>) {normalizer, scale = 0.25 : f32} : !qk, !qk, !v -> !v, tensor<1x2x16x16xf32>
  return %o, %s : !v, tensor<1x2x16x16xf32>
}

// -----

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x2x16xf32>
!h = tensor<1x32x2xf32>

// CHECK-LABEL: func.func @retention
// CHECK-NOT: la.
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: scf.forall (%{{.*}}) in (2) shared_outs(
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[C32]] step %[[C16]] iter_args(
// CHECK: vector.fma
// CHECK-NOT: la.
// CHECK: return
func.func @retention(%q: !qk, %k: !qk, %v: !v, %s0: tensor<1x2x16x16xf32>) -> (!v, tensor<1x2x16x16xf32>) {
  %o, %s = la.attention retention %q, %k, %v initial_state(%s0 : tensor<1x2x16x16xf32>) {log_decay = array<f32: -0.03125, -0.015625>} : !qk, !qk, !v -> !v, tensor<1x2x16x16xf32>
  return %o, %s : !v, tensor<1x2x16x16xf32>
}

// -----

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x2x16xf32>
!h = tensor<1x32x2xf32>

// CHECK-LABEL: func.func @mamba2
// CHECK-NOT: la.
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: scf.forall (%{{.*}}) in (2) shared_outs(
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[C32]] step %[[C16]] iter_args(
// CHECK: vector.fma
// CHECK-NOT: la.
// CHECK: return
func.func @mamba2(%q: !qk, %k: !qk, %v: !v, %g: !h, %s0: tensor<1x2x16x16xf32>) -> (!v, tensor<1x2x16x16xf32>) {
  %o, %s = la.attention mamba2 %q, %k, %v g(%g : !h) initial_state(%s0 : tensor<1x2x16x16xf32>)  : !qk, !qk, !v -> !v, tensor<1x2x16x16xf32>
  return %o, %s : !v, tensor<1x2x16x16xf32>
}

// -----

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x2x16xf32>
!h = tensor<1x32x2xf32>

// CHECK-LABEL: func.func @gla
// CHECK-NOT: la.
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: scf.forall (%{{.*}}) in (2) shared_outs(
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[C32]] step %[[C16]] iter_args(
// CHECK: vector.fma
// CHECK-NOT: la.
// CHECK: return
func.func @gla(%q: !qk, %k: !qk, %v: !v, %g: !qk, %s0: tensor<1x2x16x16xf32>) -> (!v, tensor<1x2x16x16xf32>) {
  %o, %s = la.attention gla %q, %k, %v g(%g : !qk) initial_state(%s0 : tensor<1x2x16x16xf32>)  : !qk, !qk, !v -> !v, tensor<1x2x16x16xf32>
  return %o, %s : !v, tensor<1x2x16x16xf32>
}

// -----

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x2x16xf32>
!h = tensor<1x32x2xf32>

// CHECK-LABEL: func.func @deltanet
// CHECK-NOT: la.
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: scf.forall (%{{.*}}) in (2) shared_outs(
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[C32]] step %[[C16]] iter_args(
// CHECK: vector.fma
// CHECK-NOT: la.
// CHECK: return
func.func @deltanet(%q: !qk, %k: !qk, %v: !v, %beta: !h, %s0: tensor<1x2x16x16xf32>) -> (!v, tensor<1x2x16x16xf32>) {
  %o, %s = la.attention deltanet %q, %k, %v beta(%beta : !h) initial_state(%s0 : tensor<1x2x16x16xf32>) {qk_l2norm} : !qk, !qk, !v -> !v, tensor<1x2x16x16xf32>
  return %o, %s : !v, tensor<1x2x16x16xf32>
}

// -----

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x2x16xf32>
!h = tensor<1x32x2xf32>

// CHECK-LABEL: func.func @decayed_deltanet
// CHECK-NOT: la.
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: scf.forall (%{{.*}}) in (2) shared_outs(
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[C32]] step %[[C16]] iter_args(
// CHECK: vector.fma
// CHECK-NOT: la.
// CHECK: return
func.func @decayed_deltanet(%q: !qk, %k: !qk, %v: !v, %beta: !h, %s0: tensor<1x2x16x16xf32>) -> (!v, tensor<1x2x16x16xf32>) {
  %o, %s = la.attention decayed_deltanet %q, %k, %v beta(%beta : !h) initial_state(%s0 : tensor<1x2x16x16xf32>) {log_decay = array<f32: -0.5, -0.25>} : !qk, !qk, !v -> !v, tensor<1x2x16x16xf32>
  return %o, %s : !v, tensor<1x2x16x16xf32>
}

// -----

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x2x16xf32>
!h = tensor<1x32x2xf32>

// CHECK-LABEL: func.func @gated_deltanet
// CHECK-NOT: la.
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: scf.forall (%{{.*}}) in (2) shared_outs(
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[C32]] step %[[C16]] iter_args(
// CHECK: vector.fma
// CHECK-NOT: la.
// CHECK: return
func.func @gated_deltanet(%q: !qk, %k: !qk, %v: !v, %g: !h, %beta: !h, %s0: tensor<1x2x16x16xf32>) -> (!v, tensor<1x2x16x16xf32>) {
  %o, %s = la.attention gated_deltanet %q, %k, %v g(%g : !h) beta(%beta : !h) initial_state(%s0 : tensor<1x2x16x16xf32>) {qk_l2norm} : !qk, !qk, !v -> !v, tensor<1x2x16x16xf32>
  return %o, %s : !v, tensor<1x2x16x16xf32>
}

// -----

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x2x16xf32>
!h = tensor<1x32x2xf32>

// CHECK-LABEL: func.func @kda
// CHECK-NOT: la.
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: scf.forall (%{{.*}}) in (2) shared_outs(
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[C32]] step %[[C16]] iter_args(
// CHECK: vector.fma
// CHECK-NOT: la.
// CHECK: return
func.func @kda(%q: !qk, %k: !qk, %v: !v, %g: !qk, %beta: !h, %s0: tensor<1x2x16x16xf32>) -> (!v, tensor<1x2x16x16xf32>) {
  %o, %s = la.attention kda %q, %k, %v g(%g : !qk) beta(%beta : !h) initial_state(%s0 : tensor<1x2x16x16xf32>) {qk_l2norm} : !qk, !qk, !v -> !v, tensor<1x2x16x16xf32>
  return %o, %s : !v, tensor<1x2x16x16xf32>
}

// -----

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x2x16xf32>
!h = tensor<1x32x2xf32>

// CHECK-LABEL: func.func @deltanet2
// CHECK-NOT: la.
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: scf.forall (%{{.*}}) in (2) shared_outs(
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[C32]] step %[[C16]] iter_args(
// CHECK: vector.fma
// CHECK-NOT: la.
// CHECK: return
func.func @deltanet2(%q: !qk, %k: !qk, %v: !v, %e: !qk, %w: !v, %s0: tensor<1x2x16x16xf32>) -> (!v, tensor<1x2x16x16xf32>) {
  %o, %s = la.attention deltanet2 %q, %k, %v erase(%e : !qk) write(%w : !v) initial_state(%s0 : tensor<1x2x16x16xf32>)  : !qk, !qk, !v -> !v, tensor<1x2x16x16xf32>
  return %o, %s : !v, tensor<1x2x16x16xf32>
}

// -----

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x2x16xf32>
!h = tensor<1x32x2xf32>

// CHECK-LABEL: func.func @decayed_deltanet2
// CHECK-NOT: la.
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: scf.forall (%{{.*}}) in (2) shared_outs(
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[C32]] step %[[C16]] iter_args(
// CHECK: vector.fma
// CHECK-NOT: la.
// CHECK: return
func.func @decayed_deltanet2(%q: !qk, %k: !qk, %v: !v, %e: !qk, %w: !v, %s0: tensor<1x2x16x16xf32>) -> (!v, tensor<1x2x16x16xf32>) {
  %o, %s = la.attention decayed_deltanet2 %q, %k, %v erase(%e : !qk) write(%w : !v) initial_state(%s0 : tensor<1x2x16x16xf32>) {log_decay = array<f32: -0.5, -0.25>} : !qk, !qk, !v -> !v, tensor<1x2x16x16xf32>
  return %o, %s : !v, tensor<1x2x16x16xf32>
}

// -----

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x2x16xf32>
!h = tensor<1x32x2xf32>

// CHECK-LABEL: func.func @scalar_gated_deltanet2
// CHECK-NOT: la.
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: scf.forall (%{{.*}}) in (2) shared_outs(
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[C32]] step %[[C16]] iter_args(
// CHECK: vector.fma
// CHECK-NOT: la.
// CHECK: return
func.func @scalar_gated_deltanet2(%q: !qk, %k: !qk, %v: !v, %g: !h, %e: !qk, %w: !v, %s0: tensor<1x2x16x16xf32>) -> (!v, tensor<1x2x16x16xf32>) {
  %o, %s = la.attention scalar_gated_deltanet2 %q, %k, %v g(%g : !h) erase(%e : !qk) write(%w : !v) initial_state(%s0 : tensor<1x2x16x16xf32>)  : !qk, !qk, !v -> !v, tensor<1x2x16x16xf32>
  return %o, %s : !v, tensor<1x2x16x16xf32>
}

// -----

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x2x16xf32>
!h = tensor<1x32x2xf32>

// CHECK-LABEL: func.func @gated_deltanet2
// CHECK-NOT: la.
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: scf.forall (%{{.*}}) in (2) shared_outs(
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[C32]] step %[[C16]] iter_args(
// CHECK: vector.fma
// CHECK-NOT: la.
// CHECK: return
func.func @gated_deltanet2(%q: !qk, %k: !qk, %v: !v, %g: !qk, %e: !qk, %w: !v, %s0: tensor<1x2x16x16xf32>) -> (!v, tensor<1x2x16x16xf32>) {
  %o, %s = la.attention gated_deltanet2 %q, %k, %v g(%g : !qk) erase(%e : !qk) write(%w : !v) initial_state(%s0 : tensor<1x2x16x16xf32>)  : !qk, !qk, !v -> !v, tensor<1x2x16x16xf32>
  return %o, %s : !v, tensor<1x2x16x16xf32>
}
