// RUN: la-opt %s -split-input-file -la-in-place-arguments | FileCheck %s

// The result that is the la.in_place argument (here through a cast) is
// dropped; the caller reads it from the buffer it passed. Other results,
// and an unmarked argument returned, stay.
// CHECK-LABEL: func.func @updated
// CHECK-SAME: (%[[X:[^:]*]]: memref<4xf32>, %[[S:[^:]*]]: memref<2x3xf32> {la.in_place}, %[[Y:[^:]*]]: memref<4xf32>) -> (memref<4xf32>, memref<4xf32>)
// CHECK: %[[O:.*]] = memref.alloc() : memref<4xf32>
// CHECK: return %[[O]], %[[Y]] : memref<4xf32>, memref<4xf32>
func.func @updated(%x: memref<4xf32>, %s: memref<2x3xf32> {la.in_place}, %y: memref<4xf32>)
    -> (memref<4xf32>, memref<?x3xf32>, memref<4xf32>) {
  %o = memref.alloc() : memref<4xf32>
  memref.copy %x, %o : memref<4xf32> to memref<4xf32>
  %c = memref.cast %s : memref<2x3xf32> to memref<?x3xf32>
  return %o, %c, %y : memref<4xf32>, memref<?x3xf32>, memref<4xf32>
}

// -----

// Without a marked argument nothing changes.
// CHECK-LABEL: func.func @unmarked
// CHECK: return %{{.*}}, %{{.*}} : memref<4xf32>, memref<2x3xf32>
func.func @unmarked(%x: memref<4xf32>, %s: memref<2x3xf32>) -> (memref<4xf32>, memref<2x3xf32>) {
  return %x, %s : memref<4xf32>, memref<2x3xf32>
}
