// RUN: la-opt %s -split-input-file -la-flush-denormals | FileCheck %s

// The function sets MXCSR's flush-to-zero and denormals-are-zero bits
// (0x8040 = 32832) at its entry and restores the saved value before each
// return; each outermost forall body (a thread's task under OpenMP) does
// the same for itself, and the forall nested in it is left alone.
// CHECK-LABEL: func.func @tasks
// CHECK: %[[SLOT:.*]] = llvm.alloca %{{.*}} x i32 {alignment = 4 : i64}
// CHECK: llvm.call_intrinsic "llvm.x86.sse.stmxcsr"(%[[SLOT]]) : (!llvm.ptr) -> ()
// CHECK: %[[SAVED:.*]] = llvm.load %[[SLOT]] : !llvm.ptr -> i32
// CHECK: %[[BITS:.*]] = arith.constant 32832 : i32
// CHECK: %[[FLUSH:.*]] = arith.ori %[[SAVED]], %[[BITS]] : i32
// CHECK: llvm.store %[[FLUSH]], %[[SLOT]] : i32, !llvm.ptr
// CHECK: llvm.call_intrinsic "llvm.x86.sse.ldmxcsr"(%[[SLOT]]) : (!llvm.ptr) -> ()
// CHECK: scf.forall (%{{.*}}) in (4) {
// CHECK: %[[TSLOT:.*]] = llvm.alloca
// CHECK: llvm.call_intrinsic "llvm.x86.sse.stmxcsr"(%[[TSLOT]])
// CHECK: %[[TSAVED:.*]] = llvm.load %[[TSLOT]]
// CHECK: llvm.call_intrinsic "llvm.x86.sse.ldmxcsr"(%[[TSLOT]])
// CHECK: scf.forall (%{{.*}}) in (2) {
// CHECK-NOT: llvm.call_intrinsic
// CHECK: memref.store
// CHECK: }
// CHECK: llvm.store %[[TSAVED]], %[[TSLOT]] : i32, !llvm.ptr
// CHECK-NEXT: llvm.call_intrinsic "llvm.x86.sse.ldmxcsr"(%[[TSLOT]])
// CHECK: }
// CHECK: llvm.store %[[SAVED]], %[[SLOT]] : i32, !llvm.ptr
// CHECK-NEXT: llvm.call_intrinsic "llvm.x86.sse.ldmxcsr"(%[[SLOT]])
// CHECK-NEXT: return
func.func @tasks(%m: memref<4x2xf32>, %x: f32) {
  scf.forall (%i) in (4) {
    scf.forall (%j) in (2) {
      memref.store %x, %m[%i, %j] : memref<4x2xf32>
    }
  }
  return
}

// -----

// Every return restores; a declaration is left alone.
// CHECK-LABEL: func.func private @external(f32)
// CHECK-LABEL: func.func @two_returns
// CHECK: %[[SLOT:.*]] = llvm.alloca
// CHECK: %[[SAVED:.*]] = llvm.load %[[SLOT]]
// CHECK: cf.cond_br
// CHECK: llvm.store %[[SAVED]], %[[SLOT]]
// CHECK-NEXT: llvm.call_intrinsic "llvm.x86.sse.ldmxcsr"(%[[SLOT]])
// CHECK-NEXT: return
// CHECK: llvm.store %[[SAVED]], %[[SLOT]]
// CHECK-NEXT: llvm.call_intrinsic "llvm.x86.sse.ldmxcsr"(%[[SLOT]])
// CHECK-NEXT: return
func.func private @external(f32)
func.func @two_returns(%c: i1, %x: f32) {
  cf.cond_br %c, ^a, ^b
^a:
  return
^b:
  func.call @external(%x) : (f32) -> ()
  return
}
