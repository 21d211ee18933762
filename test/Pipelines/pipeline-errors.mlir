// The registered pipelines check their options and their anchor before any
// pass runs: a clear error, a non-zero exit and no output file.
// RUN: rm -f %t.out
// RUN: not la-opt %s -la-lower-to-nvvm=format=bogus -o %t.out 2>&1 | FileCheck %s --check-prefix=FORMAT
// RUN: not test -e %t.out
// RUN: not la-opt %s -la-lower-to-gpu=mma-precision=fp8 2>&1 | FileCheck %s --check-prefix=MMA
// RUN: not la-opt %s -la-lower-to-gpu-emulator=threads-per-block=0 2>&1 | FileCheck %s --check-prefix=THREADS
// RUN: not la-opt %s -la-lower-to-cpu=fuse=sometimes 2>&1 | FileCheck %s --check-prefix=FUSE
// RUN: not la-opt %s -la-lower-to-cpu=chunk-size=2147483648 2>&1 | FileCheck %s --check-prefix=HUGE
// RUN: not la-opt %s -la-lower-to-cpu=chunk-size=9223372036854775807 2>&1 | FileCheck %s --check-prefix=HUGE63
// RUN: not la-opt %s -la-lower-to-cpu=gate-spread-limit=-1 2>&1 | FileCheck %s --check-prefix=SPREAD
// RUN: not la-opt %s -la-lower-to-cpu=row-tile=-1 2>&1 | FileCheck %s --check-prefix=ROWTILE
// RUN: not la-opt %s -la-lower-to-cpu=vector-bits=384 2>&1 | FileCheck %s --check-prefix=VECTORBITS
// A value llvm::cl cannot parse: its words are in the one error message.
// RUN: not la-opt %s -la-lower-to-cpu=chunk-size=abc -o %t.out 2>&1 | FileCheck %s --check-prefix=NOTINT
// RUN: not test -e %t.out
// RUN: not la-opt %s --pass-pipeline="builtin.module(la-lower-to-gpu{tensor-cores=maybe})" 2>&1 | FileCheck %s --check-prefix=NOTBOOL

// Nested below builtin.module: a diagnostic, not LLVM's fatal error.
// RUN: not la-opt %s --pass-pipeline="builtin.module(func.func(la-lower-to-cpu))" 2>&1 | FileCheck %s --check-prefix=NESTED-CPU
// RUN: not la-opt %s --pass-pipeline="builtin.module(func.func(la-lower-to-gpu))" 2>&1 | FileCheck %s --check-prefix=NESTED-GPU
// RUN: not la-opt %s --pass-pipeline="builtin.module(func.func(la-lower-to-nvvm))" 2>&1 | FileCheck %s --check-prefix=NESTED-NVVM
// RUN: not la-opt %s --pass-pipeline="builtin.module(func.func(la-lower-to-gpu-emulator))" 2>&1 | FileCheck %s --check-prefix=NESTED-EMU

// A chunk size above T is lowered as T: one chunk, no padding.
// RUN: la-opt %s -la-lower-to-cpu=chunk-size=65536 -mlir-print-ir-after=la-chunk -o /dev/null 2>&1 | FileCheck %s --check-prefix=CLAMP

// FORMAT: error: la-lower-to-nvvm: 'format' must be bin, isa or fatbin, got 'bogus'
// MMA: error: la-lower-to-gpu: invalid options 'mma-precision=fp8': la-opt: for the --mma-precision option: Cannot find option named 'fp8'!
// THREADS: error: la-lower-to-gpu-emulator: 'threads-per-block' must be in [1, 1024], got 0
// FUSE: error: la-lower-to-cpu: invalid options 'fuse=sometimes': la-opt: for the --fuse option: Cannot find option named 'sometimes'!
// HUGE: error: la-lower-to-cpu: 'chunk-size' must be in [1, 65536], got 2147483648
// HUGE63: error: la-lower-to-cpu: 'chunk-size' must be in [1, 65536], got 9223372036854775807
// SPREAD: error: la-lower-to-cpu: 'gate-spread-limit' must be finite and >= 0
// ROWTILE: error: la-lower-to-cpu: 'row-tile' and 'lane-tile' must be >= 0 (0: from 'vector-bits'), got -1 and 0
// VECTORBITS: error: la-lower-to-cpu: 'vector-bits' must be 128, 256 or 512, got 384
// NOTINT: error: la-lower-to-cpu: invalid options 'chunk-size=abc': la-opt: for the --chunk-size option: 'abc' value invalid for long argument!
// NOTBOOL: error: la-lower-to-gpu: invalid options 'tensor-cores=maybe': la-opt: for the --tensor-cores option: 'maybe' is invalid value for boolean argument! Try 0 or 1
// NESTED-CPU: error: la-lower-to-cpu: runs on 'builtin.module', not on 'func.func'
// NESTED-GPU: error: la-lower-to-gpu: runs on 'builtin.module', not on 'func.func'
// NESTED-NVVM: error: la-lower-to-nvvm: runs on 'builtin.module', not on 'func.func'
// NESTED-EMU: error: la-lower-to-gpu-emulator: runs on 'builtin.module', not on 'func.func'

// CLAMP-LABEL: func.func @linear
// CLAMP: la.chunk_intra {{.*}} : tensor<1x1x16x1x4xf32>
func.func @linear(%q: tensor<1x16x1x4xf32>, %k: tensor<1x16x1x4xf32>,
                  %v: tensor<1x16x1x4xf32>) -> tensor<1x16x1x4xf32> {
  %o = la.attention linear %q, %k, %v
      : tensor<1x16x1x4xf32>, tensor<1x16x1x4xf32>, tensor<1x16x1x4xf32>
      -> tensor<1x16x1x4xf32>
  return %o : tensor<1x16x1x4xf32>
}
