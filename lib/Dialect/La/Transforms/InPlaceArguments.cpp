//===- InPlaceArguments.cpp - results written into their arguments -------===//
//
// A function argument marked `la.in_place` lends its buffer to one result
// (a kernel's final state written over its initial state). After one-shot
// bufferization that result is the argument itself: it is dropped, and the
// caller reads the buffer it passed. A marked argument whose result went
// elsewhere is an error, never a stale buffer.
//
//===----------------------------------------------------------------------===//

#include "la/Dialect/La/LaPasses.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/BitVector.h"

namespace mlir {
namespace la {
#define GEN_PASS_DEF_LAINPLACEARGUMENTSPASS
#include "la/Dialect/La/LaPasses.h.inc"
} // namespace la
} // namespace mlir

using namespace mlir;
using namespace mlir::la;

/// Drops the results of `func` that are its `la.in_place` arguments.
static LogicalResult dropInPlaceResults(func::FuncOp func, ModuleOp module) {
  SmallVector<BlockArgument> marked;
  for (BlockArgument arg : func.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), kInPlaceAttrName))
      marked.push_back(arg);
  if (marked.empty())
    return success();
  if (!SymbolTable::symbolKnownUseEmpty(func, module))
    return func.emitError() << "has arguments marked " << kInPlaceAttrName
                            << " and callers, whose results would change";
  SmallVector<func::ReturnOp> returns;
  func.walk([&](func::ReturnOp ret) { returns.push_back(ret); });
  if (returns.size() != 1)
    return func.emitError()
           << "has arguments marked " << kInPlaceAttrName << " and "
           << returns.size() << " returns (one is needed)";
  func::ReturnOp ret = returns.front();
  llvm::BitVector drop(ret.getNumOperands());
  for (BlockArgument arg : marked) {
    std::optional<unsigned> result;
    for (OpOperand &operand : ret->getOpOperands()) {
      Value value = operand.get();
      while (auto cast = value.getDefiningOp<memref::CastOp>())
        value = cast.getSource();
      if (value == arg && !drop.test(operand.getOperandNumber())) {
        result = operand.getOperandNumber();
        break;
      }
    }
    if (!result)
      return emitError(arg.getLoc())
             << "argument #" << arg.getArgNumber() << " of '" << func.getName()
             << "' is marked " << kInPlaceAttrName
             << " but no result was written into its buffer (bufferization "
                "wrote it elsewhere, or the function does not return it)";
    drop.set(*result);
  }
  ret->eraseOperands(drop);
  return func.eraseResults(drop);
}

namespace {
struct LaInPlaceArgumentsPass
    : la::impl::LaInPlaceArgumentsPassBase<LaInPlaceArgumentsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    for (auto func : llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
      if (!func.isExternal() && failed(dropInPlaceResults(func, module)))
        return signalPassFailure();
  }
};
} // namespace
