// The CPU schedule as transform ops gives exactly what the passes give.
// RUN: la-opt %s --transform-preload-library=transform-library-paths=%p/Inputs/cpu-schedule.mlir --transform-interpreter -canonicalize -cse > %t.schedule
// RUN: la-opt %s -la-lower-to-recurrence -la-chunk=chunk-size=16 -convert-la-to-linalg -canonicalize -cse -la-tile -canonicalize -cse > %t.passes
// RUN: diff %t.schedule %t.passes
// RUN: FileCheck %s < %t.schedule
// The fused schedule too.
// RUN: la-opt %s --transform-preload-library=transform-library-paths=%p/Inputs/cpu-fused-schedule.mlir --transform-interpreter -canonicalize -cse > %t.fused-schedule
// RUN: la-opt %s -la-lower-to-recurrence -la-fuse-recurrence="chunk-size=16 mode=fused" -convert-la-to-linalg -canonicalize -cse -la-tile -canonicalize -cse > %t.fused-passes
// RUN: diff %t.fused-schedule %t.fused-passes
// RUN: FileCheck %s --check-prefix=FUSED < %t.fused-schedule

// CHECK-LABEL: func.func @retention
// CHECK-NOT: la.
// CHECK: scf.forall
// CHECK: vector.fma {{.*}} : vector<8x32xf32>
// CHECK: return

// FUSED-LABEL: func.func @retention
// FUSED-NOT: la.
// FUSED: scf.forall ({{.*}}) in (1, 2)
// FUSED: scf.for
// FUSED: vector.fma {{.*}} : vector<8x32xf32>
// FUSED: return
func.func @retention(%q: tensor<1x32x2x32xf32>, %k: tensor<1x32x2x32xf32>, %v: tensor<1x32x2x32xf32>) -> (tensor<1x32x2x32xf32>, tensor<1x2x32x32xf32>) {
  %o, %s = la.attention retention %q, %k, %v {log_decay = array<f32: -0.1, -0.2>} : tensor<1x32x2x32xf32>, tensor<1x32x2x32xf32>, tensor<1x32x2x32xf32> -> tensor<1x32x2x32xf32>, tensor<1x2x32x32xf32>
  return %o, %s : tensor<1x32x2x32xf32>, tensor<1x2x32x32xf32>
}
