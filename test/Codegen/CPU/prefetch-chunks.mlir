// RUN: la-opt %s -split-input-file -la-prefetch-chunks | FileCheck %s
// RUN: la-opt %s -split-input-file -la-prefetch-chunks="distance=2 locality=3" | FileCheck %s --check-prefix=FAR
// RUN: not la-opt %s -la-prefetch-chunks=distance=0 2>&1 | FileCheck %s --check-prefix=BADDIST
// RUN: not la-opt %s -la-prefetch-chunks=locality=4 2>&1 | FileCheck %s --check-prefix=BADLOC

// BADDIST: error: la-prefetch-chunks: 'distance' must be >= 1, got 0
// BADLOC: error: la-prefetch-chunks: 'locality' must be in [0, 3], got 4

// A chunk loop reading chunk %n of head %h of a [B, NC, C, H, D] input (a
// view of the argument) in an inner loop: at the start of each iteration the
// rows of chunk %n + 1 are prefetched, one line (16 f32) at a time.
// CHECK-LABEL: func.func @chunk_loop
// CHECK-SAME: (%[[X:[^:]*]]: memref<1x4x8x2x32xf32>, %[[H:[^:]*]]: index, %[[OUT:[^:]*]]: memref<4x8x32xf32>)
// CHECK: %[[C4:.*]] = arith.constant 4 : index
// CHECK: scf.for %[[N:.*]] = %{{.*}} to %[[C4]] step %[[STEP:[^ ]*]]
// CHECK: %[[AHEAD:.*]] = arith.muli %[[STEP]], %[[ONE:.*]] : index
// CHECK: %[[NEXT:.*]] = arith.addi %[[N]], %[[AHEAD]] : index
// CHECK: %[[END:.*]] = arith.addi %[[NEXT]], %[[STEP]] : index
// CHECK: %[[IN:.*]] = arith.cmpi sle, %[[END]], %[[C4]] : index
// CHECK: scf.if %[[IN]] {
// CHECK: %[[SLICE:.*]] = memref.subview %[[X]][0, %[[NEXT]], 0, %[[H]], 0] [1, 1, 8, 1, 32] [1, 1, 1, 1, 1]
// CHECK: scf.for %[[ROW:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK: scf.for %[[COL:.*]] = %[[Z:.*]] to %[[C32:.*]] step %[[C16:.*]] {
// CHECK: memref.prefetch %[[SLICE]][%[[Z]], %[[Z]], %[[ROW]], %[[Z]], %[[COL]]], read, locality<2>, data
// CHECK-NOT: memref.prefetch
// CHECK: } {la.fused_chunk_loop}

// FAR-LABEL: func.func @chunk_loop
// FAR: %[[TWO:.*]] = arith.constant 2 : index
// FAR: arith.muli %{{.*}}, %[[TWO]] : index
// FAR: memref.prefetch {{.*}} read, locality<3>, data
func.func @chunk_loop(%x: memref<1x4x8x2x32xf32>, %h: index, %out: memref<4x8x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %pad = arith.constant 0.0 : f32
  scf.for %n = %c0 to %c4 step %c1 {
    scf.for %t = %c0 to %c8 step %c1 {
      %row = vector.transfer_read %x[%c0, %n, %t, %h, %c0], %pad {in_bounds = [true]} : memref<1x4x8x2x32xf32>, vector<32xf32>
      vector.transfer_write %row, %out[%n, %t, %c0] {in_bounds = [true]} : vector<32xf32>, memref<4x8x32xf32>
    }
  } {la.fused_chunk_loop}
  return
}

// -----

// The chunk loop that tiling T writes: over tokens in steps of the chunk
// size, a row of the chunk being %t + %r. The next chunk's 16 rows of head
// %h are prefetched, from token %t + 16 on, while all of them are in T.
// CHECK-LABEL: func.func @token_loop
// CHECK-SAME: (%[[X:[^:]*]]: memref<1x64x2x32xf32>, %[[H:[^:]*]]: index, %{{[^:]*}}: memref<16x32xf32>)
// CHECK: %[[C64:.*]] = arith.constant 64 : index
// CHECK: scf.for %[[T:.*]] = %{{.*}} to %[[C64]] step %[[STEP:[^ ]*]]
// CHECK: %[[NEXT:.*]] = arith.addi %[[T]], %{{.*}} : index
// CHECK: %[[END:.*]] = arith.addi %[[NEXT]], %[[STEP]] : index
// CHECK: %[[IN:.*]] = arith.cmpi sle, %[[END]], %[[C64]] : index
// CHECK: scf.if %[[IN]] {
// CHECK: memref.subview %[[X]][0, %[[NEXT]], %[[H]], 0] [1, 16, 1, 32] [1, 1, 1, 1]
// CHECK: memref.prefetch
// CHECK: } {la.fused_chunk_loop}
func.func @token_loop(%x: memref<1x64x2x32xf32>, %h: index, %out: memref<16x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %pad = arith.constant 0.0 : f32
  scf.for %t = %c0 to %c64 step %c16 {
    scf.for %r = %c0 to %c16 step %c1 {
      %token = affine.apply affine_map<()[s0, s1] -> (s0 + s1)>()[%t, %r]
      %row = vector.transfer_read %x[%c0, %token, %h, %c0], %pad {in_bounds = [true]} : memref<1x64x2x32xf32>, vector<32xf32>
      vector.transfer_write %row, %out[%r, %c0] {in_bounds = [true]} : vector<32xf32>, memref<16x32xf32>
    }
  } {la.fused_chunk_loop}
  return
}

// -----

// Nothing is prefetched from a buffer the function writes, nor in loops that
// are not chunk loops.
// CHECK-LABEL: func.func @not_prefetched
// CHECK-NOT: memref.prefetch
func.func @not_prefetched(%x: memref<4x32xf32>, %y: memref<4x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %pad = arith.constant 0.0 : f32
  scf.for %n = %c0 to %c4 step %c1 {
    %row = vector.transfer_read %x[%n, %c0], %pad {in_bounds = [true]} : memref<4x32xf32>, vector<32xf32>
    vector.transfer_write %row, %x[%n, %c0] {in_bounds = [true]} : vector<32xf32>, memref<4x32xf32>
  } {la.fused_chunk_loop}
  scf.for %n = %c0 to %c4 step %c1 {
    %row = vector.transfer_read %y[%n, %c0], %pad {in_bounds = [true]} : memref<4x32xf32>, vector<32xf32>
    vector.transfer_write %row, %x[%n, %c0] {in_bounds = [true]} : vector<32xf32>, memref<4x32xf32>
  }
  return
}
