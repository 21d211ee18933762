// RUN: la-opt %s -split-input-file -convert-la-to-linalg="cumsum-scan=0 gate-block=16 gate-spread-limit=0" | FileCheck %s
// RUN: la-opt %s -split-input-file -convert-la-to-linalg="cumsum-scan=0 gate-block=8 gate-spread-limit=0" | FileCheck %s --check-prefix=GB8
// RUN: not la-opt %s -split-input-file -convert-la-to-linalg=gate-block=-1 2>&1 | FileCheck %s --check-prefix=BADGB
// RUN: la-opt %s -split-input-file -convert-la-to-linalg="cumsum-scan=0" | FileCheck %s --check-prefix=SPREAD
// RUN: not la-opt %s -split-input-file -convert-la-to-linalg=gate-spread-limit=-1 2>&1 | FileCheck %s --check-prefix=BADSPREAD

// BADGB: convert-la-to-linalg: 'gate-block' must be >= 0, got -1
// BADSPREAD: convert-la-to-linalg: 'gate-spread-limit' must be finite and >= 0, got -1

// CHECK-DAG: #[[CUM_IN:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4, d3)>
// CHECK-DAG: #[[CUM_OUT:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
// CHECK-LABEL: func.func @cumsum
// CHECK-SAME: (%[[G:.*]]: tensor<1x2x16x2xbf16>)
// CHECK: %[[ZERO:.*]] = linalg.fill
// CHECK: %[[CUM:.*]] = linalg.generic {indexing_maps = [#[[CUM_IN]], #[[CUM_OUT]]], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%[[G]] : tensor<1x2x16x2xbf16>) outs(%[[ZERO]] : tensor<1x2x16x2xf32>)
// CHECK: %[[I:.*]] = linalg.index 2 : index
// CHECK: %[[J:.*]] = linalg.index 4 : index
// CHECK: %[[KEEP:.*]] = arith.cmpi ule, %[[J]], %[[I]] : index
// CHECK: %[[EXT:.*]] = arith.extf %{{.*}} : bf16 to f32
// The log-gate clamped at -104 (exp(-104) is 0 in f32): -inf stays exact.
// CHECK: %[[FLOOR:.*]] = arith.constant -1.040000e+02 : f32
// CHECK: %[[CLAMPED:.*]] = arith.maximumf %[[EXT]], %[[FLOOR]] : f32
// CHECK: %[[TERM:.*]] = arith.select %[[KEEP]], %[[CLAMPED]], %{{.*}} : f32
// CHECK: arith.addf %{{.*}}, %[[TERM]] : f32
// CHECK: return %[[CUM]]
func.func @cumsum(%g: tensor<1x2x16x2xbf16>) -> tensor<1x2x16x2xf32> {
  %cum = la.chunk_cumsum %g : tensor<1x2x16x2xbf16> -> tensor<1x2x16x2xf32>
  return %cum : tensor<1x2x16x2xf32>
}

// -----

