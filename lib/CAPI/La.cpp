//===- La.cpp - C API of la -----------------------------------------------===//

#include "la-c/La.h"

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

void laRegisterAllDialects(MlirDialectRegistry registry) {
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
  detail::CallbackOstream stream(diagnostics, userData);
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(unwrap(source), "<source>"),
      llvm::SMLoc());
  SourceMgrDiagnosticHandler handler(sourceMgr, unwrap(context), stream);
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(sourceMgr, unwrap(context));
  if (!module)
    return MlirModule{nullptr};
  return wrap(module.release());
}

void laModuleDestroy(MlirModule module) {
  if (ModuleOp op = unwrap(module))
    op->erase();
}

bool laModuleIsNull(MlirModule module) { return !module.ptr; }

void laModulePrint(MlirModule module, bool generic, MlirStringCallback callback,
                   void *userData) {
  detail::CallbackOstream stream(callback, userData);
  OpPrintingFlags flags;
  if (generic)
    flags.printGenericOpForm();
  unwrap(module)->print(stream, flags);
}

MlirLogicalResult laModuleRunPipeline(MlirModule module, MlirStringRef pipeline,
                                      bool printIRAfterAll,
                                      MlirStringCallback output,
                                      void *userData) {
  laRegisterAllPasses();
  ModuleOp op = unwrap(module);
  MLIRContext *context = op.getContext();
  detail::CallbackOstream stream(output, userData);
  ScopedDiagnosticHandler handler(context, [&](Diagnostic &diag) {
    stream << diag.getLocation() << ": " << diag << "\n";
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
  if (printIRAfterAll) {
    context->disableMultithreading();
    pm.enableIRPrinting([](Pass *, Operation *) { return false; },
                        [](Pass *, Operation *) { return true; },
                        /*printModuleScope=*/true,
                        /*printAfterOnlyOnChange=*/true,
                        /*printAfterOnlyOnFailure=*/false, stream);
  }
  return wrap(pm.run(op));
}

MlirLogicalResult laModuleEmitCInterface(MlirModule module,
                                         MlirStringRef function) {
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
  detail::CallbackOstream stream(callback, userData);
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(unwrap(module), llvmContext);
  if (!llvmModule)
    return mlirLogicalResultFailure();
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
  detail::CallbackOstream stream(diagnostics, userData);
  SmallVector<StringRef> libs;
  for (int i = 0; i < numSharedLibPaths; ++i)
    libs.push_back(unwrap(sharedLibPaths[i]));
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
  auto *jit = static_cast<ExecutionEngine *>(engine.ptr);
  auto function = jit->lookupPacked(unwrap(name));
  if (!function) {
    llvm::consumeError(function.takeError());
    return mlirLogicalResultFailure();
  }
  (*function)(args);
  return mlirLogicalResultSuccess();
}
