// RUN: la-opt %s -split-input-file -la-fuse-recurrence="chunk-size=16 threads=2 pack-inputs=0 peel-tail=1" | FileCheck %s
// RUN: la-opt %s -split-input-file -la-fuse-recurrence="chunk-size=16 threads=4 pack-inputs=0 peel-tail=1" | FileCheck %s --check-prefix=FEW
// RUN: la-opt %s -split-input-file -la-fuse-recurrence="chunk-size=16 mode=materialized pack-inputs=0 peel-tail=1" | FileCheck %s --check-prefix=MAT
// RUN: not la-opt %s -split-input-file -la-fuse-recurrence="mode=sometimes" 2>&1 | FileCheck %s --check-prefix=BADMODE
// RUN: not la-opt %s -split-input-file -la-fuse-recurrence="chunk-size=0" 2>&1 | FileCheck %s --check-prefix=BADCHUNK
// RUN: la-opt %s -split-input-file -la-fuse-recurrence="chunk-size=16 threads=4 value-tile=4 pack-inputs=0 peel-tail=1" | FileCheck %s --check-prefix=VT
// RUN: not la-opt %s -split-input-file -la-fuse-recurrence="value-tile=-1" 2>&1 | FileCheck %s --check-prefix=BADVT
// RUN: not la-opt %s -split-input-file -la-fuse-recurrence="threads=-2" 2>&1 | FileCheck %s --check-prefix=BADTHREADS
// RUN: la-opt %s -split-input-file -la-fuse-recurrence="chunk-size=16 threads=2 pack-inputs=true" | FileCheck %s --check-prefix=PACK
// RUN: la-opt %s -split-input-file -la-fuse-recurrence="chunk-size=16 threads=2 pack-inputs=0 peel-tail=0" | FileCheck %s --check-prefix=PAD
// RUN: la-opt %s -split-input-file -la-fuse-recurrence="threads=2 chunk=0 peel-tail=1" | FileCheck %s --check-prefix=TASKS

// BADMODE: for the --mode option: Cannot find option named 'sometimes'!
// BADCHUNK: la-fuse-recurrence: 'chunk-size' must be in [1, 65536], got 0
// BADVT: la-fuse-recurrence: 'value-tile' must be >= 0, got -1
// BADTHREADS: la-fuse-recurrence: 'threads' must be >= 0, got -2

// Value tiles of 4 columns: V = 8 gives two tiles per (batch, value head),
// so 1 x 2 x 2 = 4 tasks reach threads=4 (fused). The task forall is
// normalized (task indices); each task carries a [1,1,K,4] state and reads
// and writes its 4 value columns.
// VT-LABEL: func.func @gla
// VT: scf.forall (%[[B:.*]], %[[H:.*]], %[[T:.*]]) in (1, 2, 2) shared_outs(%[[OUT:.*]] = %{{.*}}, %[[FIN:.*]] = %{{.*}})
// VT: %[[COL:.*]] = affine.apply #{{.*}}(%[[T]])
// VT: %[[TASK:.*]] = tensor.extract_slice %[[OUT]][%[[B]], 0, %[[H]], %[[COL]]] [1, 40, 1, 4]
// VT: scf.for {{.*}} iter_args(%{{.*}} = %[[TASK]], %{{.*}} = %{{.*}}) -> (tensor<1x40x1x4xf32>, tensor<1x1x4x4xf32>)
// VT: tensor.extract_slice %{{.*}}[%[[B]], %{{.*}}, %[[H]], %{{.*}}] [1, %{{.*}}, 1, 4]
// VT: scf.forall.in_parallel
// VT: tensor.parallel_insert_slice %{{.*}} into %[[OUT]][%[[B]], 0, %[[H]], %[[COL]]] [1, 40, 1, 4]
// VT: tensor.parallel_insert_slice %{{.*}} into %[[FIN]][%[[B]], %[[H]], 0, %[[COL]]] [1, 1, 4, 4]
// VT: mapping = [#la.task<0>, #la.task<1>, #la.task<2>]

