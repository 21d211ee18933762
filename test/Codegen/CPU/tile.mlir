// RUN: la-opt %s -split-input-file -la-tile -canonicalize -cse | FileCheck %s
// RUN: la-opt %s -split-input-file -la-tile="vectorize=false distribute=false" -canonicalize -cse | FileCheck %s --check-prefix=LOOPS
// RUN: not la-opt %s -split-input-file -la-tile=row-tile=0 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: error: la-tile: tile sizes must be >= 1

// A batch of small matrix products O += M X (the shape of la's chunk
// products): the batch loops become one scf.forall, the register tile is 8
// rows x 32 lanes, one reduction step per iteration, and the accumulator
// stays in registers across the reduction loop.
// CHECK-LABEL: func.func @contraction
// CHECK-SAME: (%[[M:[^:]*]]: tensor<2x3x16x16xf32>, %[[X:[^:]*]]: tensor<2x3x16x64xf32>, %[[INIT:[^:]*]]: tensor<2x3x16x64xf32>)
// CHECK: %[[RES:.*]] = scf.forall (%[[B:.*]], %[[N:.*]]) in (2, 3) shared_outs(%[[OUT:.*]] = %[[INIT]])
// CHECK: %[[TILE:.*]] = tensor.extract_slice %[[OUT]][%[[B]], %[[N]], 0, 0] [1, 1, 16, 64]
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %[[C8:.*]] iter_args
// CHECK: scf.for %[[V:.*]] = %{{.*}} to %{{.*}} step %[[C32:.*]] iter_args(%[[ACC_T:.*]] =
// CHECK: %[[ACC0:.*]] = vector.transfer_read %[[ACC_T]][%{{.*}}, %{{.*}}, %[[I]], %[[V]]], {{.*}} : tensor<1x1x16x64xf32>, vector<8x32xf32>
// CHECK: %[[RED:.*]] = scf.for %[[J:.*]] = {{.*}} iter_args(%[[ACC:.*]] = %[[ACC0]]) -> (vector<8x32xf32>)
// CHECK: %[[MCOL:.*]] = vector.transfer_read %[[M]][%[[B]], %[[N]], %[[I]], %[[J]]], {{.*}} : tensor<2x3x16x16xf32>, vector<8x1xf32>
// CHECK: %[[XROW:.*]] = vector.transfer_read %[[X]][%[[B]], %[[N]], %[[J]], %[[V]]], {{.*}} : tensor<2x3x16x64xf32>, vector<32xf32>
// CHECK: %[[XB:.*]] = vector.broadcast %[[XROW]] : vector<32xf32> to vector<8x32xf32>
// CHECK: %[[FMA:.*]] = vector.fma %{{.*}}, %[[XB]], %[[ACC]] : vector<8x32xf32>
// CHECK: scf.yield %[[FMA]]
// The write has the tensor's rank (leading unit dims), so that one-shot
// bufferization sees it covers only part of its destination.
// CHECK: %[[FULL:.*]] = vector.shape_cast %[[RED]] : vector<8x32xf32> to vector<1x1x8x32xf32>
// CHECK: vector.transfer_write %[[FULL]], %[[ACC_T]][%{{.*}}, %{{.*}}, %[[I]], %[[V]]] {in_bounds = [true, true, true, true]} : vector<1x1x8x32xf32>, tensor<1x1x16x64xf32>
// CHECK: scf.forall.in_parallel
// CHECK: return %[[RES]]

