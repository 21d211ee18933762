// la.sliding_window_hybrid: printed and parsed back, and decomposed by
// la-lower-to-recurrence into an la.recurrence (linear attention on the
// features, keys and values w tokens later, a column of ones on the values)
// and the window's block products.
// RUN: la-opt %s -split-input-file | la-opt -split-input-file | FileCheck %s --check-prefix=ROUNDTRIP
// RUN: la-opt %s -split-input-file --la-lower-to-recurrence -canonicalize -cse | FileCheck %s

// ROUNDTRIP-LABEL: func.func @window_20
// ROUNDTRIP: la.sliding_window_hybrid %{{.*}}, %{{.*}}, %{{.*}} features(%{{.*}} : tensor<2x100x2x4xf32>, %{{.*}} : tensor<2x100x2x4xf32>) {window = 20 : i64} : tensor<2x100x2x16xf32>, tensor<2x100x2x16xf32>, tensor<2x100x2x8xf32> -> tensor<2x100x2x8xf32>

// A window of 20 reaches one block of 32 back (blocks of 16 to 64 tokens,
// the power of two >= w - 1): T = 100 is padded to 4 blocks, the keys to 5.
// CHECK-LABEL: func.func @window_20
// CHECK-SAME: (%[[Q:.*]]: tensor<2x100x2x16xf32>, %[[K:.*]]: tensor<2x100x2x16xf32>, %[[V:.*]]: tensor<2x100x2x8xf32>, %[[FQ:.*]]: tensor<2x100x2x4xf32>, %[[FK:.*]]: tensor<2x100x2x4xf32>)
// CHECK-NOT: la.sliding_window_hybrid
// The far part's keys and values: 80 tokens moved 20 later, ones in column 8.
// CHECK: %[[FK80:.*]] = tensor.extract_slice %[[FK]][0, 0, 0, 0] [2, 80, 2, 4]
// CHECK: %[[FKS:.*]] = tensor.insert_slice %[[FK80]] into %{{.*}}[0, 20, 0, 0] [2, 80, 2, 4]
// CHECK: %[[ONES:.*]] = tensor.insert_slice %{{.*}} into %{{.*}}[0, 20, 0, 8] [2, 80, 2, 1]
// CHECK: %[[V80:.*]] = tensor.extract_slice %[[V]][0, 0, 0, 0] [2, 80, 2, 8]
// CHECK: %[[VS:.*]] = tensor.insert_slice %[[V80]] into %[[ONES]][0, 20, 0, 0] [2, 80, 2, 8]
// CHECK: %[[FAR:.*]], %{{.*}} = la.recurrence decay(none) low_rank(none) %[[FQ]], %[[FKS]], %[[VS]] outs(%{{.*}}, %{{.*}} : tensor<2x100x2x9xf32>, tensor<2x2x4x9xf32>) {scale = 1.000000e+00 : f32}
// CHECK: %[[QB:.*]] = tensor.expand_shape %{{.*}} {{\[\[}}0], [1, 2], [3], [4]] output_shape [2, 4, 32, 2, 16]
// CHECK: %[[KB:.*]] = tensor.expand_shape %{{.*}} output_shape [2, 5, 32, 2, 16]
// CHECK: %[[KT:.*]] = linalg.generic {{.*}} ins(%[[KB]] : tensor<2x5x32x2x16xf32>) outs(%{{.*}} : tensor<2x5x2x16x32xf32>)
// The block itself (offset 1 in the padded keys) and the one before it.
// CHECK: %[[OWN:.*]] = tensor.extract_slice %[[KT]][0, 1, 0, 0, 0] [2, 4, 2, 16, 32]
// Within the window the own block's keys are at or before the query (la-tile
// skips the upper triangle), the block before's after it (the lower one).
// CHECK: %[[S0:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%[[QB]], %[[OWN]] : {{.*}}) outs(%{{.*}} : tensor<2x4x2x32x32xf32>) attrs = {la.lower_triangular = array<i64: 3, 4>}
// CHECK: %[[BEFORE:.*]] = tensor.extract_slice %[[KT]][0, 0, 0, 0, 0] [2, 4, 2, 16, 32]
// CHECK: %[[S1:.*]] = linalg.generic {{.*}} ins(%[[QB]], %[[BEFORE]] : {{.*}}) outs(%{{.*}} : tensor<2x4x2x32x32xf32>) attrs = {la.upper_triangular = array<i64: 3, 4>}
// The row maxima (clipped at 0) over both, in the window only.
// CHECK: %[[M0:.*]] = linalg.generic {{.*}} ins(%[[S0]] : tensor<2x4x2x32x32xf32>) outs(%{{.*}} : tensor<2x4x32x2xf32>)
// CHECK: arith.maximumf
// CHECK: %[[M:.*]] = linalg.generic {{.*}} ins(%[[S1]] : tensor<2x4x2x32x32xf32>) outs(%[[M0]] : tensor<2x4x32x2xf32>)
// CHECK: %[[P0:.*]] = linalg.generic {{.*}} ins(%[[S0]], %[[M]] : {{.*}})
// CHECK: math.exp
// CHECK: %[[D0:.*]] = linalg.generic {{.*}} ins(%[[P0]] : {{.*}})
// CHECK: %[[O0:.*]] = linalg.generic {{.*}} ins(%[[P0]], %{{.*}} : tensor<2x4x2x32x32xf32>, tensor<2x4x32x2x8xf32>) outs(%{{.*}}) attrs = {la.lower_triangular = array<i64: 2, 5>}
// CHECK: %[[P1:.*]] = linalg.generic {{.*}} ins(%[[S1]], %[[M]] : {{.*}})
// CHECK: %[[D:.*]] = linalg.generic {{.*}} ins(%[[P1]] : {{.*}}) outs(%[[D0]] : {{.*}})
// CHECK: %[[O:.*]] = linalg.generic {{.*}} ins(%[[P1]], %{{.*}} : {{.*}}) outs(%[[O0]] : {{.*}}) attrs = {la.upper_triangular = array<i64: 2, 5>}
// The first non-finite value per column, then the two parts combined.
// CHECK: %[[BAD:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<2x2x8xf32>)
// CHECK: %[[FARV:.*]] = tensor.extract_slice %[[FAR]][0, 0, 0, 0] [2, 100, 2, 8]
// CHECK: %[[FARS:.*]] = tensor.extract_slice %[[FAR]][0, 0, 0, 8] [2, 100, 2, 1] [1, 1, 1, 1] : tensor<2x100x2x9xf32> to tensor<2x100x2xf32>
// CHECK: %[[OUT:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %[[FARV]], %{{.*}}, %[[FARS]], %{{.*}}, %[[BAD]] : {{.*}}) outs(%{{.*}} : tensor<2x100x2x8xf32>)
// CHECK: return %[[OUT]]
func.func @window_20(%q: tensor<2x100x2x16xf32>, %k: tensor<2x100x2x16xf32>, %v: tensor<2x100x2x8xf32>, %fq: tensor<2x100x2x4xf32>, %fk: tensor<2x100x2x4xf32>) -> tensor<2x100x2x8xf32> {
  %o = la.sliding_window_hybrid %q, %k, %v features(%fq : tensor<2x100x2x4xf32>, %fk : tensor<2x100x2x4xf32>) {window = 20 : i64}
    : tensor<2x100x2x16xf32>, tensor<2x100x2x16xf32>, tensor<2x100x2x8xf32> -> tensor<2x100x2x8xf32>
  return %o : tensor<2x100x2x8xf32>
}

