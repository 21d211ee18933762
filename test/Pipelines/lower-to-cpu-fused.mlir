// RUN: la-opt %s -la-lower-to-cpu="chunk-size=16 copy-loops=false" | FileCheck %s
// RUN: la-opt %s -la-lower-to-cpu="chunk-size=16 prefetch=false copy-loops=false" | FileCheck %s --check-prefix=NOPF

// (copy-loops=false: la-copy-loops would turn a strided copy into loops,
// hiding the copies these checks look for.)

// The fused schedule on buffers: the state is updated in place, each
// chunk's output is written where it lives and the output is the caller's
// buffer, so no strided copy (memrefCopy) is left, only the gate scan's
// contiguous rows (llvm.intr.memcpy); the next chunk's inputs are
// prefetched.
// CHECK-LABEL: llvm.func @gla(
// CHECK-NOT: memrefCopy
// CHECK: llvm.intr.prefetch
// CHECK-NOT: memrefCopy
// CHECK: llvm.return

// NOPF-LABEL: llvm.func @gla(
// NOPF-NOT: llvm.intr.prefetch
// NOPF: llvm.return
func.func @gla(%q: tensor<1x64x2x32xf32>, %k: tensor<1x64x2x32xf32>, %v: tensor<1x64x2x32xf32>, %g: tensor<1x64x2x32xf32>) -> (tensor<1x64x2x32xf32>, tensor<1x2x32x32xf32>) {
  %o, %s = la.attention gla %q, %k, %v g(%g : tensor<1x64x2x32xf32>) : tensor<1x64x2x32xf32>, tensor<1x64x2x32xf32>, tensor<1x64x2x32xf32> -> tensor<1x64x2x32xf32>, tensor<1x2x32x32xf32>
  return %o, %s : tensor<1x64x2x32xf32>, tensor<1x2x32x32xf32>
}

// A value-side gate gv: its chunk output adds the gated state part to the
// intra part chosen at run time (one product or a term per exponential),
// and is still written in place (it was copied element by element,
// memrefCopy, which cost a gv recurrence a third of its time).
// CHECK-LABEL: llvm.func @linear_value_gate(
// CHECK-NOT: memrefCopy
// CHECK: llvm.return
func.func @linear_value_gate(%q: tensor<1x64x2x32xf32>, %k: tensor<1x64x2x32xf32>, %v: tensor<1x64x2x32xf32>, %gv: tensor<1x64x2x32xf32>) -> (tensor<1x64x2x32xf32>, tensor<1x2x32x32xf32>) {
  %o, %s = la.attention linear %q, %k, %v gv(%gv : tensor<1x64x2x32xf32>) : tensor<1x64x2x32xf32>, tensor<1x64x2x32xf32>, tensor<1x64x2x32xf32> -> tensor<1x64x2x32xf32>, tensor<1x2x32x32xf32>
  return %o, %s : tensor<1x64x2x32xf32>, tensor<1x2x32x32xf32>
}