// Without vectorisation and distribution: the same tiles as scf.for loops.
// LOOPS-LABEL: func.func @contraction
// LOOPS-NOT: scf.forall
// LOOPS: scf.for %{{.*}} = %{{.*}} to %[[C2:.*]] step
// LOOPS: scf.for
// LOOPS: scf.for {{.*}} step %[[C8:c8]]
// LOOPS: scf.for {{.*}} step %[[C32:c32]]
// LOOPS: scf.for
// LOOPS: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<1x1x8x1xf32>, tensor<1x1x1x32xf32>) outs(%{{.*}} : tensor<1x1x8x32xf32>)
#mn = affine_map<(b, n, i, v, j) -> (b, n, i, j)>
#x = affine_map<(b, n, i, v, j) -> (b, n, j, v)>
#o = affine_map<(b, n, i, v, j) -> (b, n, i, v)>
func.func @contraction(%m: tensor<2x3x16x16xf32>, %x: tensor<2x3x16x64xf32>, %init: tensor<2x3x16x64xf32>) -> tensor<2x3x16x64xf32> {
  %r = linalg.generic {indexing_maps = [#mn, #x, #o], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%m, %x : tensor<2x3x16x16xf32>, tensor<2x3x16x64xf32>) outs(%init : tensor<2x3x16x64xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %p = arith.mulf %a, %b : f32
    %s = arith.addf %c, %p : f32
    linalg.yield %s : f32
  } -> tensor<2x3x16x64xf32>
  return %r : tensor<2x3x16x64xf32>
}

// -----

// A product whose terms vanish where the column j exceeds the row i (a
// causally masked M, marked la.lower_triangular = [i, j]): the j loop of the
// tile at rows [i, i + 8) stops at min(i + 8, 16).
// CHECK-LABEL: func.func @lower_triangular
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %[[C16:.*]] step %[[C8:[^ ]*]] iter_args
// CHECK: scf.for %[[V:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// CHECK: %[[END:.*]] = arith.addi %[[I]], %[[C8]] : index
// CHECK: %[[STOP:.*]] = arith.minsi %[[END]], %[[C16]] : index
// CHECK: scf.for %[[J:.*]] = %{{.*}} to %[[STOP]] step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (vector<8x32xf32>)
// CHECK: vector.fma
// Without the mark, the j loop runs to the end.
// CHECK-LABEL: func.func @unmarked
// CHECK-NOT: arith.minsi
// CHECK: return
#mn2 = affine_map<(b, n, i, v, j) -> (b, n, i, j)>
#x2 = affine_map<(b, n, i, v, j) -> (b, n, j, v)>
#o2 = affine_map<(b, n, i, v, j) -> (b, n, i, v)>
func.func @lower_triangular(%m: tensor<2x3x16x16xf32>, %x: tensor<2x3x16x64xf32>, %init: tensor<2x3x16x64xf32>) -> tensor<2x3x16x64xf32> {
  %r = linalg.generic {indexing_maps = [#mn2, #x2, #o2], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%m, %x : tensor<2x3x16x16xf32>, tensor<2x3x16x64xf32>) outs(%init : tensor<2x3x16x64xf32>) attrs = {la.lower_triangular = array<i64: 2, 4>} {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %p = arith.mulf %a, %b : f32
    %s = arith.addf %c, %p : f32
    linalg.yield %s : f32
  } -> tensor<2x3x16x64xf32>
  return %r : tensor<2x3x16x64xf32>
}
func.func @unmarked(%m: tensor<2x3x16x16xf32>, %x: tensor<2x3x16x64xf32>, %init: tensor<2x3x16x64xf32>) -> tensor<2x3x16x64xf32> {
  %r = linalg.generic {indexing_maps = [#mn2, #x2, #o2], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%m, %x : tensor<2x3x16x16xf32>, tensor<2x3x16x64xf32>) outs(%init : tensor<2x3x16x64xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %p = arith.mulf %a, %b : f32
    %s = arith.addf %c, %p : f32
    linalg.yield %s : f32
  } -> tensor<2x3x16x64xf32>
  return %r : tensor<2x3x16x64xf32>
}

// -----

// Scores whose entries j > i are masked later (la.lower_triangular = [i, j]
// with j a lane loop): the 32-lane column tiles of rows [i, i + 8) start
// below min(i + 8, 64), so rows 0-31 skip the second tile.
// CHECK-LABEL: func.func @causal_lanes
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %[[C64:.*]] step %[[C8:[^ ]*]] iter_args
// CHECK: %[[END:.*]] = arith.addi %[[I]], %[[C8]] : index
// CHECK: %[[STOP:.*]] = arith.minsi %[[END]], %[[C64]] : index
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[STOP]] step %{{.*}} iter_args
// CHECK: vector.transfer_read {{.*}} : tensor<64x64xf32>, vector<8x32xf32>
// CHECK: vector.fma {{.*}} : vector<8x32xf32>
#qx = affine_map<(i, j, k) -> (i, k)>
#ky = affine_map<(i, j, k) -> (k, j)>
#po = affine_map<(i, j, k) -> (i, j)>
func.func @causal_lanes(%q: tensor<64x16xf32>, %kt: tensor<16x64xf32>, %init: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %r = linalg.generic {indexing_maps = [#qx, #ky, #po], iterator_types = ["parallel", "parallel", "reduction"]} ins(%q, %kt : tensor<64x16xf32>, tensor<16x64xf32>) outs(%init : tensor<64x64xf32>) attrs = {la.lower_triangular = array<i64: 0, 1>} {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %p = arith.mulf %a, %b : f32
    %s = arith.addf %c, %p : f32
    linalg.yield %s : f32
  } -> tensor<64x64xf32>
  return %r : tensor<64x64xf32>
}

// -----

// Its mirror (la.upper_triangular = [i, j]: terms with j < i vanish, the
// earlier block of la.sliding_window_hybrid's window): the j loop of the
// tile at rows [i, i + 8) starts at i rounded down to its step (1 here, a
// reduction loop, so at i) instead of 0.
// CHECK-LABEL: func.func @upper_triangular
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// CHECK: scf.for %[[V:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// CHECK: %[[START:.*]] = arith.maxsi %[[I]], %{{.*}} : index
// CHECK: scf.for %[[J:.*]] = %[[START]] to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (vector<8x32xf32>)
// CHECK: vector.fma
#mn3 = affine_map<(b, n, i, v, j) -> (b, n, i, j)>
#x3 = affine_map<(b, n, i, v, j) -> (b, n, j, v)>
#o3 = affine_map<(b, n, i, v, j) -> (b, n, i, v)>
func.func @upper_triangular(%m: tensor<2x3x16x16xf32>, %x: tensor<2x3x16x64xf32>, %init: tensor<2x3x16x64xf32>) -> tensor<2x3x16x64xf32> {
  %r = linalg.generic {indexing_maps = [#mn3, #x3, #o3], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%m, %x : tensor<2x3x16x16xf32>, tensor<2x3x16x64xf32>) outs(%init : tensor<2x3x16x64xf32>) attrs = {la.upper_triangular = array<i64: 2, 4>} {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %p = arith.mulf %a, %b : f32
    %s = arith.addf %c, %p : f32
    linalg.yield %s : f32
  } -> tensor<2x3x16x64xf32>
  return %r : tensor<2x3x16x64xf32>
}

// -----

// The same scores over 48 columns: with 32-lane tiles the last column tile
// is partial, so the loop is not cut (a cut loop could not be peeled).
// CHECK-LABEL: func.func @causal_lanes_partial
// CHECK-NOT: arith.minsi
// CHECK: return
#pqx = affine_map<(i, j, k) -> (i, k)>
#pky = affine_map<(i, j, k) -> (k, j)>
#ppo = affine_map<(i, j, k) -> (i, j)>
func.func @causal_lanes_partial(%q: tensor<48x16xf32>, %kt: tensor<16x48xf32>, %init: tensor<48x48xf32>) -> tensor<48x48xf32> {
  %r = linalg.generic {indexing_maps = [#pqx, #pky, #ppo], iterator_types = ["parallel", "parallel", "reduction"]} ins(%q, %kt : tensor<48x16xf32>, tensor<16x48xf32>) outs(%init : tensor<48x48xf32>) attrs = {la.lower_triangular = array<i64: 0, 1>} {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %p = arith.mulf %a, %b : f32
    %s = arith.addf %c, %p : f32
    linalg.yield %s : f32
  } -> tensor<48x48xf32>
  return %r : tensor<48x48xf32>
}

// -----

// A blocked causal product (la.block_causal = [a, j, 8]: only columns
// j < 8 a of block a are read later): the lane loop over j of block a's
// tiles stops at min(8 a, 64). Block a is an outer loop (tile 1).
// CHECK-LABEL: func.func @block_causal
// CHECK: scf.forall (%[[A:.*]]) in (4)
// CHECK: %[[END:.*]] = arith.muli %[[A]], %[[C8:.*]] : index
// CHECK: %[[STOP:.*]] = arith.minsi %[[END]], %[[C64:.*]] : index
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[STOP]] step %{{.*}} iter_args
// CHECK: vector.fma
#bx = affine_map<(a, r, j, k) -> (a, r, k)>
#by = affine_map<(a, r, j, k) -> (a, k, j)>
#bo = affine_map<(a, r, j, k) -> (a, r, j)>
func.func @block_causal(%x: tensor<4x8x16xf32>, %y: tensor<4x16x64xf32>, %init: tensor<4x8x64xf32>) -> tensor<4x8x64xf32> {
  %r = linalg.generic {indexing_maps = [#bx, #by, #bo], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %y : tensor<4x8x16xf32>, tensor<4x16x64xf32>) outs(%init : tensor<4x8x64xf32>) attrs = {la.block_causal = array<i64: 0, 2, 8>} {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %p = arith.mulf %a, %b : f32
    %s = arith.addf %c, %p : f32
    linalg.yield %s : f32
  } -> tensor<4x8x64xf32>
  return %r : tensor<4x8x64xf32>
}

// -----

// An element-wise blocked product (la.block_causal = [a, c, 1]: only
// blocks c < a of row block a are read later). Its row tile is one, so c is
// an outer loop inside a's: without threads that loop stops at min(a, 4).
// CHECK-LABEL: func.func @block_causal_outer
// CHECK: scf.forall
// CHECK-NOT: arith.minsi
// LOOPS-LABEL: func.func @block_causal_outer
// LOOPS: scf.for %[[A:.*]] = %{{.*}} to %[[C4:.*]] step
// LOOPS: scf.for %{{.*}} = %{{.*}} to %{{.*}} step
// LOOPS: %[[STOP:.*]] = arith.minsi %[[A]], %[[C4]] : index
// LOOPS: scf.for %{{.*}} = %{{.*}} to %[[STOP]] step
// LOOPS: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x1x1x8xf32>)
#ey = affine_map<(a, k, c, s) -> (k, c, s)>
#ep = affine_map<(a, k, c, s) -> (a, c, k)>
#eo = affine_map<(a, k, c, s) -> (a, k, c, s)>
func.func @block_causal_outer(%y: tensor<16x4x8xf32>, %p: tensor<4x4x16xf32>) -> tensor<4x16x4x8xf32> {
  %e = tensor.empty() : tensor<4x16x4x8xf32>
  %r = linalg.generic {indexing_maps = [#ey, #ep, #eo], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%y, %p : tensor<16x4x8xf32>, tensor<4x4x16xf32>) outs(%e : tensor<4x16x4x8xf32>) attrs = {la.block_causal = array<i64: 0, 2, 1>} {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<4x16x4x8xf32>
  return %r : tensor<4x16x4x8xf32>
}

// -----

// A one-dimensional output (a per-channel reduction over rows): the
// channels are the lanes, there is no row loop, so the lanes take the rows'
// share of the register budget (8 x 32: all 64 channels in one tile), and the
// accumulator stays in registers across the reduction, which reads one whole
// row per step.
// CHECK-LABEL: func.func @one_dim_output
// CHECK: %[[ACC0:.*]] = vector.transfer_read %{{.*}}[%{{.*}}], %{{.*}} {in_bounds = [true]} : tensor<64xf32>, vector<64xf32>
// CHECK: %[[ACC:.*]] = scf.for %{{.*}} iter_args(%[[RUNNING:.*]] = %[[ACC0]]) -> (vector<64xf32>)
// CHECK: %[[ROW:.*]] = vector.transfer_read %{{.*}} : tensor<16x64xf32>, vector<64xf32>
// CHECK: %[[ABS:.*]] = math.absf %[[ROW]] : vector<64xf32>
// CHECK: arith.maximumf %[[RUNNING]], %[[ABS]] : vector<64xf32>
// CHECK: vector.transfer_write %[[ACC]]
func.func @one_dim_output(%g: tensor<16x64xf32>) -> tensor<64xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64xf32>
  %init = linalg.fill ins(%cst : f32) outs(%e : tensor<64xf32>) -> tensor<64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(c, i) -> (i, c)>, affine_map<(c, i) -> (c)>], iterator_types = ["parallel", "reduction"]} ins(%g : tensor<16x64xf32>) outs(%init : tensor<64xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %a = math.absf %x : f32
    %m = arith.maximumf %acc, %a : f32
    linalg.yield %m : f32
  } -> tensor<64xf32>
  return %r : tensor<64xf32>
}

// -----

// A matrix-vector product (decoding reads the state so: o = x^T S): no row
// loop, so the lanes are 8 x 32 = 256 wide, in whole 32-lane tiles, and
// each reduction step reads 256 contiguous elements of a row of S instead
// of 32 at a row stride.
// CHECK-LABEL: func.func @mat_vec
// CHECK: scf.for %[[V:.*]] = %{{.*}} to %{{.*}} step %c256 iter_args
// CHECK: %[[ACC:.*]] = scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %c1 iter_args(%[[RUNNING:.*]] = %{{.*}}) -> (vector<256xf32>)
// CHECK: %[[ROW:.*]] = vector.transfer_read %{{.*}}[%[[K]], %[[V]]], %{{.*}} {in_bounds = [true]} : tensor<128x512xf32>, vector<256xf32>
// CHECK: vector.fma %{{.*}}, %[[ROW]], %[[RUNNING]] : vector<256xf32>
// CHECK: vector.transfer_write %[[ACC]]
func.func @mat_vec(%x: tensor<128xf32>, %s: tensor<128x512xf32>) -> tensor<512xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<512xf32>
  %init = linalg.fill ins(%cst : f32) outs(%e : tensor<512xf32>) -> tensor<512xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(v, k) -> (k)>, affine_map<(v, k) -> (k, v)>, affine_map<(v, k) -> (v)>], iterator_types = ["parallel", "reduction"]} ins(%x, %s : tensor<128xf32>, tensor<128x512xf32>) outs(%init : tensor<512xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %n = arith.addf %acc, %m : f32
    linalg.yield %n : f32
  } -> tensor<512xf32>
  return %r : tensor<512xf32>
}

// -----

// Equal row and lane tiles (8 x 8): the column of M is broadcast along the
// lanes (a shape_cast to 8 elements, a broadcast to 8x8 and a transpose),
// never as a broadcast of the 8x1 column that would put it along the rows.
// CHECK-LABEL: func.func @square_tile
// CHECK: %[[COL:.*]] = vector.transfer_read {{.*}} vector<8x1xf32>
// CHECK: %[[FLAT:.*]] = vector.shape_cast %[[COL]] : vector<8x1xf32> to vector<8xf32>
// CHECK: %[[SPREAD:.*]] = vector.broadcast %[[FLAT]] : vector<8xf32> to vector<8x8xf32>
// CHECK: %[[A:.*]] = vector.transpose %[[SPREAD]], [1, 0]
// CHECK: vector.fma %[[A]], %{{.*}}, %{{.*}} : vector<8x8xf32>
#mn2 = affine_map<(i, v, j) -> (i, j)>
#x2 = affine_map<(i, v, j) -> (j, v)>
#o2 = affine_map<(i, v, j) -> (i, v)>
func.func @square_tile(%m: tensor<8x4xf32>, %x: tensor<4x8xf32>, %init: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %r = linalg.generic {indexing_maps = [#mn2, #x2, #o2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%m, %x : tensor<8x4xf32>, tensor<4x8xf32>) outs(%init : tensor<8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %p = arith.mulf %a, %b : f32
    %s = arith.addf %c, %p : f32
    linalg.yield %s : f32
  } -> tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}

// -----

// 48 lanes with a lane tile of 32: the partial tile of 16 is peeled into its
// own loop, so both bodies have static shapes; exp becomes a polynomial. An
// element-wise op that reads no input across the lanes gets one row per
// tile.
// CHECK-LABEL: func.func @partial
// CHECK-NOT: math.exp
// CHECK: vector.transfer_read {{.*}} vector<32xf32>
// CHECK: vector.transfer_read {{.*}} vector<16xf32>
// LOOPS-LABEL: func.func @partial
// LOOPS: linalg.generic {{.*}} ins(%{{.*}} : tensor<1x32xf32>) outs(%{{.*}} : tensor<1x32xf32>)
// LOOPS: math.exp
// LOOPS: linalg.generic {{.*}} ins(%{{.*}} : tensor<1x16xf32>) outs(%{{.*}} : tensor<1x16xf32>)
func.func @partial(%a: tensor<4x48xf32>) -> tensor<4x48xf32> {
  %e = tensor.empty() : tensor<4x48xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<4x48xf32>) outs(%e : tensor<4x48xf32>) {
  ^bb0(%x: f32, %y: f32):
    %z = math.exp %x : f32
    linalg.yield %z : f32
  } -> tensor<4x48xf32>
  return %r : tensor<4x48xf32>
}

// -----

// A transpose keeps the row tile: 8 rows of the source are loaded and
// transposed in registers.
// CHECK-LABEL: func.func @transpose
// CHECK: vector.transfer_read {{.*}} : tensor<64x16xf32>, vector<32x8xf32>
// CHECK: vector.transpose %{{.*}}, [1, 0] : vector<32x8xf32> to vector<8x32xf32>
func.func @transpose(%a: tensor<64x16xf32>) -> tensor<16x64xf32> {
  %e = tensor.empty() : tensor<16x64xf32>
  %t = linalg.transpose ins(%a : tensor<64x16xf32>) outs(%e : tensor<16x64xf32>) permutation = [1, 0]
  return %t : tensor<16x64xf32>
}

// -----

// Not this tiling's form: a grouped (floordiv) map stays as it is.
// CHECK-LABEL: func.func @untouched
// CHECK-NOT: scf.for
// CHECK-NOT: vector.
// CHECK: linalg.generic {{.*}} ins(%{{.*}} : tensor<4x8xf32>) outs(%{{.*}} : tensor<8x8xf32>)
func.func @untouched(%a: tensor<4x8xf32>, %init: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i floordiv 2, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<4x8xf32>) outs(%init : tensor<8x8xf32>) {
  ^bb0(%x: f32, %y: f32):
    linalg.yield %x : f32
  } -> tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}