// Two (batch, value head) tasks and two threads: fused. The recurrence is
// tiled by upstream tiling: an scf.forall over (batch, value head), mapped
// to #la.task, holds an scf.for over tokens in steps of 16 that carries the
// [1,1,K,V] state (the recurrence's accumulator); each chunk is decomposed
// into the level-2 ops on one chunk of one head, [1,1,C,1,...]. T = 40 is
// not a multiple of 16: the last, partial chunk is peeled into a loop of
// its own, so the main loop's chunks have 16 tokens and the tail's 8 (both
// static; nothing is padded).
// CHECK-LABEL: func.func @gla
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: tensor<1x40x2x4xf32>)
// CHECK-NOT: tensor.pad
// CHECK: %[[RES:.*]]:2 = scf.forall (%[[B:.*]], %[[H:.*]]) in (1, 2) shared_outs(%[[OUT:.*]] = %{{.*}}, %[[FIN:.*]] = %{{.*}}) -> (tensor<1x40x2x8xf32>, tensor<1x2x4x8xf32>)
// CHECK: %[[TASK:.*]] = tensor.extract_slice %[[OUT]][%[[B]], 0, %[[H]], 0] [1, 40, 1, 8]
// CHECK: %[[LOOP:.*]]:2 = scf.for %[[N:.*]] = %{{.*}} to %[[C32:.*]] step %[[C16:.*]] iter_args(%[[O:.*]] = %[[TASK]], %[[S:.*]] = %{{.*}}) -> (tensor<1x40x1x8xf32>, tensor<1x1x4x8xf32>)
// CHECK: %[[QN:.*]] = tensor.extract_slice %[[Q]][%[[B]], %[[N]], %[[H]], 0] [1, %[[C16]], 1, 4]
// CHECK: %[[GN:.*]] = tensor.extract_slice %[[G]][%[[B]], %[[N]], %[[H]], 0] [1, %[[C16]], 1, 4]
// CHECK: %[[QS:.*]] = tensor.cast %[[QN]] : tensor<1x?x1x4xf32> to tensor<1x16x1x4xf32>
// CHECK: %[[GS:.*]] = tensor.cast %[[GN]] : tensor<1x?x1x4xf32> to tensor<1x16x1x4xf32>
// CHECK: %[[QC:.*]] = tensor.expand_shape %[[QS]] {{.*}} into tensor<1x1x16x1x4xf32>
// CHECK: %[[GC:.*]] = tensor.expand_shape %[[GS]] {{.*}} into tensor<1x1x16x1x4xf32>
// CHECK: %[[CUM:.*]] = la.chunk_cumsum %[[GC]] : tensor<1x1x16x1x4xf32> -> tensor<1x1x16x1x4xf32>
// CHECK: %[[STATES:.*]], %[[NEXT:.*]] = la.chunk_state_scan %{{.*}}, %{{.*}} gates(%[[CUM]] : {{.*}}) initial_state(%[[S]] : tensor<1x1x4x8xf32>)
// CHECK: %[[INTRA:.*]] = la.chunk_intra %[[QC]]
// CHECK: %[[ON:.*]] = la.chunk_inter %[[QC]], %[[STATES]], %[[INTRA]]
// CHECK: %[[OT:.*]] = tensor.collapse_shape %[[ON]] {{.*}} into tensor<1x16x1x8xf32>
// CHECK: %[[OD:.*]] = tensor.cast %[[OT]]
// CHECK: %[[OW:.*]] = tensor.insert_slice %[[OD]] into %[[O]][0, %[[N]], 0, 0] [1, %[[C16]], 1, 8]
// CHECK: scf.yield %[[OW]], %[[NEXT]]
// CHECK: } {la.fused_chunk_loop}
// CHECK: %[[TAIL:.*]]:2 = scf.for %[[M:.*]] = %[[C32]] to %{{.*}} step %[[C16]] iter_args(%{{.*}} = %[[LOOP]]#0, %{{.*}} = %[[LOOP]]#1)
// CHECK: %[[QT:.*]] = tensor.extract_slice %[[Q]][%[[B]], %[[M]], %[[H]], 0]
// CHECK: tensor.cast %[[QT]] : tensor<1x?x1x4xf32> to tensor<1x8x1x4xf32>
// CHECK: la.chunk_cumsum %{{.*}} : tensor<1x1x8x1x4xf32> -> tensor<1x1x8x1x4xf32>
// CHECK: scf.forall.in_parallel
// CHECK: tensor.parallel_insert_slice %[[TAIL]]#0 into %[[OUT]][%[[B]], 0, %[[H]], 0] [1, 40, 1, 8]
// CHECK: tensor.parallel_insert_slice %[[TAIL]]#1 into %[[FIN]][%[[B]], %[[H]], 0, 0] [1, 1, 4, 8]
// CHECK: mapping = [#la.task<0>, #la.task<1>]
// CHECK: return %[[RES]]#0, %[[RES]]#1

// pack-inputs=0 (the GPU pipeline's form): full chunks read their slices
// in place, but a partial chunk is still packed into C rows in the loop
// (as with pack-inputs: one static chunk program), never padded as a whole
// tensor outside the tasks.
// PAD-LABEL: func.func @gla
// PAD-NOT: tensor.pad
// PAD: scf.forall {{.*}} -> (tensor<1x40x2x8xf32>, tensor<1x2x4x8xf32>)
// PAD: scf.for %[[N:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args({{.*}}) -> (tensor<1x40x1x8xf32>, tensor<1x1x4x8xf32>)
// PAD: %[[SIZE:.*]] = affine.min #{{.*}}(%[[N]])
// PAD: %[[QN:.*]] = tensor.extract_slice %{{.*}}[%{{.*}}, %[[N]], %{{.*}}, 0] [1, %[[SIZE]], 1, 4]
// PAD: %[[QE:.*]] = tensor.empty() : tensor<1x16x1x4xf32>
// PAD: tensor.insert_slice %[[QN]] into %[[QE]][0, 0, 0, 0] [1, %[[SIZE]], 1, 4]
// PAD: linalg.fill
// PAD: la.chunk_intra {{.*}} -> tensor<1x1x16x1x8xf32>
// PAD: } {la.fused_chunk_loop}
// PAD-NOT: tensor.extract_slice
// PAD: return