// Scalar gate, grouped value heads (HV = 2H).
// CHECK-DAG: #[[Q_MAP:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d3, d2, d5)>
// CHECK-DAG: #[[KT_MAP:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d5, d4)>
// CHECK-DAG: #[[P_MAP:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3, d4)>
// CHECK-DAG: #[[GI:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d2)>
// CHECK-DAG: #[[GJ:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4, d2)>
// CHECK-DAG: #[[GROUPED:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d3 floordiv 2, d2, d5)>
// CHECK-DAG: #[[V_MAP:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d5, d3, d4)>
// CHECK-LABEL: func.func @intra
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: tensor<1x2x16x2xf32>)
// Scores Q K^T per chunk and key head, K read as [B,NC,H,K,C] so that the
// score column is contiguous.
// CHECK: %[[KT:.*]] = linalg.transpose ins(%[[K]] : tensor<1x2x16x2x4xf32>) outs(%{{.*}} : tensor<1x2x2x4x16xf32>) permutation = [0, 1, 3, 4, 2]
// CHECK: %[[P:.*]] = linalg.generic {indexing_maps = [#[[Q_MAP]], #[[KT_MAP]], #[[P_MAP]]], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%[[Q]], %[[KT]] : {{.*}}) outs(%{{.*}} : tensor<1x2x2x16x16xf32>)
// Its entries j > i (loops 3 and 4) are masked below: la-tile may skip them.
// CHECK-SAME: attrs = {la.lower_triangular = array<i64: 3, 4>}
// Decay exp(min(G_i - G_j, 0)) and the causal mask, selected after the exp.
// CHECK: %[[M:.*]] = linalg.generic {{.*}} ins(%[[P]], %[[G]], %[[G]] : {{.*}})
// CHECK: %[[DIFF:.*]] = arith.subf
// CHECK: %[[CLAMPED:.*]] = arith.minimumf %[[DIFF]], %{{.*}} : f32
// CHECK: %[[DECAY:.*]] = math.exp %[[CLAMPED]] : f32
// CHECK: %[[DECAYED:.*]] = arith.mulf %{{.*}}, %[[DECAY]] : f32
// CHECK: %[[CAUSAL:.*]] = arith.cmpi ule
// CHECK: arith.select %[[CAUSAL]], %[[DECAYED]], %{{.*}} : f32
// Non-finite values: the first such row of each column (a reduction over
// the chunk's rows), then V with them zeroed, in place.
// CHECK: %[[FIRST:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%[[V]] : tensor<1x2x16x4x8xbf16>) outs(%{{.*}} : tensor<1x2x4x8xf32>)
// CHECK: %[[FINITE:.*]] = arith.cmpf olt
// CHECK: %[[ROW:.*]] = arith.uitofp
// CHECK: %[[CANDIDATE:.*]] = arith.select %[[FINITE]], %{{.*}}, %[[ROW]] : f32
// CHECK: arith.minimumf %{{.*}}, %[[CANDIDATE]] : f32
// CHECK: %[[VF:.*]] = linalg.generic {{.*}} outs(%[[V]] : tensor<1x2x16x4x8xbf16>)
// A bf16 value is tested and zeroed as its bits (exponent all ones: not
// finite), never as a bf16 vector select, which x86's backend cannot
// legalise at some widths.
// CHECK: %[[BITS:.*]] = arith.bitcast %{{.*}} : bf16 to i16
// CHECK: %[[EXP:.*]] = arith.andi %[[BITS]], %[[EXPMASK:.*]] : i16
// CHECK: %[[KEEP:.*]] = arith.cmpi ne, %[[EXP]], %[[EXPMASK]] : i16
// CHECK: %[[KEPT:.*]] = arith.select %[[KEEP]], %[[BITS]], %{{.*}} : i16
// CHECK: arith.bitcast %[[KEPT]] : i16 to bf16
// Then M V with the value head reading key head hv floordiv 2.
// CHECK: %[[O0:.*]] = linalg.generic {indexing_maps = [#[[GROUPED]], #[[V_MAP]], #[[P_MAP]]], {{.*}}} ins(%[[M]], %[[VF]] : tensor<1x2x2x16x16xf32>, tensor<1x2x16x4x8xbf16>)
// The masked scores make its terms vanish for j > i (loops 2 and 5), which
// la-tile uses to stop the j loop at each row tile's end.
// CHECK-SAME: attrs = {la.lower_triangular = array<i64: 2, 5>}
// NaN from the first non-finite row of each column on, in place.
// CHECK: %[[O:.*]] = linalg.generic {{.*}} ins(%[[FIRST]] : tensor<1x2x4x8xf32>) outs(%[[O0]] : tensor<1x2x16x4x8xf32>)
// CHECK: %[[I:.*]] = arith.uitofp
// CHECK: %[[POISONED:.*]] = arith.cmpf oge, %[[I]], %{{.*}} : f32
// CHECK: %[[NAN:.*]] = arith.constant 0x7FC00000 : f32
// CHECK: arith.select %[[POISONED]], %[[NAN]], %{{.*}} : f32
// CHECK: return %[[O]]
func.func @intra(%q: tensor<1x2x16x2x4xf32>, %k: tensor<1x2x16x2x4xf32>, %v: tensor<1x2x16x4x8xbf16>, %g: tensor<1x2x16x2xf32>) -> tensor<1x2x16x4x8xf32> {
  %o = la.chunk_intra %q, %k, %v gates(%g : tensor<1x2x16x2xf32>) {scale = 0.5 : f32} : tensor<1x2x16x2x4xf32>, tensor<1x2x16x2x4xf32>, tensor<1x2x16x4x8xbf16> -> tensor<1x2x16x4x8xf32>
  return %o : tensor<1x2x16x4x8xf32>
}

// -----