// -----

// A window of one token is the softmax over the token itself: blocks of 16
// and no block before.
// ROUNDTRIP-LABEL: func.func @window_1_bf16
// ROUNDTRIP: la.sliding_window_hybrid {{.*}} {scale = 5.000000e-01 : f32, window = 1 : i64} : tensor<1x40x1x4xbf16>
// CHECK-LABEL: func.func @window_1_bf16
// CHECK: la.recurrence decay(none) low_rank(none) {{.*}} : tensor<1x40x1x2xbf16>, tensor<1x40x1x2xbf16>, tensor<1x40x1x5xbf16> -> tensor<1x40x1x5xf32>
// CHECK: tensor.expand_shape {{.*}} output_shape [1, 3, 16, 1, 4]
// CHECK-NOT: output_shape [1, 4, 16
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<1x3x16x1x4xf32>, tensor<1x3x1x4x16xf32>)
// CHECK-NOT: tensor<1x3x16x1x4xf32>, tensor<1x3x1x4x16xf32>
// CHECK: arith.truncf {{.*}} : f32 to bf16
// CHECK: return {{.*}} : tensor<1x40x1x4xbf16>
func.func @window_1_bf16(%q: tensor<1x40x1x4xbf16>, %v: tensor<1x40x1x4xbf16>, %f: tensor<1x40x1x2xbf16>) -> tensor<1x40x1x4xbf16> {
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x40x1x2xbf16>, %f : tensor<1x40x1x2xbf16>) {window = 1 : i64, scale = 0.5 : f32}
    : tensor<1x40x1x4xbf16>, tensor<1x40x1x4xbf16>, tensor<1x40x1x4xbf16> -> tensor<1x40x1x4xbf16>
  return %o : tensor<1x40x1x4xbf16>
}

