// la.attention's checkpoints (`checkpoint_every = n`): la-lower-to-recurrence
// makes them a loop over segments of n tokens, each an la.recurrence from
// the state the one before ended with, then one over the rest.
// RUN: la-opt %s -split-input-file | la-opt -split-input-file | FileCheck %s --check-prefix=ROUND
// RUN: la-opt %s -split-input-file -la-lower-to-recurrence -cse | FileCheck %s
// RUN: la-opt %s -split-input-file -la-lower-to-recurrence -la-fuse-recurrence="chunk-size=4 threads=2 pack-inputs=0" -canonicalize -cse | FileCheck %s --check-prefix=FUSE

// ROUND-LABEL: func.func @partial_tail
// ROUND: %{{.*}}, %{{.*}}, %{{.*}} = la.attention gated_deltanet %{{.*}} {checkpoint_every = 16 : i64} : {{.*}} -> tensor<2x40x4x8xf32>, tensor<2x4x16x8xf32>, tensor<2x2x4x16x8xf32>

// Two whole segments of 16 tokens, then the 8 left; the state after each
// segment is checkpoint j.
// CHECK-LABEL: func.func @partial_tail
// CHECK-SAME: %[[Q:[^:]*]]: tensor<2x40x2x16xf32>
// CHECK-DAG: %[[C2:.*]] = arith.constant 2 : index
// CHECK-DAG: %[[ZERO:.*]] = linalg.fill {{.*}} -> tensor<2x4x16x8xf32>
// CHECK-DAG: %[[CK:.*]] = tensor.empty() : tensor<2x2x4x16x8xf32>
// CHECK: %[[LOOP:.*]]:3 = scf.for %[[J:.*]] = %{{.*}} to %[[C2]] step %{{.*}} iter_args(%[[O:.*]] = %{{.*}}, %[[S:.*]] = %[[ZERO]], %[[SAVED:.*]] = %[[CK]])
// CHECK: %[[START:.*]] = affine.apply #{{.*}}(%[[J]])
// CHECK: %[[QS:.*]] = tensor.extract_slice %[[Q]][0, %[[START]], 0, 0] [2, 16, 2, 16]
// CHECK: %[[OS:.*]] = tensor.extract_slice %[[O]][0, %[[START]], 0, 0] [2, 16, 4, 8]
// CHECK: %[[SEG:.*]], %[[SEGS:.*]] = la.recurrence decay(scalar) low_rank(delta) %[[QS]], {{.*}} outs(%[[OS]], %[[S]] : tensor<2x16x4x8xf32>, tensor<2x4x16x8xf32>)
// CHECK: %[[ONEXT:.*]] = tensor.insert_slice %[[SEG]] into %[[O]][0, %[[START]], 0, 0] [2, 16, 4, 8]
// CHECK: %[[CKNEXT:.*]] = tensor.insert_slice %[[SEGS]] into %[[SAVED]][0, %[[J]], 0, 0, 0] [2, 1, 4, 16, 8]
// CHECK: scf.yield %[[ONEXT]], %[[SEGS]], %[[CKNEXT]]
// CHECK: %[[QT:.*]] = tensor.extract_slice %[[Q]][0, 32, 0, 0] [2, 8, 2, 16]
// CHECK: %[[OT:.*]] = tensor.extract_slice %[[LOOP]]#0[0, 32, 0, 0] [2, 8, 4, 8]
// CHECK: %[[TAIL:.*]], %[[FINAL:.*]] = la.recurrence decay(scalar) low_rank(delta) %[[QT]], {{.*}} outs(%[[OT]], %[[LOOP]]#1 : tensor<2x8x4x8xf32>, tensor<2x4x16x8xf32>)
// CHECK: %[[OUT:.*]] = tensor.insert_slice %[[TAIL]] into %[[LOOP]]#0[0, 32, 0, 0] [2, 8, 4, 8]
// CHECK: return %[[OUT]], %[[FINAL]], %[[LOOP]]#2
func.func @partial_tail(%q: tensor<2x40x2x16xf32>, %k: tensor<2x40x2x16xf32>, %v: tensor<2x40x4x8xf32>, %g: tensor<2x40x2xf32>, %beta: tensor<2x40x2xf32>) -> (tensor<2x40x4x8xf32>, tensor<2x4x16x8xf32>, tensor<2x2x4x16x8xf32>) {
  %o, %s, %c = la.attention gated_deltanet %q, %k, %v g(%g : tensor<2x40x2xf32>) beta(%beta : tensor<2x40x2xf32>) {checkpoint_every = 16}
      : tensor<2x40x2x16xf32>, tensor<2x40x2x16xf32>, tensor<2x40x4x8xf32> -> tensor<2x40x4x8xf32>, tensor<2x4x16x8xf32>, tensor<2x2x4x16x8xf32>
  return %o, %s, %c : tensor<2x40x4x8xf32>, tensor<2x4x16x8xf32>, tensor<2x2x4x16x8xf32>
}

