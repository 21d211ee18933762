// la-fuse-recurrence maps its task forall (#la.task), so canonicalization
// keeps it even with a single task (one batch, one value head) and
// la-tile-for-gpu still finds the task to map onto blocks: no pass has to
// run before canonicalization.
// RUN: la-opt %s -la-fuse-recurrence="chunk-size=16 mode=fused pack-inputs=0" -canonicalize -cse | FileCheck %s --check-prefix=FUSED
// RUN: la-opt %s -la-fuse-recurrence="chunk-size=16 mode=fused pack-inputs=0" -convert-la-to-linalg -canonicalize -cse -la-tile-for-gpu=stage-inputs=0 | FileCheck %s --check-prefix=GPU

// FUSED-LABEL: func.func @one_task
// FUSED: scf.forall (%[[B:.*]], %[[H:.*]]) in (1, 1) shared_outs(
// FUSED: scf.for
// FUSED: } {mapping = [#la.task<0>, #la.task<1>]}

// GPU-LABEL: func.func @one_task
// GPU: scf.forall (%{{.*}}, %{{.*}}) in (1, 1) shared_outs(
// GPU: #gpu.thread<linear_dim_0>
// GPU: } {mapping = [#gpu.block<x>, #gpu.block<y>]}
func.func @one_task(%q: tensor<1x32x1x16xf32>, %k: tensor<1x32x1x16xf32>, %v: tensor<1x32x1x16xf32>, %g: tensor<1x32x1xf32>) -> (tensor<1x32x1x16xf32>, tensor<1x1x16x16xf32>) {
  %oi = tensor.empty() : tensor<1x32x1x16xf32>
  %s0 = arith.constant dense<0.0> : tensor<1x1x16x16xf32>
  %o, %s = la.recurrence decay(scalar) low_rank(none) %q, %k, %v g(%g : tensor<1x32x1xf32>) outs(%oi, %s0 : tensor<1x32x1x16xf32>, tensor<1x1x16x16xf32>) {scale = 0.25 : f32} : tensor<1x32x1x16xf32>, tensor<1x32x1x16xf32>, tensor<1x32x1x16xf32> -> tensor<1x32x1x16xf32>, tensor<1x1x16x16xf32>
  return %o, %s : tensor<1x32x1x16xf32>, tensor<1x1x16x16xf32>
}
