//===- Outlining.cpp - parts of a CPU kernel as functions of their own ----===//
//
// Upstream's outlineSingleBlockRegion (SCF utils) outlines a region's body
// and rebuilds only index constants; here the whole op moves, with its
// results, and every constant is rebuilt, so a part's vector constants
// still fold.
//
//===----------------------------------------------------------------------===//

#include "la/Codegen/CPU/Outlining.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Transforms/RegionUtils.h"

using namespace mlir;

bool mlir::la::isRebuiltConstant(Value value) {
  Operation *def = value.getDefiningOp();
  return def && def->getNumOperands() == 0 &&
         def->hasTrait<OpTrait::ConstantLike>();
}

func::CallOp mlir::la::outlineIntoFunction(Operation *op, func::FuncOp parent,
                                           StringRef name, bool internal,
                                           SymbolTable &symbols) {
  SetVector<Value> used;
  getUsedValuesDefinedAbove(op->getRegions(), used);
  used.insert(op->getOperands().begin(), op->getOperands().end());
  SmallVector<Value> arguments, constants;
  for (Value value : used)
    (isRebuiltConstant(value) ? constants : arguments).push_back(value);

  OpBuilder b(parent);
  Location loc = op->getLoc();
  auto type =
      b.getFunctionType(ValueRange(arguments).getTypes(), op->getResultTypes());
  auto outlined = func::FuncOp::create(b, loc, name, type);
  outlined.setPrivate();
  if (internal)
    outlined->setAttr(
        "llvm.linkage",
        LLVM::LinkageAttr::get(b.getContext(), LLVM::Linkage::Internal));
  // Not inlined back: clang compiles one large function much more slowly
  // than its parts (GLA's forward: 0.62 s against 0.47 s).
  outlined->setAttr("passthrough",
                    b.getArrayAttr({b.getStringAttr("noinline")}));
  symbols.insert(outlined);
  Block *entry = outlined.addEntryBlock();
  b.setInsertionPointToStart(entry);
  IRMapping mapping;
  for (auto [value, argument] : llvm::zip(arguments, entry->getArguments()))
    mapping.map(value, argument);
  for (Value value : constants)
    b.clone(*value.getDefiningOp(), mapping);
  Operation *moved = b.clone(*op, mapping);
  func::ReturnOp::create(b, loc, moved->getResults());

  b.setInsertionPoint(op);
  auto call = func::CallOp::create(b, loc, outlined, arguments);
  op->replaceAllUsesWith(call.getResults());
  op->erase();
  return call;
}
