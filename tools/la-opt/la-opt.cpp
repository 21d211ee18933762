//===- la-opt.cpp - the la optimizer driver -------------------------------===//
//
// mlir-opt with every upstream dialect and pass plus all of la's.
//
//===----------------------------------------------------------------------===//

#include "la/InitAllDialects.h"
#include "la/InitAllPasses.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mlir::la::registerPasses();

  mlir::DialectRegistry registry;
  mlir::la::registerCompilerDialects(registry);

  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "la: the linear-attention compiler's optimizer driver\n",
      registry));
}