// -----

// Whole segments only, from a given initial state, without a final state
// result: no tail.
// ROUND-LABEL: func.func @whole_segments
// ROUND: la.attention gla {{.*}} initial_state(%{{.*}} : tensor<1x2x8x8xf32>) {checkpoint_every = 4 : i64} : {{.*}} -> tensor<1x8x2x8xf32>, tensor<1x2x2x8x8xf32>

// CHECK-LABEL: func.func @whole_segments
// CHECK-SAME: %[[S0:[^:]*]]: tensor<1x2x8x8xf32>
// CHECK: %[[LOOP:.*]]:3 = scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %[[S0]], %{{.*}} = %{{.*}})
// CHECK: la.recurrence decay(channel) low_rank(none) {{.*}} : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>
// CHECK: scf.yield
// CHECK-NOT: la.recurrence
// CHECK: return %[[LOOP]]#0, %[[LOOP]]#2
// Each segment's (batch, head) tasks write o into the segment's slice of
// the carried o (in place, not a fresh tensor copied back) and read the
// state the segment before ended with.
// FUSE-LABEL: func.func @whole_segments
// FUSE-SAME: %[[S0:[^:]*]]: tensor<1x2x8x8xf32>
// FUSE: scf.for %[[J:.*]] = {{.*}} iter_args(%[[O:.*]] = %{{.*}}, %[[S:.*]] = %[[S0]], %[[SAVED:.*]] = %{{.*}})
// FUSE: %[[OSEG:.*]] = tensor.extract_slice %[[O]][0, %{{.*}}, 0, 0] [1, 4, 2, 8]
// FUSE: %[[TASKS:.*]]:2 = scf.forall (%{{.*}}, %[[H:.*]]) in (1, 2) shared_outs(%[[OSH:.*]] = %[[OSEG]], %{{.*}} = %{{.*}})
// FUSE: tensor.extract_slice %[[S]][0, %[[H]], 0, 0] [1, 1, 8, 8]
// FUSE: tensor.parallel_insert_slice %{{.*}} into %[[OSH]][0, 0, %[[H]], 0] [1, 4, 1, 8]
// FUSE: tensor.insert_slice %[[TASKS]]#0 into %[[O]]
// FUSE: tensor.insert_slice %[[TASKS]]#1 into %[[SAVED]][0, %[[J]], 0, 0, 0] [1, 1, 2, 8, 8]
func.func @whole_segments(%q: tensor<1x8x2x8xf32>, %g: tensor<1x8x2x8xf32>, %s0: tensor<1x2x8x8xf32>) -> (tensor<1x8x2x8xf32>, tensor<1x2x2x8x8xf32>) {
  %o, %c = la.attention gla %q, %q, %q g(%g : tensor<1x8x2x8xf32>) initial_state(%s0 : tensor<1x2x8x8xf32>) {checkpoint_every = 4}
      : tensor<1x8x2x8xf32>, tensor<1x8x2x8xf32>, tensor<1x8x2x8xf32> -> tensor<1x8x2x8xf32>, tensor<1x2x2x8x8xf32>
  return %o, %c : tensor<1x8x2x8xf32>, tensor<1x2x2x8x8xf32>
}

