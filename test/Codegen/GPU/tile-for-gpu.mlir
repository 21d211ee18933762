// RUN: la-opt %s -split-input-file -la-tile-for-gpu="tensor-cores stage-inputs=0" -canonicalize -cse | FileCheck %s --check-prefix=TC
// RUN: la-opt %s -split-input-file -la-tile-for-gpu=stage-inputs=0 -canonicalize -cse | FileCheck %s
// RUN: la-opt %s -split-input-file -la-tile-for-gpu="stage-inputs=0 state-in-shared-memory" -canonicalize -cse | FileCheck %s --check-prefix=STATE

// One task per batch: the task forall maps onto blocks; the fill and the
// matmul become foralls over their 16 x 4 output elements, mapped onto
// threads with the innermost loop fastest (linear_dim_0); the matmul's
// reduction stays inside one iteration.
// CHECK-LABEL: func.func @matmul_per_task
// CHECK-SAME: (%[[A:.*]]: tensor<2x16x8xf32>, %[[B:.*]]: tensor<2x8x4xf32>)
// CHECK: scf.forall (%[[T:.*]]) in (2) shared_outs(%[[OUT:.*]] = %{{.*}})
// CHECK: %[[AS:.*]] = tensor.extract_slice %[[A]][%[[T]], 0, 0] [1, 16, 8]
// CHECK: %[[BS:.*]] = tensor.extract_slice %[[B]][%[[T]], 0, 0] [1, 8, 4]
// CHECK: %[[ZERO:.*]] = scf.forall (%[[I:.*]], %[[J:.*]]) in (16, 4) shared_outs(%[[Z:.*]] = %{{.*}})
// CHECK: linalg.fill {{.*}} -> tensor<1x1xf32>
// CHECK: } {mapping = [#gpu.thread<linear_dim_1>, #gpu.thread<linear_dim_0>]}
// CHECK: %[[PROD:.*]] = scf.forall (%[[I2:.*]], %[[J2:.*]]) in (16, 4) shared_outs(%[[P:.*]] = %[[ZERO]])
// CHECK: %[[AR:.*]] = tensor.extract_slice %[[AS]][%[[I2]], 0] [1, 8]
// CHECK: %[[BC:.*]] = tensor.extract_slice %[[BS]][0, %[[J2]]] [8, 1]
// CHECK: %[[PE:.*]] = tensor.extract_slice %[[P]][%[[I2]], %[[J2]]] [1, 1]
// CHECK: linalg.matmul ins(%[[AR]], %[[BC]] : tensor<1x8xf32>, tensor<8x1xf32>) outs(%[[PE]] : tensor<1x1xf32>)
// CHECK: } {mapping = [#gpu.thread<linear_dim_1>, #gpu.thread<linear_dim_0>]}
// CHECK: tensor.parallel_insert_slice %[[PROD]] into %[[OUT]][%[[T]], 0, 0] [1, 16, 4]
// CHECK: } {mapping = [#gpu.block<x>]}
func.func @matmul_per_task(%a: tensor<2x16x8xf32>, %b: tensor<2x8x4xf32>)
    -> tensor<2x16x4xf32> {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<2x16x4xf32>
  %r = scf.forall (%t) in (2) shared_outs(%out = %init) -> tensor<2x16x4xf32> {
    %as = tensor.extract_slice %a[%t, 0, 0] [1, 16, 8] [1, 1, 1]
        : tensor<2x16x8xf32> to tensor<16x8xf32>
    %bs = tensor.extract_slice %b[%t, 0, 0] [1, 8, 4] [1, 1, 1]
        : tensor<2x8x4xf32> to tensor<8x4xf32>
    %e = tensor.empty() : tensor<16x4xf32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<16x4xf32>) -> tensor<16x4xf32>
    %p = linalg.matmul ins(%as, %bs : tensor<16x8xf32>, tensor<8x4xf32>)
                       outs(%z : tensor<16x4xf32>) -> tensor<16x4xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %p into %out[%t, 0, 0] [1, 16, 4] [1, 1, 1]
          : tensor<16x4xf32> into tensor<2x16x4xf32>
    }
  }
  return %r : tensor<2x16x4xf32>
}

// -----

