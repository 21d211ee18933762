//===- La.cpp - C API of la -----------------------------------------------===//

#include "la-c/La.h"

#include "la/Dialect/La/LaVariants.h"
#include "la/InitAllDialects.h"
#include "la/InitAllPasses.h"
#include "la/Pipelines/Pipelines.h"

#include "mlir/CAPI/IR.h"
#include "mlir/CAPI/Support.h"
#include "mlir/CAPI/Utils.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"

#include <algorithm>
#include <mutex>

using namespace mlir;

namespace {
/// The callback of the contract in La.h: a null callback discards the text.
void discardText(MlirStringRef, void *) {}

MlirStringCallback orDiscard(MlirStringCallback callback) {
  return callback ? callback : discardText;
}

/// A buffered stream to an MlirStringCallback, for the large texts (a
/// module, its LLVM IR). MLIR's detail::CallbackOstream is unbuffered: every
/// token printed is one callback, through ctypes in the Python package (0.25
/// s for a 7,500-line kernel's LLVM IR, a fifth of its compile time). The
/// text arrives in pieces that may split a UTF-8 character.
class BufferedCallbackOstream : public llvm::raw_ostream {
public:
  BufferedCallbackOstream(MlirStringCallback callback, void *userData)
      : callback(orDiscard(callback)), userData(userData) {
    SetBufferSize(1 << 16);
  }
  ~BufferedCallbackOstream() override { flush(); }

private:
  void write_impl(const char *ptr, size_t size) override {
    callback(mlirStringRefCreate(ptr, size), userData);
    position += size;
  }
  uint64_t current_pos() const override { return position; }

  MlirStringCallback callback;
  void *userData;
  uint64_t position = 0;
};

/// Reports a null handle passed to `function` (La.h: every function checks
/// its handles and fails instead of dereferencing them).
void reportNull(MlirStringCallback callback, void *userData,
                llvm::StringRef function, llvm::StringRef what) {
  detail::CallbackOstream stream(orDiscard(callback), userData);
  stream << "la: " << function << ": " << what << " is null\n";
}
} // namespace

intptr_t laGetNumVariants(void) {
  return static_cast<intptr_t>(mlir::la::getVariants().size());
}

bool laGetVariant(intptr_t index, LaVariantInfo *info) {
  llvm::ArrayRef<mlir::la::VariantInfo> variants = mlir::la::getVariants();
  if (!info || index < 0 || index >= static_cast<intptr_t>(variants.size()))
    return false;
  const mlir::la::VariantInfo &variant = variants[index];
  // The registry's strings are literals (NUL-terminated); the enum names
  // come from TableGen's stringify functions, which return literals too.
  info->keyword = variant.keyword.data();
  info->update = mlir::la::stringifyUpdateRule(variant.update).data();
  info->gate = mlir::la::stringifyGateKind(variant.gate).data();
  info->summary = variant.summary.data();
  return true;
}

intptr_t laHostVectorBits(void) {
  return static_cast<intptr_t>(mlir::la::getHostVectorBits());
}

void laRegisterAllDialects(MlirDialectRegistry registry) {
  if (!registry.ptr)
    return;
  la::registerAllDialects(*unwrap(registry));
}

void laRegisterAllPasses(void) {
  static std::once_flag once;
  std::call_once(once, [] {
    registerAllPasses();
    la::registerPasses();
  });
}

MlirContext laContextCreate(void) {
  DialectRegistry registry;
  la::registerCompilerDialects(registry);
  auto *context = new MLIRContext(registry);
  context->loadAllAvailableDialects();
  return wrap(context);
}

void laContextDestroy(MlirContext context) { delete unwrap(context); }

MlirModule laModuleParse(MlirContext context, MlirStringRef source,
                         MlirStringCallback diagnostics, void *userData) {
  if (!context.ptr) {
    reportNull(diagnostics, userData, "laModuleParse", "the context");
    return MlirModule{nullptr};
  }
  if (!source.data && source.length) {
    reportNull(diagnostics, userData, "laModuleParse", "the source text");
    return MlirModule{nullptr};
  }
  detail::CallbackOstream stream(orDiscard(diagnostics), userData);
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(
          source.data ? unwrap(source) : llvm::StringRef(), "<source>"),
      llvm::SMLoc());
  SourceMgrDiagnosticHandler handler(sourceMgr, unwrap(context), stream);
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(sourceMgr, unwrap(context));
  if (!module)
    return MlirModule{nullptr};
  return wrap(module.release());
}

void laModuleDestroy(MlirModule module) {
  if (!module.ptr)
    return;
  if (ModuleOp op = unwrap(module))
    op->erase();
}

bool laModuleIsNull(MlirModule module) { return !module.ptr; }

