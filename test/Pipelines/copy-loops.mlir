// RUN: la-opt %s -la-lower-to-cpu | FileCheck %s
// RUN: la-opt %s -la-lower-to-cpu=copy-loops=false | FileCheck %s --check-prefix=RUNTIME

// GLA's backward with a run-time B and T, as the Python package compiles
// it: the gates shifted one token and the gate gradient's per-token rows are
// copies with a dynamic size and an outer stride. la-copy-loops makes them
// loops; without it they call the runtime's element-by-element memrefCopy.
// CHECK-LABEL: llvm.func @gla_grad(
// CHECK-NOT: memrefCopy
// CHECK: llvm.return
// RUNTIME-LABEL: llvm.func @gla_grad(
// RUNTIME: llvm.call @memrefCopy
func.func @gla_grad(%q: tensor<?x?x2x16xf32>, %k: tensor<?x?x2x16xf32>,
                    %v: tensor<?x?x2x16xf32>, %g: tensor<?x?x2x16xf32>,
                    %s0: tensor<?x2x16x16xf32>, %do: tensor<?x?x2x16xf32>,
                    %dsf: tensor<?x2x16x16xf32>)
    -> (tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>,
        tensor<?x2x16x16xf32>, tensor<?x?x2x16xf32>) {
  %r:5 = la.recurrence_grad decay(channel) low_rank(none) %q, %k, %v
      g(%g : tensor<?x?x2x16xf32>) initial_state(%s0 : tensor<?x2x16x16xf32>)
      d_o(%do : tensor<?x?x2x16xf32>) d_final_state(%dsf : tensor<?x2x16x16xf32>)
      {scale = 0.25 : f32}
      : tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>
      -> tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>,
         tensor<?x2x16x16xf32>, tensor<?x?x2x16xf32>
  return %r#0, %r#1, %r#2, %r#3, %r#4 : tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>, tensor<?x2x16x16xf32>, tensor<?x?x2x16xf32>
}
