//===- la-opt.cpp - the la optimizer driver -------------------------------===//
//
// mlir-opt with every upstream dialect and pass plus all of la's.
//
//===----------------------------------------------------------------------===//

#include "TestDevices.h"
#include "la/InitAllDialects.h"
#include "la/InitAllPasses.h"
#include "la/Version.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

/// Hides the options registered so far (LLVM's code generation flags, which
/// the shared libLLVM registers for every target) from --help; they stay
/// usable and listed by --help-hidden. MlirOptMain registers its own options
/// after this, so they and la's passes stay visible.
static void hideLibraryOptions() {
  for (auto &entry : llvm::cl::getRegisteredOptions()) {
    llvm::cl::Option *option = entry.second;
    llvm::StringRef name = entry.first;
    if (option->getOptionHiddenFlag() == llvm::cl::NotHidden &&
        name != "help" && name != "version" && name != "help-hidden")
      option->setHiddenFlag(llvm::cl::Hidden);
  }
}

int main(int argc, char **argv) {
  hideLibraryOptions();
  llvm::cl::AddExtraVersionPrinter(
      [](llvm::raw_ostream &os) { os << "la version " LA_VERSION "\n"; });
  mlir::registerAllPasses();
  mlir::la::registerPasses();
  // The GPU emulator (test/lib), for the tests.
  mlir::la::test::registerTestDevices();

  mlir::DialectRegistry registry;
  mlir::la::registerCompilerDialects(registry);

  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "la: the linear-attention compiler's optimizer driver\n",
      registry));
}