void laModulePrint(MlirModule module, bool generic, MlirStringCallback callback,
                   void *userData) {
  if (!module.ptr)
    return reportNull(callback, userData, "laModulePrint", "the module");
  BufferedCallbackOstream stream(callback, userData);
  OpPrintingFlags flags;
  if (generic)
    flags.printGenericOpForm();
  unwrap(module)->print(stream, flags);
}

namespace {
/// Sends the whole module before or after each run of one pass to a
/// callback, one call per run.
class CaptureInstrumentation : public PassInstrumentation {
public:
  CaptureInstrumentation(std::string pass, bool before,
                         MlirStringCallback callback, void *userData)
      : pass(std::move(pass)), before(before), callback(callback),
        userData(userData) {}

  void runBeforePass(Pass *p, Operation *op) override {
    if (before && p->getArgument() == pass)
      send(op);
  }
  void runAfterPass(Pass *p, Operation *op) override {
    if (!before && p->getArgument() == pass)
      send(op);
  }

private:
  void send(Operation *op) {
    while (Operation *parent = op->getParentOp())
      op = parent;
    std::string text;
    llvm::raw_string_ostream os(text);
    op->print(os);
    callback(MlirStringRef{text.data(), text.size()}, userData);
  }

  std::string pass;
  bool before;
  MlirStringCallback callback;
  void *userData;
};

/// Flushes a stream before each pass, so that what the passes before it
/// printed (--print-ir-after-all) is out if this one crashes.
class FlushBeforePass : public PassInstrumentation {
public:
  explicit FlushBeforePass(llvm::raw_ostream &stream) : stream(stream) {}
  void runBeforePass(Pass *, Operation *) override { stream.flush(); }

private:
  llvm::raw_ostream &stream;
};
} // namespace

MlirLogicalResult laModuleRunPipeline(MlirModule module, MlirStringRef pipeline,
                                      bool printIRAfterAll,
                                      MlirStringCallback output,
                                      void *userData) {
  LaPipelineRunOptions options = {};
  options.printIRAfterAll = printIRAfterAll;
  return laModuleRunPipelineWithOptions(module, pipeline, &options, output,
                                        userData);
}

MlirLogicalResult
laModuleRunPipelineWithOptions(MlirModule module, MlirStringRef pipeline,
                               const LaPipelineRunOptions *runOptions,
                               MlirStringCallback output, void *userData) {
  if (!module.ptr) {
    reportNull(output, userData, "laModuleRunPipeline", "the module");
    return mlirLogicalResultFailure();
  }
  if (!pipeline.data) {
    reportNull(output, userData, "laModuleRunPipeline", "the pipeline text");
    return mlirLogicalResultFailure();
  }
  LaPipelineRunOptions options = {};
  if (runOptions)
    options = *runOptions;
  auto text = [](MlirStringRef ref) {
    return ref.data ? unwrap(ref) : llvm::StringRef();
  };
  if (!text(options.capturePass).empty() && !options.capture) {
    reportNull(output, userData, "laModuleRunPipeline", "the capture callback");
    return mlirLogicalResultFailure();
  }
  laRegisterAllPasses();
  ModuleOp op = unwrap(module);
  MLIRContext *context = op.getContext();
  BufferedCallbackOstream stream(output, userData);
  ScopedDiagnosticHandler handler(context, [&](Diagnostic &diag) {
    stream << diag.getLocation() << ": " << diag << "\n";
    stream.flush();
    return success();
  });
  std::string errors;
  llvm::raw_string_ostream errorStream(errors);
  FailureOr<OpPassManager> parsed =
      parsePassPipeline(unwrap(pipeline), errorStream);
  if (failed(parsed)) {
    stream << "invalid pass pipeline '" << unwrap(pipeline) << "': " << errors
           << "\n";
    return mlirLogicalResultFailure();
  }
  PassManager pm(context, parsed->getOpAnchorName());
  static_cast<OpPassManager &>(pm) = std::move(*parsed);
  // Printing and capturing see one pass at a time.
  bool inspect = options.printIRAfterAll || !text(options.irTreeDir).empty() ||
                 !text(options.capturePass).empty();
  bool wasMultithreaded = context->isMultithreadingEnabled();
  if (inspect)
    context->disableMultithreading();
  if (!text(options.crashReproducer).empty())
    pm.enableCrashReproducerGeneration(text(options.crashReproducer),
                                       /*genLocalReproducer=*/false);
  if (options.printIRAfterAll) {
    // Single-threaded (above), so the flushes never run concurrently.
    pm.addInstrumentation(std::make_unique<FlushBeforePass>(stream));
    pm.enableIRPrinting([](Pass *, Operation *) { return false; },
                        [](Pass *, Operation *) { return true; },
                        /*printModuleScope=*/true,
                        /*printAfterOnlyOnChange=*/true,
                        /*printAfterOnlyOnFailure=*/false, stream);
  }
  if (!text(options.irTreeDir).empty())
    pm.enableIRPrintingToFileTree(
        [](Pass *, Operation *) { return false; },
        [](Pass *, Operation *) { return true; },
        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/true,
        /*printAfterOnlyOnFailure=*/false, text(options.irTreeDir));
  if (!text(options.capturePass).empty())
    pm.addInstrumentation(std::make_unique<CaptureInstrumentation>(
        text(options.capturePass).str(), options.captureBefore, options.capture,
        options.captureUserData));
  LogicalResult result = pm.run(op);
  if (inspect && wasMultithreaded)
    context->enableMultithreading();
  return wrap(result);
}