// Three task dimensions map onto x, y and z. An op whose parallel
// dimensions are all units (a reduction to one element) gets a
// one-iteration forall: one thread runs it.
// CHECK-LABEL: func.func @unit_op
// CHECK: scf.forall (%{{.*}}, %{{.*}}, %{{.*}}) in (2, 3, 4)
// CHECK: scf.forall (%{{.*}}) in (1)
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]
// CHECK: } {mapping = [#gpu.thread<linear_dim_0>]}
// CHECK: } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
func.func @unit_op(%x: tensor<2x3x4x8xf32>) -> tensor<2x3x4x1xf32> {
  %init = tensor.empty() : tensor<2x3x4x1xf32>
  %r = scf.forall (%i, %j, %k) in (2, 3, 4) shared_outs(%out = %init)
      -> tensor<2x3x4x1xf32> {
    %row = tensor.extract_slice %x[%i, %j, %k, 0] [1, 1, 1, 8] [1, 1, 1, 1]
        : tensor<2x3x4x8xf32> to tensor<1x8xf32>
    %acc = tensor.extract_slice %out[%i, %j, %k, 0] [1, 1, 1, 1] [1, 1, 1, 1]
        : tensor<2x3x4x1xf32> to tensor<1xf32>
    %sum = linalg.generic {
        indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>,
                         affine_map<(d0, d1) -> (d0)>],
        iterator_types = ["parallel", "reduction"]}
        ins(%row : tensor<1x8xf32>) outs(%acc : tensor<1xf32>) {
    ^bb0(%in: f32, %o: f32):
      %s = arith.addf %in, %o : f32
      linalg.yield %s : f32
    } -> tensor<1xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %sum into %out[%i, %j, %k, 0] [1, 1, 1, 1] [1, 1, 1, 1]
          : tensor<1xf32> into tensor<2x3x4x1xf32>
    }
  }
  return %r : tensor<2x3x4x1xf32>
}

// -----

// With tensor cores, the f32 matmul (32 x 16 x 16: multiples of 16, 8, 16) is
// tiled into 16 x 8 output tiles over the whole reduction, mapped onto
// warps; the fill stays on threads.
// TC-LABEL: func.func @tensor_core_tiles
// TC: %[[ZERO:.*]] = scf.forall (%{{.*}}, %{{.*}}) in (32, 16)
// TC: } {mapping = [#gpu.thread<linear_dim_1>, #gpu.thread<linear_dim_0>]}
// TC: scf.forall (%[[I:.*]], %[[J:.*]]) = (0, 0) to (32, 16) step (16, 8) shared_outs(%[[P:.*]] = %[[ZERO]])
// TC: %[[AT:.*]] = tensor.extract_slice %{{.*}}[%[[I]], 0] [16, 16]
// TC: %[[BT:.*]] = tensor.extract_slice %{{.*}}[0, %[[J]]] [16, 8]
// TC: %[[CT:.*]] = tensor.extract_slice %[[P]][%[[I]], %[[J]]] [16, 8]
// TC: linalg.matmul ins(%[[AT]], %[[BT]] : tensor<16x16xf32>, tensor<16x8xf32>) outs(%[[CT]] : tensor<16x8xf32>)
// TC: } {mapping = [#gpu.warp<linear_dim_1>, #gpu.warp<linear_dim_0>]}
// A matmul whose rows are not a multiple of 16 stays on threads.
// TC: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<1x16xf32>, tensor<16x1xf32>)
// TC: } {mapping = [#gpu.thread<linear_dim_1>, #gpu.thread<linear_dim_0>]}
func.func @tensor_core_tiles(%a: tensor<32x16xf32>, %b: tensor<16x16xf32>,
                             %c: tensor<12x16xf32>)
    -> (tensor<32x16xf32>, tensor<12x16xf32>) {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<32x16xf32>
  %init2 = tensor.empty() : tensor<12x16xf32>
  %r:2 = scf.forall (%t) in (1) shared_outs(%out = %init, %out2 = %init2)
      -> (tensor<32x16xf32>, tensor<12x16xf32>) {
    %e = tensor.empty() : tensor<32x16xf32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<32x16xf32>) -> tensor<32x16xf32>
    %p = linalg.matmul ins(%a, %b : tensor<32x16xf32>, tensor<16x16xf32>)
                       outs(%z : tensor<32x16xf32>) -> tensor<32x16xf32>
    %p2 = linalg.matmul ins(%c, %b : tensor<12x16xf32>, tensor<16x16xf32>)
                        outs(%out2 : tensor<12x16xf32>) -> tensor<12x16xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %p into %out[0, 0] [32, 16] [1, 1]
          : tensor<32x16xf32> into tensor<32x16xf32>
      tensor.parallel_insert_slice %p2 into %out2[0, 0] [12, 16] [1, 1]
          : tensor<12x16xf32> into tensor<12x16xf32>
    }
  }
  return %r#0, %r#1 : tensor<32x16xf32>, tensor<12x16xf32>
}

// -----