// chunk=0 (the token loops' threads): the same tasks, each holding one
// recurrence over all of its tokens; nothing is chunked.
// TASKS-LABEL: func.func @gla
// TASKS-SAME: (%[[Q:[^:]*]]: tensor<1x40x2x4xf32>
// TASKS: scf.forall (%[[B:.*]], %[[H:.*]]) in (1, 2) shared_outs(%[[OUT:.*]] = %{{.*}}, %[[FIN:.*]] = %{{.*}})
// TASKS-NOT: scf.for
// TASKS: %[[QT:.*]] = tensor.extract_slice %[[Q]][%[[B]], 0, %[[H]], 0] [1, 40, 1, 4]
// TASKS: %[[O:.*]], %[[S:.*]] = la.recurrence decay(channel) low_rank(none) %[[QT]], {{.*}} -> tensor<1x40x1x8xf32>, tensor<1x1x4x8xf32>
// TASKS-NOT: la.chunk_
// TASKS: tensor.parallel_insert_slice %[[O]] into %[[OUT]][%[[B]], 0, %[[H]], 0] [1, 40, 1, 8]
// TASKS: tensor.parallel_insert_slice %[[S]] into %[[FIN]][%[[B]], %[[H]], 0, 0] [1, 1, 4, 8]
// TASKS: mapping = [#la.task<0>, #la.task<1>]

// With pack-inputs (and no peel-tail: the defaults) each chunk's slice of
// an input is packed into a [1,16,1,...] tensor, which the chunk's ops read
// instead of the strided slice; the rows after the chunk's tokens (the last
// chunk's 8) are zero tokens. One static chunk program serves every chunk;
// its output is sliced back to the chunk's tokens.
// PACK-LABEL: func.func @gla
// PACK-NOT: tensor.pad
// PACK: scf.for %[[N:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[O:.*]] = %{{.*}}, %{{.*}} = %{{.*}})
// PACK: %[[SIZE:.*]] = affine.min #{{.*}}(%[[N]])
// PACK: %[[QN:.*]] = tensor.extract_slice %{{.*}}[%{{.*}}, %[[N]], %{{.*}}, 0] [1, %[[SIZE]], 1, 4]
// PACK: %[[ROWS:.*]] = affine.apply #{{.*}}()[%[[SIZE]]]
// PACK: %[[QE:.*]] = tensor.empty() : tensor<1x16x1x4xf32>
// PACK: %[[QR:.*]] = tensor.insert_slice %[[QN]] into %[[QE]][0, 0, 0, 0] [1, %[[SIZE]], 1, 4]
// PACK: %[[QZ:.*]] = tensor.extract_slice %[[QR]][0, %[[SIZE]], 0, 0] [1, %[[ROWS]], 1, 4]
// PACK: %[[QF:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[QZ]] : tensor<1x?x1x4xf32>)
// PACK: %[[QP:.*]] = tensor.insert_slice %[[QF]] into %[[QR]][0, %[[SIZE]], 0, 0] [1, %[[ROWS]], 1, 4] {{.*}} into tensor<1x16x1x4xf32>
// PACK: %[[QC:.*]] = tensor.expand_shape %[[QP]]
// PACK: la.chunk_intra %[[QC]]
// PACK: %[[ON:.*]] = la.chunk_inter %[[QC]]
// PACK: %[[OT:.*]] = tensor.collapse_shape %[[ON]] {{.*}} into tensor<1x16x1x8xf32>
// PACK: %[[OS:.*]] = tensor.extract_slice %[[OT]][0, 0, 0, 0] [1, %[[SIZE]], 1, 8]
// PACK: tensor.insert_slice %[[OS]] into %[[O]][0, %[[N]], 0, 0] [1, %[[SIZE]], 1, 8]
// PACK: } {la.fused_chunk_loop}
// PACK-NOT: scf.for %
// PACK: return

// Four threads for two tasks, or materialized: left to la-chunk.
// FEW-LABEL: func.func @gla
// FEW-NOT: scf.forall
// FEW: la.recurrence decay(channel)
// MAT-LABEL: func.func @gla
// MAT-NOT: scf.forall
// MAT: la.recurrence decay(channel)
func.func @gla(%q: tensor<1x40x2x4xf32>, %k: tensor<1x40x2x4xf32>, %v: tensor<1x40x2x8xf32>, %g: tensor<1x40x2x4xf32>) -> (tensor<1x40x2x8xf32>, tensor<1x2x4x8xf32>) {
  %oi0 = tensor.empty() : tensor<1x40x2x8xf32>
  %zs0 = arith.constant dense<0.0> : tensor<1x2x4x8xf32>
  %o, %s = la.recurrence decay(channel) low_rank(none) %q, %k, %v g(%g : tensor<1x40x2x4xf32>) outs(%oi0, %zs0 : tensor<1x40x2x8xf32>, tensor<1x2x4x8xf32>) {scale = 0.5 : f32} : tensor<1x40x2x4xf32>, tensor<1x40x2x4xf32>, tensor<1x40x2x8xf32> -> tensor<1x40x2x8xf32>, tensor<1x2x4x8xf32>
  return %o, %s : tensor<1x40x2x8xf32>, tensor<1x2x4x8xf32>
}

