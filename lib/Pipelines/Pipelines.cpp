//===- Pipelines.cpp - la's pass pipelines --------------------------------===//

#include "la/Pipelines/Pipelines.h"

#include "la/Codegen/CPU/Passes.h"
#include "la/Codegen/GPU/Passes.h"
#include "la/Conversion/LaToLinalg.h"
#include "la/Dialect/La/LaPasses.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Conversion/VectorToSCF/VectorToSCF.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/Transforms/OptimizeForNVVM.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

#include <cmath>
#include <cstdio>
#include <mutex>
#include <unistd.h>

using namespace mlir;
using namespace mlir::la;

/// One-shot bufferization of the whole module with identity layouts at
/// function boundaries, results as out-parameters (the caller owns every
/// output), then CSE and canonicalization: bufferizing an scf.forall leaves
/// copies between two equal subviews of its shared output, which fold away
/// once CSE has made the subviews one value.
void mlir::la::buildBufferizationPipeline(OpPassManager &pm,
                                          bool allowReturnAllocsFromLoops) {
  // A value returned twice would be one allocation for two out-parameters.
  pm.addNestedPass<func::FuncOp>(createLaDistinctResultsPass());
  bufferization::OneShotBufferizePassOptions bufferizeOptions;
  bufferizeOptions.bufferizeFunctionBoundaries = true;
  bufferizeOptions.allowReturnAllocsFromLoops = allowReturnAllocsFromLoops;
  bufferizeOptions.functionBoundaryTypeConversion =
      bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(bufferization::createOneShotBufferizePass(bufferizeOptions));
  // Results written into `la.in_place` arguments (a state updated in place)
  // stop being results.
  pm.addPass(createLaInPlaceArgumentsPass());
  // Folds a result's collapse of an expanded allocation into the allocation
  // (la-in-place-destinations), which the caller's buffer then replaces.
  pm.addPass(createCanonicalizerPass());
  bufferization::BufferResultsToOutParamsPassOptions outParamsOptions;
  outParamsOptions.modifyPublicFunctions = true;
  outParamsOptions.hoistStaticAllocs = true;
  // Dynamic results too (any B and T): the caller's buffer, which has the
  // result's shape, replaces the allocation instead of receiving a copy.
  outParamsOptions.hoistDynamicAllocs = true;
  pm.addPass(
      bufferization::createBufferResultsToOutParamsPass(outParamsOptions));
  pm.addPass(createCSEPass());
  pm.addPass(createCanonicalizerPass());
}