// -----

// Any B and T (the Python package's kernels): T's blocks, the moved tokens
// and the padding are computed at run time.
// ROUNDTRIP-LABEL: func.func @dynamic
// CHECK-LABEL: func.func @dynamic
// CHECK: %[[T:.*]] = tensor.dim %{{.*}}, %c1 : tensor<?x?x2x3xf32>
// CHECK: affine.max #{{.*}}()[%[[T]]]
// CHECK: la.recurrence decay(none) low_rank(none) {{.*}} -> tensor<?x?x2x5xf32>, tensor<?x2x3x5xf32>
// CHECK: tensor.expand_shape {{.*}} output_shape [%{{.*}}, %{{.*}}, 64, 2, 8] : tensor<?x?x2x8xf32> into tensor<?x?x64x2x8xf32>
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<?x?x2x64x64xf32>)
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<?x?x2x64x64xf32>)
// CHECK: return {{.*}} : tensor<?x?x2x4xf32>
func.func @dynamic(%q: tensor<?x?x2x8xf32>, %v: tensor<?x?x2x4xf32>, %f: tensor<?x?x2x3xf32>) -> tensor<?x?x2x4xf32> {
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<?x?x2x3xf32>, %f : tensor<?x?x2x3xf32>) {window = 64 : i64}
    : tensor<?x?x2x8xf32>, tensor<?x?x2x8xf32>, tensor<?x?x2x4xf32> -> tensor<?x?x2x4xf32>
  return %o : tensor<?x?x2x4xf32>
}

// -----

// Packed sequences: each token's sequence start from the offsets, the moved
// features and values (in f32) zeroed where they came from the sequence
// before, the recurrence restarted per sequence, the window's entries
// before the query's start masked, and a non-finite value counted in the
// windows that hold it (the recurrence carries it on past them).
// ROUNDTRIP-LABEL: func.func @packed
// ROUNDTRIP: la.sliding_window_hybrid {{.*}} cu_seqlens(%{{.*}} : tensor<4xi32>) {window = 8 : i64}
// CHECK-LABEL: func.func @packed
// CHECK-SAME: %[[CU:[^:]*]]: tensor<4xi32>
// CHECK: %[[STARTS:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]} ins(%[[CU]] : tensor<4xi32>) outs(%{{.*}} : tensor<40xf32>)
// CHECK: %[[KEYS:.*]] = linalg.generic {{.*}} ins(%[[STARTS]] : tensor<40xf32>) outs(%{{.*}} : tensor<1x40x1x2xf32>)
// CHECK: %[[VALUES:.*]] = linalg.generic {{.*}} ins(%[[STARTS]] : tensor<40xf32>) outs(%{{.*}} : tensor<1x40x1x5xf32>)
// CHECK: la.recurrence decay(none) low_rank(none) %{{.*}}, %[[KEYS]], %[[VALUES]] cu_seqlens(%[[CU]] : tensor<4xi32>) outs(%{{.*}}, %{{.*}} : tensor<1x40x1x5xf32>, tensor<3x1x2x5xf32>)
// CHECK: %[[SB:.*]] = tensor.expand_shape %{{.*}} {{\[\[}}0, 1]] output_shape [3, 16] : tensor<48xf32> into tensor<3x16xf32>
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %[[SB]] : tensor<1x3x1x16x16xf32>, tensor<3x16xf32>) outs(%{{.*}} : tensor<1x3x16x1xf32>)
// CHECK: arith.cmpf oge
// CHECK: linalg.generic {{.*}} ins(%[[SB]] : tensor<3x16xf32>) outs(%{{.*}} : tensor<1x3x1x16x16xf32>)
// CHECK: arith.cmpf ogt
// CHECK: return {{.*}} : tensor<1x40x1x4xf32>
func.func @packed(%q: tensor<1x40x1x4xf32>, %v: tensor<1x40x1x4xf32>, %f: tensor<1x40x1x2xf32>, %cu: tensor<4xi32>) -> tensor<1x40x1x4xf32> {
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x40x1x2xf32>, %f : tensor<1x40x1x2xf32>) cu_seqlens(%cu : tensor<4xi32>) {window = 8 : i64}
    : tensor<1x40x1x4xf32>, tensor<1x40x1x4xf32>, tensor<1x40x1x4xf32> -> tensor<1x40x1x4xf32>
  return %o : tensor<1x40x1x4xf32>
}