// Channel-wise gate: the decay enters the K reduction, clamped to <= 0.
// CHECK-LABEL: func.func @intra_channel
// CHECK-SAME: %[[G:[^:]*]]: tensor<1x1x16x1x4xf32>)
// CHECK: %[[GT:.*]] = linalg.transpose ins(%[[G]] : {{.*}}) outs(%{{.*}} : tensor<1x1x1x4x16xf32>) permutation = [0, 1, 3, 4, 2]
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%{{.*}}, %{{.*}}, %[[G]], %[[GT]] : {{.*}})
// CHECK: arith.subf
// CHECK: arith.minimumf
// CHECK: math.exp
// With gate-block=8 the 16-row chunk is two blocks of 8. The decay between
// row i of block a and key j of an earlier block c factors through R_a (the
// gates at block a's first row) and E_c (at block c's last row): queries
// and keys are pre-scaled once each, the block pairs take one exponential
// per channel and the keys of each row block are one multiplication; the
// off-diagonal scores are one plain product ([2 blocks, 8 rows, 16 keys])
// and only the two 8 x 8 diagonal blocks take an exponential per term.
// GB8-LABEL: func.func @intra_channel
// GB8: %[[QB:.*]] = tensor.expand_shape %{{.*}} output_shape [1, 1, 2, 8, 1, 4]
// GB8: %[[GB:.*]] = tensor.expand_shape %{{.*}} output_shape [1, 1, 2, 8, 1, 4]
// GB8: %[[FIRST:.*]] = tensor.extract_slice %[[GB]][0, 0, 0, 0, 0, 0] [1, 1, 2, 1, 1, 4]
// GB8: %[[R:.*]] = tensor.collapse_shape %[[FIRST]]
// GB8: %[[LAST:.*]] = tensor.extract_slice %{{.*}}[0, 0, 0, 7, 0, 0] [1, 1, 2, 1, 1, 4]
// GB8: %[[E:.*]] = tensor.collapse_shape %[[LAST]]
// GB8: %[[QSCALED:.*]] = linalg.generic {{.*}} ins(%[[QB]], %[[GB]], %[[R]] : {{.*}})
// GB8: math.exp
// GB8: %[[KBLOCKS:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %{{.*}}, %[[E]] : {{.*}}) outs(%{{.*}} : tensor<1x1x1x4x2x8xf32>)
// GB8: math.exp
// Block pairs (a, c), needed for c < a only (loops 3 and 4).
// GB8: %[[PAIR:.*]] = linalg.generic {{.*}} ins(%[[R]], %[[E]] : {{.*}}) outs(%{{.*}} : tensor<1x1x1x2x2x4xf32>)
// GB8-SAME: attrs = {la.block_causal = array<i64: 3, 4, 1>}
// GB8: math.exp
// GB8: %[[KSCALED:.*]] = linalg.generic {{.*}} ins(%[[KBLOCKS]], %[[PAIR]] : {{.*}}) outs(%{{.*}} : tensor<1x1x1x2x4x2x8xf32>)
// GB8-SAME: attrs = {la.block_causal = array<i64: 3, 5, 1>}
// GB8-NOT: math.exp
// GB8: %[[KFLAT:.*]] = tensor.collapse_shape %[[KSCALED]] {{\[}}[0], [1], [2], [3], [4], [5, 6]]
// GB8-NOT: math.exp
// GB8: %[[OFF:.*]] = linalg.generic {{.*}} ins(%[[QSCALED]], %[[KFLAT]] : tensor<1x1x2x8x1x4xf32>, tensor<1x1x1x2x4x16xf32>) outs(%{{.*}} : tensor<1x1x1x2x8x16xf32>)
// Row block a only needs its columns j < 8 a (loops 3 and 5).
// GB8-SAME: attrs = {la.block_causal = array<i64: 3, 5, 8>}
// GB8-NOT: math.exp
// GB8: %[[DIAG:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<1x1x1x2x8x8xf32>)
// GB8: math.exp
// GB8: linalg.generic {{.*}} ins(%{{.*}}, %[[DIAG]] : tensor<1x1x1x2x8x2x8xf32>, tensor<1x1x1x2x8x8xf32>)
// With gate-spread-limit=32, a run-time check picks the form: where every
// cumulative gate lies within 32 of the chunk's first row R (per channel,
// then over the channels), the scores are one plain product of q exp(G - R)
// and k exp(R - G); elsewhere the blocked form above runs.
// SPREAD-LABEL: func.func @intra_channel
// SPREAD-SAME: %[[Q:[^:]*]]: tensor<1x1x16x1x4xf32>, %[[K:[^:]*]]: tensor<1x1x16x1x4xf32>, %{{[^:]*}}: tensor<1x1x16x1x8xf32>, %[[G:[^:]*]]: tensor<1x1x16x1x4xf32>)
// SPREAD: %[[R:.*]] = tensor.extract_slice %[[G]][0, 0, 0, 0, 0] [1, 1, 1, 1, 4] [1, 1, 1, 1, 1] : tensor<1x1x16x1x4xf32> to tensor<1x1x1x4xf32>
// SPREAD: %[[PERCHANNEL:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction", "reduction", "reduction", "reduction"]} ins(%[[G]], %[[G]], %[[R]] : {{.*}}) outs(%{{.*}} : tensor<4xf32>)
// SPREAD: math.absf
// SPREAD: arith.maximumf
// SPREAD: %[[ALL:.*]] = linalg.generic {{.*}} ins(%[[PERCHANNEL]] : tensor<4xf32>) outs(%{{.*}} : tensor<f32>)
// SPREAD: %[[SPREAD:.*]] = tensor.extract %[[ALL]][] : tensor<f32>
// SPREAD: %[[LIMIT:.*]] = arith.constant 3.200000e+01 : f32
// SPREAD: %[[NEAR:.*]] = arith.cmpf olt, %[[SPREAD]], %[[LIMIT]] : f32
// SPREAD: %[[QS:.*]] = linalg.generic {{.*}} ins(%[[Q]], %[[G]], %[[R]] : {{.*}})
// SPREAD-NOT: arith.minimumf
// SPREAD: math.exp
// SPREAD: %[[KS:.*]] = linalg.generic {{.*}} ins(%[[K]], %[[G]], %[[R]] : {{.*}})
// SPREAD: math.exp
// SPREAD: %[[KST:.*]] = linalg.transpose ins(%[[KS]] : {{.*}}) outs(%{{.*}} : tensor<1x1x1x4x16xf32>)
// SPREAD: %[[SCORES:.*]] = scf.if %[[NEAR]] -> (tensor<1x1x1x16x16xf32>) {
// SPREAD: %[[PLAIN:.*]] = linalg.generic {{.*}} ins(%[[QS]], %[[KST]] : {{.*}}) outs(%{{.*}} : tensor<1x1x1x16x16xf32>)
// SPREAD-SAME: attrs = {la.lower_triangular = array<i64: 3, 4>}
// SPREAD-NOT: math.exp
// SPREAD: scf.yield %[[PLAIN]]
// SPREAD: } else {
// SPREAD: la.block_causal
// SPREAD: scf.yield
// SPREAD: linalg.generic {{.*}} ins(%[[SCORES]] : tensor<1x1x1x16x16xf32>)
func.func @intra_channel(%q: tensor<1x1x16x1x4xf32>, %k: tensor<1x1x16x1x4xf32>, %v: tensor<1x1x16x1x8xf32>, %g: tensor<1x1x16x1x4xf32>) -> tensor<1x1x16x1x8xf32> {
  %o = la.chunk_intra %q, %k, %v gates(%g : tensor<1x1x16x1x4xf32>) {scale = 0.5 : f32} : tensor<1x1x16x1x4xf32>, tensor<1x1x16x1x4xf32>, tensor<1x1x16x1x8xf32> -> tensor<1x1x16x1x8xf32>
  return %o : tensor<1x1x16x1x8xf32>
}

// -----