void mlir::la::buildLowerBuffersToLLVMPipeline(OpPassManager &pm, bool parallel,
                                               bool tile, bool hostAllocator,
                                               bool copyLoops) {
  FinalizeMemRefToLLVMConversionPassOptions memrefOptions;
  memrefOptions.useGenericFunctions = hostAllocator;
  // Strided and dynamic copies as loops (not the runtime's element-by-
  // element memrefCopy); not where linalg becomes parallel loops, whose
  // OpenMP regions would nest in the threads' ones.
  if (copyLoops && (tile || !parallel)) {
    LaCopyLoopsPassOptions copyOptions;
    copyOptions.vectorRows = tile;
    pm.addNestedPass<func::FuncOp>(createLaCopyLoopsPass(copyOptions));
  }
  if (parallel) {
    pm.addPass(createForallToParallelLoopPass());
    // After la-tile the threads are la-tile's scf.forall loops; the ops it
    // left run sequentially (parallel loops inside them would nest OpenMP
    // regions).
    if (tile)
      pm.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
    else
      pm.addNestedPass<func::FuncOp>(createConvertLinalgToParallelLoopsPass());
    pm.addPass(createConvertSCFToOpenMPPass());
  } else {
    pm.addPass(createForallToForLoopPass());
    pm.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
  }
  if (tile) {
    // Register tiles: n-D transfers unrolled into 1-D ones, contractions
    // into outer products (FMAs), then the rest of the vector dialect.
    VectorTransferToSCFOptions transferOptions;
    transferOptions.enableFullUnroll();
    pm.addNestedPass<func::FuncOp>(
        createConvertVectorToSCFPass(transferOptions));
  }
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  // With OpenMP, memref.alloca_scope (around each parallel body) must be
  // lowered while its region is still a single block, so memrefs go to LLVM
  // before scf goes to control flow.
  if (parallel)
    pm.addPass(createFinalizeMemRefToLLVMConversionPass(memrefOptions));
  pm.addPass(createSCFToControlFlowPass());
  if (parallel)
    pm.addPass(createConvertOpenMPToLLVMPass());
  if (tile) {
    ConvertVectorToLLVMPassOptions vectorOptions;
    vectorOptions.vectorContractLowering =
        vector::VectorContractLowering::OuterProduct;
    // Per function on one thread: the outlined tasks (la-outline-tasks)
    // convert in parallel (the largest pass of a backward's pipeline). With
    // OpenMP the functions are llvm.func by now (one, whose regions the
    // translation outlines), so the pass takes the module.
    if (parallel)
      pm.addPass(createConvertVectorToLLVMPass(vectorOptions));
    else
      pm.addNestedPass<func::FuncOp>(
          createConvertVectorToLLVMPass(vectorOptions));
  }
  if (!parallel)
    pm.addPass(createFinalizeMemRefToLLVMConversionPass(memrefOptions));
  // The remaining dialects in one conversion (upstream convert-to-llvm): a
  // pass per dialect walked the whole module each time, a third of a
  // forward kernel's pipeline. memref keeps its own pass above for its
  // options (la's allocator through the generic functions).
  ConvertToLLVMPassOptions toLLVMOptions;
  toLLVMOptions.filterDialects = {"arith", "cf", "func", "index", "math", "ub"};
  pm.addPass(createConvertToLLVMPass(toLLVMOptions));
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addNestedPass<LLVM::LLVMFuncOp>(createCanonicalizerPass());
}

/// The GPU's lowering of the chunked ops, where it differs from the passes'
/// (CPU) defaults: the masked cumulative-gate reduction (threads share it),
/// blocks of 16 rows in the channel-gate products (with 8, KDA's kernel went
/// over sm_90's shared memory) and no run-time choice of the one-product
/// form.
static void setGPULinalgOptions(ConvertLaToLinalgPassOptions &options) {
  options.cumsumScan = false;
  options.gateBlock = 16;
  options.gateSpreadLimit = 0.0;
}

