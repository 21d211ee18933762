//===- DistinctResults.cpp - one value per function result ----------------===//
//
// Upstream buffer-results-to-out-params (hoisting allocations) replaces a
// returned allocation by the caller's buffer and erases it; a function that
// returns the same tensor twice would hand it the erased allocation again.
// Each repeat gets a copy of its own before bufferization.
//
//===----------------------------------------------------------------------===//

#include "la/Dialect/La/LaPasses.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace mlir {
namespace la {
#define GEN_PASS_DEF_LADISTINCTRESULTSPASS
#include "la/Dialect/La/LaPasses.h.inc"
} // namespace la
} // namespace mlir

using namespace mlir;
using namespace mlir::la;

namespace {
struct LaDistinctResultsPass
    : la::impl::LaDistinctResultsPassBase<LaDistinctResultsPass> {
  void runOnOperation() override {
    getOperation().walk([](func::ReturnOp ret) {
      llvm::SmallPtrSet<Value, 4> seen;
      OpBuilder b(ret);
      for (OpOperand &operand : ret->getOpOperands()) {
        Value value = operand.get();
        if (!isa<RankedTensorType>(value.getType()) ||
            seen.insert(value).second)
          continue;
        Location loc = ret.getLoc();
        auto type = cast<RankedTensorType>(value.getType());
        Value init = emptyTensor(b, loc, mixedSizes(b, loc, value),
                                 type.getElementType());
        operand.set(linalg::CopyOp::create(b, loc, value, init).getResult(0));
      }
    });
  }
};
} // namespace