// -----

// Grouped value heads (HV = 2H) with an initial state: four tasks; a task
// reads key head hv / 2, its own value head and its tile of the initial
// state (from the argument: the final state is written to a fresh tensor);
// the delta rule's WY form runs per chunk.
// CHECK-LABEL: func.func @grouped_delta
// CHECK-SAME: %[[S0:[^:]*]]: tensor<2x4x4x8xf32>)
// CHECK: scf.forall (%[[B:.*]], %[[HV:.*]]) in (2, 4)
// CHECK: %[[INIT:.*]] = tensor.extract_slice %[[S0]][%[[B]], %[[HV]], 0, 0] [1, 1, 4, 8]
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %[[INIT]])
// CHECK: %[[KH:.*]] = affine.apply #{{.*}}(%[[HV]])
// CHECK: tensor.extract_slice %{{.*}}[%[[B]], %{{.*}}, %[[KH]], 0] [1, 16, 1, 4]
// CHECK: tensor.extract_slice %{{.*}}[%[[B]], %{{.*}}, %[[HV]], 0] [1, 16, 1, 8]
// CHECK: la.chunk_wy
// CHECK: la.chunk_state_scan
// Eight tasks are enough for four threads.
// FEW-LABEL: func.func @grouped_delta
// FEW: scf.forall
// MAT-LABEL: func.func @grouped_delta
// MAT-NOT: scf.forall
// MAT: la.recurrence decay(none) low_rank(delta)
func.func @grouped_delta(%q: tensor<2x16x2x4xf32>, %k: tensor<2x16x2x4xf32>, %v: tensor<2x16x4x8xf32>, %b: tensor<2x16x2xf32>, %s0: tensor<2x4x4x8xf32>) -> (tensor<2x16x4x8xf32>, tensor<2x4x4x8xf32>) {
  %oi1 = tensor.empty() : tensor<2x16x4x8xf32>
  %o, %s = la.recurrence decay(none) low_rank(delta) %q, %k, %v beta(%b : tensor<2x16x2xf32>) outs(%oi1, %s0 : tensor<2x16x4x8xf32>, tensor<2x4x4x8xf32>) {scale = 0.5 : f32} : tensor<2x16x2x4xf32>, tensor<2x16x2x4xf32>, tensor<2x16x4x8xf32> -> tensor<2x16x4x8xf32>, tensor<2x4x4x8xf32>
  return %o, %s : tensor<2x16x4x8xf32>, tensor<2x4x4x8xf32>
}

// -----

// Packed sequences: an scf.for over the sequences, each the recurrence of
// one sequence (its tokens [start, end) as a dynamic T, its row of the
// initial state) fused like any other: (batch, head) tasks, a chunk loop
// and its peeled tail. Tokens outside every sequence stay zero. With fewer
// tasks than threads (FEW) or materialized (MAT), la-chunk takes it whole.
// CHECK-LABEL: func.func @varlen
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}}, %[[CU:[^:]*]]: tensor<4xi32>)
// CHECK: %[[ZERO:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<1x50x2x4xf32>)
// CHECK: %[[SEQ:.*]]:2 = scf.for %[[N:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[OA:.*]] = %[[ZERO]], %[[SA:.*]] = %{{.*}})
// CHECK: tensor.extract %[[CU]][%[[N]]]
// CHECK: scf.forall (%{{.*}}, %{{.*}}) in (1, 2) {{.*}} -> (tensor<1x?x2x4xf32>, tensor<1x2x4x4xf32>)
// CHECK: scf.for
// CHECK: tensor.extract_slice %[[Q]][%{{.*}}, %{{.*}}, %{{.*}}, 0] [1, %{{.*}}, 1, 4]
// CHECK: la.chunk_state_scan
// CHECK: scf.for
// CHECK: la.chunk_state_scan
// CHECK: %[[OW:.*]] = tensor.insert_slice %{{.*}} into %[[OA]][0, %{{.*}}, 0, 0] [1, %{{.*}}, 2, 4]
// CHECK: %[[SW:.*]] = tensor.insert_slice %{{.*}} into %[[SA]][%[[N]], 0, 0, 0] [1, 2, 4, 4]
// CHECK: scf.yield %[[OW]], %[[SW]]
// CHECK: return %[[SEQ]]#0
// FEW-LABEL: func.func @varlen
// FEW-NOT: scf.forall
// FEW: la.recurrence {{.*}} cu_seqlens
// MAT-LABEL: func.func @varlen
// MAT-NOT: scf.forall
// MAT: la.recurrence {{.*}} cu_seqlens
func.func @varlen(%q: tensor<1x50x2x4xf32>, %k: tensor<1x50x2x4xf32>, %v: tensor<1x50x2x4xf32>, %cu: tensor<4xi32>) -> tensor<1x50x2x4xf32> {
  %oi2 = tensor.empty() : tensor<1x50x2x4xf32>
  %zs2 = arith.constant dense<0.0> : tensor<3x2x4x4xf32>
  %o, %fs2 = la.recurrence decay(none) low_rank(none) %q, %k, %v cu_seqlens(%cu : tensor<4xi32>) outs(%oi2, %zs2 : tensor<1x50x2x4xf32>, tensor<3x2x4x4xf32>) {scale = 0.5 : f32} : tensor<1x50x2x4xf32>, tensor<1x50x2x4xf32>, tensor<1x50x2x4xf32> -> tensor<1x50x2x4xf32>, tensor<3x2x4x4xf32>
  return %o : tensor<1x50x2x4xf32>
}