// -----

// Keys with L = 16 context tokens before the 8 queries, an initial state and
// the final state: the recurrence runs over the queries' tokens, its keys
// and values the moved ones from token L on, and starts from the given
// state plus the moved tokens before L; the window's queries are padded to
// token L, and the outputs read from there.
// ROUNDTRIP-LABEL: func.func @context_and_state
// ROUNDTRIP: %{{.*}}, %{{.*}} = la.sliding_window_hybrid %{{.*}}, %{{.*}}, %{{.*}} features(%{{.*}} : tensor<1x8x2x4xf32>, %{{.*}} : tensor<1x24x2x4xf32>) initial_state(%{{.*}} : tensor<1x2x4x9xf32>) {window = 10 : i64} : tensor<1x8x2x16xf32>, tensor<1x24x2x16xf32>, tensor<1x24x2x8xf32> -> tensor<1x8x2x8xf32>, tensor<1x2x4x9xf32>
// CHECK-LABEL: func.func @context_and_state
// CHECK-SAME: (%[[Q:.*]]: tensor<1x8x2x16xf32>, %[[K:.*]]: tensor<1x24x2x16xf32>, %[[V:.*]]: tensor<1x24x2x8xf32>, %[[FQ:.*]]: tensor<1x8x2x4xf32>, %[[FK:.*]]: tensor<1x24x2x4xf32>, %[[S0:.*]]: tensor<1x2x4x9xf32>)
// CHECK: %[[FKS:.*]] = tensor.insert_slice %{{.*}} into %{{.*}}[0, 10, 0, 0] [1, 14, 2, 4]
// CHECK: %[[VS:.*]] = tensor.insert_slice %{{.*}} into %{{.*}}[0, 10, 0, 0] [1, 14, 2, 8]
// CHECK: %[[FKQ:.*]] = tensor.extract_slice %[[FKS]][0, 16, 0, 0] [1, 8, 2, 4]
// CHECK: %[[VQ:.*]] = tensor.extract_slice %[[VS]][0, 16, 0, 0] [1, 8, 2, 9]
// CHECK: %[[FKE:.*]] = tensor.extract_slice %[[FKS]][0, 0, 0, 0] [1, 16, 2, 4]
// CHECK: %[[VE:.*]] = tensor.extract_slice %[[VS]][0, 0, 0, 0] [1, 16, 2, 9]
// CHECK: %[[COPY:.*]] = linalg.copy ins(%[[S0]] : tensor<1x2x4x9xf32>)
// CHECK: %[[INIT:.*]] = linalg.generic {{.*}} ins(%[[FKE]], %[[VE]] : tensor<1x16x2x4xf32>, tensor<1x16x2x9xf32>) outs(%[[COPY]] : tensor<1x2x4x9xf32>)
// CHECK: %[[FAR:.*]], %[[FINAL:.*]] = la.recurrence decay(none) low_rank(none) %[[FQ]], %[[FKQ]], %[[VQ]] outs(%{{.*}}, %[[INIT]] : tensor<1x8x2x9xf32>, tensor<1x2x4x9xf32>)
// CHECK: tensor.insert_slice %[[Q]] into %{{.*}}[0, 16, 0, 0] [1, 8, 2, 16] [1, 1, 1, 1] : tensor<1x8x2x16xf32> into tensor<1x32x2x16xf32>
// CHECK: %[[WO:.*]] = tensor.extract_slice %{{.*}}[0, 16, 0, 0] [1, 8, 2, 8] [1, 1, 1, 1] : tensor<1x32x2x8xf32> to tensor<1x8x2x8xf32>
// CHECK: %[[FARV:.*]] = tensor.extract_slice %[[FAR]][0, 0, 0, 0] [1, 8, 2, 8]
// CHECK: %[[OUT:.*]] = linalg.generic {{.*}} ins(%[[WO]], %[[FARV]], {{.*}}) outs(%{{.*}} : tensor<1x8x2x8xf32>)
// The non-finite values' first token is counted among the keys' tokens.
// CHECK: arith.addf %{{.*}}, %cst{{.*}} : f32
// CHECK: return %[[OUT]], %[[FINAL]]
func.func @context_and_state(%q: tensor<1x8x2x16xf32>, %k: tensor<1x24x2x16xf32>, %v: tensor<1x24x2x8xf32>, %fq: tensor<1x8x2x4xf32>, %fk: tensor<1x24x2x4xf32>, %s0: tensor<1x2x4x9xf32>) -> (tensor<1x8x2x8xf32>, tensor<1x2x4x9xf32>) {
  %o, %s = la.sliding_window_hybrid %q, %k, %v features(%fq : tensor<1x8x2x4xf32>, %fk : tensor<1x24x2x4xf32>) initial_state(%s0 : tensor<1x2x4x9xf32>) {window = 10 : i64}
    : tensor<1x8x2x16xf32>, tensor<1x24x2x16xf32>, tensor<1x24x2x8xf32> -> tensor<1x8x2x8xf32>, tensor<1x2x4x9xf32>
  return %o, %s : tensor<1x8x2x8xf32>, tensor<1x2x4x9xf32>
}

