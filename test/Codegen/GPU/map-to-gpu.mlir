// RUN: la-opt %s -split-input-file -la-map-to-gpu -cse | FileCheck %s
// RUN: la-opt %s -split-input-file -la-map-to-gpu=threads-per-block=64 | FileCheck %s --check-prefix=T64
// RUN: la-opt %s -split-input-file -la-map-to-gpu=mma-precision=f16 | FileCheck %s --check-prefix=F16
// RUN: la-opt %s -split-input-file -la-map-to-gpu=mma-precision=bf16 | FileCheck %s --check-prefix=BF16

// A block forall becomes a launch over its grid; the task's buffer moves to
// dynamic shared memory (16 x 8 f32 = 512 bytes); the thread forall becomes
// a loop of the block's threads over its 128 linearized iterations, and the
// copy into the output a loop over its elements, each followed by a barrier.
// CHECK-LABEL: func.func @one_buffer
// CHECK-SAME: (%[[A:.*]]: memref<2x16x8xf32>, %[[OUT:.*]]: memref<2x16x8xf32>)
// CHECK: gpu.launch blocks(%[[BX:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %c2, %{{.*}} = %c1, %{{.*}} = %c1) threads(%[[TX:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %[[NT:c128]], %{{.*}} = %c1, %{{.*}} = %c1) dynamic_shared_memory_size %c512_i32
// CHECK: %[[SMEM:.*]] = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
// CHECK: %[[VIEW:.*]] = memref.view %[[SMEM]][%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<16x8xf32, #gpu.address_space<workgroup>>
// CHECK: %[[BUF:.*]] = memref.memory_space_cast %[[VIEW]] : memref<16x8xf32, #gpu.address_space<workgroup>> to memref<16x8xf32>
// CHECK: scf.for %[[I:.*]] = %[[TX]] to %c128 step %[[NT]] {
// CHECK: %[[IJ:.*]]:2 = affine.delinearize_index %[[I]] into (16, 8)
// CHECK: memref.load %[[A]][%[[BX]], %[[IJ]]#0, %[[IJ]]#1]
// CHECK: memref.store %{{.*}}, %[[BUF]][%[[IJ]]#0, %[[IJ]]#1]
// CHECK: }
// CHECK-NEXT: gpu.barrier
// CHECK: %[[SUB:.*]] = memref.subview %[[OUT]][%[[BX]], 0, 0]
// CHECK: scf.for %[[E:.*]] = %[[TX]] to %c128 step %[[NT]] {
// CHECK: %[[RC:.*]]:2 = affine.delinearize_index %[[E]] into (16, 8)
// CHECK: %[[X:.*]] = memref.load %[[BUF]][%[[RC]]#0, %[[RC]]#1]
// CHECK: memref.store %[[X]], %[[SUB]][%[[RC]]#0, %[[RC]]#1]
// CHECK: }
// CHECK-NEXT: gpu.barrier
// CHECK-NOT: memref.dealloc
// CHECK: gpu.terminator
// T64-LABEL: func.func @one_buffer
// T64: threads(%{{.*}}, %{{.*}}, %{{.*}}) in (%{{.*}} = %c64,
func.func @one_buffer(%a: memref<2x16x8xf32>, %out: memref<2x16x8xf32>) {
  scf.forall (%t) in (2) {
    %buf = memref.alloc() : memref<16x8xf32>
    scf.forall (%i, %j) in (16, 8) {
      %x = memref.load %a[%t, %i, %j] : memref<2x16x8xf32>
      %y = arith.mulf %x, %x : f32
      memref.store %y, %buf[%i, %j] : memref<16x8xf32>
    } {mapping = [#gpu.thread<linear_dim_1>, #gpu.thread<linear_dim_0>]}
    %sub = memref.subview %out[%t, 0, 0] [1, 16, 8] [1, 1, 1]
        : memref<2x16x8xf32> to memref<16x8xf32, strided<[8, 1], offset: ?>>
    memref.copy %buf, %sub : memref<16x8xf32> to memref<16x8xf32, strided<[8, 1], offset: ?>>
    memref.dealloc %buf : memref<16x8xf32>
  } {mapping = [#gpu.block<x>]}
  return
}

// -----

// Lifetimes: %first is dead once %second is written, so %third (allocated
// after %first's last use) reuses %first's bytes; %second overlaps both and
// gets its own. 3 x 256 bytes would be 768; the plan needs 512. (CSE merges
// the views of %first and %third: same bytes.)
// CHECK-LABEL: func.func @packing
// CHECK: dynamic_shared_memory_size %c512_i32
// CHECK: %[[FIRSTV:.*]] = memref.view %{{.*}}[%c0][]
// CHECK: %[[FIRST:.*]] = memref.memory_space_cast %[[FIRSTV]]
// CHECK: %[[SECONDV:.*]] = memref.view %{{.*}}[%c256][]
// CHECK: %[[SECOND:.*]] = memref.memory_space_cast %[[SECONDV]]
// CHECK-NOT: memref.view
// CHECK: %[[X:.*]] = memref.load %[[SECOND]]
// CHECK-NEXT: memref.store %[[X]], %[[FIRST]]
func.func @packing(%a: memref<64xf32>, %out: memref<64xf32>) {
  scf.forall (%t) in (1) {
    %first = memref.alloc() : memref<64xf32>
    %second = memref.alloc() : memref<64xf32>
    memref.copy %a, %first : memref<64xf32> to memref<64xf32>
    memref.copy %first, %second : memref<64xf32> to memref<64xf32>
    %third = memref.alloc() : memref<64xf32>
    memref.copy %second, %third : memref<64xf32> to memref<64xf32>
    memref.copy %third, %out : memref<64xf32> to memref<64xf32>
  } {mapping = [#gpu.block<x>]}
  return
}

// -----

// Around the launch: the output buffer copied (through a collapse_shape)
// into the result becomes a view of the result, written in place; another
// host buffer becomes device memory (gpu-to-llvm lowers the asynchronous
// forms), freed before the return.
// CHECK-LABEL: func.func @host_side
// CHECK-SAME: (%[[A:.*]]: memref<2x8xf32>, %[[RES:.*]]: memref<16xf32>)
// CHECK: %[[OUTV:.*]] = memref.expand_shape %[[RES]] {{\[\[}}0, 1]] output_shape [2, 8]
// CHECK: %[[T0:.*]] = gpu.wait async
// CHECK: %[[TMP:.*]], %[[T1:.*]] = gpu.alloc async [%[[T0]]] () : memref<2x8xf32>
// CHECK: gpu.wait [%[[T1]]]
// CHECK: gpu.launch
// CHECK: memref.store %{{.*}}, %[[TMP]]
// CHECK: memref.store %{{.*}}, %[[OUTV]]
// CHECK: gpu.terminator
// CHECK: %[[T2:.*]] = gpu.wait async
// CHECK: %[[T3:.*]] = gpu.dealloc async [%[[T2]]] %[[TMP]]
// CHECK: gpu.wait [%[[T3]]]
// CHECK-NOT: memref.copy
// CHECK: return
func.func @host_side(%a: memref<2x8xf32>, %res: memref<16xf32>) {
  %out = memref.alloc() : memref<2x8xf32>
  %tmp = memref.alloc() : memref<2x8xf32>
  scf.forall (%t) in (2) {
    scf.forall (%i) in (8) {
      %x = memref.load %a[%t, %i] : memref<2x8xf32>
      memref.store %x, %tmp[%t, %i] : memref<2x8xf32>
      memref.store %x, %out[%t, %i] : memref<2x8xf32>
    } {mapping = [#gpu.thread<linear_dim_0>]}
  } {mapping = [#gpu.block<x>]}
  memref.dealloc %tmp : memref<2x8xf32>
  %flat = memref.collapse_shape %out [[0, 1]] : memref<2x8xf32> into memref<16xf32>
  memref.copy %flat, %res : memref<16xf32> to memref<16xf32>
  return
}

// -----

// A warp forall (tensor-core tiles of a 32 x 16 output, reduction 16): the
// block's 4 warps take its 4 tiles (warp w: w, w + 4, ...); each lane loads
// its accumulator fragment, runs two mma.sync m16n8k8 steps (tf32) over
// the reduction and stores the fragment back.
// CHECK-LABEL: func.func @warp_tiles
// CHECK-SAME: (%[[A:.*]]: memref<32x16xf32>, %[[B:.*]]: memref<16x16xf32>, %[[C:.*]]: memref<32x16xf32>)
// CHECK: gpu.launch blocks({{.*}}) threads(%[[TX:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %[[NT:c128]],
// CHECK: %[[WARP:.*]] = arith.divui %[[TX]], %c32
// CHECK: %[[LANE:.*]] = arith.remui %[[TX]], %c32
// CHECK: %[[WARPS:.*]] = arith.divui %[[NT]], %c32
// CHECK: scf.for %[[W:.*]] = %[[WARP]] to %c4 step %[[WARPS]] {
// CHECK: %[[IJ:.*]]:2 = affine.delinearize_index %[[W]] into (2, 2)
// CHECK: %[[GROUP:.*]] = arith.divui %[[LANE]], %c4
// CHECK: %[[T:.*]] = arith.remui %[[LANE]], %c4
// CHECK: %[[ACC:.*]] = vector.from_elements {{.*}} : vector<2x2xf32>
// CHECK: %[[RES:.*]] = scf.for %[[K:.*]] = %c0 to %c16 step %c8 iter_args(%[[IT:.*]] = %[[ACC]]) -> (vector<2x2xf32>) {
// CHECK: %[[KT:.*]] = arith.addi %[[K]], %[[T]]
// CHECK: %[[AF:.*]] = vector.from_elements {{.*}} : vector<4x1xf32>
// CHECK: %[[BF:.*]] = vector.from_elements {{.*}} : vector<2x1xf32>
// CHECK: %[[NEXT:.*]] = nvgpu.mma.sync(%[[AF]], %[[BF]], %[[IT]]) {mmaShape = [16, 8, 8], tf32Enabled} : (vector<4x1xf32>, vector<2x1xf32>, vector<2x2xf32>) -> vector<2x2xf32>
// CHECK: scf.yield %[[NEXT]]
// CHECK: vector.extract %[[RES]][0, 0]
// CHECK: memref.store
// CHECK: vector.extract %[[RES]][1, 1]
// CHECK: memref.store
// CHECK: gpu.barrier
// f16: one m16n8k16 step; lane (group, t) loads A's registers at rows
// group and group + 8, columns 2t, 2t + 1 (and + 8), as f16.
// F16-LABEL: func.func @warp_tiles
// F16: scf.for %{{.*}} = %c0 to %c16 step %c16{{.*}} iter_args(%[[IT:.*]] = %{{.*}}) -> (vector<2x2xf32>) {
// F16: arith.truncf %{{.*}} : f32 to f16
// F16: %[[AF:.*]] = vector.from_elements {{.*}} : vector<4x2xf16>
// F16: %[[BF:.*]] = vector.from_elements {{.*}} : vector<2x2xf16>
// F16: nvgpu.mma.sync(%[[AF]], %[[BF]], %[[IT]]) {mmaShape = [16, 8, 16]} : (vector<4x2xf16>, vector<2x2xf16>, vector<2x2xf32>) -> vector<2x2xf32>
// bf16: the same registers packed in i32 for NVVM's op (nvgpu has no bf16
// lowering).
// BF16-LABEL: func.func @warp_tiles
// BF16: arith.truncf %{{.*}} : f32 to bf16
// BF16: %[[PAIR:.*]] = vector.from_elements %{{.*}}, %{{.*}} : vector<2xbf16>
// BF16: %[[WORD:.*]] = vector.bitcast %[[PAIR]] : vector<2xbf16> to vector<1xi32>
// BF16: %[[D:.*]] = nvvm.mma.sync A[{{.*}}] B[{{.*}}] C[{{.*}}] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>, shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// BF16: llvm.extractvalue %[[D]][3]
func.func @warp_tiles(%a: memref<32x16xf32>, %b: memref<16x16xf32>,
                      %c: memref<32x16xf32>) {
  scf.forall (%t) in (1) {
    scf.forall (%i, %j) = (0, 0) to (32, 16) step (16, 8) {
      %at = memref.subview %a[%i, 0] [16, 16] [1, 1]
          : memref<32x16xf32> to memref<16x16xf32, strided<[16, 1], offset: ?>>
      %bt = memref.subview %b[0, %j] [16, 8] [1, 1]
          : memref<16x16xf32> to memref<16x8xf32, strided<[16, 1], offset: ?>>
      %ct = memref.subview %c[%i, %j] [16, 8] [1, 1]
          : memref<32x16xf32> to memref<16x8xf32, strided<[16, 1], offset: ?>>
      linalg.matmul ins(%at, %bt : memref<16x16xf32, strided<[16, 1], offset: ?>>,
                                   memref<16x8xf32, strided<[16, 1], offset: ?>>)
                    outs(%ct : memref<16x8xf32, strided<[16, 1], offset: ?>>)
    } {mapping = [#gpu.warp<linear_dim_1>, #gpu.warp<linear_dim_0>]}
  } {mapping = [#gpu.block<x>]}
  return
}

// -----

// A subtraction of a product (out + (-a) * b, as la writes u - W S): the
// negated input's fragment elements are negated as they are loaded.
// CHECK-LABEL: func.func @negated_product
// CHECK: scf.for %{{.*}} = %c0 to %c16 step %c8 iter_args(
// CHECK-COUNT-4: arith.negf
// CHECK: vector.from_elements {{.*}} : vector<4x1xf32>
// CHECK-NOT: arith.negf
// CHECK: nvgpu.mma.sync
func.func @negated_product(%a: memref<16x16xf32>, %b: memref<16x8xf32>,
                           %c: memref<16x8xf32>) {
  scf.forall (%t) in (1) {
    scf.forall (%i) in (1) {
      linalg.generic {
          indexing_maps = [affine_map<(m, n, k) -> (m, k)>,
                           affine_map<(m, n, k) -> (k, n)>,
                           affine_map<(m, n, k) -> (m, n)>],
          iterator_types = ["parallel", "parallel", "reduction"]}
          ins(%a, %b : memref<16x16xf32>, memref<16x8xf32>)
          outs(%c : memref<16x8xf32>) {
      ^bb0(%x: f32, %y: f32, %acc: f32):
        %nx = arith.negf %x : f32
        %p = arith.mulf %nx, %y : f32
        %s = arith.addf %acc, %p : f32
        linalg.yield %s : f32
      }
    } {mapping = [#gpu.warp<linear_dim_0>]}
  } {mapping = [#gpu.block<x>]}
  return
}

// -----

// Work outside the tasks gets kernels of its own. A structured op: one
// parallel iteration per thread, 128 per block, ceil(48 * 4 / 128) = 2
// blocks; block b takes iterations [128 b, min(128 (b + 1), 192)), each
// thread's reduction (over 8) a tile of its own.
// CHECK: #[[$FIRST:.*]] = affine_map<()[s0] -> (s0 * 128)>
// CHECK: #[[$COUNT:.*]] = affine_map<()[s0] -> (128, s0 * -128 + 192)>
// CHECK-LABEL: func.func @sum_outside_tasks
// CHECK-SAME: (%[[X:.*]]: memref<48x4x8xf32>, %[[S:.*]]: memref<48x4xf32>)
// CHECK: gpu.launch blocks(%[[BX:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %c2, %{{.*}} = %c1, %{{.*}} = %c1) threads(%[[TX:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %[[NT:c128]], %{{.*}} = %c1, %{{.*}} = %c1)
// CHECK: %[[FIRST:.*]] = affine.apply #[[$FIRST]]()[%[[BX]]]
// CHECK: %[[COUNT:.*]] = affine.min #[[$COUNT]]()[%[[BX]]]
// CHECK: scf.for %[[J:.*]] = %[[TX]] to %[[COUNT]] step %[[NT]] {
// CHECK: %[[I:.*]] = arith.addi %[[FIRST]], %[[J]] : index
// CHECK: %[[IJ:.*]]:2 = affine.delinearize_index %[[I]] into (48, 4)
// CHECK: %[[IN:.*]] = memref.subview %[[X]][%[[IJ]]#0, %[[IJ]]#1, 0] [1, 1, 8] [1, 1, 1]
// CHECK: %[[OUT:.*]] = memref.subview %[[S]][%[[IJ]]#0, %[[IJ]]#1] [1, 1] [1, 1]
// CHECK: linalg.generic {{.*}} ins(%[[IN]] : {{.*}}) outs(%[[OUT]] : {{.*}})
// CHECK: } {la.distributed}
// CHECK: gpu.terminator
// The copy between two of the function's buffers: a linalg.copy kernel.
// CHECK: gpu.launch blocks({{.*}}) in (%{{.*}} = %c2, %{{.*}} = %c1, %{{.*}} = %c1)
// CHECK: linalg.copy
// CHECK: gpu.terminator
// CHECK-NOT: memref.copy
// CHECK: return
#sum_in = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#sum_out = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @sum_outside_tasks(%x: memref<48x4x8xf32>, %s: memref<48x4xf32>) {
  linalg.generic {indexing_maps = [#sum_in, #sum_out],
                  iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : memref<48x4x8xf32>) outs(%s : memref<48x4xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %sum = arith.addf %acc, %in : f32
    linalg.yield %sum : f32
  }
  %flat = memref.collapse_shape %x [[0], [1, 2]] : memref<48x4x8xf32> into memref<48x32xf32>
  %head = memref.subview %flat[0, 0] [48, 4] [1, 1] : memref<48x32xf32> to memref<48x4xf32, strided<[32, 1]>>
  memref.copy %s, %head : memref<48x4xf32> to memref<48x4xf32, strided<[32, 1]>>
  return
}

// -----

// A loop outside the tasks (a reverse sum over tokens) runs in one block:
// its ops are split over the block's threads, each followed by a barrier,
// the loop's indices computed by every thread alike.
// CHECK-LABEL: func.func @token_loop_outside_tasks
// CHECK-SAME: (%[[X:.*]]: memref<16x8xf32>, %[[ACC:.*]]: memref<8xf32>, %[[Y:.*]]: memref<16x8xf32>)
// CHECK: gpu.launch blocks(%{{.*}}, %{{.*}}, %{{.*}}) in (%{{.*}} = %c1, %{{.*}} = %c1, %{{.*}} = %c1) threads(%[[TX:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %[[NT:c128]],
// CHECK: scf.for %[[R:.*]] = %c0 to %c16 step %c1 {
// CHECK: %[[T:.*]] = arith.subi %c15, %[[R]] : index
// CHECK: %[[ROW:.*]] = memref.subview %[[X]][%[[T]], 0] [1, 8] [1, 1]
// CHECK: scf.for %[[E:.*]] = %[[TX]] to %c8 step %[[NT]] {
// CHECK: memref.subview %[[ROW]][%[[E]]] [1] [1]
// CHECK: linalg.generic
// CHECK: } {la.distributed}
// CHECK-NEXT: gpu.barrier
// CHECK: scf.for %[[C:.*]] = %[[TX]] to %c8 step %[[NT]] {
// CHECK: %[[CI:.*]] = affine.delinearize_index %[[C]] into (8)
// CHECK: memref.load %[[ACC]][%[[CI]]]
// CHECK: memref.store
// CHECK: } {la.distributed}
// CHECK-NEXT: gpu.barrier
// CHECK: }
// CHECK: gpu.terminator
#row = affine_map<(d0) -> (d0)>
func.func @token_loop_outside_tasks(%x: memref<16x8xf32>, %acc: memref<8xf32>,
                                    %y: memref<16x8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c15 = arith.constant 15 : index
  %c16 = arith.constant 16 : index
  scf.for %r = %c0 to %c16 step %c1 {
    %t = arith.subi %c15, %r : index
    %in = memref.subview %x[%t, 0] [1, 8] [1, 1] : memref<16x8xf32> to memref<8xf32, strided<[1], offset: ?>>
    linalg.generic {indexing_maps = [#row, #row], iterator_types = ["parallel"]}
        ins(%in : memref<8xf32, strided<[1], offset: ?>>) outs(%acc : memref<8xf32>) {
    ^bb0(%a: f32, %b: f32):
      %sum = arith.addf %a, %b : f32
      linalg.yield %sum : f32
    }
    %out = memref.subview %y[%t, 0] [1, 8] [1, 1] : memref<16x8xf32> to memref<8xf32, strided<[1], offset: ?>>
    memref.copy %acc, %out : memref<8xf32> to memref<8xf32, strided<[1], offset: ?>>
  }
  return
}

// -----

// Scalars that the host would read from device memory (packed sequences'
// offsets, hoisted out of a loop over one sequence) and what the host
// computes from them (bounds, a view, an scf.if choosing a view) are
// computed by each kernel that uses them; nothing reads device memory on
// the host.
// CHECK-LABEL: func.func @offsets_read_in_the_kernels
// CHECK-SAME: (%[[CU:[^:]*]]: memref<2xi32>, %[[X:[^:]*]]: memref<8xf32>, %[[Y:[^:]*]]: memref<8xf32>)
// CHECK-NOT: memref.load
// CHECK: gpu.launch
// CHECK: %[[RAW:.*]] = memref.load %[[CU]][%{{.*}}] : memref<2xi32>
// CHECK: %[[START:.*]] = arith.index_cast %[[RAW]]
// CHECK: %[[ROW:.*]] = scf.if
// CHECK: memref.subview %[[X]][%[[START]]] [1] [1]
// CHECK: memref.subview %[[ROW]][
// CHECK: linalg.copy
// CHECK: gpu.terminator
// CHECK-NOT: memref.load
// CHECK: return
func.func @offsets_read_in_the_kernels(%cu: memref<2xi32>, %x: memref<8xf32>,
                                       %y: memref<8xf32>) {
  %c0 = arith.constant 0 : index
  %raw = memref.load %cu[%c0] : memref<2xi32>
  %start = arith.index_cast %raw : i32 to index
  %c8 = arith.constant 8 : index
  %inside = arith.cmpi ult, %start, %c8 : index
  %row = scf.if %inside -> (memref<1xf32, strided<[1], offset: ?>>) {
    %view = memref.subview %x[%start] [1] [1] : memref<8xf32> to memref<1xf32, strided<[1], offset: ?>>
    scf.yield %view : memref<1xf32, strided<[1], offset: ?>>
  } else {
    %c7 = arith.constant 7 : index
    %last = memref.subview %x[%c7] [1] [1] : memref<8xf32> to memref<1xf32, strided<[1], offset: ?>>
    scf.yield %last : memref<1xf32, strided<[1], offset: ?>>
  }
  %out = memref.subview %y[%c0] [1] [1] : memref<8xf32> to memref<1xf32, strided<[1], offset: ?>>
  memref.copy %row, %out : memref<1xf32, strided<[1], offset: ?>> to memref<1xf32, strided<[1], offset: ?>>
  return
}
