// la.recurrence tiled by upstream scf::tileUsingSCF through the transform
// dialect's generic tiling ops (TilingInterface).
// RUN: la-opt %s -split-input-file --transform-interpreter -canonicalize -cse -verify-diagnostics | FileCheck %s

// Tasks over (batch, value head, value tile) in an scf.forall: each tile is
// the recurrence on its slices, its state init the slice of the state.
// CHECK-LABEL: func.func @forall_tasks
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<2x32x2x8xf32>, %[[K:[^:]*]]: tensor<2x32x2x8xf32>, %[[V:[^:]*]]: tensor<2x32x2x16xf32>, %[[G:[^:]*]]: tensor<2x32x2xf32>, %[[S0:[^:]*]]: tensor<2x2x8x16xf32>)
// CHECK: %[[OI:.*]] = tensor.empty() : tensor<2x32x2x16xf32>
// CHECK: %[[RES:.*]]:2 = scf.forall (%[[B:.*]], %[[H:.*]], %[[VT:.*]]) in (2, 2, 2) shared_outs(%[[OA:.*]] = %[[OI]], %[[SA:.*]] = %[[S0]])
// CHECK: %[[C:.*]] = affine.apply #{{.*}}(%[[VT]])
// CHECK-DAG: %[[QT:.*]] = tensor.extract_slice %[[Q]][%[[B]], 0, %[[H]], 0] [1, 32, 1, 8]
// CHECK-DAG: %[[VS:.*]] = tensor.extract_slice %[[V]][%[[B]], 0, %[[H]], %[[C]]] [1, 32, 1, 8]
// CHECK-DAG: %[[GT:.*]] = tensor.extract_slice %[[G]][%[[B]], 0, %[[H]]] [1, 32, 1]
// CHECK-DAG: %[[OT:.*]] = tensor.extract_slice %[[OA]][%[[B]], 0, %[[H]], %[[C]]] [1, 32, 1, 8]
// CHECK-DAG: %[[ST:.*]] = tensor.extract_slice %[[SA]][%[[B]], %[[H]], 0, %[[C]]] [1, 1, 8, 8]
// CHECK: %[[O:.*]], %[[S:.*]] = la.recurrence decay(scalar) low_rank(delta) %[[QT]], %{{.*}}, %[[VS]] g(%[[GT]] : tensor<1x32x1xf32>) beta(%{{.*}} : tensor<1x32x1xf32>) outs(%[[OT]], %[[ST]] : tensor<1x32x1x8xf32>, tensor<1x1x8x8xf32>)
// CHECK: scf.forall.in_parallel
// CHECK: tensor.parallel_insert_slice %[[O]] into %[[OA]][%[[B]], 0, %[[H]], %[[C]]] [1, 32, 1, 8]
// CHECK: tensor.parallel_insert_slice %[[S]] into %[[SA]][%[[B]], %[[H]], 0, %[[C]]] [1, 1, 8, 8]
// CHECK: return %[[RES]]#0, %[[RES]]#1
func.func @forall_tasks(%q: tensor<2x32x2x8xf32>, %k: tensor<2x32x2x8xf32>, %v: tensor<2x32x2x16xf32>, %g: tensor<2x32x2xf32>, %s0: tensor<2x2x8x16xf32>) -> (tensor<2x32x2x16xf32>, tensor<2x2x8x16xf32>) {
  %oi = tensor.empty() : tensor<2x32x2x16xf32>
  %o, %s = la.recurrence decay(scalar) low_rank(delta) %q, %k, %v g(%g : tensor<2x32x2xf32>) beta(%g : tensor<2x32x2xf32>) outs(%oi, %s0 : tensor<2x32x2x16xf32>, tensor<2x2x8x16xf32>) {scale = 0.5 : f32} : tensor<2x32x2x8xf32>, tensor<2x32x2x8xf32>, tensor<2x32x2x16xf32> -> tensor<2x32x2x16xf32>, tensor<2x2x8x16xf32>
  return %o, %s : tensor<2x32x2x16xf32>, tensor<2x2x8x16xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %r = transform.structured.match ops{["la.recurrence"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %forall = transform.structured.tile_using_forall %r tile_sizes [1, 0, 1, 8] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// T tiled by 16: an scf.for over chunks carries the state as the
// accumulator of a reduction; each chunk's output is written at its tokens.
// CHECK-LABEL: func.func @time_loop
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x48x2x8xf32>, %[[K:[^:]*]]: tensor<1x48x2x8xf32>, %[[V:[^:]*]]: tensor<1x48x2x16xf32>, %[[G:[^:]*]]: tensor<1x48x2x8xf32>)
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C48:.*]] = arith.constant 48 : index
// CHECK-DAG: %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : tensor<1x2x8x16xf32>
// CHECK: %[[RES:.*]]:2 = scf.for %[[T:.*]] = %{{.*}} to %[[C48]] step %[[C16]] iter_args(%[[OA:.*]] = %{{.*}}, %[[SA:.*]] = %[[ZERO]])
// CHECK-DAG: %[[QT:.*]] = tensor.extract_slice %[[Q]][0, %[[T]], 0, 0] [1, 16, 2, 8]
// CHECK-DAG: %[[GT:.*]] = tensor.extract_slice %[[G]][0, %[[T]], 0, 0] [1, 16, 2, 8]
// CHECK-DAG: %[[OT:.*]] = tensor.extract_slice %[[OA]][0, %[[T]], 0, 0] [1, 16, 2, 16]
// CHECK: %[[O:.*]], %[[S:.*]] = la.recurrence decay(channel) low_rank(none) %[[QT]], %{{.*}}, %{{.*}} g(%[[GT]] : tensor<1x16x2x8xf32>) outs(%[[OT]], %[[SA]] : tensor<1x16x2x16xf32>, tensor<1x2x8x16xf32>)
// CHECK: %[[OW:.*]] = tensor.insert_slice %[[O]] into %[[OA]][0, %[[T]], 0, 0] [1, 16, 2, 16]
// CHECK: scf.yield %[[OW]], %[[S]]
// CHECK: return %[[RES]]#0, %[[RES]]#1
func.func @time_loop(%q: tensor<1x48x2x8xf32>, %k: tensor<1x48x2x8xf32>, %v: tensor<1x48x2x16xf32>, %g: tensor<1x48x2x8xf32>) -> (tensor<1x48x2x16xf32>, tensor<1x2x8x16xf32>) {
  %oi = tensor.empty() : tensor<1x48x2x16xf32>
  %s0 = arith.constant dense<0.0> : tensor<1x2x8x16xf32>
  %o, %s = la.recurrence decay(channel) low_rank(none) %q, %k, %v g(%g : tensor<1x48x2x8xf32>) outs(%oi, %s0 : tensor<1x48x2x16xf32>, tensor<1x2x8x16xf32>) {scale = 0.5 : f32} : tensor<1x48x2x8xf32>, tensor<1x48x2x8xf32>, tensor<1x48x2x16xf32> -> tensor<1x48x2x16xf32>, tensor<1x2x8x16xf32>
  return %o, %s : tensor<1x48x2x16xf32>, tensor<1x2x8x16xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %r = transform.structured.match ops{["la.recurrence"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_for %r tile_sizes [0, 16, 0, 0] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// Grouped value heads (HV = 4, H = 2): value head hv reads key head hv / 2.
// CHECK-LABEL: func.func @grouped_heads
// CHECK: scf.forall (%[[H:.*]]) in (4)
// CHECK: %[[KH:.*]] = affine.apply #{{.*}}(%[[H]])
// CHECK: tensor.extract_slice %{{.*}}[0, 0, %[[KH]], 0] [1, 8, 1, 4]
// CHECK: la.recurrence decay(none) low_rank(general) {{.*}} : tensor<1x8x1x4xf32>, tensor<1x8x1x4xf32>, tensor<1x8x1x6xf32> -> tensor<1x8x1x6xf32>, tensor<1x1x4x6xf32>
func.func @grouped_heads(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x4x6xf32>) -> tensor<1x8x4x6xf32> {
  %oi = tensor.empty() : tensor<1x8x4x6xf32>
  %s0 = arith.constant dense<0.0> : tensor<1x4x4x6xf32>
  %o, %s = la.recurrence decay(none) low_rank(general) %q, %q, %v a(%q : tensor<1x8x2x4xf32>) b(%q : tensor<1x8x2x4xf32>) outs(%oi, %s0 : tensor<1x8x4x6xf32>, tensor<1x4x4x6xf32>) {scale = 0.5 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x4x6xf32> -> tensor<1x8x4x6xf32>, tensor<1x4x4x6xf32>
  return %o : tensor<1x8x4x6xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %r = transform.structured.match ops{["la.recurrence"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %forall = transform.structured.tile_using_forall %r tile_sizes [0, 0, 1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// A fixed gate is sliced at constant key heads.
// CHECK-LABEL: func.func @fixed_gate
// CHECK: scf.for
// CHECK: la.recurrence decay(fixed) low_rank(none) {{.*}} {log_decay = array<f32: -5.000000e-01, -2.500000e-01>, scale = 5.000000e-01 : f32} : tensor<1x4x2x4xf32>
func.func @fixed_gate(%q: tensor<1x8x2x4xf32>) -> tensor<1x8x2x4xf32> {
  %oi = tensor.empty() : tensor<1x8x2x4xf32>
  %s0 = arith.constant dense<0.0> : tensor<1x2x4x4xf32>
  %o, %s = la.recurrence decay(fixed) low_rank(none) %q, %q, %q outs(%oi, %s0 : tensor<1x8x2x4xf32>, tensor<1x2x4x4xf32>) {log_decay = array<f32: -0.5, -0.25>, scale = 0.5 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<1x2x4x4xf32>
  return %o : tensor<1x8x2x4xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %r = transform.structured.match ops{["la.recurrence"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_for %r tile_sizes [0, 4] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

func.func @fixed_gate_per_head(%q: tensor<1x8x2x4xf32>) -> tensor<1x8x2x4xf32> {
  %oi = tensor.empty() : tensor<1x8x2x4xf32>
  %s0 = arith.constant dense<0.0> : tensor<1x2x4x4xf32>
  // expected-error @+3 {{with a 'fixed' gate can only be tiled at constant head offsets}}
  // expected-error @+2 {{faild to tile operation}}
  // expected-error @+1 {{failed to generate tiling loops}}
  %o, %s = la.recurrence decay(fixed) low_rank(none) %q, %q, %q outs(%oi, %s0 : tensor<1x8x2x4xf32>, tensor<1x2x4x4xf32>) {log_decay = array<f32: -0.5, -0.25>, scale = 0.5 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<1x2x4x4xf32>
  return %o : tensor<1x8x2x4xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %r = transform.structured.match ops{["la.recurrence"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_for %r tile_sizes [0, 0, 1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

func.func @split_group(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x6x4xf32>) -> tensor<1x8x6x4xf32> {
  %oi = tensor.empty() : tensor<1x8x6x4xf32>
  %s0 = arith.constant dense<0.0> : tensor<1x6x4x4xf32>
  // expected-error @+4 {{expects a tile of value heads that covers whole groups of 3 (HV / H) or lies in one}}
  // expected-error @+3 {{faild to tile operation}}
  // expected-error @+2 {{failed to generate tiling loops}}
  // expected-note @+1 {{when applied to this op}}
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %q, %v outs(%oi, %s0 : tensor<1x8x6x4xf32>, tensor<1x6x4x4xf32>) {scale = 0.5 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x6x4xf32> -> tensor<1x8x6x4xf32>, tensor<1x6x4x4xf32>
  return %o : tensor<1x8x6x4xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %r = transform.structured.match ops{["la.recurrence"]} in %root : (!transform.any_op) -> !transform.any_op
    // expected-error @+1 {{failed to apply}}
    %tiled, %loop = transform.structured.tile_using_forall %r tile_sizes [0, 0, 2] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

func.func @packed_sequences(%q: tensor<1x8x2x4xf32>, %cu: tensor<3xi32>) -> tensor<1x8x2x4xf32> {
  %oi = tensor.empty() : tensor<1x8x2x4xf32>
  %s0 = arith.constant dense<0.0> : tensor<2x2x4x4xf32>
  // expected-error @+3 {{with 'cu_seqlens' cannot be tiled along T}}
  // expected-error @+2 {{faild to tile operation}}
  // expected-error @+1 {{failed to generate tiling loops}}
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %q, %q cu_seqlens(%cu : tensor<3xi32>) outs(%oi, %s0 : tensor<1x8x2x4xf32>, tensor<2x2x4x4xf32>) {scale = 0.5 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<2x2x4x4xf32>
  return %o : tensor<1x8x2x4xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %r = transform.structured.match ops{["la.recurrence"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_for %r tile_sizes [0, 4] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// Two of three packed sequences are not a tile: one at a time, or all.
func.func @two_sequences(%q: tensor<1x8x2x4xf32>, %cu: tensor<4xi32>) -> tensor<1x8x2x4xf32> {
  %oi = tensor.empty() : tensor<1x8x2x4xf32>
  %s0 = arith.constant dense<0.0> : tensor<3x2x4x4xf32>
  // expected-error @+3 {{with 'cu_seqlens' can only be tiled along its sequences one at a time}}
  // expected-error @+2 {{faild to tile operation}}
  // expected-error @+1 {{failed to generate tiling loops}}
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %q, %q cu_seqlens(%cu : tensor<4xi32>) outs(%oi, %s0 : tensor<1x8x2x4xf32>, tensor<3x2x4x4xf32>) {scale = 0.5 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<3x2x4x4xf32>
  return %o : tensor<1x8x2x4xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %r = transform.structured.match ops{["la.recurrence"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_for %r tile_sizes [2] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// Packed sequences as tasks: the iteration domain's first loop runs over the
// N = 3 sequences (not B = 1); a tile of one sequence n is the recurrence
// of its tokens [cu[n], cu[n+1]) (clamped into [0, T]) with its state row,
// without cu_seqlens, and its output rows are those tokens.
// CHECK-LABEL: func.func @sequence_tasks
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x8x2x4xf32>, %[[G:[^:]*]]: tensor<1x8x2xf32>, %[[CU:[^:]*]]: tensor<4xi32>, %[[S0:[^:]*]]: tensor<3x2x4x4xf32>)
// CHECK: scf.forall (%[[N:.*]], %[[H:.*]]) in (3, 2) shared_outs(%[[OA:.*]] = %{{.*}}, %[[SA:.*]] = %[[S0]])
// CHECK: %[[N1:.*]] = arith.addi %[[N]]
// CHECK: %[[RS:.*]] = tensor.extract %[[CU]][%[[N]]]
// CHECK: %[[RE:.*]] = tensor.extract %[[CU]][%[[N1]]]
// CHECK: %[[START:.*]] = arith.minsi
// CHECK: %[[END:.*]] = arith.minsi
// CHECK: %[[LEN:.*]] = arith.subi %[[END]], %[[START]]
// CHECK-DAG: %[[QT:.*]] = tensor.extract_slice %[[Q]][0, %[[START]], %[[H]], 0] [1, %[[LEN]], 1, 4]
// CHECK-DAG: %[[GT:.*]] = tensor.extract_slice %[[G]][0, %[[START]], %[[H]]] [1, %[[LEN]], 1]
// CHECK-DAG: %[[OT:.*]] = tensor.extract_slice %[[OA]][0, %[[START]], %[[H]], 0] [1, %[[LEN]], 1, 4]
// CHECK-DAG: %[[ST:.*]] = tensor.extract_slice %[[SA]][%[[N]], %[[H]], 0, 0] [1, 1, 4, 4]
// CHECK: %[[O:.*]], %[[S:.*]] = la.recurrence decay(scalar) low_rank(none) %[[QT]], %[[QT]], %[[QT]] g(%[[GT]] : tensor<1x?x1xf32>) outs(%[[OT]], %[[ST]] : tensor<1x?x1x4xf32>, tensor<1x1x4x4xf32>) {reverse, scale = 5.000000e-01 : f32}
// CHECK-NOT: cu_seqlens
// CHECK: tensor.parallel_insert_slice %[[O]] into %[[OA]][0, %[[START]], %[[H]], 0] [1, %[[LEN]], 1, 4]
// CHECK: tensor.parallel_insert_slice %[[S]] into %[[SA]][%[[N]], %[[H]], 0, 0] [1, 1, 4, 4]
func.func @sequence_tasks(%q: tensor<1x8x2x4xf32>, %g: tensor<1x8x2xf32>, %cu: tensor<4xi32>, %s0: tensor<3x2x4x4xf32>) -> (tensor<1x8x2x4xf32>, tensor<3x2x4x4xf32>) {
  %oi = tensor.empty() : tensor<1x8x2x4xf32>
  %o, %s = la.recurrence decay(scalar) low_rank(none) %q, %q, %q g(%g : tensor<1x8x2xf32>) cu_seqlens(%cu : tensor<4xi32>) outs(%oi, %s0 : tensor<1x8x2x4xf32>, tensor<3x2x4x4xf32>) {reverse, scale = 0.5 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<3x2x4x4xf32>
  return %o, %s : tensor<1x8x2x4xf32>, tensor<3x2x4x4xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %r = transform.structured.match ops{["la.recurrence"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %forall = transform.structured.tile_using_forall %r tile_sizes [1, 0, 1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// A run-time number of sequences: the forall's bound is the size of
// cu_seqlens minus one; a tile of value heads alone keeps every sequence
// (and cu_seqlens).
// CHECK-LABEL: func.func @dynamic_sequences
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x?x2x4xf32>, %[[CU:[^:]*]]: tensor<?xi32>, %[[S0:[^:]*]]: tensor<?x2x4x4xf32>)
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK: %[[DIM:.*]] = tensor.dim %[[CU]], %[[C0]]
// CHECK: %[[NUM:.*]] = affine.apply #{{.*}}()[%[[DIM]]]
// CHECK: scf.forall (%[[N:.*]]) in (%[[NUM]])
// CHECK: la.recurrence decay(none) low_rank(none) {{.*}} outs({{.*}} : tensor<1x?x2x4xf32>, tensor<1x2x4x4xf32>)
// CHECK-LABEL: func.func @all_sequences_per_head
// CHECK: scf.forall (%{{.*}}) in (2)
// CHECK: la.recurrence decay(none) low_rank(none) {{.*}} cu_seqlens(%{{.*}} : tensor<?xi32>) outs({{.*}} : tensor<1x?x1x4xf32>, tensor<?x1x4x4xf32>)
func.func @dynamic_sequences(%q: tensor<1x?x2x4xf32>, %cu: tensor<?xi32>, %s0: tensor<?x2x4x4xf32>) -> tensor<1x?x2x4xf32> {
  %c1 = arith.constant 1 : index
  %t = tensor.dim %q, %c1 : tensor<1x?x2x4xf32>
  %oi = tensor.empty(%t) : tensor<1x?x2x4xf32>
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %q, %q cu_seqlens(%cu : tensor<?xi32>) outs(%oi, %s0 : tensor<1x?x2x4xf32>, tensor<?x2x4x4xf32>) {scale = 0.5 : f32} : tensor<1x?x2x4xf32>, tensor<1x?x2x4xf32>, tensor<1x?x2x4xf32> -> tensor<1x?x2x4xf32>, tensor<?x2x4x4xf32>
  return %o : tensor<1x?x2x4xf32>
}

func.func @all_sequences_per_head(%q: tensor<1x?x2x4xf32>, %cu: tensor<?xi32>, %s0: tensor<?x2x4x4xf32>) -> tensor<1x?x2x4xf32> {
  %c1 = arith.constant 1 : index
  %t = tensor.dim %q, %c1 : tensor<1x?x2x4xf32>
  %oi = tensor.empty(%t) : tensor<1x?x2x4xf32>
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %q, %q cu_seqlens(%cu : tensor<?xi32>) outs(%oi, %s0 : tensor<1x?x2x4xf32>, tensor<?x2x4x4xf32>) {scale = 0.5 : f32} : tensor<1x?x2x4xf32>, tensor<1x?x2x4xf32>, tensor<1x?x2x4xf32> -> tensor<1x?x2x4xf32>, tensor<?x2x4x4xf32>
  return %o : tensor<1x?x2x4xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %f = transform.structured.match ops{["func.func"]} attributes {sym_name = "dynamic_sequences"} in %root : (!transform.any_op) -> !transform.any_op
    %r = transform.structured.match ops{["la.recurrence"]} in %f : (!transform.any_op) -> !transform.any_op
    %tiled, %forall = transform.structured.tile_using_forall %r tile_sizes [1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %f2 = transform.structured.match ops{["func.func"]} attributes {sym_name = "all_sequences_per_head"} in %root : (!transform.any_op) -> !transform.any_op
    %r2 = transform.structured.match ops{["la.recurrence"]} in %f2 : (!transform.any_op) -> !transform.any_op
    %tiled2, %forall2 = transform.structured.tile_using_forall %r2 tile_sizes [0, 0, 1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

func.func @normalizer(%q: tensor<1x8x2x4xf32>) -> tensor<1x8x2x4xf32> {
  %oi = tensor.empty() : tensor<1x8x2x4xf32>
  %s0 = arith.constant dense<0.0> : tensor<1x2x4x4xf32>
  // expected-error @+3 {{with 'normalizer' cannot be tiled along T}}
  // expected-error @+2 {{faild to tile operation}}
  // expected-error @+1 {{failed to generate tiling loops}}
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %q, %q outs(%oi, %s0 : tensor<1x8x2x4xf32>, tensor<1x2x4x4xf32>) {normalizer, scale = 0.5 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<1x2x4x4xf32>
  return %o : tensor<1x8x2x4xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %r = transform.structured.match ops{["la.recurrence"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_for %r tile_sizes [0, 4] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// Grouped query heads (HQ = 6 over HV = 2 states over H = 1 key head): a
// task of one value head reads and writes its G = 3 query heads, [3 hv, 3 hv
// + 3), and the key head hv floordiv 2; its state is the value head's.
// CHECK-LABEL: func.func @grouped_query_tasks
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<2x32x6x8xf32>, %[[K:[^:]*]]: tensor<2x32x1x8xf32>, %[[V:[^:]*]]: tensor<2x32x2x16xf32>, %[[G:[^:]*]]: tensor<2x32x1xf32>, %[[S0:[^:]*]]: tensor<2x2x8x16xf32>)
// CHECK: %[[RES:.*]]:2 = scf.forall (%[[B:.*]], %[[H:.*]], %[[VT:.*]]) in (2, 2, 2) shared_outs(%[[OA:.*]] = %{{.*}}, %[[SA:.*]] = %[[S0]])
// CHECK-DAG: %[[C:.*]] = affine.apply #{{.*}}(%[[VT]])
// CHECK-DAG: %[[KH:.*]] = affine.apply #{{.*}}(%[[H]])
// CHECK-DAG: %[[QH:.*]] = affine.apply #{{.*}}(%[[H]])
// CHECK-DAG: %[[QT:.*]] = tensor.extract_slice %[[Q]][%[[B]], 0, %[[QH]], 0] [1, 32, 3, 8]
// CHECK-DAG: %[[KT:.*]] = tensor.extract_slice %[[K]][%[[B]], 0, %[[KH]], 0] [1, 32, 1, 8]
// CHECK-DAG: %[[VS:.*]] = tensor.extract_slice %[[V]][%[[B]], 0, %[[H]], %[[C]]] [1, 32, 1, 8]
// CHECK-DAG: %[[OT:.*]] = tensor.extract_slice %[[OA]][%[[B]], 0, %[[QH]], %[[C]]] [1, 32, 3, 8]
// CHECK-DAG: %[[ST:.*]] = tensor.extract_slice %[[SA]][%[[B]], %[[H]], 0, %[[C]]] [1, 1, 8, 8]
// CHECK: %[[O:.*]], %[[S:.*]] = la.recurrence decay(scalar) low_rank(delta) %[[QT]], %[[KT]], %[[VS]] {{.*}} outs(%[[OT]], %[[ST]] : tensor<1x32x3x8xf32>, tensor<1x1x8x8xf32>)
// CHECK: tensor.parallel_insert_slice %[[O]] into %[[OA]][%[[B]], 0, %[[QH]], %[[C]]] [1, 32, 3, 8]
// CHECK: tensor.parallel_insert_slice %[[S]] into %[[SA]][%[[B]], %[[H]], 0, %[[C]]] [1, 1, 8, 8]
func.func @grouped_query_tasks(%q: tensor<2x32x6x8xf32>, %k: tensor<2x32x1x8xf32>, %v: tensor<2x32x2x16xf32>, %g: tensor<2x32x1xf32>, %s0: tensor<2x2x8x16xf32>) -> (tensor<2x32x6x16xf32>, tensor<2x2x8x16xf32>) {
  %oi = tensor.empty() : tensor<2x32x6x16xf32>
  %o, %s = la.recurrence decay(scalar) low_rank(delta) %q, %k, %v g(%g : tensor<2x32x1xf32>) beta(%g : tensor<2x32x1xf32>) outs(%oi, %s0 : tensor<2x32x6x16xf32>, tensor<2x2x8x16xf32>) {scale = 0.5 : f32} : tensor<2x32x6x8xf32>, tensor<2x32x1x8xf32>, tensor<2x32x2x16xf32> -> tensor<2x32x6x16xf32>, tensor<2x2x8x16xf32>
  return %o, %s : tensor<2x32x6x16xf32>, tensor<2x2x8x16xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %r = transform.structured.match ops{["la.recurrence"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %forall = transform.structured.tile_using_forall %r tile_sizes [1, 0, 1, 8] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}
