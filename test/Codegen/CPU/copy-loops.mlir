// RUN: la-opt %s -split-input-file -la-copy-loops | FileCheck %s
// RUN: la-opt %s -split-input-file -la-copy-loops -convert-linalg-to-loops | FileCheck %s --check-prefix=LOOPS
// RUN: la-opt %s -split-input-file -la-copy-loops=vector-rows=false | FileCheck %s --check-prefix=NOVEC

// A row of a dynamic number of tokens [B, 8, 128] written into a [B, T, 8,
// 128] buffer at token %t: a dynamic shape with an outer stride, which
// finalize-memref-to-llvm would copy element by element through memrefCopy.
// It becomes loops over B and the 8 rows, each row of 128 one vector.
// CHECK-LABEL: func.func @dynamic_row
// CHECK-SAME: (%[[SRC:[^:]*]]: memref<?x8x128xf32>, %[[DST:[^:]*]]: memref<?x?x8x128xf32>, %[[T:[^:]*]]: index)
// CHECK: %[[ROWS:.*]] = memref.subview %[[DST]]
// CHECK-NOT: memref.copy
// CHECK: %[[B:.*]] = memref.dim %[[SRC]]
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %[[B]]
// CHECK: scf.for %[[J:.*]] = %{{.*}} to %{{.*}}
// CHECK: %[[ROW:.*]] = vector.load %[[SRC]][%[[I]], %[[J]], %{{.*}}] : memref<?x8x128xf32>, vector<128xf32>
// CHECK: vector.store %[[ROW]], %[[ROWS]][%[[I]], %[[J]], %{{.*}}] : memref<?x8x128xf32, strided<[?, 128, 1], offset: ?>>, vector<128xf32>
// CHECK-NOT: memref.copy
// CHECK-NOT: linalg.copy
// CHECK: return
// With vector-rows=false (the untiled pipeline): element loops.
// NOVEC-LABEL: func.func @dynamic_row
// NOVEC-NOT: vector.
// NOVEC: linalg.copy
// NOVEC-NOT: memref.copy
// NOVEC: return
func.func @dynamic_row(%src: memref<?x8x128xf32>, %dst: memref<?x?x8x128xf32>,
                       %t: index) {
  %c0 = arith.constant 0 : index
  %b = memref.dim %dst, %c0 : memref<?x?x8x128xf32>
  %row = memref.subview %dst[0, %t, 0, 0] [%b, 1, 8, 128] [1, 1, 1, 1]
      : memref<?x?x8x128xf32> to memref<?x8x128xf32, strided<[?, 128, 1], offset: ?>>
  memref.copy %src, %row : memref<?x8x128xf32> to memref<?x8x128xf32, strided<[?, 128, 1], offset: ?>>
  return
}

// -----

// A static shape whose rows are 1024 elements apart: not contiguous, one
// vector per row.
// CHECK-LABEL: func.func @static_strided
// CHECK-SAME: (%[[SRC:[^:]*]]: memref<64x128xf32, strided<[1024, 1], offset: ?>>, %[[DST:[^:]*]]: memref<64x128xf32>)
// CHECK: scf.for %[[I:.*]] =
// CHECK: %[[ROW:.*]] = vector.load %[[SRC]][%[[I]], %{{.*}}] : {{.*}}, vector<128xf32>
// CHECK: vector.store %[[ROW]], %[[DST]][%[[I]], %{{.*}}] : memref<64x128xf32>, vector<128xf32>
// CHECK-NOT: memref.copy
func.func @static_strided(%src: memref<64x128xf32, strided<[1024, 1], offset: ?>>,
                          %dst: memref<64x128xf32>) {
  memref.copy %src, %dst : memref<64x128xf32, strided<[1024, 1], offset: ?>> to memref<64x128xf32>
  return
}

// -----

