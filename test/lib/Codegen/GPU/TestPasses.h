//===- TestPasses.h - la's test devices -------------------------*- C++ -*-===//

#ifndef LA_TEST_CODEGEN_GPU_TESTPASSES_H
#define LA_TEST_CODEGEN_GPU_TESTPASSES_H

#include "la/Dialect/La/LaDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
namespace la {

#define GEN_PASS_DECL
#include "TestPasses.h.inc"

#define GEN_PASS_REGISTRATION
#include "TestPasses.h.inc"

} // namespace la
} // namespace mlir

#endif // LA_TEST_CODEGEN_GPU_TESTPASSES_H
