// RUN: la-opt %s -split-input-file -la-outline-chunk-parts="min-size=4" | FileCheck %s
// RUN: la-opt %s -split-input-file -la-outline-chunk-parts | FileCheck %s --check-prefix=DEFAULT
// RUN: not la-opt %s -la-outline-chunk-parts=min-size=1 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: error: la-outline-chunk-parts: 'min-size' must be >= 2, got 1

// A chunk loop's large loop nest (its vector<4x8xf32> ops count 4 each)
// becomes a private, internal, noinline function that takes the values it
// uses from above (in the order of their first use) with its constants
// rebuilt inside, and returns the nest's result; the small nest stays.
// CHECK-LABEL: func.func private @chunk_part0(
// CHECK-SAME: %[[A:[a-z0-9]+]]: memref<4x8xf32>, %[[OUT:[a-z0-9]+]]: memref<?x8xf32>, %[[C:[a-z0-9]+]]: index) -> f32
// CHECK-SAME: attributes {llvm.linkage = #llvm.linkage<internal>, passthrough = ["noinline"]}
// CHECK: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[SUM:.*]] = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %[[ZERO]]) -> (f32) {
// CHECK: %[[ROW:.*]] = vector.transfer_read %[[A]]
// CHECK: %[[SQ:.*]] = arith.mulf %[[ROW]], %[[ROW]] : vector<4x8xf32>
// CHECK: vector.transfer_write %[[SQ]], %[[OUT]][%[[C]],
// CHECK: return %[[SUM]] : f32
// CHECK-LABEL: func.func @chunk(
// CHECK-SAME: %[[FA:[a-z0-9]+]]: memref<4x8xf32>, %[[FOUT:[a-z0-9]+]]: memref<?x8xf32>, %[[FS:[a-z0-9]+]]: memref<4xf32>)
// CHECK: scf.for %[[FC:.*]] = {{.*}} {
// CHECK: %[[R:.*]] = func.call @chunk_part0(%[[FA]], %[[FOUT]], %[[FC]]) : (memref<4x8xf32>, memref<?x8xf32>, index) -> f32
// CHECK: memref.store %[[R]], %[[FS]]
// CHECK: scf.for
// CHECK: memref.store
// CHECK: } {la.fused_chunk_loop}
// The default size (16) outlines this nest too (19).
// DEFAULT-LABEL: func.func private @chunk_part0(
// DEFAULT-LABEL: func.func @chunk(
// DEFAULT: func.call @chunk_part0(
func.func @chunk(%a: memref<4x8xf32>, %out: memref<?x8xf32>, %s: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %f0 = arith.constant 0.0 : f32
  scf.for %c = %c0 to %c8 step %c4 {
    %sum = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %f0) -> (f32) {
      %row = vector.transfer_read %a[%c0, %c0], %f0 : memref<4x8xf32>, vector<4x8xf32>
      %sq = arith.mulf %row, %row : vector<4x8xf32>
      vector.transfer_write %sq, %out[%c, %c0] : vector<4x8xf32>, memref<?x8xf32>
      %first = vector.extract %sq[0, 0] : f32 from vector<4x8xf32>
      %next = arith.addf %acc, %first : f32
      scf.yield %next : f32
    }
    memref.store %sum, %s[%c0] : memref<4xf32>
    scf.for %i = %c0 to %c4 step %c1 {
      memref.store %f0, %s[%i] : memref<4xf32>
    }
  } {la.fused_chunk_loop}
  return
}

// -----

// A large scf.if (a product's fast and blocked forms) stays; the large ops
// of each branch are outlined, so only the branch taken is called.
// CHECK-LABEL: func.func private @choice_part0(
// CHECK: arith.mulf %{{.*}}, %{{.*}} : vector<4x8xf32>
// CHECK-LABEL: func.func private @choice_part1(
// CHECK: arith.subf %{{.*}}, %{{.*}} : vector<4x8xf32>
// CHECK-LABEL: func.func @choice(
// CHECK: scf.if %{{.*}} {
// CHECK-NEXT: func.call @choice_part0(
// CHECK-NEXT: } else {
// CHECK-NEXT: func.call @choice_part1(
// CHECK-NEXT: }
func.func @choice(%a: memref<4x8xf32>, %fast: i1) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %f0 = arith.constant 0.0 : f32
  scf.for %c = %c0 to %c4 step %c1 {
    scf.if %fast {
      scf.for %i = %c0 to %c4 step %c1 {
        %x = vector.transfer_read %a[%c0, %c0], %f0 : memref<4x8xf32>, vector<4x8xf32>
        %y = arith.mulf %x, %x : vector<4x8xf32>
        vector.transfer_write %y, %a[%c0, %c0] : vector<4x8xf32>, memref<4x8xf32>
      }
    } else {
      scf.for %i = %c0 to %c4 step %c1 {
        %x = vector.transfer_read %a[%c0, %c0], %f0 : memref<4x8xf32>, vector<4x8xf32>
        %y = arith.subf %x, %x : vector<4x8xf32>
        vector.transfer_write %y, %a[%c0, %c0] : vector<4x8xf32>, memref<4x8xf32>
      }
    }
  } {la.fused_chunk_loop}
  return
}

// -----

// Loops that are not chunk loops, nests with a stack allocation (it would
// die with the call) and nests that take or return a vector stay.
// CHECK-LABEL: func.func @stays(
// CHECK-NOT: call
// CHECK: memref.alloca
// CHECK-NOT: func.func
func.func @stays(%a: memref<4x8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %f0 = arith.constant 0.0 : f32
  scf.for %c = %c0 to %c4 step %c1 {
    scf.for %i = %c0 to %c4 step %c1 {
      %x = vector.transfer_read %a[%c0, %c0], %f0 : memref<4x8xf32>, vector<4x8xf32>
      %y = arith.mulf %x, %x : vector<4x8xf32>
      vector.transfer_write %y, %a[%c0, %c0] : vector<4x8xf32>, memref<4x8xf32>
    }
  }
  scf.for %c = %c0 to %c4 step %c1 {
    scf.for %i = %c0 to %c4 step %c1 {
      %t = memref.alloca() : memref<4x8xf32>
      %x = vector.transfer_read %a[%c0, %c0], %f0 : memref<4x8xf32>, vector<4x8xf32>
      %y = arith.mulf %x, %x : vector<4x8xf32>
      vector.transfer_write %y, %t[%c0, %c0] : vector<4x8xf32>, memref<4x8xf32>
    }
    %v = vector.transfer_read %a[%c0, %c0], %f0 : memref<4x8xf32>, vector<4x8xf32>
    %w = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %v) -> (vector<4x8xf32>) {
      %y = arith.mulf %acc, %acc : vector<4x8xf32>
      %z = arith.addf %y, %acc : vector<4x8xf32>
      %u = arith.subf %z, %y : vector<4x8xf32>
      scf.yield %u : vector<4x8xf32>
    }
    vector.transfer_write %w, %a[%c0, %c0] : vector<4x8xf32>, memref<4x8xf32>
  } {la.fused_chunk_loop}
  return
}
