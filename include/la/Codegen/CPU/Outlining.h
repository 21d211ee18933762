//===- Outlining.h - kernel parts as functions of their own ----*- C++ -*-===//
//
// Shared by `la-outline-tasks` (tasks that the Python package compiles in
// parallel parts) and `la-outline-chunk-parts` (loop nests that clang
// compiles faster as functions of their own than inlined into one).
//
//===----------------------------------------------------------------------===//

#ifndef LA_CODEGEN_CPU_OUTLINING_H
#define LA_CODEGEN_CPU_OUTLINING_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::la {

/// Whether `value` is defined by a constant that an outlined function
/// rebuilds instead of taking as an argument.
bool isRebuiltConstant(Value value);

/// Moves `op` into a new private function `name`, inserted before `parent`,
/// that takes the values `op` uses from above as arguments and returns
/// `op`'s results; constants are rebuilt inside instead, so that LLVM still
/// folds them. `op` is replaced by a call. The function is `noinline`, and
/// with `internal` its LLVM linkage is internal (LLVM then specialises it
/// to its call site's constants; llvm-split --preserve-locals keeps it in
/// its caller's part), external otherwise (a part of its own).
func::CallOp outlineIntoFunction(Operation *op, func::FuncOp parent,
                                 StringRef name, bool internal,
                                 SymbolTable &symbols);

} // namespace mlir::la

#endif // LA_CODEGEN_CPU_OUTLINING_H
