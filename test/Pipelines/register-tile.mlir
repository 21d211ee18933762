// la-lower-to-cpu gives la-tile the register tile of `vector-bits` (two
// vectors per row: 8 rows with AVX-512's 32 registers, 6 with 16), unless
// row-tile or lane-tile are given. la-opt's default is 512 whatever the host:
// the IR does not depend on where it is compiled.
// RUN: la-opt %s -la-lower-to-cpu --dump-pass-pipeline -o /dev/null 2>&1 | FileCheck %s --check-prefix=AVX512
// RUN: la-opt %s -la-lower-to-cpu=vector-bits=256 --dump-pass-pipeline -o /dev/null 2>&1 | FileCheck %s --check-prefix=AVX2
// RUN: la-opt %s -la-lower-to-cpu=vector-bits=128 --dump-pass-pipeline -o /dev/null 2>&1 | FileCheck %s --check-prefix=SSE
// RUN: la-opt %s -la-lower-to-cpu="vector-bits=256 row-tile=4" --dump-pass-pipeline -o /dev/null 2>&1 | FileCheck %s --check-prefix=ROWS
// RUN: la-opt %s -la-lower-to-cpu="vector-bits=128 lane-tile=12" --dump-pass-pipeline -o /dev/null 2>&1 | FileCheck %s --check-prefix=LANES

// AVX512: la-tile{distribute=false lane-tile=32 reduction-tile=1 row-tile=8 vectorize=true}
// AVX2: la-tile{distribute=false lane-tile=16 reduction-tile=1 row-tile=6 vectorize=true}
// SSE: la-tile{distribute=false lane-tile=8 reduction-tile=1 row-tile=6 vectorize=true}
// ROWS: la-tile{distribute=false lane-tile=16 reduction-tile=1 row-tile=4 vectorize=true}
// LANES: la-tile{distribute=false lane-tile=12 reduction-tile=1 row-tile=6 vectorize=true}

// The tile reaches the products: an AVX2 tile's accumulator is 6 x 16.
// RUN: la-opt %s -split-input-file -la-lower-to-cpu=vector-bits=256 -mlir-print-ir-after=la-tile -o /dev/null 2>&1 | FileCheck %s --check-prefix=TILED
// TILED-LABEL: func.func @linear
// TILED: vector.fma {{.*}} : vector<6x16xf32>
// TILED-NOT: vector<8x32xf32>
func.func @linear(%q: tensor<1x64x1x32xf32>, %k: tensor<1x64x1x32xf32>,
                  %v: tensor<1x64x1x32xf32>) -> tensor<1x64x1x32xf32> {
  %o, %s = la.attention linear %q, %k, %v
      : tensor<1x64x1x32xf32>, tensor<1x64x1x32xf32>, tensor<1x64x1x32xf32>
        -> tensor<1x64x1x32xf32>, tensor<1x1x32x32xf32>
  return %o : tensor<1x64x1x32xf32>
}
