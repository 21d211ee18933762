// RUN: la-opt %s -la-map-to-gpu -la-emulate-gpu -cse | FileCheck %s --check-prefix=MMA
// A tensor-core tile: each step's fragments of the 32 lanes are gathered
// into scratch ([lane][register][element]), the step's product is computed
// on the 16 x 16 and 16 x 8 matrices they make up, and the results go back
// to the lanes' fragments; no nvgpu op is left.
// MMA-LABEL: func.func @mma_tile
// MMA-DAG: memref.alloca() : memref<32x4x1xf32>
// MMA-DAG: memref.alloca() : memref<32x2x1xf32>
// MMA-DAG: memref.alloca() : memref<32x2x2xf32>
// MMA-DAG: memref.alloca() : memref<16x8xf32>
// MMA-NOT: nvgpu.
// MMA: scf.for %{{.*}} = %c0 to %c16 step %c8 {
// MMA: scf.for %[[LANE:.*]] = %c0 to %c32 step %c1 {
// MMA: arith.divui %[[LANE]], %c4
// MMA-NOT: nvgpu.
// MMA: return
func.func @mma_tile(%a: memref<16x16xf32>, %b: memref<16x8xf32>,
                    %c: memref<16x8xf32>) {
  scf.forall (%t) in (1) {
    scf.forall (%i) in (1) {
      linalg.matmul ins(%a, %b : memref<16x16xf32>, memref<16x8xf32>)
                    outs(%c : memref<16x8xf32>)
    } {mapping = [#gpu.warp<linear_dim_0>]}
  } {mapping = [#gpu.block<x>]}
  return
}
