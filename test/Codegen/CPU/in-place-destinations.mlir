// RUN: la-opt %s -split-input-file -la-in-place-destinations | FileCheck %s

// The state update of a chunk loop: the decay reads the carried state %s
// element-wise and writes a fresh tensor, the accumulation adds into it, and
// the output reads the old state afterwards. The chain moves after the
// output's read and the decay updates %s in place (it reads its `outs`).
// CHECK-LABEL: func.func @state_in_place
// CHECK-SAME: (%[[S0:[^:]*]]: tensor<4x8xf32>, %[[G:[^:]*]]: tensor<4x8xf32>, %[[K:[^:]*]]: tensor<16x4xf32>, %[[V:[^:]*]]: tensor<16x8xf32>, %[[Q:[^:]*]]: tensor<2x4xf32>)
// CHECK: scf.for %{{.*}} iter_args(%[[S:.*]] = %[[S0]], %[[O:.*]] = %{{.*}})
// CHECK: %[[OUT:.*]] = linalg.generic {{.*}} ins(%[[Q]], %[[S]] : tensor<2x4xf32>, tensor<4x8xf32>) outs(%[[O]] : tensor<2x8xf32>)
// CHECK: %[[DECAYED:.*]] = linalg.generic {{.*}} ins(%[[G]] : tensor<4x8xf32>) outs(%[[S]] : tensor<4x8xf32>)
// CHECK-NEXT: ^bb0(%[[GATE:.*]]: f32, %[[OLD:.*]]: f32):
// CHECK-NEXT: %[[NEW:.*]] = arith.mulf %[[OLD]], %[[GATE]]
// CHECK: %[[UPDATED:.*]] = linalg.generic {{.*}} ins(%[[K]], %[[V]] : tensor<16x4xf32>, tensor<16x8xf32>) outs(%[[DECAYED]] : tensor<4x8xf32>)
// CHECK-NEXT: ^bb0
// CHECK: scf.yield %[[UPDATED]], %[[OUT]]
#id = affine_map<(i, j) -> (i, j)>
#kt = affine_map<(k, v, t) -> (t, k)>
#vt = affine_map<(k, v, t) -> (t, v)>
#kv = affine_map<(k, v, t) -> (k, v)>
#q = affine_map<(r, v, k) -> (r, k)>
#s = affine_map<(r, v, k) -> (k, v)>
#o = affine_map<(r, v, k) -> (r, v)>
func.func @state_in_place(%s0: tensor<4x8xf32>, %g: tensor<4x8xf32>, %k: tensor<16x4xf32>, %v: tensor<16x8xf32>, %q: tensor<2x4xf32>) -> (tensor<4x8xf32>, tensor<2x8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %o0 = tensor.empty() : tensor<2x8xf32>
  %r:2 = scf.for %i = %c0 to %c4 step %c1 iter_args(%s = %s0, %o = %o0) -> (tensor<4x8xf32>, tensor<2x8xf32>) {
    %e = tensor.empty() : tensor<4x8xf32>
    %decayed = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%s, %g : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
    ^bb0(%x: f32, %y: f32, %out: f32):
      %m = arith.mulf %x, %y : f32
      linalg.yield %m : f32
    } -> tensor<4x8xf32>
    %updated = linalg.generic {indexing_maps = [#kt, #vt, #kv], iterator_types = ["parallel", "parallel", "reduction"]} ins(%k, %v : tensor<16x4xf32>, tensor<16x8xf32>) outs(%decayed : tensor<4x8xf32>) {
    ^bb0(%a: f32, %b: f32, %acc: f32):
      %m = arith.mulf %a, %b : f32
      %sum = arith.addf %acc, %m : f32
      linalg.yield %sum : f32
    } -> tensor<4x8xf32>
    %out = linalg.generic {indexing_maps = [#q, #s, #o], iterator_types = ["parallel", "parallel", "reduction"]} ins(%q, %s : tensor<2x4xf32>, tensor<4x8xf32>) outs(%o : tensor<2x8xf32>) {
    ^bb0(%a: f32, %b: f32, %acc: f32):
      %m = arith.mulf %a, %b : f32
      %sum = arith.addf %acc, %m : f32
      linalg.yield %sum : f32
    } -> tensor<2x8xf32>
    scf.yield %updated, %out : tensor<4x8xf32>, tensor<2x8xf32>
  }
  return %r#0, %r#1 : tensor<4x8xf32>, tensor<2x8xf32>
}

// -----

// When a later op of the chain also reads the old state, the state is not
// updated in place (that op would read the new one): the decay keeps a
// destination of its own.
// CHECK-LABEL: func.func @state_read_by_chain
// CHECK: scf.for %{{.*}} iter_args(%[[S:.*]] = %{{.*}})
// CHECK: %[[E:.*]] = bufferization.alloc_tensor() : tensor<4x8xf32>
// CHECK: %[[DECAYED:.*]] = linalg.generic {{.*}} ins(%[[S]], %{{.*}} : tensor<4x8xf32>, tensor<4x8xf32>) outs(%[[E]] : tensor<4x8xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[S]] : tensor<4x8xf32>) outs(%[[DECAYED]] : tensor<4x8xf32>)
#id2 = affine_map<(i, j) -> (i, j)>
func.func @state_read_by_chain(%s0: tensor<4x8xf32>, %g: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%s = %s0) -> (tensor<4x8xf32>) {
    %e = tensor.empty() : tensor<4x8xf32>
    %decayed = linalg.generic {indexing_maps = [#id2, #id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%s, %g : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
    ^bb0(%x: f32, %y: f32, %out: f32):
      %m = arith.mulf %x, %y : f32
      linalg.yield %m : f32
    } -> tensor<4x8xf32>
    %plus = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%s : tensor<4x8xf32>) outs(%decayed : tensor<4x8xf32>) {
    ^bb0(%x: f32, %acc: f32):
      %sum = arith.addf %acc, %x : f32
      linalg.yield %sum : f32
    } -> tensor<4x8xf32>
    scf.yield %plus : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

// -----

// One empty (and one fill) shared by two ops: each op gets its own, so
// that bufferization does not copy one buffer for the other. The empties
// that remain become alloc_tensor, which CSE cannot merge again.
// CHECK-LABEL: func.func @shared_destinations
// CHECK-SAME: (%[[X:[^:]*]]: tensor<8xf32>)
// CHECK: %[[ZERO:.*]] = arith.constant 0.0
// CHECK: %[[E0:.*]] = bufferization.alloc_tensor() : tensor<8xf32>
// CHECK: %[[F0:.*]] = linalg.fill ins(%[[ZERO]] : f32) outs(%[[E0]] : tensor<8xf32>)
// CHECK: %[[A:.*]] = linalg.generic {{.*}} ins(%[[X]] : tensor<8xf32>) outs(%[[F0]] : tensor<8xf32>)
// CHECK: %[[E1:.*]] = bufferization.alloc_tensor() : tensor<8xf32>
// CHECK: %[[F1:.*]] = linalg.fill ins(%[[ZERO]] : f32) outs(%[[E1]] : tensor<8xf32>)
// CHECK: %[[B:.*]] = linalg.generic {{.*}} ins(%[[X]] : tensor<8xf32>) outs(%[[F1]] : tensor<8xf32>)
// CHECK: %[[E2:.*]] = bufferization.alloc_tensor() : tensor<8xf32>
// CHECK: %[[C:.*]] = linalg.generic {{.*}} ins(%[[A]] : tensor<8xf32>) outs(%[[E2]] : tensor<8xf32>)
// CHECK: %[[E3:.*]] = bufferization.alloc_tensor() : tensor<8xf32>
// CHECK: %[[D:.*]] = linalg.generic {{.*}} ins(%[[B]] : tensor<8xf32>) outs(%[[E3]] : tensor<8xf32>)
// CHECK: return %[[C]], %[[D]]
#v = affine_map<(i) -> (i)>
func.func @shared_destinations(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  %a = linalg.generic {indexing_maps = [#v, #v], iterator_types = ["parallel"]} ins(%x : tensor<8xf32>) outs(%f : tensor<8xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %b = linalg.generic {indexing_maps = [#v, #v], iterator_types = ["parallel"]} ins(%x : tensor<8xf32>) outs(%f : tensor<8xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.subf %acc, %in : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %e2 = tensor.empty() : tensor<8xf32>
  %c = linalg.generic {indexing_maps = [#v, #v], iterator_types = ["parallel"]} ins(%a : tensor<8xf32>) outs(%e2 : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.mulf %in, %in : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %d = linalg.generic {indexing_maps = [#v, #v], iterator_types = ["parallel"]} ins(%b : tensor<8xf32>) outs(%e2 : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.negf %in : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  return %c, %d : tensor<8xf32>, tensor<8xf32>
}

// -----

// A chunk's output computed into an empty and then inserted into the task's
// output: the empty becomes the slice it is inserted into.
// CHECK-LABEL: func.func @insert_in_place
// CHECK: scf.for %[[N:.*]] = {{.*}} iter_args(%[[OUT:.*]] = %{{.*}})
// CHECK: %[[SLICE:.*]] = tensor.extract_slice %[[OUT]][%[[N]], 0] [1, 8] [1, 1]
// CHECK: %[[CHUNK:.*]] = linalg.generic {{.*}} outs(%[[SLICE]] : tensor<1x8xf32>)
// CHECK: tensor.insert_slice %[[CHUNK]] into %[[OUT]][%[[N]], 0] [1, 8] [1, 1]
#r = affine_map<(i, j) -> (i, j)>
func.func @insert_in_place(%x: tensor<4x8xf32>, %init: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %r = scf.for %n = %c0 to %c4 step %c1 iter_args(%out = %init) -> (tensor<4x8xf32>) {
    %row = tensor.extract_slice %x[%n, 0] [1, 8] [1, 1] : tensor<4x8xf32> to tensor<1x8xf32>
    %e = tensor.empty() : tensor<1x8xf32>
    %chunk = linalg.generic {indexing_maps = [#r, #r], iterator_types = ["parallel", "parallel"]} ins(%row : tensor<1x8xf32>) outs(%e : tensor<1x8xf32>) {
    ^bb0(%in: f32, %o: f32):
      %s = arith.mulf %in, %in : f32
      linalg.yield %s : f32
    } -> tensor<1x8xf32>
    %w = tensor.insert_slice %chunk into %out[%n, 0] [1, 8] [1, 1] : tensor<1x8xf32> into tensor<4x8xf32>
    scf.yield %w : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

// -----

// A result computed chunked ([2,4,8]) in an empty and returned collapsed
// ([8,8]): the empty gets the result's shape, expanded for the loop.
// CHECK-LABEL: func.func @result_in_its_shape
// CHECK: %[[WHOLE:.*]] = bufferization.alloc_tensor() : tensor<8x8xf32>
// CHECK: %[[CHUNKED:.*]] = tensor.expand_shape %[[WHOLE]] {{\[}}[0, 1], [2]] output_shape [2, 4, 8] : tensor<8x8xf32> into tensor<2x4x8xf32>
// CHECK: %[[R:.*]] = scf.forall (%{{.*}}) in (2) shared_outs(%{{.*}} = %[[CHUNKED]])
// CHECK: %[[C:.*]] = tensor.collapse_shape %[[R]]
// CHECK: return %[[C]]
#c = affine_map<(i, j) -> (i, j)>
func.func @result_in_its_shape(%x: tensor<2x4x8xf32>) -> tensor<8x8xf32> {
  %e = tensor.empty() : tensor<2x4x8xf32>
  %r = scf.forall (%b) in (2) shared_outs(%o = %e) -> (tensor<2x4x8xf32>) {
    %in = tensor.extract_slice %x[%b, 0, 0] [1, 4, 8] [1, 1, 1] : tensor<2x4x8xf32> to tensor<4x8xf32>
    %t = tensor.empty() : tensor<4x8xf32>
    %y = linalg.generic {indexing_maps = [#c, #c], iterator_types = ["parallel", "parallel"]} ins(%in : tensor<4x8xf32>) outs(%t : tensor<4x8xf32>) {
    ^bb0(%a: f32, %out: f32):
      %s = arith.addf %a, %a : f32
      linalg.yield %s : f32
    } -> tensor<4x8xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %y into %o[%b, 0, 0] [1, 4, 8] [1, 1, 1] : tensor<4x8xf32> into tensor<2x4x8xf32>
    }
  }
  %c = tensor.collapse_shape %r [[0, 1], [2]] : tensor<2x4x8xf32> into tensor<8x8xf32>
  return %c : tensor<8x8xf32>
}
