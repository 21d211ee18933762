// RUN: la-opt %s -la-lower-to-cpu | FileCheck %s
// RUN: la-opt %s -la-lower-to-cpu=sequential | FileCheck %s --check-prefix=SEQ
// RUN: la-opt %s --pass-pipeline="builtin.module(la-lower-to-cpu{chunk-size=16})" | FileCheck %s
// RUN: not la-opt %s -la-lower-to-cpu=chunk-size=0 2>&1 | FileCheck %s --check-prefix=BADCHUNK
// RUN: la-opt %s -la-lower-to-cpu=parallel | FileCheck %s --check-prefix=OMP
// RUN: la-opt %s -la-lower-to-cpu="sequential=1 parallel=1 threads=2" | FileCheck %s --check-prefix=SEQOMP
// RUN: la-opt %s -la-lower-to-cpu=tile=false | FileCheck %s --check-prefix=SCALAR
// RUN: la-opt %s -la-lower-to-cpu="chunk-size=16 gate-block=4" -mlir-print-ir-after=convert-la-to-linalg -o /dev/null 2>&1 | FileCheck %s --check-prefix=GB4
// RUN: la-opt %s -la-lower-to-cpu="chunk-size=16 gate-block=0" -mlir-print-ir-after=convert-la-to-linalg -o /dev/null 2>&1 | FileCheck %s --check-prefix=GB0
// RUN: not la-opt %s -la-lower-to-cpu=gate-block=-1 2>&1 | FileCheck %s --check-prefix=BADGATE
// RUN: la-opt %s -la-lower-to-cpu="chunk-size=16 gate-spread-limit=0" -mlir-print-ir-after=convert-la-to-linalg -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOSPREAD
// RUN: la-opt %s -la-lower-to-cpu | FileCheck %s --check-prefix=MALLOC
// RUN: la-opt %s -la-lower-to-cpu=host-allocator | FileCheck %s --check-prefix=HOSTALLOC

// The whole pipeline ends in the LLVM dialect: results become trailing
// out-parameters (the caller owns every output), no la op is left.
// CHECK-NOT: la.
// CHECK-LABEL: llvm.func @gla(
// CHECK-SAME: %{{[^:]*}}: !llvm.ptr
// CHECK-NOT: -> !llvm.struct
// la-tile's register tiles: fused multiply-adds on vectors, exp as a
// polynomial (no libm call per lane).
// CHECK: llvm.intr.fma({{.*}}) : (vector<8xf32>, vector<8xf32>, vector<8xf32>) -> vector<8xf32>
// CHECK-NOT: llvm.intr.exp
// CHECK: llvm.return
// CHECK-NOT: la.

// Buffers: malloc and free by default; with host-allocator, the generic
// functions of finalize-memref-to-llvm (libla_host_runtime.so's cache).
// MALLOC-LABEL: llvm.func @gla(
// MALLOC: llvm.call @malloc(
// MALLOC-NOT: _mlir_memref_to_llvm
// MALLOC: llvm.call @free(
// HOSTALLOC-DAG: llvm.func @_mlir_memref_to_llvm_alloc(i64) -> !llvm.ptr
// HOSTALLOC-DAG: llvm.func @_mlir_memref_to_llvm_free(!llvm.ptr)
// HOSTALLOC-LABEL: llvm.func @gla(
// HOSTALLOC: llvm.call @_mlir_memref_to_llvm_alloc(
// HOSTALLOC-NOT: llvm.call @malloc(
// HOSTALLOC: llvm.call @_mlir_memref_to_llvm_free(
// HOSTALLOC-NOT: llvm.call @free(

// Without tiling: scalar loops.
// SCALAR-LABEL: llvm.func @gla(
// SCALAR-NOT: vector<
// SCALAR: llvm.intr.exp
// SCALAR-NOT: vector<
// SCALAR: llvm.return

// SEQ-LABEL: llvm.func @gla(
// SEQ: llvm.intr.fma({{.*}}) : (vector<8xf32>, vector<8xf32>, vector<8xf32>) -> vector<8xf32>
// SEQ: llvm.return
// SEQ-NOT: la.

// With `parallel`, the parallel loops of the linalg ops run in OpenMP
// regions, already lowered to the LLVM dialect's operands.
// OMP-LABEL: llvm.func @gla(
// OMP: omp.parallel
// OMP: omp.wsloop
// OMP: omp.loop_nest
// OMP-NOT: scf.parallel

// The token loops on threads: one loop per (batch, value head) task
// (la-fuse-recurrence{chunk=0}), the tasks in an OpenMP region.
// SEQOMP-LABEL: llvm.func @gla(
// SEQOMP: omp.parallel
// SEQOMP: omp.wsloop
// SEQOMP: llvm.intr.fma({{.*}}) : (vector<8xf32>, vector<8xf32>, vector<8xf32>) -> vector<8xf32>
// SEQOMP: llvm.return

// gate-block and gate-spread-limit (default 32) reach
// convert-la-to-linalg: a run-time choice between the one-product form and
// blocks of 4 rows of a 16-row chunk (the block-causal products of the
// three-factor decay), or no blocks; without the limit, no choice.
// GB4-LABEL: IR Dump After ConvertLaToLinalgPass
// GB4: arith.cmpf olt, %{{.*}}, %{{.*}} : f32
// GB4: scf.if
// GB4: } else {
// GB4: la.block_causal = array<i64: 3, 4, 1>
// GB4: la.block_causal = array<i64: 3, 5, 1>
// GB4: la.block_causal = array<i64: 3, 5, 4>
// GB0-LABEL: IR Dump After ConvertLaToLinalgPass
// GB0-NOT: la.block_causal
// NOSPREAD-LABEL: IR Dump After ConvertLaToLinalgPass
// NOSPREAD-NOT: scf.if
// NOSPREAD: la.block_causal = array<i64: 3, 5, 8>
// NOSPREAD-NOT: scf.if

// BADGATE: la-lower-to-cpu: 'gate-block' must be >= 0, got -1
// BADCHUNK: la-lower-to-cpu: 'chunk-size' must be in [1, 65536], got 0
func.func @gla(%q: tensor<1x20x2x8xf32>, %k: tensor<1x20x2x8xf32>, %v: tensor<1x20x2x8xf32>, %g: tensor<1x20x2x8xf32>) -> (tensor<1x20x2x8xf32>, tensor<1x2x8x8xf32>) {
  %o, %s = la.attention gla %q, %k, %v g(%g : tensor<1x20x2x8xf32>) : tensor<1x20x2x8xf32>, tensor<1x20x2x8xf32>, tensor<1x20x2x8xf32> -> tensor<1x20x2x8xf32>, tensor<1x2x8x8xf32>
  return %o, %s : tensor<1x20x2x8xf32>, tensor<1x2x8x8xf32>
}