// The state recurrence: an scf.for over chunks recording the state entering
// each chunk, decaying by the chunk's last cumulative gate and adding
// (K * exp(G_C - G))^T V.
// CHECK-LABEL: func.func @scan
// CHECK-SAME: (%[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: tensor<1x3x16x2xf32>, %[[S0:[^:]*]]: tensor<1x2x4x8xf32>)
// With a gate the first update (the decay) writes a new tensor, so the
// caller's initial state is only read: no copy.
// CHECK-NOT: bufferization.alloc_tensor
// CHECK: %[[STATES0:.*]] = tensor.empty() : tensor<1x3x2x4x8xf32>
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[C3:.*]] = arith.constant 3 : index
// CHECK: %[[LOOP:.*]]:2 = scf.for %[[N:.*]] = %[[C0]] to %[[C3]] step %[[C1]] iter_args(%[[S:.*]] = %[[S0]], %[[ALL:.*]] = %[[STATES0]])
// CHECK: %[[REC:.*]] = tensor.insert_slice %[[S]] into %[[ALL]][0, %[[N]], 0, 0, 0] [1, 1, 2, 4, 8]
// CHECK: %[[KN:.*]] = tensor.extract_slice %[[K]][0, %[[N]], 0, 0, 0] [1, 1, 16, 2, 4] {{.*}} to tensor<1x16x2x4xf32>
// CHECK: %[[VN:.*]] = tensor.extract_slice %[[V]][0, %[[N]], 0, 0, 0]
// CHECK: %[[GN:.*]] = tensor.extract_slice %[[G]][0, %[[N]], 0, 0]
// CHECK: %[[LAST:.*]] = tensor.extract_slice %[[GN]][0, 15, 0] [1, 1, 2] {{.*}} to tensor<1x2xf32>
// CHECK: %[[FACTOR:.*]] = linalg.generic {{.*}} ins(%[[LAST]] : tensor<1x2xf32>)
// CHECK: math.exp
// CHECK: %[[DECAYED:.*]] = linalg.generic {{.*}} ins(%[[S]], %[[FACTOR]] : tensor<1x2x4x8xf32>, tensor<1x2xf32>)
// CHECK-NOT: math.exp
// CHECK: arith.mulf
// CHECK: %[[KW:.*]] = linalg.generic {{.*}} ins(%[[KN]], %[[GN]], %[[LAST]] : {{.*}})
// CHECK: %[[NEXT:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%[[KW]], %[[VN]] : {{.*}}) outs(%[[DECAYED]] : tensor<1x2x4x8xf32>)
// CHECK: scf.yield %[[NEXT]], %[[REC]]
// CHECK: return %[[LOOP]]#1, %[[LOOP]]#0
func.func @scan(%k: tensor<1x3x16x2x4xf32>, %v: tensor<1x3x16x2x8xf32>, %g: tensor<1x3x16x2xf32>, %s0: tensor<1x2x4x8xf32>) -> (tensor<1x3x2x4x8xf32>, tensor<1x2x4x8xf32>) {
  %states, %final = la.chunk_state_scan %k, %v gates(%g : tensor<1x3x16x2xf32>) initial_state(%s0 : tensor<1x2x4x8xf32>) : tensor<1x3x16x2x4xf32>, tensor<1x3x16x2x8xf32> -> tensor<1x3x2x4x8xf32>, tensor<1x2x4x8xf32>
  return %states, %final : tensor<1x3x2x4x8xf32>, tensor<1x2x4x8xf32>
}

// -----

// Without a gate the first update accumulates into the incoming state, so
// the caller's initial state is copied first. One chunk needs no loop: the
// recorded state is a view of the initial state and the final state the
// update.
// CHECK-LABEL: func.func @scan_one_chunk
// CHECK-SAME: (%[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[S0:[^:]*]]: tensor<1x2x4x8xf32>)
// CHECK: %[[COPY:.*]] = bufferization.alloc_tensor() copy(%[[S0]]) : tensor<1x2x4x8xf32>
// CHECK-NOT: scf.for
// CHECK: %[[NEXT:.*]] = linalg.generic {{.*}} outs(%[[COPY]] : tensor<1x2x4x8xf32>)
// CHECK: %[[STATES:.*]] = tensor.expand_shape %[[COPY]] {{\[}}[0, 1], [2], [3], [4]] output_shape [1, 1, 2, 4, 8]
// CHECK: return %[[STATES]], %[[NEXT]]
func.func @scan_one_chunk(%k: tensor<1x1x16x2x4xf32>, %v: tensor<1x1x16x2x8xf32>, %s0: tensor<1x2x4x8xf32>) -> (tensor<1x1x2x4x8xf32>, tensor<1x2x4x8xf32>) {
  %states, %final = la.chunk_state_scan %k, %v initial_state(%s0 : tensor<1x2x4x8xf32>) : tensor<1x1x16x2x4xf32>, tensor<1x1x16x2x8xf32> -> tensor<1x1x2x4x8xf32>, tensor<1x2x4x8xf32>
  return %states, %final : tensor<1x1x2x4x8xf32>, tensor<1x2x4x8xf32>
}

// -----

