//===- Passes.h - CPU code generation passes of la --------------*- C++ -*-===//

#ifndef LA_CODEGEN_CPU_PASSES_H
#define LA_CODEGEN_CPU_PASSES_H

#include "la/Dialect/La/LaDialect.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
namespace la {

#define GEN_PASS_DECL
#include "la/Codegen/CPU/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "la/Codegen/CPU/Passes.h.inc"

} // namespace la
} // namespace mlir

#endif // LA_CODEGEN_CPU_PASSES_H
