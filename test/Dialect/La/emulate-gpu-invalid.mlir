// RUN: la-opt %s -la-map-to-gpu=mma-precision=bf16 -la-emulate-gpu -verify-diagnostics -o /dev/null


func.func @tensor_cores(%a: memref<16x16xf32>, %b: memref<16x8xf32>, %c: memref<16x8xf32>) {
  // expected-error @below {{uses nvvm.mma.sync (bf16 tensor cores), which la-emulate-gpu does not emulate}}
  scf.forall (%t) in (1) {
    scf.forall (%i) in (1) {
      linalg.matmul ins(%a, %b : memref<16x16xf32>, memref<16x8xf32>) outs(%c : memref<16x8xf32>)
    } {mapping = [#gpu.warp<linear_dim_0>]}
  } {mapping = [#gpu.block<x>]}
  return
}