// Chunks of one token (decode): the decay and the rank-one update are one
// element-wise pass over the state, S' = exp(g) S + k v^T, into a fresh
// tensor (no copy of the caller's state, no accumulation into a decayed
// copy); the decay factor is exponentiated once per head.
// CHECK-LABEL: func.func @scan_one_token
// CHECK-SAME: (%[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[G:[^:]*]]: {{.*}}, %[[S0:[^:]*]]: tensor<1x2x4x8xf32>)
// CHECK-NOT: bufferization.alloc_tensor
// CHECK-NOT: scf.for
// CHECK-DAG: %[[KT:.*]] = tensor.extract_slice %{{.*}}[0, 0, 0, 0] [1, 1, 2, 4] {{.*}} to tensor<1x2x4xf32>
// CHECK-DAG: %[[VT:.*]] = tensor.extract_slice %{{.*}}[0, 0, 0, 0] [1, 1, 2, 8] {{.*}} to tensor<1x2x8xf32>
// CHECK: %[[FACTOR:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<1x2xf32>)
// CHECK: math.exp
// CHECK: %[[EMPTY:.*]] = tensor.empty() : tensor<1x2x4x8xf32>
// CHECK: %[[NEXT:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%[[S0]], %[[KT]], %[[VT]], %[[FACTOR]] : {{.*}}) outs(%[[EMPTY]] : tensor<1x2x4x8xf32>)
// CHECK-NEXT: ^bb0(%[[SIN:.*]]: f32, %[[KIN:.*]]: f32, %[[VIN:.*]]: f32, %[[FIN:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT: %[[KEPT:.*]] = arith.mulf %[[SIN]], %[[FIN]] : f32
// CHECK-NEXT: %[[KV:.*]] = arith.mulf %[[KIN]], %[[VIN]] : f32
// CHECK-NEXT: %[[SUM:.*]] = arith.addf %[[KEPT]], %[[KV]] : f32
// CHECK-NEXT: linalg.yield %[[SUM]] : f32
// CHECK-NOT: linalg.generic
// CHECK: %[[STATES:.*]] = tensor.expand_shape %[[S0]] {{\[}}[0, 1], [2], [3], [4]] output_shape [1, 1, 2, 4, 8]
// CHECK: return %[[STATES]], %[[NEXT]]
func.func @scan_one_token(%k: tensor<1x1x1x2x4xf32>, %v: tensor<1x1x1x2x8xf32>, %g: tensor<1x1x1x2xf32>, %s0: tensor<1x2x4x8xf32>) -> (tensor<1x1x2x4x8xf32>, tensor<1x2x4x8xf32>) {
  %states, %final = la.chunk_state_scan %k, %v gates(%g : tensor<1x1x1x2xf32>) initial_state(%s0 : tensor<1x2x4x8xf32>) : tensor<1x1x1x2x4xf32>, tensor<1x1x1x2x8xf32> -> tensor<1x1x2x4x8xf32>, tensor<1x2x4x8xf32>
  return %states, %final : tensor<1x1x2x4x8xf32>, tensor<1x2x4x8xf32>
}

// -----

// Output: intra + (scale * Q * exp(G))^T S_n, then truncation to bf16.
// CHECK-LABEL: func.func @inter
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[S:[^:]*]]: {{.*}}, %[[INTRA:[^:]*]]: {{.*}}, %[[G:[^:]*]]: tensor<1x2x16x2xf32>)
// CHECK: %[[SCALE:.*]] = arith.constant 5.000000e-01 : f32
// CHECK: %[[QS:.*]] = linalg.generic {{.*}} ins(%[[Q]], %[[G]] : {{.*}})
// CHECK: arith.mulf %{{.*}}, %[[SCALE]] : f32
// CHECK: math.exp
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} ins(%[[QS]], %[[S]] : {{.*}}) outs(%[[INTRA]] : tensor<1x2x16x2x8xf32>)
// CHECK: %[[OUT:.*]] = linalg.generic {{.*}} ins(%[[SUM]] : tensor<1x2x16x2x8xf32>) outs(%{{.*}} : tensor<1x2x16x2x8xbf16>)
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: return %[[OUT]]
func.func @inter(%q: tensor<1x2x16x2x4xf32>, %s: tensor<1x2x2x4x8xf32>, %intra: tensor<1x2x16x2x8xf32>, %g: tensor<1x2x16x2xf32>) -> tensor<1x2x16x2x8xbf16> {
  %o = la.chunk_inter %q, %s, %intra gates(%g : tensor<1x2x16x2xf32>) {scale = 0.5 : f32} : tensor<1x2x16x2x4xf32>, tensor<1x2x2x4x8xf32>, tensor<1x2x16x2x8xf32> -> tensor<1x2x16x2x8xbf16>
  return %o : tensor<1x2x16x2x8xbf16>
}

// -----

