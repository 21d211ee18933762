//===- AllowFPContraction.cpp - FMAs in la's kernels ----------------------===//
//
// arith's float ops carry no fast-math flags, so NVPTX keeps every
// multiply and add apart (mul.rn + add.rn): the kernels' products, which
// are chains of multiply-adds in scalar loops, issue twice the arithmetic
// instructions they need. `fastmath<contract>` lets LLVM fuse each pair into
// one fma.rn (rounded once, so no less accurate); nothing else is relaxed.
//
//===----------------------------------------------------------------------===//

#include "la/Codegen/GPU/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

namespace mlir::la {
#define GEN_PASS_DEF_LAALLOWFPCONTRACTIONPASS
#include "la/Codegen/GPU/Passes.h.inc"
} // namespace mlir::la

using namespace mlir;

namespace {
struct LaAllowFPContractionPass
    : la::impl::LaAllowFPContractionPassBase<LaAllowFPContractionPass> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    getOperation()->walk([&](arith::ArithFastMathInterface op) {
      // Some ops (the conversions' fastmath) may carry no flags at all.
      arith::FastMathFlagsAttr attr = op.getFastMathFlagsAttr();
      arith::FastMathFlags flags =
          attr ? attr.getValue() : arith::FastMathFlags::none;
      op->setAttr(op.getFastMathAttrName(),
                  arith::FastMathFlagsAttr::get(
                      ctx, flags | arith::FastMathFlags::contract));
    });
  }
};
} // namespace
