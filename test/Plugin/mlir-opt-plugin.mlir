// Stock mlir-opt loads la as a dialect plugin and a pass plugin.
// UNSUPPORTED: sanitizers
// RUN: mlir-opt %s --load-dialect-plugin=%la_lib_dir/LaPlugin.so --load-pass-plugin=%la_lib_dir/LaPlugin.so --pass-pipeline="builtin.module(la-lower-to-recurrence)" | FileCheck %s
// RUN: mlir-opt %s --load-dialect-plugin=%la_lib_dir/LaPlugin.so | FileCheck %s --check-prefix=PARSE
// RUN: not mlir-opt %s 2>&1 | FileCheck %s --check-prefix=NOPLUGIN

// CHECK-LABEL: func.func @gla
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: tensor<1x8x2x4xf32>)
// CHECK: %[[O:[^ ,]*]], %{{.*}} = la.recurrence decay(channel) low_rank(none) %[[Q]], %[[K]], %[[V]] g(%[[G]] : tensor<1x8x2x4xf32>) outs({{.*}}) {scale = 5.000000e-01 : f32}
// CHECK: return %[[O]]
// PARSE-LABEL: func.func @gla
// PARSE: la.attention gla
// NOPLUGIN: Dialect `la' not found
func.func @gla(%q: tensor<1x8x2x4xf32>, %k: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %g: tensor<1x8x2x4xf32>) -> tensor<1x8x2x6xf32> {
  %o = la.attention gla %q, %k, %v g(%g : tensor<1x8x2x4xf32>) : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>
  return %o : tensor<1x8x2x6xf32>
}