// -----

// A reduction over a run-time number of rows is stepped one row at a time,
// the accumulator kept in a register across the loop.
// CHECK-LABEL: func.func @dynamic_reduction
// CHECK-SAME: (%[[D:[^:]*]]: tensor<?x8xf32>, %[[ACC:[^:]*]]: tensor<8xf32>)
// CHECK: %[[N:.*]] = tensor.dim %[[D]], %c0
// CHECK: %[[INIT:.*]] = vector.transfer_read %[[ACC]]
// CHECK: %[[SUM:.*]] = scf.for %[[I:.*]] = %c0 to %[[N]] step %c1 iter_args(%[[PART:.*]] = %[[INIT]]) -> (vector<8xf32>)
// CHECK: %[[ROW:.*]] = vector.transfer_read %[[D]][%[[I]], %c0]
// CHECK: %[[NEXT:.*]] = arith.addf %[[PART]], %[[ROW]] : vector<8xf32>
// CHECK: scf.yield %[[NEXT]]
// CHECK: vector.transfer_write %[[SUM]], %[[ACC]]
// LOOPS-LABEL: func.func @dynamic_reduction
// LOOPS: scf.for
// LOOPS: linalg.generic {{.*}} ins(%{{.*}} : tensor<1x8xf32>) outs(%{{.*}} : tensor<8xf32>)
func.func @dynamic_reduction(%d: tensor<?x8xf32>, %acc: tensor<8xf32>) -> tensor<8xf32> {
  %s = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>], iterator_types = ["reduction", "parallel"]} ins(%d : tensor<?x8xf32>) outs(%acc : tensor<8xf32>) {
  ^bb0(%x: f32, %y: f32):
    %z = arith.addf %x, %y : f32
    linalg.yield %z : f32
  } -> tensor<8xf32>
  return %s : tensor<8xf32>
}