// 16-bit rows that fill whole 512-bit vectors are vectors too.
// CHECK-LABEL: func.func @bf16_rows
// CHECK: %[[ROW:.*]] = vector.load {{.*}} : memref<?x64xbf16, strided<[?, 1], offset: ?>>, vector<64xbf16>
// CHECK: vector.store %[[ROW]], {{.*}} : memref<?x64xbf16>, vector<64xbf16>
// CHECK-NOT: linalg.copy
func.func @bf16_rows(%a: memref<?x64xbf16, strided<[?, 1], offset: ?>>, %b: memref<?x64xbf16>) {
  memref.copy %a, %b : memref<?x64xbf16, strided<[?, 1], offset: ?>> to memref<?x64xbf16>
  return
}

// -----

// Rows that are not vectors (a dynamic innermost size, a strided innermost
// dimension, rows longer than 1024 elements, 9 bf16 elements): element
// loops of a linalg.copy.
// CHECK-LABEL: func.func @element_loops
// CHECK-SAME: (%[[A:[^:]*]]: memref<?x?xf32, strided<[?, 1], offset: ?>>, %[[B:[^:]*]]: memref<?x?xf32>, %[[C:[^:]*]]: memref<4x8xf32, strided<[64, 2]>>, %[[D:[^:]*]]: memref<4x8xf32>, %[[E:[^:]*]]: memref<2x2048xf32, strided<[4096, 1]>>, %[[F:[^:]*]]: memref<2x2048xf32>, %[[G:[^:]*]]: memref<?x9xbf16, strided<[?, 1], offset: ?>>, %[[H:[^:]*]]: memref<?x9xbf16>)
// CHECK-NOT: vector.
// CHECK: linalg.copy ins(%[[A]] : {{.*}}) outs(%[[B]] : {{.*}})
// CHECK: linalg.copy ins(%[[C]] : {{.*}}) outs(%[[D]] : {{.*}})
// CHECK: linalg.copy ins(%[[E]] : {{.*}}) outs(%[[F]] : {{.*}})
// CHECK: linalg.copy ins(%[[G]] : {{.*}}) outs(%[[H]] : {{.*}})
// CHECK-NOT: memref.copy
// LOOPS-LABEL: func.func @element_loops
// LOOPS: scf.for
// LOOPS: scf.for
// LOOPS: %[[X:.*]] = memref.load
// LOOPS: memref.store %[[X]]
// LOOPS-NOT: memref.copy
// LOOPS: return
func.func @element_loops(%a: memref<?x?xf32, strided<[?, 1], offset: ?>>, %b: memref<?x?xf32>,
                         %c: memref<4x8xf32, strided<[64, 2]>>, %d: memref<4x8xf32>,
                         %e: memref<2x2048xf32, strided<[4096, 1]>>, %f: memref<2x2048xf32>,
                         %g: memref<?x9xbf16, strided<[?, 1], offset: ?>>, %h: memref<?x9xbf16>) {
  memref.copy %a, %b : memref<?x?xf32, strided<[?, 1], offset: ?>> to memref<?x?xf32>
  memref.copy %c, %d : memref<4x8xf32, strided<[64, 2]>> to memref<4x8xf32>
  memref.copy %e, %f : memref<2x2048xf32, strided<[4096, 1]>> to memref<2x2048xf32>
  memref.copy %g, %h : memref<?x9xbf16, strided<[?, 1], offset: ?>> to memref<?x9xbf16>
  return
}

// -----

// Copies that finalize-memref-to-llvm turns into llvm.memcpy stay: identity
// layouts (also with dynamic sizes), a static contiguous view at any offset
// (unit dims may have any stride), and unranked memrefs (the runtime's).
// CHECK-LABEL: func.func @kept
// CHECK-NOT: linalg.copy
// CHECK-COUNT-3: memref.copy
// CHECK-NOT: linalg.copy
// CHECK: return
func.func @kept(%a: memref<?x128xf32>, %b: memref<?x128xf32>,
                %c: memref<1x1x32xf32, strided<[8192, 128, 1], offset: ?>>,
                %d: memref<1x1x32xf32>, %u: memref<*xf32>, %w: memref<*xf32>) {
  memref.copy %a, %b : memref<?x128xf32> to memref<?x128xf32>
  memref.copy %c, %d : memref<1x1x32xf32, strided<[8192, 128, 1], offset: ?>> to memref<1x1x32xf32>
  memref.copy %u, %w : memref<*xf32> to memref<*xf32>
  return
}
