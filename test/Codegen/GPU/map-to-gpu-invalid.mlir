// RUN: la-opt %s -split-input-file -la-map-to-gpu=threads-per-block=48 -verify-diagnostics
// RUN: not la-opt %s -split-input-file -la-map-to-gpu=threads-per-block=2000 2>&1 | FileCheck %s --check-prefix=THREADS

// RUN: not la-opt %s -split-input-file -la-map-to-gpu=mma-precision=fp8 2>&1 | FileCheck %s --check-prefix=PRECISION

// THREADS: la-map-to-gpu: 'threads-per-block' must be in [1, 1024], got 2000
// PRECISION: for the --mma-precision option: Cannot find option named 'fp8'!

// The host writes device memory: no kernel form. (A host load that a
// kernel uses is read by the kernel itself: map-to-gpu.mlir.)
func.func @host_writes_device_memory(%a: memref<8xf32>, %out: memref<8xf32>) {
  %c0 = arith.constant 0 : index
  %x = arith.constant 1.0 : f32
  // expected-error @below {{runs outside the attention's GPU tasks, which la-map-to-gpu cannot place on the GPU}}
  memref.store %x, %a[%c0] : memref<8xf32>
  linalg.fill ins(%x : f32) outs(%out : memref<8xf32>)
  return
}

// -----

// A loop outside the tasks runs in a kernel, which cannot return its value.
func.func @loop_with_results(%a: memref<8xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f32
  // expected-error @below {{runs outside the attention's GPU tasks and returns values}}
  %sum = scf.for %i = %c0 to %c8 step %c1 iter_args(%acc = %zero) -> f32 {
    %x = memref.load %a[%i] : memref<8xf32>
    %next = arith.addf %acc, %x : f32
    scf.yield %next : f32
  }
  return %sum : f32
}

// -----

// Nor can a kernel allocate (packed sequences' loops do, with run-time
// sizes).
func.func @loop_allocates(%a: memref<8xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    // expected-error @below {{runs in a loop outside the attention's GPU tasks}}
    %buf = memref.alloc(%i) : memref<?xf32>
    memref.dealloc %buf : memref<?xf32>
  }
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