void mlir::la::buildLowerToCPUPipeline(OpPassManager &pm,
                                       const LowerToCPUOptions &options) {
  // la to linalg and scf on tensors.
  pm.addPass(createLaLowerToRecurrencePass());
  if (!options.sequential) {
    // Gradients that are recurrences again are chunked like the forward.
    LaExpandRecurrenceGradPassOptions gradOptions;
    gradOptions.transposedReads = options.transposedReads;
    pm.addPass(createLaExpandRecurrenceGradPass(gradOptions));
    // The threads the program will run on: as many as asked for with
    // OpenMP, one otherwise. (Never the compiling machine's count unless
    // asked: the IR must not depend on where it was compiled.)
    LaFuseRecurrencePassOptions fuseOptions;
    fuseOptions.chunkSize = options.chunkSize;
    fuseOptions.mode = options.fuse;
    fuseOptions.threads = options.parallel ? int64_t(options.threads) : 1;
    fuseOptions.valueTile = options.valueTile;
    fuseOptions.packInputs = options.packInputs;
    fuseOptions.peelTail = options.peelTail;
    fuseOptions.sequenceTasks = options.sequenceTasks;
    pm.addPass(createLaFuseRecurrencePass(fuseOptions));
    LaChunkPassOptions chunkOptions;
    chunkOptions.chunkSize = options.chunkSize;
    pm.addPass(createLaChunkPass(chunkOptions));
  } else if (options.parallel) {
    // Token loops, one per (batch, value head) task, the tasks on the
    // threads.
    LaFuseRecurrencePassOptions taskOptions;
    taskOptions.threads = options.threads;
    taskOptions.chunk = false;
    pm.addPass(createLaFuseRecurrencePass(taskOptions));
  }
  bool tile = options.tile;
  ConvertLaToLinalgPassOptions linalgOptions;
  if (tile) {
    // On the CPU the chunk's cumulative gates are a scan over its rows, the
    // channel-gate score products take small blocks (fewer exponentials
    // per product term; their key copies cost cache, not shared memory)
    // and the run-time choice of the one-product form.
    linalgOptions.gateBlock = options.gateBlock;
    linalgOptions.gateSpreadLimit = options.gateSpreadLimit;
  } else {
    setGPULinalgOptions(linalgOptions);
  }
  pm.addPass(createConvertLaToLinalgPass(linalgOptions));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  bool parallel = options.parallel;
  if (tile) {
    // Destinations that bufferize in place; before la-tile, whose tiles
    // then write into them.
    pm.addNestedPass<func::FuncOp>(createLaInPlaceDestinationsPass());
    LaTilePassOptions tileOptions;
    RegisterTile registerTile = getRegisterTile(options);
    tileOptions.rowTile = registerTile.rows;
    tileOptions.laneTile = registerTile.lanes;
    tileOptions.distribute = parallel;
    pm.addNestedPass<func::FuncOp>(createLaTilePass(tileOptions));
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
  }

  // Buffers: results become out-parameters so that callers own every output.
  buildBufferizationPipeline(pm, /*allowReturnAllocsFromLoops=*/true);
  bufferization::BufferDeallocationPipelineOptions deallocOptions;
  bufferization::buildBufferDeallocationPipeline(pm, deallocOptions);
  // The fused chunk loops fetch the next chunk's inputs while computing.
  if (options.prefetch)
    pm.addNestedPass<func::FuncOp>(createLaPrefetchChunksPass());

  // Denormals as zeros while the kernel runs (a decaying state would
  // otherwise take x86's microcode assists).
  if (options.flushDenormals &&
      llvm::Triple(llvm::sys::getProcessTriple()).isX86())
    pm.addNestedPass<func::FuncOp>(createLaFlushDenormalsPass());
  // One thread: the task loops as functions, compiled in parallel parts like
  // the OpenMP regions of a threaded kernel.
  if (!parallel && options.outlineTasks)
    pm.addPass(createLaOutlineTasksPass());
  // A chunk's loop nests as functions: clang compiles them faster than one
  // large function. (A threaded kernel's split makes every function
  // external, OpenMP's regions being internal ones: the parts would lose
  // their call sites' constants.)
  if (!parallel && options.outlineChunkParts)
    pm.addPass(createLaOutlineChunkPartsPass());
  buildLowerBuffersToLLVMPipeline(pm, parallel, tile, options.hostAllocator,
                                  options.copyLoops);
}

RegisterTile mlir::la::getRegisterTile(const LowerToCPUOptions &options) {
  // Two vectors per row: each loaded row of B feeds them, each broadcast of
  // A two FMAs. AVX-512's 32 registers hold 8 rows of them (16
  // accumulators); with 16 registers, 8 rows would spill (measured on an
  // AVX2 machine: Gated DeltaNet 1.7x slower than with 6 rows), 6 rows leave
  // 4 registers for the operands (OpenBLAS's Haswell kernel is 6 x 16 too).
  RegisterTile tile{options.vectorBits >= 512 ? 8 : 6,
                    2 * (options.vectorBits / 32)};
  if (options.rowTile > 0)
    tile.rows = options.rowTile;
  if (options.laneTile > 0)
    tile.lanes = options.laneTile;
  return tile;
}

int64_t mlir::la::getHostVectorBits() {
  llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  if (features.lookup("avx512f"))
    return 512;
  if (features.lookup("avx"))
    return 256;
  return 128;
}