// -----

// A run-time batch and a run-time reduction (the sliding-window hybrid's
// context folded into its state: [B,F,V] += sum over L of fk^T v): the
// batch on the threads, register tiles of F rows x V lanes, the L tokens
// innermost, one FMA tile per token.
// CHECK-LABEL: func.func @dynamic_batch_and_reduction
// CHECK-SAME: (%[[FK:[^:]*]]: tensor<?x?x16xf32>, %[[V:[^:]*]]: tensor<?x?x32xf32>, %[[S:[^:]*]]: tensor<?x16x32xf32>)
// CHECK-DAG: %[[B:.*]] = tensor.dim %[[FK]], %c0
// CHECK-DAG: %[[L:.*]] = tensor.dim %[[FK]], %c1
// CHECK: scf.forall (%[[I:.*]]) in (%[[B]])
// CHECK: scf.for %[[ROW:.*]] = %c0 to %c16 step %c8
// CHECK: scf.for %[[TOKEN:.*]] = %c0 to %[[L]] step %c1 iter_args(%[[TILE:.*]] = %{{.*}}) -> (vector<8x32xf32>)
// CHECK: vector.fma {{.*}}, %[[TILE]] : vector<8x32xf32>
// CHECK-NOT: linalg.generic
func.func @dynamic_batch_and_reduction(%fk: tensor<?x?x16xf32>, %v: tensor<?x?x32xf32>, %s: tensor<?x16x32xf32>) -> tensor<?x16x32xf32> {
  %r = linalg.generic {indexing_maps = [affine_map<(b, f, c, l) -> (b, l, f)>, affine_map<(b, f, c, l) -> (b, l, c)>, affine_map<(b, f, c, l) -> (b, f, c)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%fk, %v : tensor<?x?x16xf32>, tensor<?x?x32xf32>) outs(%s : tensor<?x16x32xf32>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %m = arith.mulf %x, %y : f32
    %a = arith.addf %z, %m : f32
    linalg.yield %a : f32
  } -> tensor<?x16x32xf32>
  return %r : tensor<?x16x32xf32>
}

// -----

// Dynamic parallel dims (the Python package's run-time B and T) are tiled
// by one, on the threads; each tile has static ranges and is vectorised.
// CHECK-LABEL: func.func @dynamic_rows
// CHECK-SAME: (%[[D:[^:]*]]: tensor<?x?x64xf32>)
// CHECK-DAG: %[[B:.*]] = tensor.dim %[[D]], %c0
// CHECK-DAG: %[[T:.*]] = tensor.dim %[[D]], %c1
// CHECK: scf.forall (%[[I:[^,]*]], %[[J:[^)]*]]) in (%[[B]], %[[T]]) shared_outs(%[[OUT:[^ ]*]] = %[[D]])
// CHECK: %[[ROW:.*]] = vector.transfer_read %[[D]][%[[I]], %[[J]], %{{.*}}]
// CHECK: %[[SUM:.*]] = arith.addf %[[ROW]], %[[ROW]] : vector<32xf32>
// CHECK: %[[CAST:.*]] = vector.shape_cast %[[SUM]]
// CHECK: vector.transfer_write %[[CAST]]
// CHECK: tensor.parallel_insert_slice {{.*}} into %[[OUT]][%[[I]], %[[J]], 0] [1, 1, 64]
// LOOPS-LABEL: func.func @dynamic_rows
// LOOPS: scf.for
// LOOPS: scf.for
// LOOPS-NOT: scf.forall
// LOOPS: linalg.generic {{.*}} ins(%{{.*}} : tensor<1x1x32xf32>)
func.func @dynamic_rows(%d: tensor<?x?x64xf32>) -> tensor<?x?x64xf32> {
  %s = linalg.generic {indexing_maps = [affine_map<(i, j, k) -> (i, j, k)>, affine_map<(i, j, k) -> (i, j, k)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%d : tensor<?x?x64xf32>) outs(%d : tensor<?x?x64xf32>) {
  ^bb0(%x: f32, %y: f32):
    %z = arith.addf %x, %x : f32
    linalg.yield %z : f32
  } -> tensor<?x?x64xf32>
  return %s : tensor<?x?x64xf32>
}

// -----

// A time flip (a copy whose input map reverses one dim, as the decomposition
// of a `reverse` recurrence makes) is not a projected permutation: it
// becomes a loop over the reversed dim copying one contiguous slice each.
#flip = affine_map<(d0, d1, d2, d3) -> (d0, -d1 + 15, d2, d3)>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-LABEL: func.func @flip
// CHECK-SAME: (%[[X:.*]]: tensor<1x16x1x32xf32>)
// CHECK-DAG: %[[C15:.*]] = arith.constant 15 : index
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK: %[[R:.*]] = scf.for %[[I:.*]] = %{{.*}} to %[[C16]] step %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}})
// CHECK: %[[FROM:.*]] = arith.subi %[[C15]], %[[I]] : index
// CHECK: %[[ROW:.*]] = tensor.extract_slice %[[X]][0, %[[FROM]], 0, 0] [1, 1, 1, 32] [1, 1, 1, 1]
// CHECK: %[[NEW:.*]] = tensor.insert_slice %[[ROW]] into %[[ACC]][0, %[[I]], 0, 0] [1, 1, 1, 32] [1, 1, 1, 1]
// CHECK: scf.yield %[[NEW]]
// CHECK-NOT: linalg.generic
// CHECK: return %[[R]]
func.func @flip(%x: tensor<1x16x1x32xf32>) -> tensor<1x16x1x32xf32> {
  %e = tensor.empty() : tensor<1x16x1x32xf32>
  %r = linalg.generic {indexing_maps = [#flip, #id],
                       iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x : tensor<1x16x1x32xf32>) outs(%e : tensor<1x16x1x32xf32>) {
  ^bb0(%a: f32, %b: f32):
    linalg.yield %a : f32
  } -> tensor<1x16x1x32xf32>
  return %r : tensor<1x16x1x32xf32>
}

// -----

// Not a plain copy (the body computes): left as it is.
#flip = affine_map<(d0, d1) -> (d0, -d1 + 15)>
#id = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @not_a_flip
// CHECK: linalg.generic
// CHECK-NOT: scf.for
func.func @not_a_flip(%x: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %e = tensor.empty() : tensor<16x16xf32>
  %r = linalg.generic {indexing_maps = [#flip, #id],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %a : f32
    linalg.yield %s : f32
  } -> tensor<16x16xf32>
  return %r : tensor<16x16xf32>
}

// -----

// A small op inside a loop (one token's row of a loop over tokens: 8 x 128
// iterations) keeps its outer loops sequential, since the loop would enter
// a thread region per iteration; a large one (64 x 512) is still
// distributed.
// CHECK-LABEL: func.func @small_op_in_loop
// CHECK: scf.for
// CHECK-NOT: scf.forall
// CHECK: return
// CHECK-LABEL: func.func @large_op_in_loop
// CHECK: scf.for
// CHECK: scf.forall
func.func @small_op_in_loop(%x: tensor<16x8x128xf32>, %init: tensor<8x128xf32>) -> tensor<8x128xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %r = scf.for %t = %c0 to %c16 step %c1 iter_args(%acc = %init) -> (tensor<8x128xf32>) {
    %row = tensor.extract_slice %x[%t, 0, 0] [1, 8, 128] [1, 1, 1] : tensor<16x8x128xf32> to tensor<8x128xf32>
    %sum = linalg.generic {indexing_maps = [affine_map<(h, k) -> (h, k)>, affine_map<(h, k) -> (h, k)>], iterator_types = ["parallel", "parallel"]} ins(%row : tensor<8x128xf32>) outs(%acc : tensor<8x128xf32>) {
    ^bb0(%a: f32, %b: f32):
      %s = arith.addf %a, %b : f32
      linalg.yield %s : f32
    } -> tensor<8x128xf32>
    scf.yield %sum : tensor<8x128xf32>
  }
  return %r : tensor<8x128xf32>
}

func.func @large_op_in_loop(%x: tensor<2x64x512xf32>, %init: tensor<64x512xf32>) -> tensor<64x512xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %r = scf.for %t = %c0 to %c2 step %c1 iter_args(%acc = %init) -> (tensor<64x512xf32>) {
    %row = tensor.extract_slice %x[%t, 0, 0] [1, 64, 512] [1, 1, 1] : tensor<2x64x512xf32> to tensor<64x512xf32>
    %sum = linalg.generic {indexing_maps = [affine_map<(h, k) -> (h, k)>, affine_map<(h, k) -> (h, k)>], iterator_types = ["parallel", "parallel"]} ins(%row : tensor<64x512xf32>) outs(%acc : tensor<64x512xf32>) {
    ^bb0(%a: f32, %b: f32):
      %s = arith.addf %a, %b : f32
      linalg.yield %s : f32
    } -> tensor<64x512xf32>
    scf.yield %sum : tensor<64x512xf32>
  }
  return %r : tensor<64x512xf32>
}

