//===- LaToLinalg.cpp - the convert-la-to-linalg pass ---------------------===//

#include "la/Conversion/LaToLinalg.h"
#include "la/Dialect/La/LaPasses.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/DialectConversion.h"

#include <cmath>

namespace mlir {
namespace la {
#define GEN_PASS_DEF_CONVERTLATOLINALGPASS
#include "la/Conversion/Passes.h.inc"
} // namespace la
} // namespace mlir

using namespace mlir;
using namespace mlir::la;

namespace {
struct ConvertLaToLinalgPass
    : la::impl::ConvertLaToLinalgPassBase<ConvertLaToLinalgPass> {
  using Base::Base;

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    ConversionTarget target(*ctx);
    target.addIllegalDialect<LaDialect>();
    target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
    RewritePatternSet patterns(ctx);
    populateSimplifyRecurrencePatterns(patterns);
    if (gateBlock < 0) {
      getOperation()->emitError()
          << "convert-la-to-linalg: 'gate-block' must be >= 0, got "
          << static_cast<int64_t>(gateBlock);
      return signalPassFailure();
    }
    if (!(gateSpreadLimit >= 0.0) || !std::isfinite(gateSpreadLimit)) {
      getOperation()->emitError()
          << "convert-la-to-linalg: 'gate-spread-limit' must be finite and "
             ">= 0, got "
          << static_cast<double>(gateSpreadLimit);
      return signalPassFailure();
    }
    ChannelGateProducts gateProducts;
    gateProducts.block = gateBlock;
    gateProducts.spreadLimit = gateSpreadLimit;
    populateChunkedToLinalgPatterns(patterns, cumsumScan, gateProducts);
    populateRecurrenceToLoopsPatterns(patterns);
    populateRecurrenceGradToLoopsPatterns(patterns);
    if (failed(applyPartialConversion(getOperation(), target,
                                      std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
