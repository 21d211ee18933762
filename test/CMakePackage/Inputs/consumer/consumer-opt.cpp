// A downstream opt tool built from the documented embedding API only:
// la::registerAllDialects and la::registerPasses (plus MLIR's own
// registerAllPasses, for the upstream passes a textual pipeline or a
// transform schedule names, such as -transform-interpreter).
#include "la/InitAllDialects.h"
#include "la/InitAllPasses.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mlir::la::registerPasses();
  mlir::DialectRegistry registry;
  mlir::la::registerAllDialects(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "la consumer\n", registry));
}