// -----

// Producers: the feature map of q (elu + 1) and the gate activation (a
// log-sigmoid) are used by nothing else, so each chunk computes them on the
// [1,16,1,4] tile it reads; T = 32 is a multiple of the chunk size.
// CHECK-LABEL: func.func @producers
// CHECK-SAME: (%[[X:[^:]*]]: tensor<1x32x2x4xf32>, %{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}}, %[[GRAW:[^:]*]]: tensor<1x32x2x4xf32>)
// CHECK-NOT: linalg.generic
// CHECK: scf.forall
// CHECK: scf.for %[[N:.*]] = {{.*}} iter_args
// CHECK: %[[XT:.*]] = tensor.extract_slice %[[X]][%{{.*}}, %[[N]], %{{.*}}, 0] [1, 16, 1, 4]
// CHECK: %[[QT:.*]] = linalg.generic {{.*}} ins(%[[XT]] : tensor<1x16x1x4xf32>) outs(%{{.*}} : tensor<1x16x1x4xf32>)
// CHECK: math.exp
// CHECK: %[[GT:.*]] = tensor.extract_slice %[[GRAW]][%{{.*}}, %[[N]], %{{.*}}, 0] [1, 16, 1, 4]
// CHECK: %[[GA:.*]] = linalg.generic {{.*}} ins(%[[GT]] : tensor<1x16x1x4xf32>)
// CHECK: math.log1p
// CHECK: %[[Q:.*]] = tensor.expand_shape %[[QT]] {{.*}} into tensor<1x1x16x1x4xf32>
// CHECK: la.chunk_cumsum
// CHECK: la.chunk_intra %[[Q]]
// MAT-LABEL: func.func @producers
// MAT: linalg.generic
// MAT: linalg.generic
// MAT: la.recurrence
#id = affine_map<(b, t, h, k) -> (b, t, h, k)>
func.func @producers(%x: tensor<1x32x2x4xf32>, %k: tensor<1x32x2x4xf32>, %v: tensor<1x32x2x8xf32>, %graw: tensor<1x32x2x4xf32>) -> (tensor<1x32x2x8xf32>, tensor<1x2x4x8xf32>) {
  %e = tensor.empty() : tensor<1x32x2x4xf32>
  %one = arith.constant 1.0 : f32
  %zero = arith.constant 0.0 : f32
  %q = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%x : tensor<1x32x2x4xf32>) outs(%e : tensor<1x32x2x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %pos = arith.cmpf ogt, %a, %zero : f32
    %ex = math.exp %a : f32
    %elu = arith.subf %ex, %one : f32
    %f = arith.select %pos, %a, %elu : f32
    %r = arith.addf %f, %one : f32
    linalg.yield %r : f32
  } -> tensor<1x32x2x4xf32>
  %g = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%graw : tensor<1x32x2x4xf32>) outs(%e : tensor<1x32x2x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %n = arith.negf %a : f32
    %ex = math.exp %n : f32
    %l = math.log1p %ex : f32
    %r = arith.negf %l : f32
    linalg.yield %r : f32
  } -> tensor<1x32x2x4xf32>
  %oi3 = tensor.empty() : tensor<1x32x2x8xf32>
  %zs3 = arith.constant dense<0.0> : tensor<1x2x4x8xf32>
  %o, %s = la.recurrence decay(channel) low_rank(none) %q, %k, %v g(%g : tensor<1x32x2x4xf32>) outs(%oi3, %zs3 : tensor<1x32x2x8xf32>, tensor<1x2x4x8xf32>) {scale = 0.5 : f32} : tensor<1x32x2x4xf32>, tensor<1x32x2x4xf32>, tensor<1x32x2x8xf32> -> tensor<1x32x2x8xf32>, tensor<1x2x4x8xf32>
  return %o, %s : tensor<1x32x2x8xf32>, tensor<1x2x4x8xf32>
}

// -----