// -----

// A product subtracted from its destination (O -= M X, as the delta rule's
// U - W S): the reduction loop accumulates the negated destination with
// plain FMAs, the negations outside it.
// CHECK-LABEL: func.func @subtracted_product
// CHECK: %[[ACC0:.*]] = vector.transfer_read {{.*}} : tensor<1x1x16x64xf32>, vector<8x32xf32>
// CHECK: %[[NEG0:.*]] = arith.negf %[[ACC0]] : vector<8x32xf32>
// CHECK: %[[RED:.*]] = scf.for {{.*}} iter_args(%[[ACC:.*]] = %[[NEG0]]) -> (vector<8x32xf32>)
// CHECK-NOT: arith.negf
// CHECK: %[[FMA:.*]] = vector.fma %{{.*}}, %{{.*}}, %[[ACC]] : vector<8x32xf32>
// CHECK-NEXT: scf.yield %[[FMA]]
// CHECK: %[[SUM:.*]] = arith.negf %[[RED]] : vector<8x32xf32>
// CHECK: vector.shape_cast %[[SUM]] : vector<8x32xf32> to vector<1x1x8x32xf32>
#mn3 = affine_map<(b, n, i, v, j) -> (b, n, i, j)>
#x3 = affine_map<(b, n, i, v, j) -> (b, n, j, v)>
#o3 = affine_map<(b, n, i, v, j) -> (b, n, i, v)>
func.func @subtracted_product(%m: tensor<2x3x16x16xf32>, %x: tensor<2x3x16x64xf32>, %init: tensor<2x3x16x64xf32>) -> tensor<2x3x16x64xf32> {
  %r = linalg.generic {indexing_maps = [#mn3, #x3, #o3], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%m, %x : tensor<2x3x16x16xf32>, tensor<2x3x16x64xf32>) outs(%init : tensor<2x3x16x64xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %n = arith.negf %a : f32
    %p = arith.mulf %n, %b : f32
    %s = arith.addf %c, %p : f32
    linalg.yield %s : f32
  } -> tensor<2x3x16x64xf32>
  return %r : tensor<2x3x16x64xf32>
}
