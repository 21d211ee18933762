//===- la-fuzz.cpp - libFuzzer target for la's parser, verifiers, passes --===//
//
// Each input is MLIR text. It is parsed and verified; if valid, the la passes
// run on it one stage at a time (la-lower-to-recurrence, la-chunk with a small
// chunk size, convert-la-to-linalg), then the whole la-lower-to-cpu pipeline
// on a copy, and la-derive-backward then la-lower-to-cpu (the gradient
// program) on another. Errors are expected and ignored; crashes, sanitizer
// reports and timeouts are the findings.
//
//===----------------------------------------------------------------------===//

#include "la/InitAllDialects.h"
#include "la/InitAllPasses.h"
#include "la/Pipelines/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <cstdint>
#include <cstdlib>
#include <string>

using namespace mlir;

static const DialectRegistry &getRegistry() {
  static DialectRegistry *registry = [] {
    auto *r = new DialectRegistry();
    la::registerCompilerDialects(*r);
    registerAllPasses();
    la::registerPasses();
    return r;
  }();
  return *registry;
}

static void runPipeline(ModuleOp module, StringRef pipeline) {
  FailureOr<OpPassManager> parsed = parsePassPipeline(pipeline);
  if (failed(parsed))
    abort(); // The pipelines below are fixed; failing to parse is a bug.
  PassManager pm(module.getContext());
  static_cast<OpPassManager &>(pm) = std::move(*parsed);
  (void)pm.run(module);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 8192)
    return 0; // Large inputs only slow the search down.
  MLIRContext context(getRegistry(), MLIRContext::Threading::DISABLED);
  // Errors are the expected outcome for most inputs: drop them.
  ScopedDiagnosticHandler silence(&context,
                                  [](Diagnostic &) { return success(); });
  // The MLIR lexer expects a null-terminated buffer; libFuzzer's is not.
  std::string text(reinterpret_cast<const char *>(data), size);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(
      text, ParserConfig(&context, /*verifyAfterParse=*/true));
  if (!module)
    return 0;
  OwningOpRef<ModuleOp> copy = module->clone();
  OwningOpRef<ModuleOp> gradient = module->clone();
  runPipeline(*module, "builtin.module(la-lower-to-recurrence,"
                       "la-chunk{chunk-size=4},convert-la-to-linalg,"
                       "canonicalize)");
  runPipeline(*copy, "builtin.module(la-lower-to-cpu{chunk-size=8})");
  // The derived backward, lowered: la-expand-recurrence-grad's adjoint
  // recurrences (read from both sides) through the same pipeline.
  runPipeline(*gradient, "builtin.module(la-derive-backward{keep-forward=0},"
                         "la-lower-to-cpu{chunk-size=8})");
  return 0;
}