// Consumers: the output's RMSNorm (sum of squares over V, then the scale by
// the weight) and its gating are fused by upstream consumer fusion into the
// task loop and then into the chunk loop, on the chunk's [1,16,1,8] tile;
// their inits become tiles of the loops' new results, and the function
// returns the loop's result directly. The recurrence's own output and its
// final state are read by nothing: the loops write neither (the chunk loop
// forwards the output's iteration argument; the task loop inserts only the
// gated result).
// CHECK-LABEL: func.func @rmsnorm_gate
// CHECK-SAME: (%{{.*}}: tensor<1x32x2x4xf32>, %{{.*}}: tensor<1x32x2x4xf32>, %{{.*}}: tensor<1x32x2x8xf32>, %[[W:.*]]: tensor<8xf32>, %[[GATE:.*]]: tensor<1x32x2x8xf32>)
// CHECK: %[[RES:.*]]:{{.*}} = scf.forall (%[[B:.*]], %[[H:.*]]) in (1, 2)
// CHECK: %[[LOOP:.*]]:4 = scf.for %[[N:.*]] = {{.*}} iter_args(%[[OARG:[^ ]*]] = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}})
// CHECK: %[[ON:.*]] = la.chunk_inter
// CHECK: %[[OT:.*]] = tensor.collapse_shape %[[ON]] {{\[\[}}0], [1, 2], [3], [4]] : tensor<1x1x16x1x8xf32> into tensor<1x16x1x8xf32>
// CHECK: %[[ZERO:.*]] = tensor.extract_slice %{{.*}}[0, %[[N]], 0] [1, 16, 1]
// CHECK: %[[SS:.*]] = linalg.generic {{.*}} ins(%[[OT]] : tensor<1x16x1x8xf32>) outs(%[[ZERO]] : tensor<1x16x1xf32>)
// CHECK: %[[GT:.*]] = tensor.extract_slice %[[GATE]][%[[B]], %[[N]], %[[H]], 0] [1, 16, 1, 8]
// CHECK: %[[R:.*]] = linalg.generic {{.*}} ins(%[[OT]], %[[SS]], %[[W]], %[[GT]] : tensor<1x16x1x8xf32>, tensor<1x16x1xf32>, tensor<8xf32>, tensor<1x16x1x8xf32>)
// CHECK: tensor.insert_slice %[[R]]
// CHECK: scf.yield %[[OARG]], %{{.*}}, %{{.*}}, %{{.*}}
// CHECK: } {la.fused_chunk_loop}
// CHECK-NEXT: scf.forall.in_parallel
// CHECK-NEXT: tensor.parallel_insert_slice %[[LOOP]]#3
// CHECK-NEXT: }
// CHECK-NOT: linalg.generic
// CHECK: return %[[RES]]
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#col = affine_map<(d0, d1, d2, d3) -> (d3)>
func.func @rmsnorm_gate(%q: tensor<1x32x2x4xf32>, %k: tensor<1x32x2x4xf32>,
                        %v: tensor<1x32x2x8xf32>, %w: tensor<8xf32>,
                        %gate: tensor<1x32x2x8xf32>) -> tensor<1x32x2x8xf32> {
  %oi = tensor.empty() : tensor<1x32x2x8xf32>
  %s0 = arith.constant dense<0.0> : tensor<1x2x4x8xf32>
  %o, %fs = la.recurrence decay(none) low_rank(none) %q, %k, %v
      outs(%oi, %s0 : tensor<1x32x2x8xf32>, tensor<1x2x4x8xf32>) {scale = 0.5 : f32}
      : tensor<1x32x2x4xf32>, tensor<1x32x2x4xf32>, tensor<1x32x2x8xf32> -> tensor<1x32x2x8xf32>, tensor<1x2x4x8xf32>
  %zero = arith.constant 0.0 : f32
  %e3 = tensor.empty() : tensor<1x32x2xf32>
  %z3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<1x32x2xf32>) -> tensor<1x32x2xf32>
  %ss = linalg.generic {indexing_maps = [#id4, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%o : tensor<1x32x2x8xf32>) outs(%z3 : tensor<1x32x2xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %sq = arith.mulf %x, %x : f32
    %s = arith.addf %acc, %sq : f32
    linalg.yield %s : f32
  } -> tensor<1x32x2xf32>
  %e4 = tensor.empty() : tensor<1x32x2x8xf32>
  %r = linalg.generic {indexing_maps = [#id4, #row, #col, #id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%o, %ss, %w, %gate : tensor<1x32x2x8xf32>, tensor<1x32x2xf32>, tensor<8xf32>, tensor<1x32x2x8xf32>) outs(%e4 : tensor<1x32x2x8xf32>) {
  ^bb0(%x: f32, %s: f32, %wt: f32, %gt: f32, %out: f32):
    %rs = math.rsqrt %s : f32
    %y = arith.mulf %x, %rs : f32
    %yw = arith.mulf %y, %wt : f32
    %res = arith.mulf %yw, %gt : f32
    linalg.yield %res : f32
  } -> tensor<1x32x2x8xf32>
  return %r : tensor<1x32x2x8xf32>
}

// -----

// A dynamic batch and T: one task per (batch, value head) (a dynamic batch
// is taken to give every thread a task: fused); the main chunk loop runs
// up to T rounded down to a multiple of 16, its chunks cast to static
// [1,16,1,...] shapes, and the peeled tail's chunk of fewer than 16 tokens
// is padded to 16 (its largest size, 15, rounded up to a size la-tile's
// tiles divide) by the decomposition.
// CHECK-LABEL: func.func @dynamic
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<?x?x2x4xf32>, %{{[^:]*}}: tensor<?x?x2x4xf32>, %[[V:[^:]*]]: tensor<?x?x2x4xf32>
// CHECK: %[[T:.*]] = tensor.dim %[[V]], %c1 : tensor<?x?x2x4xf32>
// CHECK: scf.forall
// CHECK: %[[MAIN:.*]] = affine.apply #{{.*}}()[%{{.*}}, %[[T]], %{{.*}}]
// CHECK: %[[LOOP:.*]]:2 = scf.for %{{.*}} = %{{.*}} to %[[MAIN]] step %[[C16:[^ ]*]]
// CHECK-NOT: tensor.pad
// CHECK: tensor.cast %{{.*}} : tensor<1x?x1x4xf32> to tensor<1x16x1x4xf32>
// CHECK: la.chunk_intra {{.*}} : tensor<1x1x16x1x4xf32>
// CHECK: } {la.fused_chunk_loop}
// CHECK: scf.for %{{.*}} = %[[MAIN]] to %[[T]] step %[[C16]] iter_args(%{{.*}} = %[[LOOP]]#0, %{{.*}} = %[[LOOP]]#1)
// CHECK: tensor.pad
// CHECK: la.chunk_intra {{.*}} : tensor<1x1x16x1x4xf32>
// CHECK: scf.forall.in_parallel
func.func @dynamic(%q: tensor<?x?x2x4xf32>, %k: tensor<?x?x2x4xf32>, %v: tensor<?x?x2x4xf32>, %g: tensor<?x?x2xf32>) -> tensor<?x?x2x4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %b = tensor.dim %q, %c0 : tensor<?x?x2x4xf32>
  %t = tensor.dim %q, %c1 : tensor<?x?x2x4xf32>
  %oi0 = tensor.empty(%b, %t) : tensor<?x?x2x4xf32>
  %zero = arith.constant 0.0 : f32
  %s00 = tensor.empty(%b) : tensor<?x2x4x4xf32>
  %s0 = linalg.fill ins(%zero : f32) outs(%s00 : tensor<?x2x4x4xf32>) -> tensor<?x2x4x4xf32>
  %o, %s = la.recurrence decay(scalar) low_rank(none) %q, %k, %v g(%g : tensor<?x?x2xf32>) outs(%oi0, %s0 : tensor<?x?x2x4xf32>, tensor<?x2x4x4xf32>) {scale = 0.5 : f32} : tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32> -> tensor<?x?x2x4xf32>, tensor<?x2x4x4xf32>
  return %o : tensor<?x?x2x4xf32>
}