void mlir::la::buildGPUScheduleOnTensorsPipeline(
    OpPassManager &pm, const LowerToNVVMOptions &options) {
  // The fused program on tensors, tiled onto blocks and threads. Grouped
  // query heads are repeated per state for the chunk-parallel schedule,
  // which does not distribute a state read by several output heads.
  bool chunkParallel = options.schedule == GPUSchedule::ChunkParallel;
  LaLowerToRecurrencePassOptions lowerOptions;
  lowerOptions.expandQueryGroups = chunkParallel;
  pm.addPass(createLaLowerToRecurrencePass(lowerOptions));
  // Gradients that are recurrences again take the forward's schedule; the
  // element-wise work between them becomes kernels of its own. G^T stays a
  // recurrence of its own: a read from G's value side needs all of V in
  // one task, where the GPU's blocks take tiles of V (the kernels of such
  // a read are checked on the emulator, not yet timed on a GPU).
  LaExpandRecurrenceGradPassOptions gradOptions;
  gradOptions.transposedReads = false;
  pm.addPass(createLaExpandRecurrenceGradPass(gradOptions));
  LaFuseRecurrencePassOptions fuseOptions;
  fuseOptions.chunkSize = options.chunkSize;
  fuseOptions.mode =
      chunkParallel ? FusionMode::Materialized : FusionMode::Fused;
  fuseOptions.valueTile = options.valueTile;
  // la-tile-for-gpu stages the inputs into shared memory instead.
  fuseOptions.packInputs = false;
  // One chunk loop per task, which la-tile-for-gpu maps (a partial last
  // chunk is padded inside it).
  fuseOptions.peelTail = false;
  // Packed sequences are blocks of their own (a loop over them outside the
  // tasks would have no kernel form).
  fuseOptions.sequenceTasks = true;
  pm.addPass(createLaFuseRecurrencePass(fuseOptions));
  // What does not fuse (the chunk-parallel schedule's recurrences) is
  // chunked, for la-distribute-chunks below.
  LaChunkPassOptions chunkOptions;
  chunkOptions.chunkSize = options.chunkSize;
  pm.addPass(createLaChunkPass(chunkOptions));
  if (chunkParallel) {
    LaDistributeChunksPassOptions distributeOptions;
    distributeOptions.valueTile = options.valueTile;
    pm.addNestedPass<func::FuncOp>(
        createLaDistributeChunksPass(distributeOptions));
  }
  ConvertLaToLinalgPassOptions linalgOptions;
  setGPULinalgOptions(linalgOptions);
  pm.addPass(createConvertLaToLinalgPass(linalgOptions));
  // The task forall is mapped (#la.task), so canonicalization keeps it
  // even with one task.
  LaTileForGPUPassOptions tileOptions;
  tileOptions.tensorCores = options.tensorCores;
  tileOptions.stageInputs = options.stageInputs;
  tileOptions.stateInSharedMemory = options.stateInSharedMemory;
  // The chunk-parallel scan writes its per-chunk states straight into the
  // output, not into a task buffer in shared memory copied out at the end.
  tileOptions.resultsInOutputs = chunkParallel;
  pm.addNestedPass<func::FuncOp>(createLaTileForGPUPass(tileOptions));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void mlir::la::buildLowerToGPUPipeline(OpPassManager &pm,
                                       const LowerToNVVMOptions &options) {
  buildGPUScheduleOnTensorsPipeline(pm, options);

  // Buffers; la-tile-for-gpu made every loop-carried tensor a write into its
  // iteration argument, so no loop returns a new allocation.
  buildBufferizationPipeline(pm, /*allowReturnAllocsFromLoops=*/false);

  // Kernels.
  LaMapToGPUPassOptions mapOptions;
  mapOptions.threadsPerBlock = options.threadsPerBlock;
  mapOptions.sharedMemoryLimit = options.sharedMemoryLimit;
  mapOptions.mmaPrecision = options.mmaPrecision;
  pm.addNestedPass<func::FuncOp>(createLaMapToGPUPass(mapOptions));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void mlir::la::buildLowerToNVVMPipeline(OpPassManager &pm,
                                        const LowerToNVVMOptions &options) {
  buildLowerToGPUPipeline(pm, options);
  // Each thread's one-element tiles become scalar loops.
  pm.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
  pm.addPass(createLowerAffinePass());

  // Kernels out of the functions, their code to NVVM (the steps of MLIR's
  // gpu-lower-to-nvvm-pipeline, with the CUDA toolkit named: ptxas and
  // libdevice come from it).
  pm.addPass(createConvertNVGPUToNVVMPass());
  // Constants (sizes, the block size, strides) are cloned into the kernels
  // instead of becoming kernel arguments: without it ptxas sees every
  // bound as a run-time value and nothing folds or unrolls (on an H200 this
  // made ~85% of a chunk's instructions index and loop arithmetic).
  pm.addPass(createGpuLaunchSinkIndexComputationsPass());
  pm.addPass(createGpuKernelOutliningPass());
  // Multiply-adds as FMAs (NVPTX keeps mul.rn and add.rn apart otherwise).
  if (options.fpContract)
    pm.addNestedPass<gpu::GPUModuleOp>(createLaAllowFPContractionPass());
  pm.addPass(createConvertVectorToSCFPass());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createConvertNVVMToLLVMPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  GpuNVVMAttachTargetOptions targetOptions;
  targetOptions.chip = options.chip;
  targetOptions.features = options.features;
  targetOptions.optLevel = options.optLevel;
  pm.addPass(createGpuNVVMAttachTarget(targetOptions));
  pm.addPass(createLowerAffinePass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertIndexToLLVMPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addNestedPass<gpu::GPUModuleOp>(createStripDebugInfoPass());
  pm.addNestedPass<gpu::GPUModuleOp>(createConvertGpuOpsToNVVMOps());
  pm.addNestedPass<gpu::GPUModuleOp>(LLVM::createNVVMOptimizeForTargetPass());
  pm.addNestedPass<gpu::GPUModuleOp>(createCanonicalizerPass());
  pm.addNestedPass<gpu::GPUModuleOp>(createCSEPass());
  pm.addNestedPass<gpu::GPUModuleOp>(createReconcileUnrealizedCastsPass());

  // Host code, and the kernels as a binary in it.
  pm.addPass(createGpuToLLVMConversionPass());
  GpuModuleToBinaryPassOptions binaryOptions;
  binaryOptions.compilationTarget = options.format;
  binaryOptions.toolkitPath = resolveCUDAToolkit(options.cudaToolkit);
  binaryOptions.cmdOptions = options.ptxasOptions;
  pm.addPass(createGpuModuleToBinaryPass(binaryOptions));
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
}

std::string mlir::la::resolveCUDAToolkit(StringRef requested) {
  if (!requested.empty())
    return requested.str();
  for (const char *name : {"CUDA_ROOT", "CUDA_HOME", "CUDA_PATH"})
    if (const char *value = std::getenv(name); value && *value)
      return value;
  return "/usr/local/cuda";
}

std::function<llvm::Error(llvm::Module *)>
mlir::la::makeHostOptimizingTransformer(unsigned optLevel) {
  std::shared_ptr<llvm::TargetMachine> machine;
  if (auto builder = llvm::orc::JITTargetMachineBuilder::detectHost()) {
    if (auto created = builder->createTargetMachine())
      machine = std::move(*created);
    else
      llvm::consumeError(created.takeError());
  } else {
    llvm::consumeError(builder.takeError());
  }
  // Without a host TargetMachine LLVM still optimises, with generic costs.
  auto transform =
      makeOptimizingTransformer(optLevel, /*sizeLevel=*/0, machine.get());
  return
      [machine, transform](llvm::Module *module) { return transform(module); };
}

/// The options both pipelines have.
static LogicalResult
verifyChunkAndValueTile(int64_t chunkSize, int64_t valueTile,
                        function_ref<LogicalResult(const Twine &)> emitError) {
  if (chunkSize <= 0 || chunkSize > kMaxChunkSize)
    return emitError("'chunk-size' must be in [1, " + Twine(kMaxChunkSize) +
                     "], got " + Twine(chunkSize));
  if (valueTile < 0)
    return emitError("'value-tile' must be >= 0, got " + Twine(valueTile));
  return success();
}

LogicalResult mlir::la::verifyLowerToCPUOptions(
    const LowerToCPUOptions &options,
    function_ref<LogicalResult(const Twine &)> emitError) {
  if (failed(verifyChunkAndValueTile(options.chunkSize, options.valueTile,
                                     emitError)))
    return failure();
  if (options.vectorBits != 128 && options.vectorBits != 256 &&
      options.vectorBits != 512)
    return emitError("'vector-bits' must be 128, 256 or 512, got " +
                     Twine(static_cast<int64_t>(options.vectorBits)));
  if (options.rowTile < 0 || options.laneTile < 0)
    return emitError("'row-tile' and 'lane-tile' must be >= 0 (0: from "
                     "'vector-bits'), got " +
                     Twine(static_cast<int64_t>(options.rowTile)) + " and " +
                     Twine(static_cast<int64_t>(options.laneTile)));
  if (options.threads < 0)
    return emitError("'threads' must be >= 0, got " +
                     Twine(static_cast<int64_t>(options.threads)));
  if (options.gateBlock < 0)
    return emitError("'gate-block' must be >= 0, got " +
                     Twine(static_cast<int64_t>(options.gateBlock)));
  double spread = options.gateSpreadLimit;
  if (!(spread >= 0.0) || std::isinf(spread))
    return emitError("'gate-spread-limit' must be finite and >= 0, got " +
                     Twine(std::to_string(spread)));
  return success();
}

LogicalResult mlir::la::verifyLowerToNVVMOptions(
    const LowerToNVVMOptions &options,
    function_ref<LogicalResult(const Twine &)> emitError) {
  if (failed(verifyChunkAndValueTile(options.chunkSize, options.valueTile,
                                     emitError)))
    return failure();
  if (options.threadsPerBlock <= 0 || options.threadsPerBlock > 1024)
    return emitError("'threads-per-block' must be in [1, 1024], got " +
                     Twine(static_cast<int64_t>(options.threadsPerBlock)));
  if (options.sharedMemoryLimit <= 0)
    return emitError("'shared-memory-limit' must be > 0, got " +
                     Twine(static_cast<int64_t>(options.sharedMemoryLimit)));
  // gpu-module-to-binary reports an unknown format without failing, so the
  // pipeline checks it first.
  StringRef format = options.format;
  if (format != "bin" && format != "isa" && format != "fatbin")
    return emitError("'format' must be bin, isa or fatbin, got '" + format +
                     "'");
  if (options.optLevel < 0 || options.optLevel > 3)
    return emitError("'opt-level' must be in [0, 3], got " +
                     Twine(static_cast<int64_t>(options.optLevel)));
  return success();
}

/// Runs `parse` with stderr's file descriptor pointed at a temporary file
/// and returns what was written there in `captured`. llvm::cl reports a
/// value it cannot parse (e.g. `chunk-size=abc`) on stderr only
/// (cl::Option::error takes no stream from PassOptions::parseFromString), so
/// this is the one way its words reach the error handler, and through it
/// la-opt's output, LaError and the C API's callback. On success, anything
/// captured is written back to stderr. Without a temporary file, `parse`
/// runs as it is. A mutex keeps two threads (C API callers) from swapping
/// the descriptor under each other.
static LogicalResult parseCapturingStderr(function_ref<LogicalResult()> parse,
                                          std::string &captured) {
  static std::mutex captureMutex;
  std::lock_guard<std::mutex> lock(captureMutex);
  llvm::errs().flush();
  std::fflush(stderr);
  std::FILE *file = std::tmpfile();
  int saved = file ? ::dup(STDERR_FILENO) : -1;
  if (saved < 0 || ::dup2(::fileno(file), STDERR_FILENO) < 0) {
    if (saved >= 0)
      ::close(saved);
    if (file)
      std::fclose(file);
    return parse();
  }
  LogicalResult result = parse();
  llvm::errs().flush();
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::rewind(file);
  char buffer[512];
  size_t size;
  while ((size = std::fread(buffer, 1, sizeof(buffer), file)) > 0)
    captured.append(buffer, size);
  std::fclose(file);
  if (succeeded(result) && !captured.empty())
    llvm::errs() << captured;
  return result;
}

namespace {
/// Registers a pipeline whose options are checked and which refuses to be
/// nested below `builtin.module`: its passes run on the module (one-shot
/// bufferization, conversions to LLVM), and adding them to a pass manager
/// on another op is a fatal error in MLIR, not a diagnostic.
template <typename Options>
void registerModulePipeline(
    StringRef name, StringRef description,
    void (*build)(OpPassManager &, const Options &),
    LogicalResult (*verify)(const Options &,
                            function_ref<LogicalResult(const Twine &)>)) {
  std::string pipelineName = name.str();
  registerPassPipeline(
      name, description,
      [=](OpPassManager &pm, StringRef text,
          function_ref<LogicalResult(const Twine &)> errorHandler) {
        auto error = [&](const Twine &message) {
          return errorHandler(pipelineName + ": " + message);
        };
        // Option syntax errors go to the error handler too, so that the C
        // API's callers see them, llvm::cl's words for a value that does
        // not parse included.
        Options options;
        std::string parseErrors, clErrors;
        llvm::raw_string_ostream parseErrorStream(parseErrors);
        if (failed(parseCapturingStderr(
                [&] { return options.parseFromString(text, parseErrorStream); },
                clErrors))) {
          // llvm::cl's lines start with the program's name, empty in a
          // library: ": for the --chunk-size option: ...".
          StringRef clText = StringRef(clErrors).trim().ltrim(": ");
          std::string details =
              (clText + " " + StringRef(parseErrors).trim()).str();
          details = StringRef(details).trim().str();
          return error("invalid options '" + text + "'" +
                       (details.empty() ? std::string() : ": " + details));
        }
        if (pm.getOpAnchorName() != ModuleOp::getOperationName())
          return error("runs on 'builtin.module', not on '" +
                       pm.getOpAnchorName() +
                       "': name it directly in builtin.module(...)");
        if (failed(verify(options, error)))
          return failure();
        build(pm, options);
        return success();
      },
      [](function_ref<void(const mlir::detail::PassOptions &)> optHandler) {
        optHandler(Options());
      });
}
} // namespace

namespace {
/// The registered pipelines' names and descriptions: one table for the
/// registry and the reference.
struct PipelineDescription {
  StringRef name, description;
};
} // namespace

static const PipelineDescription kCPUPipeline = {
    "la-lower-to-cpu",
    "Lower la.attention to the LLVM dialect for the CPU (chunked by default, "
    "or the sequential recurrence)"};
static const PipelineDescription kGPUPipelines[] = {
    {"la-lower-to-gpu", "Lower la.attention to gpu.launch kernels on buffers "
                        "(the first half of la-lower-to-nvvm)"},
    {"la-lower-to-nvvm",
     "Lower la.attention to host LLVM code launching NVVM kernels (cubin or "
     "PTX); the function takes device memory"}};

void mlir::la::registerPipelines() {
  registerModulePipeline<LowerToCPUOptions>(
      kCPUPipeline.name, kCPUPipeline.description, buildLowerToCPUPipeline,
      verifyLowerToCPUOptions);
  void (*gpuBuilders[])(OpPassManager &, const LowerToNVVMOptions &) = {
      buildLowerToGPUPipeline, buildLowerToNVVMPipeline};
  for (auto [pipeline, build] : llvm::zip_equal(kGPUPipelines, gpuBuilders))
    registerGPUPipeline(pipeline.name, pipeline.description, build);
}

void mlir::la::registerGPUPipeline(StringRef name, StringRef description,
                                   void (*build)(OpPassManager &,
                                                 const LowerToNVVMOptions &)) {
  registerModulePipeline<LowerToNVVMOptions>(name, description, build,
                                             verifyLowerToNVVMOptions);
}

namespace {
/// The llvm::cl options behind a PassOptions struct (its protected
/// SubCommand base holds them by name).
template <typename Options> struct OptionsView : Options {
  using llvm::cl::SubCommand::OptionsMap;
};
} // namespace

/// Splits PassOptions::print's "{a=1 b=x c={with space}}" into name ->
/// value.
static llvm::StringMap<std::string> parseDefaults(StringRef printed) {
  llvm::StringMap<std::string> defaults;
  printed = printed.trim();
  if (printed.consume_front("{"))
    printed.consume_back("}");
  while (!printed.empty()) {
    printed = printed.ltrim();
    size_t equals = printed.find('=');
    if (equals == StringRef::npos)
      break;
    StringRef name = printed.take_front(equals);
    printed = printed.drop_front(equals + 1);
    size_t end = 0;
    int depth = 0;
    for (; end < printed.size(); ++end) {
      char c = printed[end];
      if (c == '{')
        ++depth;
      else if (c == '}')
        --depth;
      else if (c == ' ' && depth == 0)
        break;
    }
    StringRef value = printed.take_front(end);
    if (value.size() >= 2 && value.front() == '{' && value.back() == '}')
      value = value.drop_front().drop_back();
    defaults[name] = value.str();
    printed = printed.drop_front(end);
  }
  return defaults;
}

/// Markdown table cells may not hold a bare '|'.
static std::string escapeCell(StringRef text) {
  std::string escaped;
  for (char c : text) {
    if (c == '|')
      escaped += '\\';
    escaped += c;
  }
  return escaped;
}

template <typename Options>
static void printOptionsTable(llvm::raw_ostream &os) {
  OptionsView<Options> options;
  std::string printed;
  llvm::raw_string_ostream printedStream(printed);
  options.print(printedStream);
  llvm::StringMap<std::string> defaults = parseDefaults(printed);
  SmallVector<llvm::cl::Option *> sorted;
  for (auto &entry : options.OptionsMap)
    sorted.push_back(entry.second);
  llvm::sort(sorted, [](llvm::cl::Option *a, llvm::cl::Option *b) {
    return a->ArgStr < b->ArgStr;
  });
  os << "| option | default | description |\n|---|---|---|\n";
  for (llvm::cl::Option *option : sorted) {
    auto found = defaults.find(option->ArgStr);
    std::string value = found == defaults.end() ? "" : found->second;
    // PassOptions prints doubles as 3.200000e+01.
    double number;
    if (StringRef(value).contains('e') &&
        !StringRef(value).getAsDouble(number)) {
      char shortest[32];
      std::snprintf(shortest, sizeof(shortest), "%g", number);
      value = shortest;
    }
    os << "| `" << option->ArgStr << "` | "
       << (value.empty() ? std::string("(empty)") : "`" + value + "`") << " | "
       << escapeCell(option->HelpStr) << " |\n";
  }
}

void mlir::la::printPipelineReference(llvm::raw_ostream &os) {
  os << "<!-- Generated by la-pipeline-doc from lib/Pipelines/Pipelines.cpp; "
        "do not edit. -->\n\n"
     << "# la pipelines\n\n"
     << "The pass pipelines `mlir::la::registerPipelines()` registers. Each "
        "runs on `builtin.module` (nested below it, it is an error) and "
        "checks its options before any pass runs. Name one in `la-opt` "
        "(`--la-lower-to-cpu=\"chunk-size=32 parallel\"`), in a pipeline "
        "string (`builtin.module(la-lower-to-cpu{chunk-size=32})`, also for "
        "the C API and Python's `la.ir.PassManager`) or build it in C++ with "
        "`buildLowerToCPUPipeline` / `buildLowerTo*Pipeline` and the option "
        "structs of `la/Pipelines/Pipelines.h`.\n";
  os << "\n## `" << kCPUPipeline.name << "`\n\n"
     << kCPUPipeline.description << ".\n\n";
  printOptionsTable<LowerToCPUOptions>(os);
  for (const PipelineDescription &pipeline : kGPUPipelines) {
    os << "\n## `" << pipeline.name << "`\n\n"
       << pipeline.description << ".\n\n";
    printOptionsTable<LowerToNVVMOptions>(os);
  }
}
