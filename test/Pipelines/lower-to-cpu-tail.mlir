// RUN: la-opt %s -la-lower-to-cpu -mlir-print-ir-after=la-fuse-recurrence -o /dev/null 2>&1 | FileCheck %s
// RUN: la-opt %s -la-lower-to-cpu=peel-tail=true -mlir-print-ir-after=la-fuse-recurrence -o /dev/null 2>&1 | FileCheck %s --check-prefix=PEEL

// A run-time T leaves a last, partial chunk. By default each chunk is
// packed into a buffer of the chunk size (zero tokens after a partial
// chunk's own), so one chunk program serves every chunk; with peel-tail the
// last chunk is peeled into a loop of its own with a second program.
// CHECK-LABEL: func.func @gla
// CHECK: scf.for
// CHECK: linalg.fill
// CHECK-COUNT-1: la.chunk_intra {{.*}} -> tensor<1x1x64x1x16xf32>
// CHECK: } {la.fused_chunk_loop}
// CHECK-NOT: la.chunk_intra
// CHECK: return
// PEEL-LABEL: func.func @gla
// PEEL: la.chunk_intra {{.*}} -> tensor<1x1x64x1x16xf32>
// PEEL: } {la.fused_chunk_loop}
// PEEL: scf.for
// PEEL: la.chunk_intra
// PEEL: return
func.func @gla(%q: tensor<?x?x2x16xf32>, %k: tensor<?x?x2x16xf32>,
               %v: tensor<?x?x2x16xf32>, %g: tensor<?x?x2x16xf32>)
    -> tensor<?x?x2x16xf32> {
  %o = la.attention gla %q, %k, %v g(%g : tensor<?x?x2x16xf32>)
      : tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>
      -> tensor<?x?x2x16xf32>
  return %o : tensor<?x?x2x16xf32>
}
