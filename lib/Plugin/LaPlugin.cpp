//===- LaPlugin.cpp - la as a plugin of stock mlir-opt --------------------===//
//
// mlir-opt --load-dialect-plugin=LaPlugin.so --load-pass-plugin=LaPlugin.so
//
//===----------------------------------------------------------------------===//

#include "la/InitAllDialects.h"
#include "la/InitAllPasses.h"

#include "mlir/Tools/Plugins/DialectPlugin.h"
#include "mlir/Tools/Plugins/PassPlugin.h"
#include "llvm/Config/llvm-config.h"

extern "C" LLVM_ATTRIBUTE_WEAK mlir::DialectPluginLibraryInfo
mlirGetDialectPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "La", LLVM_VERSION_STRING,
          [](mlir::DialectRegistry *registry) {
            mlir::la::registerAllDialects(*registry);
          }};
}

extern "C" LLVM_ATTRIBUTE_WEAK mlir::PassPluginLibraryInfo
mlirGetPassPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "La", LLVM_VERSION_STRING,
          []() { mlir::la::registerPasses(); }};
}