// The UT transform, C = 32 with 16 x 16 blocks: A = strictly_lower(beta K K^T
// * D); forward substitution inside the diagonal blocks (one row per step);
// block forward substitution for block row 1; then W and U as products with T.
// CHECK-DAG: #[[DIAG:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3 * 16 + d4, d3 * 16 + d5)>
// CHECK-DAG: #[[SCATTER:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3 floordiv 16, d3 mod 16, d4 mod 16)>
// CHECK-LABEL: func.func @wy
// CHECK-SAME: (%[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[B:[^:]*]]: tensor<1x1x32x1xf32>, %[[G:[^:]*]]: tensor<1x1x32x1xf32>)
// CHECK: %[[KT:.*]] = linalg.transpose ins(%[[K]]
// CHECK: %[[P:.*]] = linalg.generic {{.*}} ins(%[[K]], %[[KT]] : {{.*}}) outs(%{{.*}} : tensor<1x1x1x32x32xf32>)
// CHECK: %[[A:.*]] = linalg.generic {{.*}} ins(%[[P]], %[[G]], %[[G]], %[[B]] : {{.*}})
// CHECK: %[[STRICT:.*]] = arith.cmpi ult
// CHECK: arith.select %[[STRICT]]
// CHECK: %[[AD:.*]] = linalg.generic {indexing_maps = [#[[DIAG]], {{.*}}]} ins(%[[A]] : tensor<1x1x1x32x32xf32>) outs(%{{.*}} : tensor<1x1x1x2x16x16xf32>)
// CHECK: %[[TD:.*]] = scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[TACC:.*]] = %{{.*}}) -> (tensor<1x1x1x2x16x16xf32>)
// CHECK: %[[AROW:.*]] = tensor.extract_slice %[[AD]][0, 0, 0, 0, %[[R]], 0] [1, 1, 1, 2, 1, 16]
// CHECK: %[[ROW:.*]] = linalg.generic {{.*}} ins(%[[AROW]], %[[TACC]] : {{.*}})
// CHECK: %[[NEG:.*]] = arith.negf
// CHECK: %[[PROD:.*]] = arith.mulf %[[NEG]], %{{.*}} : f32
// CHECK: arith.addf %{{.*}}, %[[PROD]] : f32
// CHECK: tensor.insert_slice %[[ROW]] into %[[TACC]][0, 0, 0, 0, %[[R]], 0]
// CHECK: %[[T0:.*]] = linalg.generic {indexing_maps = [#[[SCATTER]], {{.*}}]} ins(%[[TD]] : {{.*}}) outs(%{{.*}} : tensor<1x1x1x32x32xf32>)
// CHECK: %[[T:.*]] = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[TCUR:.*]] = %[[T0]]) -> (tensor<1x1x1x32x32xf32>)
// CHECK: %[[AROWS:.*]] = tensor.extract_slice %[[A]]
// CHECK: %[[X:.*]] = linalg.generic {{.*}} ins(%[[AROWS]], %[[TCUR]] : {{.*}})
// CHECK: %[[TII:.*]] = tensor.extract_slice %[[TD]]
// CHECK: %[[TIIC:.*]] = tensor.collapse_shape %[[TII]] {{\[}}[0], [1], [2], [3, 4], [5]]
// T_ii X is a causal product too: X guarded as in applyScores.
// CHECK: %[[XFIRST:.*]] = linalg.generic {{.*}} ins(%[[X]] : {{.*}})
// CHECK: %[[XF:.*]] = linalg.generic {{.*}} outs(%[[X]] : {{.*}})
// CHECK: %[[Y0:.*]] = linalg.generic {{.*}} ins(%[[TIIC]], %[[XF]] : {{.*}})
// CHECK: %[[Y:.*]] = linalg.generic {{.*}} ins(%[[XFIRST]] : {{.*}}) outs(%[[Y0]] : {{.*}})
// CHECK: linalg.generic {{.*}} ins(%[[Y]] : {{.*}})
// CHECK: arith.negf
// The factors beta exp(G) and beta first, element-wise; then two plain
// contractions with T.
// CHECK: %[[KB:.*]] = linalg.generic {{.*}} ins(%[[K]], %[[B]], %[[G]] : {{.*}}) outs(%{{.*}} : tensor<1x1x32x1x4xf32>)
// CHECK: math.exp
// CHECK: %[[VB:.*]] = linalg.generic {{.*}} ins(%[[V]], %[[B]] : {{.*}}) outs(%{{.*}} : tensor<1x1x32x2x8xf32>)
// Each reads its operand with non-finite elements zeroed, and is NaN from
// the operand's first non-finite row on.
// CHECK: %[[KFIRST:.*]] = linalg.generic {{.*}} ins(%[[KB]] : tensor<1x1x32x1x4xf32>)
// CHECK: %[[KBF:.*]] = linalg.generic {{.*}} outs(%[[KB]] : tensor<1x1x32x1x4xf32>)
// CHECK: %[[W0:.*]] = linalg.generic {{.*}} ins(%[[T]], %[[KBF]] : {{.*}}) outs(%{{.*}} : tensor<1x1x32x1x4xf32>)
// CHECK: %[[W:.*]] = linalg.generic {{.*}} ins(%[[KFIRST]] : {{.*}}) outs(%[[W0]] : tensor<1x1x32x1x4xf32>)
// CHECK-NOT: math.exp
// CHECK: %[[VFIRST:.*]] = linalg.generic {{.*}} ins(%[[VB]] : tensor<1x1x32x2x8xf32>)
// CHECK: %[[VBF:.*]] = linalg.generic {{.*}} outs(%[[VB]] : tensor<1x1x32x2x8xf32>)
// CHECK: %[[U0:.*]] = linalg.generic {{.*}} ins(%[[T]], %[[VBF]] : {{.*}}) outs(%{{.*}} : tensor<1x1x32x2x8xf32>)
// CHECK: %[[U:.*]] = linalg.generic {{.*}} ins(%[[VFIRST]] : {{.*}}) outs(%[[U0]] : tensor<1x1x32x2x8xf32>)
// CHECK: return %[[W]], %[[U]]
func.func @wy(%k: tensor<1x1x32x1x4xf32>, %v: tensor<1x1x32x2x8xf32>, %b: tensor<1x1x32x1xf32>, %g: tensor<1x1x32x1xf32>) -> (tensor<1x1x32x1x4xf32>, tensor<1x1x32x2x8xf32>) {
  %w, %u = la.chunk_wy %k, %v beta(%b : tensor<1x1x32x1xf32>) gates(%g : tensor<1x1x32x1xf32>) : tensor<1x1x32x1x4xf32>, tensor<1x1x32x2x8xf32> -> tensor<1x1x32x1x4xf32>, tensor<1x1x32x2x8xf32>
  return %w, %u : tensor<1x1x32x1x4xf32>, tensor<1x1x32x2x8xf32>
}

// -----