// -----

// A run-time number of context tokens (S - T, from the keys' and queries'
// sizes); no initial state: the moved tokens before L start from zeros.
// CHECK-LABEL: func.func @dynamic_context
// CHECK-SAME: (%[[Q:.*]]: tensor<1x?x2x16xf32>, %[[K:.*]]: tensor<1x?x2x16xf32>, %[[V:.*]]: tensor<1x?x2x8xf32>
// CHECK: %[[T:.*]] = tensor.dim %[[Q]], %c1
// CHECK: %[[S:.*]] = tensor.dim %[[V]], %c1
// CHECK: %[[L:.*]] = affine.apply #{{.*}}()[%[[S]], %[[T]]]
// CHECK: tensor.extract_slice %{{.*}}[0, %[[L]], 0, 0] [1, %[[T]], 2, 4]
// CHECK: la.recurrence decay(none) low_rank(none)
// CHECK: tensor.insert_slice %[[Q]] into %{{.*}}[0, %[[L]], 0, 0]
func.func @dynamic_context(%q: tensor<1x?x2x16xf32>, %k: tensor<1x?x2x16xf32>, %v: tensor<1x?x2x8xf32>, %fq: tensor<1x?x2x4xf32>, %fk: tensor<1x?x2x4xf32>) -> (tensor<1x?x2x8xf32>, tensor<1x2x4x9xf32>) {
  %o, %s = la.sliding_window_hybrid %q, %k, %v features(%fq : tensor<1x?x2x4xf32>, %fk : tensor<1x?x2x4xf32>) {window = 10 : i64}
    : tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x8xf32> -> tensor<1x?x2x8xf32>, tensor<1x2x4x9xf32>
  return %o, %s : tensor<1x?x2x8xf32>, tensor<1x2x4x9xf32>
}
