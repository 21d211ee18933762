// RUN: la-opt %s -split-input-file -la-lower-to-gpu="chunk-size=16 value-tile=8" | FileCheck %s
// RUN: la-opt %s -split-input-file -la-lower-to-gpu="chunk-size=16" | FileCheck %s --check-prefix=RET
// RUN: la-opt %s -split-input-file -la-lower-to-gpu="chunk-size=16 threads-per-block=256" | FileCheck %s --check-prefix=NOTILE
// RUN: la-opt %s -split-input-file -la-lower-to-nvvm="chunk-size=16 format=isa" | %extract_gpu_objects --print | FileCheck %s --check-prefix=PTX
// RUN: la-opt %s -split-input-file -la-lower-to-nvvm="chunk-size=16 format=isa tensor-cores" | %extract_gpu_objects --print | FileCheck %s --check-prefix=TC
// RUN: not la-opt %s -split-input-file -la-lower-to-gpu="chunk-size=16 shared-memory-limit=1024" 2>&1 | FileCheck %s --check-prefix=SMEM
// RUN: la-opt %s -split-input-file -la-lower-to-gpu="chunk-size=16 value-tile=8 schedule=chunk-parallel" | FileCheck %s --check-prefix=CP

// The first half of la-lower-to-nvvm: one block per (batch, value head,
// value tile) = 1 x 2 x 2, the chunk loop inside the block, the chunk's
// buffers in dynamic shared memory, every op a loop of the block's threads
// followed by a barrier (256 threads by default). The function takes device
// memory; no la op, no tensor and no host copy is left.
// CHECK-LABEL: func.func @gla
// CHECK-SAME: (%{{.*}}: memref<1x64x2x16xf32>, %{{.*}}: memref<1x64x2x16xf32>, %{{.*}}: memref<1x64x2x16xf32>, %{{.*}}: memref<1x64x2x16xf32>, %[[O:.*]]: memref<1x64x2x16xf32>)
// CHECK-NOT: memref.copy
// CHECK: gpu.launch blocks(%{{.*}}, %{{.*}}, %{{.*}}) in (%{{.*}} = %c1, %{{.*}} = %c2, %{{.*}} = %c2) threads(%[[TX:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %[[NT:c256]], %{{.*}} = %c1, %{{.*}} = %c1) dynamic_shared_memory_size
// CHECK: gpu.dynamic_shared_memory
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c16 {
// CHECK: scf.for %{{.*}} = %[[TX]] to %{{.*}} step %[[NT]] {
// CHECK: gpu.barrier
// CHECK: gpu.terminator
// CHECK-NOT: la.
// CHECK: return
// NOTILE-LABEL: func.func @gla
// NOTILE: gpu.launch blocks({{.*}}) in (%{{.*}} = %c1, %{{.*}} = %c2, %{{.*}} = %c1) threads({{.*}}) in (%{{.*}} = %c256,

// la-lower-to-nvvm with format=isa: the kernel as PTX for sm_90a, with
// barriers and shared-memory accesses (the generic pointers of the buffers
// are resolved to the shared space).
// PTX: .target sm_90a
// PTX: .visible .entry gla_kernel(
// PTX: st.shared.{{[bf]}}32
// PTX: bar.sync
// PTX: ld.shared.{{[bf]}}32

// With tensor cores, GLA's plain contractions (the state update K^T V,
// 16 x 16 x 16 here) become mma.sync on tf32.
// TC: .visible .entry gla_kernel(
// TC: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32

// schedule=chunk-parallel: three kernels, the cumulative gates and the
// outputs (with their intra-chunk products) over (batch, chunk, head) =
// 1 x 4 x 2 blocks, the state scan over (batch, head, value tile) = 1 x 2 x 2
// with its chunk loop inside. The per-chunk states are a device buffer
// between the scan and the outputs, which the scan writes directly: its
// 4736 bytes of shared memory (the running state and the chunk's buffers)
// hold no tile of the per-chunk states (2 KB more when they were a buffer of
// the block, copied out at the end).
// CP-LABEL: func.func @gla
// CP: %[[CUM:.*]], %{{.*}} = gpu.alloc async [%{{.*}}] () : memref<1x4x16x2x16xf32>
// CP: gpu.launch blocks({{.*}}) in (%{{.*}} = %c1, %{{.*}} = %c4, %{{.*}} = %c2)
// CP: %[[STATES:.*]], %{{.*}} = gpu.alloc async [%{{.*}}] () : memref<1x4x2x16x16xf32>
// CP: gpu.launch blocks({{.*}}) in (%{{.*}} = %c1, %{{.*}} = %c2, %{{.*}} = %c2) {{.*}} dynamic_shared_memory_size %c4736_i32
// CP: %[[MINE:.*]] = memref.subview %[[STATES]][0, 0, %{{.*}}, 0, %{{.*}}] [1, 4, 1, 16, 8]
// CP: scf.for %[[N:.*]] = %c0 to %c4 step %c1
// CP: memref.subview %[[MINE]][0, %[[N]], 0, 0, 0] [1, 1, 1, 16, 8]
// CP: gpu.launch blocks({{.*}}) in (%{{.*}} = %c1, %{{.*}} = %c4, %{{.*}} = %c2)
// CP: memref.subview %[[STATES]][0, %{{.*}}, %{{.*}}, 0, 0] [1, 1, 1, 16, 16]
// CP-NOT: gpu.launch
// CP: gpu.dealloc async [%{{.*}}] %[[STATES]]
// CP: return
// SMEM: error: 'scf.forall' op needs {{[0-9]+}} bytes of shared memory for a chunk's buffers, more than the limit of 1024 (try a smaller chunk size or value tiles)
func.func @gla(%q: tensor<1x64x2x16xf32>, %k: tensor<1x64x2x16xf32>,
               %v: tensor<1x64x2x16xf32>, %g: tensor<1x64x2x16xf32>)
    -> tensor<1x64x2x16xf32> {
  %o = la.attention gla %q, %k, %v g(%g : tensor<1x64x2x16xf32>)
      : tensor<1x64x2x16xf32>, tensor<1x64x2x16xf32>, tensor<1x64x2x16xf32>
      -> tensor<1x64x2x16xf32>
  return %o : tensor<1x64x2x16xf32>
}

// -----

// Retention's per-head decays are a constant global: the kernel reads it
// itself (outlining copies it into the GPU module), never a host pointer.
// RET-LABEL: func.func @retention
// RET-NOT: memref.get_global
// RET: gpu.launch
// RET: memref.get_global @{{.*}} : memref<2xf32>
// RET: gpu.terminator
func.func @retention(%q: tensor<1x32x2x16xf32>, %k: tensor<1x32x2x16xf32>,
                     %v: tensor<1x32x2x16xf32>) -> tensor<1x32x2x16xf32> {
  %o = la.attention retention %q, %k, %v {log_decay = array<f32: -0.03, -0.01>}
      : tensor<1x32x2x16xf32>, tensor<1x32x2x16xf32>, tensor<1x32x2x16xf32>
      -> tensor<1x32x2x16xf32>
  return %o : tensor<1x32x2x16xf32>
}

// -----

// T = 40 is not a multiple of the chunk size (16): the block pads its last
// chunk itself. Each chunk's rows are copied into shared memory (8 rows in
// the last chunk) and the rest of its 16 rows zero-filled; the output's
// rows are written back with the chunk's run-time size. One kernel: no
// padded copy of the inputs or the output in global memory.
// RET-LABEL: func.func @padded
// RET-SAME: %[[Q:[a-z0-9]+]]: memref<1x40x1x16xf32>
// RET-SAME: %[[O:[a-z0-9]+]]: memref<1x40x1x16xf32>)
// RET-NOT: memref<1x48x1x16xf32>
// RET: gpu.launch {{.*}} dynamic_shared_memory_size
// RET: scf.for %[[N:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// RET: %[[SIZE:.*]] = affine.min #{{.*}}(%[[N]])
// RET: %[[QN:.*]] = memref.subview %[[Q]][0, %[[N]], 0, 0] [1, %[[SIZE]], 1, 16]
// RET: memref.load %[[QN]]
// RET: gpu.barrier
// RET: linalg.fill
// RET: %[[ON:.*]] = memref.subview %[[O]][0, %[[N]], 0, 0] [1, %[[SIZE]], 1, 16]
// RET: memref.store %{{.*}}, %[[ON]]
// RET: gpu.terminator
// RET-NOT: gpu.launch
// RET-NOT: memref.copy
// RET: return
func.func @padded(%q: tensor<1x40x1x16xf32>, %k: tensor<1x40x1x16xf32>,
                  %v: tensor<1x40x1x16xf32>) -> tensor<1x40x1x16xf32> {
  %o = la.attention linear %q, %k, %v
      : tensor<1x40x1x16xf32>, tensor<1x40x1x16xf32>, tensor<1x40x1x16xf32>
      -> tensor<1x40x1x16xf32>
  return %o : tensor<1x40x1x16xf32>
}

// -----

// Packed sequences: one block per (sequence, value head) = 3 x 2, after a
// kernel that zero-fills the output (tokens outside every sequence). Each
// block reads its sequence's offsets from cu_seqlens (clamped into [0, T]),
// runs the chunks of its run-time length and writes its rows of the output
// and its row of the final state. The ptxas-accepted PTX reads the offsets
// from global memory.
// RET-LABEL: func.func @packed
// RET-SAME: %[[CU:[a-z0-9]+]]: memref<4xi32>, %[[O:[a-z0-9]+]]: memref<1x64x2x16xf32>, %[[S:[a-z0-9]+]]: memref<3x2x16x16xf32>)
// RET: gpu.launch
// RET: linalg.fill
// RET: gpu.launch blocks(%[[N:[^,]*]], %[[H:[^,]*]], %{{[^)]*}}) in (%{{.*}} = %c3, %{{.*}} = %c2, %{{.*}} = %c1)
// RET: %[[NEXT:.*]] = arith.addi %[[N]], %c1
// RET: %[[RAW0:.*]] = memref.load %[[CU]][%[[N]]]
// RET: %[[RAW1:.*]] = memref.load %[[CU]][%[[NEXT]]]
// RET: %[[START:.*]] = arith.minsi
// RET: %[[END:.*]] = arith.minsi
// RET: %[[LEN:.*]] = arith.subi %[[END]], %[[START]]
// RET: %[[OS:.*]] = memref.subview %[[O]][0, %[[START]], %[[H]], 0] [1, %[[LEN]], 1, 16]
// RET: scf.for %{{.*}} = %c0 to %[[LEN]] step %c16 {
// RET: memref.subview %[[S]][%[[N]], %[[H]], 0, 0] [1, 1, 16, 16]
// RET: gpu.terminator
// RET-NOT: gpu.launch
// RET: return
// PTX: .visible .entry packed_kernel(
// PTX: .visible .entry packed_kernel(
// PTX: ld.global.s32 %{{.*}}, [%{{.*}}+4];
func.func @packed(%q: tensor<1x64x2x16xf32>, %k: tensor<1x64x2x16xf32>,
                  %v: tensor<1x64x2x16xf32>, %g: tensor<1x64x2xf32>,
                  %beta: tensor<1x64x2xf32>, %s0: tensor<3x2x16x16xf32>,
                  %cu: tensor<4xi32>)
    -> (tensor<1x64x2x16xf32>, tensor<3x2x16x16xf32>) {
  %o, %s = la.attention gated_deltanet %q, %k, %v g(%g : tensor<1x64x2xf32>)
      beta(%beta : tensor<1x64x2xf32>) initial_state(%s0 : tensor<3x2x16x16xf32>)
      cu_seqlens(%cu : tensor<4xi32>)
      : tensor<1x64x2x16xf32>, tensor<1x64x2x16xf32>, tensor<1x64x2x16xf32>
      -> tensor<1x64x2x16xf32>, tensor<3x2x16x16xf32>
  return %o, %s : tensor<1x64x2x16xf32>, tensor<3x2x16x16xf32>
}

// -----

// The backward of packed sequences: the adjoint recurrences as blocks per
// sequence (grid 2 x 1 x 1: two sequences, one value head), each reading its
// offsets; each sequence's edges (the shifted gates' first and last tokens)
// and the gate's reverse sums in kernels of one block that loop over the
// sequences and read the offsets themselves. No offset is read on the host
// (la-map-to-gpu would refuse a host load).
// RET-LABEL: func.func @packed_backward
// RET-SAME: %[[CU:[a-z0-9]+]]: memref<3xi32>
// RET: gpu.launch blocks({{.*}}) in (%{{.*}} = %c1, %{{.*}} = %c1, %{{.*}} = %c1)
// RET: scf.for %[[N:.*]] = %c0 to %c2 step %c1 {
// RET-NEXT: arith.addi %[[N]], %c1
// RET-NEXT: memref.load %[[CU]][%[[N]]] : memref<3xi32>
// RET: gpu.launch blocks(%[[SEQ:[^,]*]], {{.*}}) in (%{{.*}} = %c2, %{{.*}} = %c1, %{{.*}} = %c1) {{.*}} dynamic_shared_memory_size
// RET: memref.load %[[CU]][%[[SEQ]]] : memref<3xi32>
// RET: gpu.launch blocks(%[[SEQ2:[^,]*]], {{.*}}) in (%{{.*}} = %c2, %{{.*}} = %c1, %{{.*}} = %c1) {{.*}} dynamic_shared_memory_size
// RET: memref.load %[[CU]][%[[SEQ2]]] : memref<3xi32>
// RET: return
func.func @packed_backward(%q: tensor<1x64x1x16xf32>, %v: tensor<1x64x1x16xf32>,
                           %g: tensor<1x64x1xf32>, %cu: tensor<3xi32>)
    -> (tensor<1x64x1x16xf32>, tensor<1x64x1xf32>) {
  %dq, %dk, %dv, %dg = la.attention_grad mamba2 %q, %q, %v g(%g : tensor<1x64x1xf32>)
      cu_seqlens(%cu : tensor<3xi32>) d_o(%v : tensor<1x64x1x16xf32>)
      : tensor<1x64x1x16xf32>, tensor<1x64x1x16xf32>, tensor<1x64x1x16xf32>
      -> tensor<1x64x1x16xf32>, tensor<1x64x1x16xf32>, tensor<1x64x1x16xf32>,
         tensor<1x64x1xf32>
  return %dq, %dg : tensor<1x64x1x16xf32>, tensor<1x64x1xf32>
}

// -----

// Checkpoints every 16 tokens: a host loop over the 4 segments launches
// each segment's tasks, then copies the segment's final state into its row
// of the checkpoints and into the state the next segment starts from.
// RET-LABEL: func.func @checkpoints
// RET-SAME: %[[CK:[a-z0-9]+]]: memref<1x4x1x16x16xf32>)
// RET: scf.for %[[J:.*]] = %c0 to %c4 step %c1 {
// RET: gpu.launch {{.*}} dynamic_shared_memory_size
// RET: memref.subview %[[CK]][0, %[[J]], 0, 0, 0] [1, 1, 1, 16, 16]
// RET: gpu.launch
// RET: gpu.launch
// RET: }
// RET: gpu.dealloc
// RET: return
func.func @checkpoints(%q: tensor<1x64x1x16xf32>, %v: tensor<1x64x1x16xf32>,
                       %g: tensor<1x64x1xf32>)
    -> (tensor<1x64x1x16xf32>, tensor<1x4x1x16x16xf32>) {
  %o, %s, %c = la.attention mamba2 %q, %q, %v g(%g : tensor<1x64x1xf32>) {checkpoint_every = 16}
      : tensor<1x64x1x16xf32>, tensor<1x64x1x16xf32>, tensor<1x64x1x16xf32>
      -> tensor<1x64x1x16xf32>, tensor<1x1x16x16xf32>, tensor<1x4x1x16x16xf32>
  return %o, %c : tensor<1x64x1x16xf32>, tensor<1x4x1x16x16xf32>
}
