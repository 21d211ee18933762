// RUN: la-opt %s -split-input-file -la-outline-tasks | FileCheck %s

// Two outermost task loops: each becomes a private, noinline function
// taking the values it uses from above (the memrefs, the loop bound and the
// float, in the order of their first use), with the constants rebuilt
// inside; the nested loop moves with its task. The function calls the
// tasks in their order.
// CHECK-LABEL: func.func private @two_tasks_task0(
// CHECK-SAME: %[[X:[a-z0-9]+]]: f32, %[[M:[a-z0-9]+]]: memref<?x2xf32>, %[[N:[a-z0-9]+]]: index)
// CHECK-SAME: attributes {passthrough = ["noinline"]}
// CHECK: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK: scf.forall (%[[I:.*]]) in (%[[N]]) {
// CHECK: scf.forall (%[[J:.*]]) in (2) {
// CHECK: %[[SUM:.*]] = arith.addf %[[X]], %[[ONE]] : f32
// CHECK: memref.store %[[SUM]], %[[M]][%[[I]], %[[J]]]
// CHECK: return
// CHECK-LABEL: func.func private @two_tasks_task1(
// CHECK-SAME: %[[Y:[a-z0-9]+]]: memref<4xf32>, %[[M1:[a-z0-9]+]]: memref<?x2xf32>, %[[N1:[a-z0-9]+]]: index)
// CHECK: scf.forall (%[[I1:.*]]) in (%[[N1]]) {
// CHECK: %[[V:.*]] = memref.load %[[Y]]
// CHECK: memref.store %[[V]], %[[M1]][%[[I1]]
// CHECK-LABEL: func.func @two_tasks(
// CHECK-SAME: %[[FM:[a-z0-9]+]]: memref<?x2xf32>, %[[FY:[a-z0-9]+]]: memref<4xf32>, %[[FX:[a-z0-9]+]]: f32)
// CHECK: %[[FN:.*]] = memref.dim %[[FM]]
// CHECK-NOT: scf.forall
// CHECK: call @two_tasks_task0(%[[FX]], %[[FM]], %[[FN]]) : (f32, memref<?x2xf32>, index) -> ()
// CHECK-NEXT: call @two_tasks_task1(%[[FY]], %[[FM]], %[[FN]]) : (memref<4xf32>, memref<?x2xf32>, index) -> ()
// CHECK-NEXT: return
func.func @two_tasks(%m: memref<?x2xf32>, %y: memref<4xf32>, %x: f32) {
  %c0 = arith.constant 0 : index
  %one = arith.constant 1.0 : f32
  %n = memref.dim %m, %c0 : memref<?x2xf32>
  scf.forall (%i) in (%n) {
    scf.forall (%j) in (2) {
      %s = arith.addf %x, %one : f32
      memref.store %s, %m[%i, %j] : memref<?x2xf32>
    }
  }
  scf.forall (%i) in (%n) {
    %v = memref.load %y[%c0] : memref<4xf32>
    %c1 = arith.constant 1 : index
    memref.store %v, %m[%i, %c1] : memref<?x2xf32>
  }
  return
}

// -----

// One task loop (a forward): left in place, no function added.
// CHECK-LABEL: func.func @one_task(
// CHECK-NOT: call
// CHECK: scf.forall
// CHECK-NOT: func.func
func.func @one_task(%m: memref<4xf32>, %x: f32) {
  scf.forall (%i) in (4) {
    memref.store %x, %m[%i] : memref<4xf32>
  }
  return
}

// -----

// Loops with results (on tensors, before bufferization) stay: a call
// would need out-parameters.
// CHECK-LABEL: func.func @tensor_tasks(
// CHECK-NOT: call
// CHECK: scf.forall
// CHECK: scf.forall
func.func @tensor_tasks(%t: tensor<4xf32>, %x: f32) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = scf.forall (%i) in (4) shared_outs(%o = %t) -> (tensor<4xf32>) {
    %e = tensor.from_elements %x : tensor<1xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %e into %o[%i] [1] [1] : tensor<1xf32> into tensor<4xf32>
    }
  }
  %b = scf.forall (%i) in (4) shared_outs(%o = %t) -> (tensor<4xf32>) {
    %e = tensor.from_elements %x : tensor<1xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %e into %o[%i] [1] [1] : tensor<1xf32> into tensor<4xf32>
    }
  }
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}
