// The CPU schedule written with la's transform ops (Inputs/cpu-schedule.mlir)
// works for every variant, the delta-rule family included (ops that la-tile
// leaves as they are, such as the triangular solve, are left by
// tile_for_cpu too), and gives the IR of the equivalent pass pipeline.
// RUN: la-opt %s -split-input-file --transform-preload-library=transform-library-paths=%p/Inputs/cpu-schedule.mlir --transform-interpreter -canonicalize -cse > %t.schedule
// RUN: la-opt %s -split-input-file -la-lower-to-recurrence -la-chunk=chunk-size=16 -convert-la-to-linalg -canonicalize -cse -la-tile -canonicalize -cse > %t.passes
// RUN: diff %t.schedule %t.passes
// RUN: FileCheck %s < %t.schedule

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x2x16xf32>
!b = tensor<1x32x2xf32>

// CHECK-LABEL: func.func @deltanet
// CHECK-NOT: la.
// CHECK: vector.fma
// CHECK: return
func.func @deltanet(%q: !qk, %k: !qk, %v: !v, %beta: !b) -> !v {
  %o = la.attention deltanet %q, %k, %v beta(%beta : !b) : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x2x16xf32>
!b = tensor<1x32x2xf32>

// CHECK-LABEL: func.func @decayed_deltanet
// CHECK-NOT: la.
// CHECK: vector.fma
func.func @decayed_deltanet(%q: !qk, %k: !qk, %v: !v, %beta: !b) -> !v {
  %o = la.attention decayed_deltanet %q, %k, %v beta(%beta : !b) {log_decay = array<f32: -0.5, -0.25>} : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x4x16xf32>
!b = tensor<1x32x2xf32>

// Grouped value heads (HV = 2 H): their floordiv maps are left untiled.
// CHECK-LABEL: func.func @gated_deltanet
// CHECK-NOT: la.
// CHECK: vector.fma
func.func @gated_deltanet(%q: !qk, %k: !qk, %v: !v, %g: !b, %beta: !b) -> !v {
  %o = la.attention gated_deltanet %q, %k, %v g(%g : !b) beta(%beta : !b) {qk_l2norm} : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x2x16xf32>
!b = tensor<1x32x2xf32>

// CHECK-LABEL: func.func @kda
// CHECK-NOT: la.
// CHECK: vector.fma
func.func @kda(%q: !qk, %k: !qk, %v: !v, %g: !qk, %beta: !b) -> !v {
  %o = la.attention kda %q, %k, %v g(%g : !qk) beta(%beta : !b) : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x32x2x16xf32>
!v = tensor<1x32x2x16xf32>

// CHECK-LABEL: func.func @gated_deltanet2
// CHECK-NOT: la.
// CHECK: vector.fma
func.func @gated_deltanet2(%q: !qk, %k: !qk, %v: !v, %g: !qk, %e: !qk, %w: !v) -> !v {
  %o = la.attention gated_deltanet2 %q, %k, %v g(%g : !qk) erase(%e : !qk) write(%w : !v) : !qk, !qk, !v -> !v
  return %o : !v
}
