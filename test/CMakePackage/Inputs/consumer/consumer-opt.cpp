// A downstream opt tool that knows only func plus la's dialect and passes.
#include "la/InitAllDialects.h"
#include "la/InitAllPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::la::registerPasses();
  mlir::DialectRegistry registry;
  registry.insert<mlir::func::FuncDialect>();
  mlir::la::registerAllDialects(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "la consumer\n", registry));
}
