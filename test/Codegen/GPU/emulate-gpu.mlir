// RUN: la-opt %s -la-emulate-gpu -cse | FileCheck %s

// A kernel of la-map-to-gpu: blocks become loops over the grid (z, y, x),
// the loop of threads (la.distributed) runs all its iterations, barriers
// go; the dynamic shared memory is one host buffer with the same views;
// device buffers are host buffers.
// CHECK-LABEL: func.func @kernel
// CHECK-SAME: (%[[A:.*]]: memref<2x64xf32>, %[[OUT:.*]]: memref<2x64xf32>)
// CHECK: %[[TMP:.*]] = memref.alloc() : memref<2x64xf32>
// CHECK: %[[BYTES:.*]] = arith.index_cast %{{.*}} : i32 to index
// CHECK: %[[SMEM:.*]] = memref.alloc(%[[BYTES]]) : memref<?xi8>
// CHECK: scf.for %[[BZ:.*]] = %c0 to %c1 step %c1 {
// CHECK: scf.for %[[BY:.*]] = %c0 to %c1 step %c1 {
// CHECK: scf.for %[[BX:.*]] = %c0 to %c2 step %c1 {
// CHECK: %[[VIEW:.*]] = memref.view %[[SMEM]][%c0][] : memref<?xi8> to memref<64xf32>
// CHECK: scf.for %[[I:.*]] = %c0 to %c64 step %c1 {
// CHECK: %[[X:.*]] = memref.load %[[A]][%[[BX]], %[[I]]]
// CHECK: memref.store %[[X]], %[[VIEW]][%[[I]]]
// CHECK: memref.store %[[X]], %[[TMP]][%[[BX]], %[[I]]]
// CHECK: } {la.distributed}
// CHECK-NOT: gpu.
// CHECK: memref.dealloc %[[SMEM]]
// CHECK: memref.dealloc %[[TMP]]
// CHECK-NOT: gpu.
// CHECK: return
func.func @kernel(%a: memref<2x64xf32>, %out: memref<2x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %size = arith.constant 256 : i32
  %t0 = gpu.wait async
  %tmp, %t1 = gpu.alloc async [%t0] () : memref<2x64xf32>
  gpu.wait [%t1]
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c2, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%nx = %c128, %ny = %c1, %nz = %c1)
             dynamic_shared_memory_size %size {
    %smem = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
    %view = memref.view %smem[%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<64xf32, #gpu.address_space<workgroup>>
    %buf = memref.memory_space_cast %view : memref<64xf32, #gpu.address_space<workgroup>> to memref<64xf32>
    scf.for %i = %tx to %c64 step %nx {
      %x = memref.load %a[%bx, %i] : memref<2x64xf32>
      memref.store %x, %buf[%i] : memref<64xf32>
      memref.store %x, %tmp[%bx, %i] : memref<2x64xf32>
    } {la.distributed}
    gpu.barrier
    gpu.terminator
  }
  %t2 = gpu.wait async
  %t3 = gpu.dealloc async [%t2] %tmp : memref<2x64xf32>
  gpu.wait [%t3]
  return
}
