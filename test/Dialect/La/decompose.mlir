// la.recurrence tiled over T and each tile decomposed into the chunk program
// (AggregatedOpInterface) by transform ops: chunking as "tile T by C and
// decompose", the state carried by the tile loop.
// RUN: la-opt %s -split-input-file --transform-interpreter -canonicalize -cse -verify-diagnostics | FileCheck %s

// CHECK-LABEL: func.func @tile_and_decompose
// CHECK: %[[RES:.*]]:2 = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[OA:.*]] = %{{.*}}, %[[SA:.*]] = %{{.*}})
// CHECK-NOT: la.recurrence
// CHECK: %[[G:.*]] = la.chunk_cumsum %{{.*}} : tensor<1x1x16x2x8xf32> -> tensor<1x1x16x2x8xf32>
// CHECK: %[[W:.*]], %[[U:.*]] = la.chunk_wy %{{.*}}, %{{.*}} beta(%{{.*}} : tensor<1x1x16x2xf32>) gates(%[[G]] : tensor<1x1x16x2x8xf32>)
// CHECK: %[[STATES:.*]], %[[FINAL:.*]], %[[VC:.*]] = la.chunk_state_scan %{{.*}}, %[[U]] gates(%[[G]] : {{.*}}) initial_state(%[[SA]] : tensor<1x2x8x16xf32>) correction(%[[W]] : {{.*}})
// CHECK: %[[INTRA:.*]] = la.chunk_intra {{.*}}, %[[VC]] gates(%[[G]]
// CHECK: %[[OUT:.*]] = la.chunk_inter {{.*}}, %[[STATES]], %[[INTRA]]
// CHECK: %[[O:.*]] = tensor.collapse_shape %[[OUT]]
// CHECK: %[[OW:.*]] = tensor.insert_slice %[[O]] into %[[OA]]
// CHECK: scf.yield %[[OW]], %[[FINAL]]
// CHECK: return %[[RES]]#0, %[[RES]]#1
func.func @tile_and_decompose(%q: tensor<1x48x2x8xf32>, %k: tensor<1x48x2x8xf32>, %v: tensor<1x48x2x16xf32>, %g: tensor<1x48x2x8xf32>, %beta: tensor<1x48x2xf32>) -> (tensor<1x48x2x16xf32>, tensor<1x2x8x16xf32>) {
  %oi = tensor.empty() : tensor<1x48x2x16xf32>
  %s0 = arith.constant dense<0.0> : tensor<1x2x8x16xf32>
  %o, %s = la.recurrence decay(channel) low_rank(delta) %q, %k, %v g(%g : tensor<1x48x2x8xf32>) beta(%beta : tensor<1x48x2xf32>) outs(%oi, %s0 : tensor<1x48x2x16xf32>, tensor<1x2x8x16xf32>) {scale = 0.5 : f32} : tensor<1x48x2x8xf32>, tensor<1x48x2x8xf32>, tensor<1x48x2x16xf32> -> tensor<1x48x2x16xf32>, tensor<1x2x8x16xf32>
  return %o, %s : tensor<1x48x2x16xf32>, tensor<1x2x8x16xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %r = transform.structured.match ops{["la.recurrence"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_for %r tile_sizes [0, 16] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %decomposed = transform.la.decompose %tiled : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}

// -----

// A partial last tile (40 = 16 + 16 + 8) has a dynamic T bounded by 16: the
// chunk is padded to 16 tokens.
// CHECK-LABEL: func.func @partial_tile
// CHECK: scf.for
// CHECK: tensor.pad
// CHECK: } : tensor<1x?x1x4xf32> to tensor<1x16x1x4xf32>
// CHECK: la.chunk_cumsum %{{.*}} : tensor<1x1x16x1xf32>
// CHECK: la.chunk_state_scan
// CHECK: tensor.extract_slice %{{.*}} : tensor<1x16x1x4xf32> to tensor<1x?x1x4xf32>
func.func @partial_tile(%q: tensor<1x40x1x4xf32>, %g: tensor<1x40x1xf32>) -> tensor<1x40x1x4xf32> {
  %oi = tensor.empty() : tensor<1x40x1x4xf32>
  %s0 = arith.constant dense<0.0> : tensor<1x1x4x4xf32>
  %o, %s = la.recurrence decay(scalar) low_rank(none) %q, %q, %q g(%g : tensor<1x40x1xf32>) outs(%oi, %s0 : tensor<1x40x1x4xf32>, tensor<1x1x4x4xf32>) {scale = 0.5 : f32} : tensor<1x40x1x4xf32>, tensor<1x40x1x4xf32>, tensor<1x40x1x4xf32> -> tensor<1x40x1x4xf32>, tensor<1x1x4x4xf32>
  return %o : tensor<1x40x1x4xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %r = transform.structured.match ops{["la.recurrence"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_for %r tile_sizes [0, 16] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %decomposed = transform.la.decompose %tiled : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}

// -----

// Not decomposed: a fixed gate (simplify first).
func.func @fixed_gate(%q: tensor<1x8x2x4xf32>) -> tensor<1x8x2x4xf32> {
  %oi = tensor.empty() : tensor<1x8x2x4xf32>
  %s0 = arith.constant dense<0.0> : tensor<1x2x4x4xf32>
  // expected-note @+1 {{payload op}}
  %o, %s = la.recurrence decay(fixed) low_rank(none) %q, %q, %q outs(%oi, %s0 : tensor<1x8x2x4xf32>, tensor<1x2x4x4xf32>) {log_decay = array<f32: -0.5, -0.25>, scale = 0.5 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32> -> tensor<1x8x2x4xf32>, tensor<1x2x4x4xf32>
  return %o : tensor<1x8x2x4xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %r = transform.structured.match ops{["la.recurrence"]} in %root : (!transform.any_op) -> !transform.any_op
    // expected-error @+1 {{could not decompose the payload op}}
    %decomposed = transform.la.decompose %r : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}

// -----

// A reverse recurrence tiled by 16 over T = 40: the tile loop runs in
// processing order and each tile reads the tokens [40 - t - n, 40 - t); the
// last, partial tile is padded before its tokens, each chunk is flipped in
// time (T - 1 - t) for the forward chunk program, and its output flipped
// back and sliced from the padding on.
// CHECK-DAG: #[[SIZE:.*]] = affine_map<(d0) -> (-d0 + 40, 16)>
// CHECK-DAG: #[[START:.*]] = affine_map<()[s0, s1] -> (-s0 - s1 + 40)>
// CHECK-DAG: #[[PAD:.*]] = affine_map<()[s0] -> (-s0 + 16)>
// CHECK-DAG: #[[FLIP:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, -d1 + 15, d2, d3)>
// CHECK-LABEL: func.func @reverse_time_loop
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[S0:[^:]*]]: {{.*}})
// CHECK: %[[RES:.*]]:2 = scf.for %[[T:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[OA:.*]] = %{{.*}}, %[[SA:.*]] = %[[S0]])
// CHECK: %[[N:.*]] = affine.min #[[SIZE]](%[[T]])
// CHECK: %[[FIRST:.*]] = affine.apply #[[START]]()[%[[T]], %[[N]]]
// CHECK: %[[QS:.*]] = tensor.extract_slice %[[Q]][0, %[[FIRST]], 0, 0] [1, %[[N]], 2, 8]
// CHECK: %[[LOW:.*]] = affine.apply #[[PAD]]()[%[[N]]]
// CHECK: %[[QP:.*]] = tensor.pad %[[QS]] low[0, %[[LOW]], 0, 0] high[0, 0, 0, 0]
// CHECK: %[[QF:.*]] = linalg.generic {indexing_maps = [#[[FLIP]], {{.*}}]{{.*}} ins(%[[QP]] : tensor<1x16x2x8xf32>)
// CHECK: la.chunk_state_scan {{.*}} initial_state(%[[SA]] : tensor<1x2x8x16xf32>)
// CHECK: %[[OUT:.*]] = la.chunk_inter
// CHECK: %[[OC:.*]] = tensor.collapse_shape %[[OUT]]
// CHECK: %[[OF:.*]] = linalg.generic {indexing_maps = [#[[FLIP]], {{.*}}]{{.*}} ins(%[[OC]] : tensor<1x16x2x16xf32>)
// CHECK: %[[OS:.*]] = tensor.extract_slice %[[OF]][0, %[[LOW]], 0, 0] [1, %[[N]], 2, 16]
// CHECK: %[[OW:.*]] = tensor.insert_slice %[[OS]] into %[[OA]][0, %[[FIRST]], 0, 0] [1, %[[N]], 2, 16]
// CHECK: scf.yield %[[OW]], %{{.*}}
// CHECK: return %[[RES]]#0, %[[RES]]#1
func.func @reverse_time_loop(%q: tensor<1x40x2x8xf32>, %k: tensor<1x40x2x8xf32>, %v: tensor<1x40x2x16xf32>, %g: tensor<1x40x2xf32>, %s0: tensor<1x2x8x16xf32>) -> (tensor<1x40x2x16xf32>, tensor<1x2x8x16xf32>) {
  %oi = tensor.empty() : tensor<1x40x2x16xf32>
  %o, %s = la.recurrence decay(scalar) low_rank(none) %q, %k, %v g(%g : tensor<1x40x2xf32>) outs(%oi, %s0 : tensor<1x40x2x16xf32>, tensor<1x2x8x16xf32>) {reverse, scale = 0.5 : f32} : tensor<1x40x2x8xf32>, tensor<1x40x2x8xf32>, tensor<1x40x2x16xf32> -> tensor<1x40x2x16xf32>, tensor<1x2x8x16xf32>
  return %o, %s : tensor<1x40x2x16xf32>, tensor<1x2x8x16xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %r = transform.structured.match ops{["la.recurrence"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_for %r tile_sizes [0, 16] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %decomposed = transform.la.decompose %tiled : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}

// -----

// la.sliding_window_hybrid decomposes through the same interface: upstream's
// transform.structured.decompose_interface gives the far part's recurrence
// and the window's products.
// CHECK-LABEL: func.func @sliding_window_hybrid
// CHECK-NOT: la.sliding_window_hybrid
// CHECK: la.recurrence decay(none) low_rank(none) {{.*}} -> tensor<1x32x1x5xf32>, tensor<1x1x2x5xf32>
// CHECK: math.exp
// CHECK: return %{{.*}} : tensor<1x32x1x4xf32>
func.func @sliding_window_hybrid(%q: tensor<1x32x1x8xf32>, %v: tensor<1x32x1x4xf32>, %f: tensor<1x32x1x2xf32>) -> tensor<1x32x1x4xf32> {
  %o = la.sliding_window_hybrid %q, %q, %v features(%f : tensor<1x32x1x2xf32>, %f : tensor<1x32x1x2xf32>) {window = 8 : i64} : tensor<1x32x1x8xf32>, tensor<1x32x1x8xf32>, tensor<1x32x1x4xf32> -> tensor<1x32x1x4xf32>
  return %o : tensor<1x32x1x4xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %h = transform.structured.match ops{["la.sliding_window_hybrid"]} in %root : (!transform.any_op) -> !transform.any_op
    %d = transform.structured.decompose_interface %h : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}
