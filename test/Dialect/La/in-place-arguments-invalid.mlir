// RUN: la-opt %s -split-input-file -la-in-place-arguments -verify-diagnostics

// The state went to a copy: the caller's buffer would stay stale.
func.func @copied(%x: memref<4xf32>,
    // expected-error @below {{argument #1 of 'copied' is marked la.in_place but no result was written into its buffer}}
    %s: memref<2x3xf32> {la.in_place}) -> memref<2x3xf32> {
  %n = memref.alloc() : memref<2x3xf32>
  memref.copy %s, %n : memref<2x3xf32> to memref<2x3xf32>
  return %n : memref<2x3xf32>
}

// -----

// A function with callers cannot lose a result.
// expected-error @below {{has arguments marked la.in_place and callers, whose results would change}}
func.func @called(%s: memref<2x3xf32> {la.in_place}) -> memref<2x3xf32> {
  return %s : memref<2x3xf32>
}
func.func @caller(%s: memref<2x3xf32>) -> memref<2x3xf32> {
  %r = call @called(%s) : (memref<2x3xf32>) -> memref<2x3xf32>
  return %r : memref<2x3xf32>
}
