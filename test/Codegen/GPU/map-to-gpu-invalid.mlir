// RUN: la-opt %s -split-input-file -la-map-to-gpu=threads-per-block=48 -verify-diagnostics
// RUN: not la-opt %s -split-input-file -la-map-to-gpu=threads-per-block=2000 2>&1 | FileCheck %s --check-prefix=THREADS

// RUN: not la-opt %s -split-input-file -la-map-to-gpu=mma-precision=fp8 2>&1 | FileCheck %s --check-prefix=PRECISION

// THREADS: la-map-to-gpu: 'threads-per-block' must be in [1, 1024], got 2000
// PRECISION: for the --mma-precision option: Cannot find option named 'fp8'!

func.func @host_work(%a: memref<8xf32>, %out: memref<8xf32>) {
  %cst = arith.constant 1.0 : f32
  // expected-error @below {{runs outside the attention's GPU tasks}}
  linalg.fill ins(%cst : f32) outs(%a : memref<8xf32>)
  scf.forall (%t) in (1) {
    memref.copy %a, %out : memref<8xf32> to memref<8xf32>
  } {mapping = [#gpu.block<x>]}
  return
}

// -----

func.func @too_much_shared_memory(%out: memref<65536xf32>) {
  // expected-error @below {{needs 262144 bytes of shared memory for a chunk's buffers, more than the limit of 232448}}
  scf.forall (%t) in (1) {
    %big = memref.alloc() : memref<65536xf32>
    memref.copy %big, %out : memref<65536xf32> to memref<65536xf32>
  } {mapping = [#gpu.block<x>]}
  return
}

// -----

func.func @dynamic_buffer(%n: index) {
  scf.forall (%t) in (1) {
    // expected-error @below {{needs a static shape, an identity layout and a scalar element type to live in shared memory}}
    %buf = memref.alloc(%n) : memref<?xf32>
  } {mapping = [#gpu.block<x>]}
  return
}

// -----

func.func @undistributed_op(%a: memref<8xf32>) {
  %cst = arith.constant 1.0 : f32
  scf.forall (%t) in (1) {
    // expected-error @below {{is not distributed over the GPU's threads}}
    linalg.fill ins(%cst : f32) outs(%a : memref<8xf32>)
  } {mapping = [#gpu.block<x>]}
  return
}

// -----

func.func @partial_warps(%a: memref<16x8xf32>, %b: memref<8x8xf32>, %c: memref<16x8xf32>) {
  scf.forall (%t) in (1) {
    // expected-error @below {{needs whole warps: threads-per-block must be a multiple of 32, got 48}}
    scf.forall (%i) in (1) {
      linalg.matmul ins(%a, %b : memref<16x8xf32>, memref<8x8xf32>) outs(%c : memref<16x8xf32>)
    } {mapping = [#gpu.warp<linear_dim_0>]}
  } {mapping = [#gpu.block<x>]}
  return
}