// -----

// A reverse recurrence: the partial chunk's zero tokens go before its
// tokens in time, so that they come after them in the order the tokens are
// processed.
// PACK-LABEL: func.func @reverse
// PACK: scf.for %[[N:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// PACK: %[[SIZE:.*]] = affine.min #{{.*}}(%[[N]])
// PACK: %[[KN:.*]] = tensor.extract_slice %{{.*}} [1, %[[SIZE]], 1, 4]
// PACK: %[[ROWS:.*]] = affine.apply #{{.*}}()[%[[SIZE]]]
// PACK: %[[KE:.*]] = tensor.empty() : tensor<1x16x1x4xf32>
// PACK: %[[KR:.*]] = tensor.insert_slice %[[KN]] into %[[KE]][0, %[[ROWS]], 0, 0] [1, %[[SIZE]], 1, 4]
// PACK: %[[KZ:.*]] = tensor.extract_slice %[[KR]][0, 0, 0, 0] [1, %[[ROWS]], 1, 4]
// PACK: linalg.fill ins(%{{.*}} : f32) outs(%[[KZ]] : tensor<1x?x1x4xf32>)
// PACK: %[[OS:.*]] = tensor.extract_slice %{{.*}}[0, %[[ROWS]], 0, 0] [1, %[[SIZE]], 1, 8]
// PACK: } {la.fused_chunk_loop}
func.func @reverse(%q: tensor<1x40x2x4xf32>, %k: tensor<1x40x2x4xf32>, %v: tensor<1x40x2x8xf32>) -> (tensor<1x40x2x8xf32>, tensor<1x2x4x8xf32>) {
  %oi0 = tensor.empty() : tensor<1x40x2x8xf32>
  %zs0 = arith.constant dense<0.0> : tensor<1x2x4x8xf32>
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %k, %v outs(%oi0, %zs0 : tensor<1x40x2x8xf32>, tensor<1x2x4x8xf32>) {reverse, scale = 0.5 : f32} : tensor<1x40x2x4xf32>, tensor<1x40x2x4xf32>, tensor<1x40x2x8xf32> -> tensor<1x40x2x8xf32>, tensor<1x2x4x8xf32>
  return %o, %s : tensor<1x40x2x8xf32>, tensor<1x2x4x8xf32>
}

// -----

