// RUN: la-opt %s -la-gpu-schedule-on-cpu="chunk-size=16 value-tile=8" | FileCheck %s
// RUN: la-opt %s -la-gpu-schedule-on-cpu="chunk-size=16 value-tile=8 tensor-cores" | FileCheck %s
// RUN: not la-opt %s -la-gpu-schedule-on-cpu="chunk-size=0" 2>&1 | FileCheck %s --check-prefix=BAD

// The test pipeline of test/lib: la-lower-to-gpu's schedule on tensors
// (la-tile-for-gpu's block, thread and warp loops), bufferized and lowered
// to the LLVM dialect for the CPU, sequentially: no GPU op and no la op is
// left, and the results are out-parameters.
// CHECK-LABEL: llvm.func @gla(
// CHECK-NOT: gpu.
// CHECK-NOT: la.
// CHECK: llvm.return
// BAD: 'chunk-size' must be in [1, 65536], got 0
func.func @gla(%q: tensor<1x64x2x16xf32>, %k: tensor<1x64x2x16xf32>, %v: tensor<1x64x2x16xf32>, %g: tensor<1x64x2x16xf32>) -> (tensor<1x64x2x16xf32>, tensor<1x2x16x16xf32>) {
  %o, %s = la.attention gla %q, %k, %v g(%g : tensor<1x64x2x16xf32>) : tensor<1x64x2x16xf32>, tensor<1x64x2x16xf32>, tensor<1x64x2x16xf32> -> tensor<1x64x2x16xf32>, tensor<1x2x16x16xf32>
  return %o, %s : tensor<1x64x2x16xf32>, tensor<1x2x16x16xf32>
}
