//===- InitAll.cpp - registration API for embedders -----------------------===//

#include "la/InitAllDialects.h"
#include "la/InitAllPasses.h"

#include "la/Conversion/LaToLinalg.h"
#include "la/Dialect/La/LaDialect.h"
#include "la/Dialect/La/LaPasses.h"
#include "la/Pipelines/Pipelines.h"

void mlir::la::registerAllDialects(DialectRegistry &registry) {
  registry.insert<LaDialect, arith::ArithDialect, linalg::LinalgDialect,
                  math::MathDialect, tensor::TensorDialect>();
}

void mlir::la::registerPasses() {
  registerLaPasses();
  registerLaConversionPasses();
  registerPipelines();
}