// Grouped query heads (HQ = 4 over HV = H = 2): tasks over (batch, state
// head), each reading the 2 query heads of its state. Per chunk, one WY
// transform and one state update of the task's state; the intra product and
// chunk_inter for its 2 query heads.
// CHECK-LABEL: func.func @grouped_query_heads
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x32x4x8xf32>, %[[K:[^:]*]]: tensor<1x32x2x8xf32>
// CHECK: scf.forall (%[[B:.*]], %[[H:.*]]) in (1, 2) shared_outs(%[[OA:.*]] = %{{.*}}, %{{.*}} = %{{.*}}) -> (tensor<1x32x4x16xf32>, tensor<1x2x8x16xf32>)
// CHECK: %[[QH:.*]] = affine.apply #{{.*}}(%[[H]])
// CHECK: tensor.extract_slice %[[OA]][%[[B]], 0, %[[QH]], 0] [1, 32, 2, 16]
// CHECK: scf.for %[[T:[^ ]*]] =
// CHECK-DAG: tensor.extract_slice %[[Q]][%[[B]], %[[T]], %{{.*}}, 0] [1, 16, 2, 8]
// CHECK-DAG: tensor.extract_slice %[[K]][%[[B]], %[[T]], %[[H]], 0] [1, 16, 1, 8]
// CHECK: la.chunk_wy {{.*}} -> tensor<1x1x16x1x8xf32>, tensor<1x1x16x1x16xf32>
// CHECK: la.chunk_state_scan {{.*}} -> tensor<1x1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x16x1x16xf32>
// CHECK: la.chunk_intra {{.*}} -> tensor<1x1x16x2x16xf32>
// CHECK: la.chunk_inter {{.*}} : tensor<1x1x16x2x8xf32>, tensor<1x1x1x8x16xf32>, tensor<1x1x16x2x16xf32> -> tensor<1x1x16x2x16xf32>
func.func @grouped_query_heads(%q: tensor<1x32x4x8xf32>, %k: tensor<1x32x2x8xf32>, %v: tensor<1x32x2x16xf32>, %g: tensor<1x32x2xf32>, %beta: tensor<1x32x2xf32>) -> tensor<1x32x4x16xf32> {
  %oi = tensor.empty() : tensor<1x32x4x16xf32>
  %s0 = arith.constant dense<0.0> : tensor<1x2x8x16xf32>
  %o, %s = la.recurrence decay(scalar) low_rank(delta) %q, %k, %v g(%g : tensor<1x32x2xf32>) beta(%beta : tensor<1x32x2xf32>) outs(%oi, %s0 : tensor<1x32x4x16xf32>, tensor<1x2x8x16xf32>) {scale = 0.5 : f32} : tensor<1x32x4x8xf32>, tensor<1x32x2x8xf32>, tensor<1x32x2x16xf32> -> tensor<1x32x4x16xf32>, tensor<1x2x8x16xf32>
  return %o : tensor<1x32x4x16xf32>
}

// -----

// An initial state marked la.in_place stays the tasks' shared output: each
// task reads its tile of the state from the shared output and writes it
// back there, so that bufferization updates the caller's buffer in place
// (la-in-place-arguments then drops the result).
// CHECK-LABEL: func.func @in_place_state
// CHECK-SAME: %[[S0:[^:]*]]: tensor<2x4x4x8xf32> {la.in_place})
// CHECK: %[[RES:.*]]:2 = scf.forall (%[[B:.*]], %[[HV:.*]]) in (2, 4) shared_outs(%{{.*}} = %{{.*}}, %[[FIN:.*]] = %[[S0]])
// CHECK: %[[INIT:.*]] = tensor.extract_slice %[[FIN]][%[[B]], %[[HV]], 0, 0] [1, 1, 4, 8]
// CHECK: %[[LOOP:.*]]:2 = scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %[[INIT]])
// CHECK: tensor.parallel_insert_slice %[[LOOP]]#1 into %[[FIN]][%[[B]], %[[HV]], 0, 0] [1, 1, 4, 8]
// CHECK: return %[[RES]]#0, %[[RES]]#1
func.func @in_place_state(%q: tensor<2x16x2x4xf32>, %k: tensor<2x16x2x4xf32>, %v: tensor<2x16x4x8xf32>, %b: tensor<2x16x2xf32>, %s0: tensor<2x4x4x8xf32> {la.in_place}) -> (tensor<2x16x4x8xf32>, tensor<2x4x4x8xf32>) {
  %oi = tensor.empty() : tensor<2x16x4x8xf32>
  %o, %s = la.recurrence decay(none) low_rank(delta) %q, %k, %v beta(%b : tensor<2x16x2xf32>) outs(%oi, %s0 : tensor<2x16x4x8xf32>, tensor<2x4x4x8xf32>) {scale = 0.5 : f32} : tensor<2x16x2x4xf32>, tensor<2x16x2x4xf32>, tensor<2x16x4x8xf32> -> tensor<2x16x4x8xf32>, tensor<2x4x4x8xf32>
  return %o, %s : tensor<2x16x4x8xf32>, tensor<2x4x4x8xf32>
}