// -----

// A run-time T (the package's kernels): T / n segments, then the rest,
// which may be empty (no scf.if around it: bufferization would copy the
// carried o).
// CHECK-LABEL: func.func @dynamic_time
// CHECK-SAME: %[[Q:[^:]*]]: tensor<?x?x2x8xf32>
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1 : index
// CHECK: %[[T:.*]] = tensor.dim %[[Q]], %[[ONE]] : tensor<?x?x2x8xf32>
// CHECK: %[[COUNT:.*]] = affine.apply #{{.*}}()[%[[T]]]
// CHECK: tensor.empty(%{{.*}}, %[[COUNT]]) : tensor<?x?x2x8x8xf32>
// CHECK: %[[REST:.*]] = affine.apply #{{.*}}()[%[[T]]]
// CHECK: %[[LOOP:.*]]:3 = scf.for %{{.*}} = %{{.*}} to %[[COUNT]]
// CHECK: la.recurrence decay(scalar) low_rank(none) {{.*}} : tensor<?x64x2x8xf32>
// CHECK-NOT: scf.if
// CHECK: %[[QT:.*]] = tensor.extract_slice %[[Q]][0, %{{.*}}, 0, 0] [%{{.*}}, %[[REST]], 2, 8]
// CHECK: %[[TAIL:.*]], %[[FINAL:.*]] = la.recurrence decay(scalar) low_rank(none) %[[QT]], {{.*}} outs(%{{.*}}, %[[LOOP]]#1 : {{.*}}) {{.*}} : tensor<?x?x2x8xf32>
// CHECK: %[[OUT:.*]] = tensor.insert_slice %[[TAIL]] into %[[LOOP]]#0[0, %{{.*}}, 0, 0] [%{{.*}}, %[[REST]], 2, 8]
// CHECK: return %[[OUT]], %[[FINAL]], %[[LOOP]]#2
func.func @dynamic_time(%q: tensor<?x?x2x8xf32>, %g: tensor<?x?x2xf32>) -> (tensor<?x?x2x8xf32>, tensor<?x2x8x8xf32>, tensor<?x?x2x8x8xf32>) {
  %o, %s, %c = la.attention mamba2 %q, %q, %q g(%g : tensor<?x?x2xf32>) {checkpoint_every = 64}
      : tensor<?x?x2x8xf32>, tensor<?x?x2x8xf32>, tensor<?x?x2x8xf32> -> tensor<?x?x2x8xf32>, tensor<?x2x8x8xf32>, tensor<?x?x2x8x8xf32>
  return %o, %s, %c : tensor<?x?x2x8xf32>, tensor<?x2x8x8xf32>, tensor<?x?x2x8x8xf32>
}

// -----