// The delta-rule scan: V' = U - W S_n before the state update, recorded per
// chunk as the third result.
// CHECK-LABEL: func.func @scan_corrected
// CHECK-SAME: (%[[K:[^:]*]]: {{.*}}, %[[U:[^:]*]]: {{.*}}, %[[W:[^:]*]]: tensor<1x2x16x1x4xf32>)
// CHECK: %[[LOOP:.*]]:3 = scf.for %[[N:.*]] = {{.*}} iter_args(%[[S:.*]] = %{{.*}}, %[[ALL:.*]] = %{{.*}}, %[[VACC:.*]] = %{{.*}})
// CHECK: %[[KN:.*]] = tensor.extract_slice %[[K]][0, %[[N]]
// CHECK: %[[UN:.*]] = tensor.extract_slice %[[U]][0, %[[N]]
// CHECK: %[[WN:.*]] = tensor.extract_slice %[[W]][0, %[[N]]
// CHECK: %[[VNEW:.*]] = linalg.generic {{.*}} ins(%[[WN]], %[[S]] : {{.*}}) outs(%[[UN]] : tensor<1x16x1x8xf32>)
// CHECK: arith.negf
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: %[[NEXT:.*]] = linalg.generic {{.*}} ins(%[[KN]], %[[VNEW]] : {{.*}}) outs(%[[S]] : tensor<1x1x4x8xf32>)
// CHECK: %[[VREC:.*]] = tensor.insert_slice %[[VNEW]] into %[[VACC]][0, %[[N]], 0, 0, 0] [1, 1, 16, 1, 8]
// CHECK: scf.yield %[[NEXT]], %{{.*}}, %[[VREC]]
// CHECK: return %[[LOOP]]#1, %[[LOOP]]#0, %[[LOOP]]#2
func.func @scan_corrected(%k: tensor<1x2x16x1x4xf32>, %u: tensor<1x2x16x1x8xf32>, %w: tensor<1x2x16x1x4xf32>) -> (tensor<1x2x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x2x16x1x8xf32>) {
  %states, %final, %corrected = la.chunk_state_scan %k, %u correction(%w : tensor<1x2x16x1x4xf32>) : tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32> -> tensor<1x2x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x2x16x1x8xf32>
  return %states, %final, %corrected : tensor<1x2x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x2x16x1x8xf32>
}

// -----

// Value-side gates C: the decay exp(C_i - C_j) depends on the output column,
// so it is applied in the product with the values. Without a spread limit
// every term takes an exponential (masked terms are selected away); with
// one, chunks whose gates stay near their first row R take one product of
// v exp(R - C), rescaled by exp(C - R).
// CHECK-DAG: #[[VG_SCORES:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d3, d2, d5)>
// CHECK-DAG: #[[VG_ROWJ:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d5, d3, d4)>
// CHECK-DAG: #[[VG_ROWI:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3, d4)>
// CHECK-LABEL: func.func @intra_value_gates
// CHECK-SAME: (%{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}}, %[[C:[^:]*]]: tensor<1x1x16x1x8xf32>)
// CHECK-NOT: scf.if
// CHECK: linalg.generic {indexing_maps = [#[[VG_SCORES]], #[[VG_ROWJ]], #[[VG_ROWI]], #[[VG_ROWJ]], #[[VG_ROWI]]], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%{{.*}}, %{{.*}}, %[[C]], %[[C]] : {{.*}}) {{.*}} attrs = {la.lower_triangular = array<i64: 2, 5>}
// CHECK: arith.subf
// CHECK: arith.minimumf
// CHECK: math.exp
// CHECK: arith.cmpi ule
// CHECK: arith.select
// SPREAD-LABEL: func.func @intra_value_gates
// SPREAD-SAME: (%{{[^:]*}}: {{.*}}, %{{[^:]*}}: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[C:[^:]*]]: tensor<1x1x16x1x8xf32>)
// SPREAD: %[[REF:.*]] = tensor.extract_slice %[[C]][0, 0, 0, 0, 0] [1, 1, 1, 1, 8]
// SPREAD: %[[SCALED:.*]] = linalg.generic {{.*}} ins(%[[V]], %[[C]], %[[REF]] :
// SPREAD: scf.if
// SPREAD: %[[PLAIN:.*]] = linalg.generic {{.*}} attrs = {la.lower_triangular = array<i64: 2, 5>}
// SPREAD-NOT: math.exp
// SPREAD: linalg.generic {{.*}} ins(%{{.*}}, %[[C]], %[[REF]] :
// SPREAD: math.exp
// SPREAD: } else {
// SPREAD: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}}, %[[C]], %[[C]] :
func.func @intra_value_gates(%q: tensor<1x1x16x1x4xf32>, %k: tensor<1x1x16x1x4xf32>, %v: tensor<1x1x16x1x8xf32>, %c: tensor<1x1x16x1x8xf32>) -> tensor<1x1x16x1x8xf32> {
  %o = la.chunk_intra %q, %k, %v value_gates(%c : tensor<1x1x16x1x8xf32>) {scale = 0.5 : f32} : tensor<1x1x16x1x4xf32>, tensor<1x1x16x1x4xf32>, tensor<1x1x16x1x8xf32> -> tensor<1x1x16x1x8xf32>
  return %o : tensor<1x1x16x1x8xf32>
}

// -----