// A loop-carried state whose initial value is written into the task's slice
// of an output (the final state). By default the fill writes that slice, so
// the state lives in the output's global memory. With
// state-in-shared-memory the fill writes a fresh tensor instead, so that the
// state gets a buffer of the task (shared memory) and the output slice is
// written once, by the insert after the loop; a producer that reads its
// destination (the accumulating generic) keeps it.
// CHECK-LABEL: func.func @loop_state_in_task
// CHECK: scf.forall (%[[T:.*]]) in (2) shared_outs(%[[OUT:.*]] = %{{.*}}, %{{.*}} = %{{.*}})
// CHECK: %[[SLICE:.*]] = tensor.extract_slice %[[OUT]][%[[T]], 0, 0] [1, 4, 4]
// CHECK: scf.forall ({{.*}}) in (4, 4) shared_outs(%{{.*}} = %[[SLICE]])
// CHECK: linalg.fill
// STATE-LABEL: func.func @loop_state_in_task
// STATE: scf.forall (%[[T:.*]]) in (2) shared_outs(%[[OUT:.*]] = %{{.*}}, %[[OUT2:.*]] = %{{.*}})
// STATE: %[[FRESH:.*]] = tensor.empty() : tensor<4x4xf32>
// STATE: %[[ZERO:.*]] = scf.forall ({{.*}}) in (4, 4) shared_outs(%{{.*}} = %[[FRESH]])
// STATE: linalg.fill
// STATE: %[[S:.*]] = scf.for {{.*}} iter_args(%{{.*}} = %[[ZERO]])
// STATE: %[[ACC:.*]] = tensor.extract_slice %[[OUT2]][%[[T]], 0, 0] [1, 4, 4]
// STATE: scf.forall ({{.*}}) in (4, 4) shared_outs(%{{.*}} = %[[ACC]])
// STATE: linalg.generic
// STATE: tensor.parallel_insert_slice %[[S]] into %[[OUT]][%[[T]], 0, 0] [1, 4, 4]
func.func @loop_state_in_task(%x: tensor<2x4x4xf32>)
    -> (tensor<2x4x4xf32>, tensor<2x4x4xf32>) {
  %zero = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %init = tensor.empty() : tensor<2x4x4xf32>
  %r:2 = scf.forall (%t) in (2) shared_outs(%out = %init, %out2 = %init)
      -> (tensor<2x4x4xf32>, tensor<2x4x4xf32>) {
    %xs = tensor.extract_slice %x[%t, 0, 0] [1, 4, 4] [1, 1, 1]
        : tensor<2x4x4xf32> to tensor<4x4xf32>
    %slice = tensor.extract_slice %out[%t, 0, 0] [1, 4, 4] [1, 1, 1]
        : tensor<2x4x4xf32> to tensor<4x4xf32>
    %z = linalg.fill ins(%zero : f32) outs(%slice : tensor<4x4xf32>) -> tensor<4x4xf32>
    %s = scf.for %i = %c0 to %c3 step %c1 iter_args(%acc = %z) -> tensor<4x4xf32> {
      %next = linalg.add ins(%acc, %xs : tensor<4x4xf32>, tensor<4x4xf32>)
                         outs(%acc : tensor<4x4xf32>) -> tensor<4x4xf32>
      scf.yield %next : tensor<4x4xf32>
    }
    %slice2 = tensor.extract_slice %out2[%t, 0, 0] [1, 4, 4] [1, 1, 1]
        : tensor<2x4x4xf32> to tensor<4x4xf32>
    %doubled = linalg.generic {
        indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>,
                         affine_map<(d0, d1) -> (d0, d1)>],
        iterator_types = ["parallel", "parallel"]}
        ins(%xs : tensor<4x4xf32>) outs(%slice2 : tensor<4x4xf32>) {
    ^bb0(%in: f32, %o: f32):
      %sum = arith.addf %in, %o : f32
      linalg.yield %sum : f32
    } -> tensor<4x4xf32>
    %s2 = scf.for %i = %c0 to %c3 step %c1 iter_args(%acc = %doubled) -> tensor<4x4xf32> {
      %next = linalg.add ins(%acc, %xs : tensor<4x4xf32>, tensor<4x4xf32>)
                         outs(%acc : tensor<4x4xf32>) -> tensor<4x4xf32>
      scf.yield %next : tensor<4x4xf32>
    }
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %s into %out[%t, 0, 0] [1, 4, 4] [1, 1, 1]
          : tensor<4x4xf32> into tensor<2x4x4xf32>
      tensor.parallel_insert_slice %s2 into %out2[%t, 0, 0] [1, 4, 4] [1, 1, 1]
          : tensor<4x4xf32> into tensor<2x4x4xf32>
    }
  }
  return %r#0, %r#1 : tensor<2x4x4xf32>, tensor<2x4x4xf32>
}