MlirLogicalResult laModuleEmitCInterface(MlirModule module,
                                         MlirStringRef function) {
  if (!module.ptr || !function.data)
    return mlirLogicalResultFailure();
  ModuleOp op = unwrap(module);
  auto func = op.lookupSymbol<func::FuncOp>(unwrap(function));
  if (!func)
    return mlirLogicalResultFailure();
  func->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                UnitAttr::get(op.getContext()));
  return mlirLogicalResultSuccess();
}

MlirLogicalResult laModuleTranslateToLLVMIR(MlirModule module,
                                            MlirStringCallback callback,
                                            void *userData) {
  if (!module.ptr) {
    reportNull(callback, userData, "laModuleTranslateToLLVMIR", "the module");
    return mlirLogicalResultFailure();
  }
  BufferedCallbackOstream stream(callback, userData);
  // The translation's diagnostics, with their locations, are what the
  // callback receives on failure (they would go to stderr otherwise).
  std::string diagnostics;
  llvm::raw_string_ostream diagnosticStream(diagnostics);
  ModuleOp op = unwrap(module);
  ScopedDiagnosticHandler handler(op.getContext(), [&](Diagnostic &diag) {
    diagnosticStream << diag.getLocation() << ": " << diag << "\n";
    return success();
  });
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(op, llvmContext);
  if (!llvmModule) {
    stream << (diagnostics.empty()
                   ? std::string("translation to LLVM IR failed\n")
                   : diagnostics);
    return mlirLogicalResultFailure();
  }
  llvmModule->print(stream, nullptr);
  return mlirLogicalResultSuccess();
}

LaExecutionEngine laExecutionEngineCreate(MlirModule module, int optLevel,
                                          int numSharedLibPaths,
                                          const MlirStringRef *sharedLibPaths,
                                          MlirStringCallback diagnostics,
                                          void *userData) {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  if (!module.ptr) {
    reportNull(diagnostics, userData, "laExecutionEngineCreate", "the module");
    return LaExecutionEngine{nullptr};
  }
  if (numSharedLibPaths < 0 || (numSharedLibPaths > 0 && !sharedLibPaths)) {
    reportNull(diagnostics, userData, "laExecutionEngineCreate",
               "the shared library list");
    return LaExecutionEngine{nullptr};
  }
  detail::CallbackOstream stream(orDiscard(diagnostics), userData);
  SmallVector<StringRef> libs;
  for (int i = 0; i < numSharedLibPaths; ++i) {
    if (!sharedLibPaths[i].data) {
      stream << "la: laExecutionEngineCreate: shared library path " << i
             << " is null\n";
      return LaExecutionEngine{nullptr};
    }
    libs.push_back(unwrap(sharedLibPaths[i]));
  }
  auto transformer = la::makeHostOptimizingTransformer(
      static_cast<unsigned>(std::clamp(optLevel, 0, 3)));
  ExecutionEngineOptions options;
  options.transformer = transformer;
  options.sharedLibPaths = libs;
  auto engine = ExecutionEngine::create(unwrap(module), options);
  if (!engine) {
    stream << llvm::toString(engine.takeError()) << "\n";
    return LaExecutionEngine{nullptr};
  }
  return LaExecutionEngine{engine->release()};
}

bool laExecutionEngineIsNull(LaExecutionEngine engine) { return !engine.ptr; }

void laExecutionEngineDestroy(LaExecutionEngine engine) {
  delete static_cast<ExecutionEngine *>(engine.ptr);
}

MlirLogicalResult laExecutionEngineInvokePacked(LaExecutionEngine engine,
                                                MlirStringRef name,
                                                void **args) {
  if (!engine.ptr || !name.data)
    return mlirLogicalResultFailure();
  auto *jit = static_cast<ExecutionEngine *>(engine.ptr);
  auto function = jit->lookupPacked(unwrap(name));
  if (!function) {
    llvm::consumeError(function.takeError());
    return mlirLogicalResultFailure();
  }
  (*function)(args);
  return mlirLogicalResultSuccess();
}