// The scan with value-side gates: the state decays by exp(C_C) per value
// column and the values by exp(C_C - C); chunk_inter adds exp(C) times the
// state's part to the intra part, into a fresh destination (the intra part
// is an input, so that la-in-place-destinations can root the output at the
// task's output slice).
// CHECK-DAG: #[[VS_STATE:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-DAG: #[[VS_LAST:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
// CHECK-LABEL: func.func @scan_inter_value_gates
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[K:[^:]*]]: {{.*}}, %[[V:[^:]*]]: {{.*}}, %[[C:[^:]*]]: {{.*}}, %[[I:[^:]*]]: {{.*}})
// CHECK: scf.for
// CHECK: %[[CN:.*]] = tensor.extract_slice %[[C]]
// CHECK: %[[CL:.*]] = tensor.extract_slice %[[CN]]
// CHECK: linalg.generic {indexing_maps = [#[[VS_STATE]], #[[VS_LAST]], #[[VS_STATE]]], {{.*}} ins(%{{.*}}, %[[CL]] :
// CHECK: math.exp
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %[[CN]], %[[CL]] :
// CHECK: math.exp
// CHECK: scf.yield
// CHECK: %[[INTER:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<1x2x16x1x4xf32>, tensor<1x2x1x4x8xf32>) outs(%{{.*}} : tensor<1x2x16x1x8xf32>)
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} ins(%[[INTER]], %[[C]], %[[I]] : {{.*}}) outs(%{{.*}} :
// CHECK: math.exp
// CHECK: return %[[SUM]]
func.func @scan_inter_value_gates(%q: tensor<1x2x16x1x4xf32>, %k: tensor<1x2x16x1x4xf32>, %v: tensor<1x2x16x1x8xf32>, %c: tensor<1x2x16x1x8xf32>, %intra: tensor<1x2x16x1x8xf32>) -> tensor<1x2x16x1x8xf32> {
  %states, %final = la.chunk_state_scan %k, %v value_gates(%c : tensor<1x2x16x1x8xf32>) : tensor<1x2x16x1x4xf32>, tensor<1x2x16x1x8xf32> -> tensor<1x2x1x4x8xf32>, tensor<1x1x4x8xf32>
  %o = la.chunk_inter %q, %states, %intra value_gates(%c : tensor<1x2x16x1x8xf32>) {scale = 0.5 : f32} : tensor<1x2x16x1x4xf32>, tensor<1x2x1x4x8xf32>, tensor<1x2x16x1x8xf32> -> tensor<1x2x16x1x8xf32>
  return %o : tensor<1x2x16x1x8xf32>
}

// -----

// Grouped query heads: output head hv reads state hv floordiv (HV/HS). One
// state (a task of the fused schedule) is read without its head dim, so the
// product's maps stay projected permutations (la-tile vectorises those).
// CHECK-DAG: #[[QM:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3, d5)>
// CHECK-DAG: #[[ONE:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d5, d4)>
// CHECK-DAG: #[[OM:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3, d4)>
// CHECK-DAG: #[[GROUPS:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d3 floordiv 2, d5, d4)>
// CHECK-LABEL: func.func @inter_one_state
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x1x16x3x8xf32>, %[[S:[^:]*]]: tensor<1x1x1x8x16xf32>, %[[INTRA:[^:]*]]: tensor<1x1x16x3x16xf32>)
// CHECK: %[[QS:.*]] = linalg.generic {{.*}} ins(%[[Q]] : tensor<1x1x16x3x8xf32>)
// CHECK: %[[S1:.*]] = tensor.extract_slice %[[S]][0, 0, 0, 0, 0] [1, 1, 1, 8, 16] [1, 1, 1, 1, 1] : tensor<1x1x1x8x16xf32> to tensor<1x1x8x16xf32>
// CHECK: linalg.generic {indexing_maps = [#[[QM]], #[[ONE]], #[[OM]]], {{.*}} ins(%[[QS]], %[[S1]] : tensor<1x1x16x3x8xf32>, tensor<1x1x8x16xf32>) outs(%[[INTRA]] : tensor<1x1x16x3x16xf32>)
func.func @inter_one_state(%q: tensor<1x1x16x3x8xf32>, %s: tensor<1x1x1x8x16xf32>, %intra: tensor<1x1x16x3x16xf32>) -> tensor<1x1x16x3x16xf32> {
  %0 = la.chunk_inter %q, %s, %intra {scale = 0.5 : f32} : tensor<1x1x16x3x8xf32>, tensor<1x1x1x8x16xf32>, tensor<1x1x16x3x16xf32> -> tensor<1x1x16x3x16xf32>
  return %0 : tensor<1x1x16x3x16xf32>
}

// CHECK-LABEL: func.func @inter_state_groups
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x2x16x4x8xf32>, %[[S:[^:]*]]: tensor<1x2x2x8x16xf32>, %[[INTRA:[^:]*]]: tensor<1x2x16x4x16xf32>)
// CHECK: %[[QS:.*]] = linalg.generic {{.*}} ins(%[[Q]] : tensor<1x2x16x4x8xf32>)
// CHECK: linalg.generic {indexing_maps = [#[[QM]], #[[GROUPS]], #[[OM]]], {{.*}} ins(%[[QS]], %[[S]] : tensor<1x2x16x4x8xf32>, tensor<1x2x2x8x16xf32>) outs(%[[INTRA]] : tensor<1x2x16x4x16xf32>)
func.func @inter_state_groups(%q: tensor<1x2x16x4x8xf32>, %s: tensor<1x2x2x8x16xf32>, %intra: tensor<1x2x16x4x16xf32>) -> tensor<1x2x16x4x16xf32> {
  %0 = la.chunk_inter %q, %s, %intra {scale = 0.5 : f32} : tensor<1x2x16x4x8xf32>, tensor<1x2x2x8x16xf32>, tensor<1x2x16x4x16xf32> -> tensor<1x2x16x4x16xf32>
  return %0 : tensor<1x2x16x4x16xf32>
}
