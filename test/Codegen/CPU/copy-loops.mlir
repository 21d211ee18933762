// RUN: la-opt %s -split-input-file -la-copy-loops | FileCheck %s
// RUN: la-opt %s -split-input-file -la-copy-loops -convert-linalg-to-loops | FileCheck %s --check-prefix=LOOPS

// A row of a dynamic number of tokens [B, 8, 128] written into a [B, T, 8,
// 128] buffer at token %t: a dynamic shape with an outer stride, which
// finalize-memref-to-llvm would copy element by element through memrefCopy.
// CHECK-LABEL: func.func @dynamic_row
// CHECK-SAME: (%[[SRC:[^:]*]]: memref<?x8x128xf32>, %[[DST:[^:]*]]: memref<?x?x8x128xf32>, %[[T:[^:]*]]: index)
// CHECK: %[[ROW:.*]] = memref.subview %[[DST]]
// CHECK-NOT: memref.copy
// CHECK: linalg.copy ins(%[[SRC]] : memref<?x8x128xf32>) outs(%[[ROW]] : memref<?x8x128xf32, strided<[?, 128, 1], offset: ?>>)
// CHECK-NOT: memref.copy
// LOOPS-LABEL: func.func @dynamic_row
// LOOPS: scf.for
// LOOPS: scf.for
// LOOPS: scf.for
// LOOPS: %[[X:.*]] = memref.load
// LOOPS: memref.store %[[X]]
// LOOPS-NOT: memref.copy
// LOOPS: return
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

// A static shape whose rows are 1024 elements apart: not contiguous.
// CHECK-LABEL: func.func @static_strided
// CHECK: linalg.copy
// CHECK-NOT: memref.copy
func.func @static_strided(%src: memref<64x128xf32, strided<[1024, 1], offset: ?>>,
                          %dst: memref<64x128xf32>) {
  memref.copy %src, %dst : memref<64x128xf32, strided<[1024, 1], offset: ?>> to memref<64x128xf32>
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
