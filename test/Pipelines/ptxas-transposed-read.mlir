// A recurrence read from both sides (the delta rule, a channel gate, reverse
// time, K = V = 64) through la-lower-to-nvvm's fused schedule: ptxas accepts
// its kernel for sm_90a. (The NVVM pipeline's backward does not use the
// value-side read yet; this is the op's own kernel, whose numbers
// test_transposed_read.py checks on the emulator.)
// REQUIRES: ptxas
// RUN: rm -rf %t && mkdir -p %t
// RUN: la-opt %s -la-lower-to-nvvm=format=isa -o %t/kernels.mlir
// RUN: %extract_gpu_objects %t/kernels.mlir -o %t | FileCheck %s --check-prefix=FILES
// RUN: %ptxas -arch=sm_90a -v %t/both_sides_kernel.0.ptx -o %t/both.cubin 2>&1 | FileCheck %s
// FILES: both_sides_kernel.0.ptx
// CHECK: Compiling entry function 'both_sides_kernel'
// CHECK: Used {{[0-9]+}} registers
func.func @both_sides(%q: tensor<1x64x2x64xf32>, %k: tensor<1x64x2x64xf32>, %v: tensor<1x64x2x64xf32>, %g: tensor<1x64x2x64xf32>, %beta: tensor<1x64x2xf32>, %x: tensor<1x64x2x64xf32>, %s0: tensor<1x2x64x64xf32>) -> (tensor<1x64x2x64xf32>, tensor<1x2x64x64xf32>, tensor<1x64x2x64xf32>) {
  %oi = tensor.empty() : tensor<1x64x2x64xf32>
  %ti = tensor.empty() : tensor<1x64x2x64xf32>
  %o, %s, %t = la.recurrence decay(channel) low_rank(delta) %q, %k, %v g(%g : tensor<1x64x2x64xf32>) beta(%beta : tensor<1x64x2xf32>) transposed_query(%x : tensor<1x64x2x64xf32>) outs(%oi, %s0, %ti : tensor<1x64x2x64xf32>, tensor<1x2x64x64xf32>, tensor<1x64x2x64xf32>) {scale = 0.5 : f32, reverse} : tensor<1x64x2x64xf32>, tensor<1x64x2x64xf32>, tensor<1x64x2x64xf32> -> tensor<1x64x2x64xf32>, tensor<1x2x64x64xf32>, tensor<1x64x2x64xf32>
  return %o, %s, %t : tensor<1x64x2x64xf32>, tensor<1x2x64x64xf32>, tensor<1x64x2x64xf32>
}