// Packed sequences: each sequence's segments from its own first token and
// its own initial state; its checkpoints follow the sequences' before it.
// With a run-time number of checkpoints, it is counted from cu_seqlens;
// the final states go to a tensor of their own (never into the caller's
// initial states).
// CHECK-LABEL: func.func @packed_dynamic
// CHECK-SAME: %[[Q:[^:]*]]: tensor<1x?x2x8xf32>, %{{[^:]*}}: tensor<1x?x2xf32>, %[[S0:[^:]*]]: tensor<?x2x8x8xf32>, %[[CU:[^:]*]]: tensor<?xi32>
// CHECK: %[[ROWS:.*]] = scf.for {{.*}} -> (index) {
// CHECK: arith.divui %{{.*}}, %{{.*}} : index
// CHECK: %[[CK:.*]] = tensor.empty(%[[ROWS]]) : tensor<1x?x2x8x8xf32>
// CHECK: %[[FINALS:.*]] = tensor.empty(%{{.*}}) : tensor<?x2x8x8xf32>
// CHECK: %[[SEQS:.*]]:4 = scf.for %[[I:.*]] = %{{.*}} iter_args(%[[O:.*]] = %{{.*}}, %[[F:.*]] = %[[FINALS]], %[[C:.*]] = %[[CK]], %[[ROW:.*]] = %{{.*}})
// CHECK: %[[FIRST:.*]] = tensor.extract %[[CU]][%[[I]]]
// CHECK: %[[START:.*]] = arith.index_cast %[[FIRST]]
// CHECK: tensor.extract_slice %[[Q]][0, %[[START]], 0, 0] [1, %{{.*}}, 2, 8]
// CHECK: %[[INIT:.*]] = tensor.extract_slice %[[S0]][%[[I]], 0, 0, 0] [1, 2, 8, 8]
// CHECK: %[[SEG:.*]]:3 = scf.for %[[J:[a-z0-9_]+]] = {{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %[[INIT]], %[[SAVED:.*]] = %[[C]])
// CHECK: %[[SEGO:.*]], %[[SEGS:.*]] = la.recurrence decay(scalar) low_rank(none) {{.*}} : tensor<1x16x2x8xf32>
// CHECK: %[[AT:.*]] = arith.addi %[[ROW]], %[[J]] : index
// CHECK-NOT: scf.if
// CHECK: tensor.insert_slice %[[SEGS]] into %[[SAVED]][0, %[[AT]], 0, 0, 0] [1, 1, 2, 8, 8]
// CHECK: la.recurrence decay(scalar) low_rank(none) {{.*}} : tensor<1x?x2x8xf32>
// CHECK: tensor.insert_slice %{{.*}} into %[[F]][%[[I]], 0, 0, 0] [1, 2, 8, 8]
// CHECK: return %[[SEQS]]#0, %[[SEQS]]#1, %[[SEQS]]#2
func.func @packed_dynamic(%q: tensor<1x?x2x8xf32>, %g: tensor<1x?x2xf32>, %s0: tensor<?x2x8x8xf32>, %cu: tensor<?xi32>) -> (tensor<1x?x2x8xf32>, tensor<?x2x8x8xf32>, tensor<1x?x2x8x8xf32>) {
  %o, %s, %c = la.attention mamba2 %q, %q, %q g(%g : tensor<1x?x2xf32>) initial_state(%s0 : tensor<?x2x8x8xf32>) cu_seqlens(%cu : tensor<?xi32>) {checkpoint_every = 16}
      : tensor<1x?x2x8xf32>, tensor<1x?x2x8xf32>, tensor<1x?x2x8xf32> -> tensor<1x?x2x8xf32>, tensor<?x2x8x8xf32>, tensor<1x?x2x8x8xf32>
  return %o, %s, %c : tensor<1x?x2x8xf32>, tensor<?x2x8x8xf32>, tensor<1x?x2x8x8xf32>
}

// -----

// A number of checkpoints that the type fixes: rows past it are not
// written (the caller's error, which la-run and the package rule out).
// CHECK-LABEL: func.func @packed_static_rows
// CHECK: %[[THREE:.*]] = arith.constant 3 : index
// CHECK: scf.for
// CHECK: scf.for %[[J:[a-z0-9_]+]] =
// CHECK: la.recurrence
// CHECK: %[[AT:.*]] = arith.addi %{{.*}}, %[[J]] : index
// CHECK: %[[IN:.*]] = arith.cmpi slt, %[[AT]], %[[THREE]] : index
// CHECK: scf.if %[[IN]] -> (tensor<1x3x1x4x4xf32>)
// CHECK: tensor.insert_slice
func.func @packed_static_rows(%q: tensor<1x16x1x4xf32>, %cu: tensor<3xi32>) -> (tensor<1x16x1x4xf32>, tensor<1x3x1x4x4xf32>) {
  %o, %c = la.attention linear %q, %q, %q cu_seqlens(%cu : tensor<3xi32>) {checkpoint_every = 4} : tensor<1x16x1x4xf32>, tensor<1x16x1x4xf32>, tensor<1x16x1x4xf32> -> tensor<1x16x1x4xf32>, tensor<1x3x1x4x4xf32>
  return %o, %c : tensor<1x16x1x4xf32>, tensor<1x3x1x4x4xf32>
}
