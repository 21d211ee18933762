// RUN: la-opt %s -la-lower-to-cpu="chunk-size=16" -mlir-print-ir-after=la-in-place-arguments -o /dev/null 2>&1 | FileCheck %s
// RUN: not la-opt %s -la-lower-to-cpu="sequential=1" -o /dev/null 2>&1 | FileCheck %s --check-prefix=SEQ

// A decode kernel whose initial state is marked la.in_place: after
// bufferization the tasks update the caller's state buffer, and the final
// state is no longer a result (the kernel returns o only).
// CHECK-LABEL: func.func @decode
// CHECK-SAME: %[[S0:[^:]*]]: memref<?x2x16x16xf32> {la.in_place}) -> memref<?x?x2x16xf32>
// CHECK: scf.forall
// CHECK: memref.subview %[[S0]]
// CHECK: return %{{.*}} : memref<?x?x2x16xf32>

// The token loops write the state elsewhere: an error at the argument, not
// a kernel that leaves the caller's buffer stale.
// SEQ: error: argument #4 of 'decode' is marked la.in_place but no result was written into its buffer
func.func @decode(%q: tensor<?x?x2x16xf32>, %k: tensor<?x?x2x16xf32>, %v: tensor<?x?x2x16xf32>, %g: tensor<?x?x2x16xf32>, %s0: tensor<?x2x16x16xf32> {la.in_place}) -> (tensor<?x?x2x16xf32>, tensor<?x2x16x16xf32>) {
  %o, %s = la.attention gla %q, %k, %v
      g(%g : tensor<?x?x2x16xf32>) initial_state(%s0 : tensor<?x2x16x16xf32>)
      : tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32> -> tensor<?x?x2x16xf32>, tensor<?x2x16x16xf32>
  return %o, %s : tensor<?x?x2x16xf32>, tensor<?x2x16x16xf32>
}
