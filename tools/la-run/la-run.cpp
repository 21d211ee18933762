//===- la-run.cpp - compile an la function for the CPU and run it ---------===//
//
// la-run FILE.mlir [--entry=NAME] [--chunk-size=C | --sequential]
//        (--input=X.npy ... | --random-seed=S) [--output=Y.npy ...]
//        [--repeat=N] [--print-outputs] [--print-ir-after-all]
//
// Parses FILE, lowers it with la-lower-to-cpu, JIT-compiles it at -O3 and
// calls the entry function on the inputs (one .npy per argument, in order,
// or seeded random values that suit each argument's role), then writes the
// results as .npy files and prints the run time.
//
//===----------------------------------------------------------------------===//

#include "Npy.h"
#include "TestDevices.h"

#include "la-c/CudaRuntime.h"
#include "la-c/HostRuntime.h"
#include "la/Dialect/La/LaOps.h"
#include "la/Dialect/La/LaVariants.h"
#include "la/InitAllDialects.h"
#include "la/InitAllPasses.h"
#include "la/Pipelines/Pipelines.h"
#include "la/Version.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/ToolOutputFile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <random>

using namespace mlir;
namespace npy = larun::npy;
namespace cl = llvm::cl;

static cl::OptionCategory laRunCategory("la-run options");

static cl::opt<std::string> inputFile(cl::Positional, cl::cat(laRunCategory),
                                      cl::desc("<input.mlir>"), cl::Required);
static cl::opt<std::string> entryName("entry", cl::cat(laRunCategory),
                                      cl::desc("function to run (default: "
                                               "the only public function)"));
static cl::list<std::string>
    inputs("input", cl::cat(laRunCategory),
           cl::desc("an .npy file per argument, in order"));
static cl::opt<unsigned>
    randomSeed("random-seed", cl::cat(laRunCategory),
               cl::desc("generate the inputs from this seed instead"));
static cl::list<std::string>
    outputs("output", cl::cat(laRunCategory),
            cl::desc("an .npy file per result, in order"));
static cl::opt<int64_t> chunkSize("chunk-size", cl::cat(laRunCategory),
                                  cl::desc("tokens per chunk"), cl::init(64));
static cl::opt<bool>
    sequential("sequential", cl::cat(laRunCategory),
               cl::desc("run the plain recurrence token by token"));
static cl::opt<bool> parallel(
    "parallel", cl::cat(laRunCategory),
    cl::desc("run the parallel loops with OpenMP (OMP_NUM_THREADS threads)"));
static cl::opt<int64_t> fuseThreads(
    "fuse-threads", cl::cat(laRunCategory),
    cl::desc("with --parallel: the threads la-fuse-recurrence's cost rule "
             "plans for (default 0: this machine's hardware threads, since "
             "la-run compiles for the machine it runs on)"),
    cl::init(0));
static cl::opt<la::FusionMode>
    fuse("fuse", cl::cat(laRunCategory),
         cl::desc("la-fuse-recurrence's mode: auto, fused or materialized"),
         cl::init(la::FusionMode::Auto),
         cl::values(clEnumValN(la::FusionMode::Auto, "auto", "the cost rule"),
                    clEnumValN(la::FusionMode::Fused, "fused", "always fused"),
                    clEnumValN(la::FusionMode::Materialized, "materialized",
                               "never fused")));
static cl::opt<int64_t>
    vectorBits("vector-bits", cl::cat(laRunCategory),
               cl::desc("the vector registers' width that chooses la-tile's "
                        "register tile (128, 256 or 512; 0: this machine's)"),
               cl::init(0));
static cl::opt<int64_t>
    rowTile("row-tile", cl::cat(laRunCategory),
            cl::desc("rows of la-tile's register tile (0: from the vector "
                     "width)"),
            cl::init(0));
static cl::opt<int64_t>
    laneTile("lane-tile", cl::cat(laRunCategory),
             cl::desc("vector lanes of la-tile's register tile (0: from the "
                      "vector width)"),
             cl::init(0));
static cl::opt<int64_t>
    valueTile("value-tile", cl::cat(laRunCategory),
              cl::desc("value columns per fused task (0: all of V)"),
              cl::init(0));
static cl::opt<bool> packInputs(
    "pack-inputs", cl::cat(laRunCategory),
    cl::desc("fused schedule: copy each input chunk into a compact buffer"),
    cl::init(true));
static cl::opt<bool> sequenceTasks(
    "sequence-tasks", cl::cat(laRunCategory),
    cl::desc("fused schedule: packed sequences as tasks of their own, "
             "(sequence, value head) on the threads (the GPU's form)"),
    cl::init(false));
static cl::opt<bool>
    prefetch("prefetch", cl::cat(laRunCategory),
             cl::desc("fused schedule: prefetch the next chunk's inputs"),
             cl::init(true));
static cl::opt<int64_t>
    gateBlock("gate-block", cl::cat(laRunCategory),
              cl::desc("rows per block of the channel-gate score products "
                       "(0: unblocked)"),
              cl::init(8));
static cl::opt<double> gateSpreadLimit(
    "gate-spread-limit", cl::cat(laRunCategory),
    cl::desc("chunks whose cumulative channel gates stay within this "
             "distance of their first row take one plain score product (0: "
             "never)"),
    cl::init(32.0));
static cl::opt<bool> gpuSchedule(
    "gpu-schedule", cl::cat(laRunCategory),
    cl::desc("run the GPU's tiled schedule on the CPU, sequentially (the "
             "test pipeline la-gpu-schedule-on-cpu: checks its tiling)"));
static cl::opt<std::string>
    target("target", cl::cat(laRunCategory),
           cl::desc("where the function runs: cpu, gpu (la-lower-to-nvvm, "
                    "a cubin launched through libla_cuda_runtime) or "
                    "gpu-emulator (the same kernels run on the CPU)"),
           cl::init("cpu"));
static cl::opt<std::string>
    gpuChip("gpu-chip", cl::cat(laRunCategory),
            cl::desc("the GPU architecture for --target=gpu"),
            cl::init("sm_90a"));
static cl::opt<bool> tensorCores(
    "tensor-cores", cl::cat(laRunCategory),
    cl::desc("GPU schedule: f32 contractions on tensor cores (mma.sync, "
             "tf32); with --gpu-schedule, their warp tiling on the CPU"));
static cl::opt<bool> stateInSharedMemory(
    "state-in-shared-memory", cl::cat(laRunCategory),
    cl::desc("GPU schedule: the running state in shared memory, the final "
             "state written once (la-lower-to-nvvm's option)"));
static cl::opt<bool> chunkParallel(
    "chunk-parallel", cl::cat(laRunCategory),
    cl::desc("GPU schedule: every chunk in parallel, only the state scan in "
             "order (la-lower-to-nvvm's schedule=chunk-parallel)"));
static cl::opt<la::MmaPrecision> mmaPrecision(
    "mma-precision", cl::cat(laRunCategory),
    cl::desc("--target=gpu --tensor-cores: tf32, bf16 or f16 operands"),
    cl::init(la::MmaPrecision::TF32),
    cl::values(clEnumValN(la::MmaPrecision::TF32, "tf32", "tf32 operands"),
               clEnumValN(la::MmaPrecision::BF16, "bf16", "bf16 operands"),
               clEnumValN(la::MmaPrecision::F16, "f16", "f16 operands")));
static cl::opt<bool> hostAllocator(
    "host-allocator", cl::cat(laRunCategory),
    cl::desc("la-lower-to-cpu's host-allocator: buffers from "
             "libla_host_runtime.so's caching allocator (default on; off: "
             "malloc and free)"),
    cl::init(true));
static cl::opt<unsigned> repeat("repeat", cl::cat(laRunCategory),
                                cl::desc("timed runs"), cl::init(1));
static cl::opt<bool> printOutputs("print-outputs", cl::cat(laRunCategory),
                                  cl::desc("print a summary of each result"));
static cl::opt<bool> printIRAfterAll("print-ir-after-all",
                                     cl::cat(laRunCategory),
                                     cl::desc("print the IR after each pass"));

static cl::opt<std::string> printIRTreeDir(
    "print-ir-tree-dir", cl::cat(laRunCategory),
    cl::desc("write the IR after each pass into a tree of files under this "
             "directory (as mlir-opt --mlir-print-ir-tree-dir)"),
    cl::value_desc("dir"));
static cl::opt<std::string> crashReproducer(
    "crash-reproducer", cl::cat(laRunCategory),
    cl::desc("when a pass fails or crashes, write the module before the "
             "pipeline and the pipeline to this file (for la-opt "
             "--run-reproducer)"),
    cl::value_desc("file"));

namespace {
[[noreturn]] void fail(const llvm::Twine &message) {
  llvm::errs() << "la-run: error: " << message << "\n";
  exit(1);
}

/// Fails with `message` and the runtime's error when a CUDA call failed.
void failOnGPUError(const llvm::Twine &message) {
  char error[1024];
  if (laCudaLastError(error, sizeof(error)))
    fail(message + ": " + error);
}

npy::DType dtypeOf(Type type) {
  if (type.isF32())
    return npy::DType::F32;
  if (type.isF16())
    return npy::DType::F16;
  if (type.isBF16())
    return npy::DType::BF16;
  if (type.isF64())
    return npy::DType::F64;
  if (type.isInteger(32))
    return npy::DType::I32;
  if (type.isInteger(64))
    return npy::DType::I64;
  std::string name;
  llvm::raw_string_ostream os(name);
  os << type;
  fail("unsupported element type " + name);
}

std::string shapeString(ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

/// A buffer with a ranked memref descriptor pointing at it.
struct MemRefArg {
  npy::Array array;
  std::vector<int64_t> descriptor;

  void bind() {
    int64_t rank = array.shape.size();
    descriptor.assign(3 + 2 * rank, 0);
    uint8_t *data = array.data.data();
    descriptor[0] = reinterpret_cast<int64_t>(data);
    descriptor[1] = reinterpret_cast<int64_t>(data);
    int64_t stride = 1;
    for (int64_t d = rank - 1; d >= 0; --d) {
      descriptor[3 + d] = array.shape[d];
      descriptor[3 + rank + d] = stride;
      stride *= array.shape[d];
    }
  }
};

/// How a function argument is used by la.attention (the registry's roles)
/// or as la.sliding_window_hybrid's offsets, for random inputs and checks;
/// nullopt for anything else.
using Role = std::optional<la::OperandRole>;

Role roleOf(BlockArgument arg) {
  for (Operation *user : arg.getUsers()) {
    if (auto op = dyn_cast<la::AttentionOp>(user))
      if (Role role = la::getOperandRole(op, arg))
        return role;
    // LoLCATs' hybrid: its offsets (its other operands take any values).
    if (auto op = dyn_cast<la::SlidingWindowHybridOp>(user);
        op && op.getCuSeqlens() == arg)
      return la::OperandRole::SeqLens;
  }
  return std::nullopt;
}

/// The number of tokens T of the la ops that read `arg` as their cu_seqlens
/// (their q is [B, T, H, K]), or none.
std::optional<int64_t> packedTokens(BlockArgument arg) {
  for (Operation *user : arg.getUsers()) {
    Value q, cuSeqlens;
    if (auto op = dyn_cast<la::AttentionOp>(user)) {
      q = op.getQ();
      cuSeqlens = op.getCuSeqlens();
    } else if (auto op = dyn_cast<la::RecurrenceOp>(user)) {
      q = op.getQ();
      cuSeqlens = op.getCuSeqlens();
    } else if (auto op = dyn_cast<la::SlidingWindowHybridOp>(user)) {
      q = op.getQ();
      cuSeqlens = op.getCuSeqlens();
    }
    if (cuSeqlens == arg)
      return cast<ShapedType>(q.getType()).getDimSize(1);
  }
  return std::nullopt;
}

/// The state pool that the la ops reading `arg` as their state_indices index
/// (their initial state), or null.
Value indexedPool(BlockArgument arg) {
  for (Operation *user : arg.getUsers()) {
    if (auto op = dyn_cast<la::AttentionOp>(user);
        op && op.getStateIndices() == arg)
      return op.getInitialState();
    if (auto op = dyn_cast<la::RecurrenceOp>(user);
        op && op.getStateIndices() == arg)
      return op.getInitialState();
  }
  return nullptr;
}

/// The kernels trust state_indices (they are slice offsets into the pool):
/// each must name a distinct row of the pool's `rows`.
void checkStateIndices(const npy::Array &array, int64_t rows, unsigned index) {
  const auto *values = reinterpret_cast<const int32_t *>(array.data.data());
  llvm::SmallDenseSet<int32_t> seen;
  for (int64_t i = 0, e = array.numElements(); i < e; ++i) {
    if (values[i] < 0 || values[i] >= rows)
      fail("argument " + llvm::Twine(index) + " (state_indices): index " +
           llvm::Twine(i) + " is " + llvm::Twine(values[i]) +
           ", outside the pool's rows [0, " + llvm::Twine(rows) + ")");
    if (!seen.insert(values[i]).second)
      fail("argument " + llvm::Twine(index) + " (state_indices): row " +
           llvm::Twine(values[i]) +
           " appears twice; two sequences cannot write one pool row");
  }
}

/// Offset `i` of a cu_seqlens array (i32, or i64 as la-run accepts it).
int64_t seqLenOffset(const npy::Array &array, int64_t i) {
  if (array.dtype == npy::DType::I64)
    return reinterpret_cast<const int64_t *>(array.data.data())[i];
  return reinterpret_cast<const int32_t *>(array.data.data())[i];
}

/// Packed sequences' checkpoints hold sum_i len_i / n rows: a returned
/// `checkpoints` result of another size would lose checkpoints or leave
/// rows unwritten (the kernel writes only the rows it has).
void checkCheckpointRows(func::FuncOp entry, ArrayRef<MemRefArg> args) {
  auto returnOp = cast<func::ReturnOp>(entry.getBody().front().back());
  entry.walk([&](la::AttentionOp op) {
    auto cuSeqlens = dyn_cast_or_null<BlockArgument>(op.getCuSeqlens());
    if (!op.getCheckpoints() || !cuSeqlens ||
        cuSeqlens.getOwner() != &entry.getBody().front())
      return;
    const npy::Array &offsets = args[cuSeqlens.getArgNumber()].array;
    int64_t every = *op.getCheckpointEvery(), rows = 0;
    for (int64_t i = 1, e = offsets.numElements(); i < e; ++i)
      rows += (seqLenOffset(offsets, i) - seqLenOffset(offsets, i - 1)) / every;
    for (OpOperand &result : returnOp->getOpOperands()) {
      if (result.get() != op.getCheckpoints())
        continue;
      int64_t size = cast<ShapedType>(result.get().getType()).getDimSize(1);
      if (size != rows)
        fail("result " + llvm::Twine(result.getOperandNumber()) +
             " (checkpoints) has " + llvm::Twine(size) +
             " rows, but argument " + llvm::Twine(cuSeqlens.getArgNumber()) +
             " (cu_seqlens) gives " + llvm::Twine(rows) +
             " (the sum of each sequence's length / " + llvm::Twine(every) +
             ")");
    }
  });
}

/// The kernels trust cu_seqlens (it sets their loop bounds and slices): it
/// must go from 0 to T without decreasing.
void checkSeqLens(const npy::Array &array, int64_t tokens, unsigned index) {
  int64_t count = array.numElements();
  auto offset = [&](int64_t i) { return seqLenOffset(array, i); };
  auto bad = [&](int64_t i, const llvm::Twine &why) {
    fail("argument " + llvm::Twine(index) + " (cu_seqlens): offset " +
         llvm::Twine(i) + " is " + llvm::Twine(offset(i)) + ", " + why +
         "; cu_seqlens must go non-decreasing from 0 to T=" +
         llvm::Twine(tokens));
  };
  if (count < 2)
    fail("argument " + llvm::Twine(index) +
         " (cu_seqlens) needs at least 2 offsets");
  if (offset(0) != 0)
    bad(0, "not 0");
  for (int64_t i = 1; i < count; ++i) {
    if (offset(i) < offset(i - 1))
      bad(i, "less than the offset before it");
    if (offset(i) > tokens)
      bad(i, "past T");
  }
  if (offset(count - 1) != tokens)
    bad(count - 1, "not T");
}

/// Log-space decays must be <= 0 (-inf, a hard reset, and NaN pass): the
/// kernels would treat a positive exponent as 0, not as the growth the
/// recurrence gives.
void checkLogGates(const npy::Array &array, unsigned index) {
  llvm::Expected<npy::Array> f64 = npy::convert(array, npy::DType::F64);
  if (!f64) {
    llvm::consumeError(f64.takeError());
    return;
  }
  auto *values = reinterpret_cast<const double *>(f64->data.data());
  for (int64_t i = 0, e = f64->numElements(); i < e; ++i)
    if (values[i] > 0)
      fail("argument " + llvm::Twine(index) +
           " (g) holds log-space decays, which must be <= 0, but element " +
           llvm::Twine(i) + " is " + llvm::formatv("{0}", values[i]));
}

/// Seeded values that suit the role: log-gates in (-inf, 0) (log-sigmoid,
/// scaled by 1/16 as GLA does), beta, erase and write in (0, 1), unit-norm
/// keys for the delta and erase-write rules and the dplr rule's a, rows of
/// norm 1/2 for its b, small initial states.
npy::Array randomArray(Role role, RankedTensorType type, std::mt19937 &rng) {
  npy::Array f64;
  f64.dtype = npy::DType::F64;
  f64.shape.assign(type.getShape().begin(), type.getShape().end());
  int64_t n = f64.numElements();
  f64.data.resize(n * sizeof(double));
  auto *values = reinterpret_cast<double *>(f64.data.data());
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    double x = normal(rng);
    switch (role.value_or(la::OperandRole::Value)) {
    case la::OperandRole::LogGate:
      x = -std::log1p(std::exp(-x)) / 16.0;
      break;
    case la::OperandRole::UnitInterval:
      x = 1.0 / (1.0 + std::exp(-x));
      break;
    case la::OperandRole::State:
      x *= 0.1;
      break;
    default:
      break;
    }
    values[i] = x;
  }
  if (role == la::OperandRole::UnitNormKey ||
      role == la::OperandRole::LowRankWrite) {
    double rowNorm = role == la::OperandRole::LowRankWrite ? 0.5 : 1.0;
    int64_t rowLength = f64.shape.back();
    for (int64_t row = 0; row < n / std::max<int64_t>(rowLength, 1); ++row) {
      double norm = 0;
      for (int64_t i = 0; i < rowLength; ++i)
        norm += values[row * rowLength + i] * values[row * rowLength + i];
      norm = (std::sqrt(norm) + 1e-12) / rowNorm;
      for (int64_t i = 0; i < rowLength; ++i)
        values[row * rowLength + i] /= norm;
    }
  }
  llvm::Expected<npy::Array> converted =
      npy::convert(f64, dtypeOf(type.getElementType()));
  if (!converted)
    fail(llvm::toString(converted.takeError()));
  return std::move(*converted);
}

npy::Array loadInput(StringRef path, unsigned index, RankedTensorType type) {
  llvm::Expected<npy::Array> array = npy::readFile(path);
  if (!array)
    fail(llvm::toString(array.takeError()));
  if (ArrayRef<int64_t>(array->shape) != type.getShape())
    fail("argument " + llvm::Twine(index) + " expects shape " +
         shapeString(type.getShape()) + ", but " + path + " has shape " +
         shapeString(array->shape));
  npy::DType want = dtypeOf(type.getElementType());
  bool wantFloat = want != npy::DType::I32 && want != npy::DType::I64;
  bool haveFloat =
      array->dtype != npy::DType::I32 && array->dtype != npy::DType::I64;
  if (wantFloat != haveFloat)
    fail("argument " + llvm::Twine(index) + " expects " + npy::dtypeName(want) +
         ", but " + path + " holds " + npy::dtypeName(array->dtype));
  llvm::Expected<npy::Array> converted = npy::convert(*array, want);
  if (!converted)
    fail(llvm::toString(converted.takeError()));
  return std::move(*converted);
}

void printSummary(unsigned index, const npy::Array &array) {
  llvm::Expected<npy::Array> f64 = npy::convert(array, npy::DType::F64);
  llvm::outs() << "result " << index << ": " << npy::dtypeName(array.dtype)
               << shapeString(array.shape);
  if (!f64) {
    llvm::consumeError(f64.takeError());
    llvm::outs() << "\n";
    return;
  }
  auto *values = reinterpret_cast<const double *>(f64->data.data());
  int64_t n = f64->numElements();
  double sumSquares = 0;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    sumSquares += values[i] * values[i];
    finite &= std::isfinite(values[i]);
  }
  llvm::outs() << " rms="
               << llvm::format("%.6g", n ? std::sqrt(sumSquares / n) : 0.0)
               << (finite ? "" : " (non-finite values)") << " first=[";
  for (int64_t i = 0; i < std::min<int64_t>(n, 4); ++i)
    llvm::outs() << (i ? ", " : "") << llvm::format("%.6g", values[i]);
  llvm::outs() << "]\n";
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  // --help lists la-run's options, not the code generation flags that the
  // shared libLLVM registers (--help-hidden still does).
  cl::HideUnrelatedOptions(laRunCategory);
  cl::AddExtraVersionPrinter(
      [](llvm::raw_ostream &os) { os << "la version " LA_VERSION "\n"; });
  cl::ParseCommandLineOptions(
      argc, argv, "la-run: compile an la function for the CPU and run it\n");
  if (chunkSize <= 0)
    fail("--chunk-size must be > 0, got " + llvm::Twine(chunkSize));
  if (repeat == 0)
    fail("--repeat must be > 0");
  bool useRandom = randomSeed.getNumOccurrences() > 0;
  if (useRandom && !inputs.empty())
    fail("give either --input files or --random-seed, not both");

  if (target != "cpu" && target != "gpu" && target != "gpu-emulator")
    fail("--target must be cpu, gpu or gpu-emulator, got '" + target + "'");
  bool onGPU = target == "gpu";
  bool emulated = target == "gpu-emulator";
  if ((onGPU || emulated) && (sequential || parallel || gpuSchedule))
    fail("--sequential, --parallel and --gpu-schedule are CPU options");
  if (gpuSchedule && (sequential || parallel))
    fail("--gpu-schedule runs the GPU's schedule sequentially: it takes "
         "neither --sequential nor --parallel");
  if (onGPU) {
    // Before anything else: without a GPU there is nothing to run.
    laCudaSetErrorPrinting(0);
    char reason[1024];
    if (!laCudaAvailable(reason, sizeof(reason)))
      fail(llvm::Twine("--target=gpu needs a GPU: ") + reason);
    laCudaSetErrorPrinting(1);
  }

  DialectRegistry registry;
  la::registerCompilerDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();

  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  std::string openError;
  std::unique_ptr<llvm::MemoryBuffer> file =
      openInputFile(inputFile, &openError);
  if (!file)
    fail(openError);
  sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module)
    return 1;

  // The entry function and its signature, before lowering.
  func::FuncOp entry;
  for (auto func : module->getOps<func::FuncOp>()) {
    if (func.isDeclaration())
      continue;
    if (!entryName.empty() ? func.getSymName() == entryName : func.isPublic()) {
      if (entry && entryName.empty())
        fail("several public functions; choose one with --entry");
      entry = func;
    }
  }
  if (!entry)
    fail(entryName.empty() ? llvm::Twine("no public function to run")
                           : "no function named '" + entryName + "'");
  SmallVector<RankedTensorType> argTypes, resultTypes;
  SmallVector<Role> roles;
  for (BlockArgument arg : entry.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || !type.hasStaticShape())
      fail("argument " + llvm::Twine(arg.getArgNumber()) +
           " must be a statically shaped tensor");
    argTypes.push_back(type);
    roles.push_back(roleOf(arg));
  }
  for (Type result : entry.getResultTypes()) {
    auto type = dyn_cast<RankedTensorType>(result);
    if (!type || !type.hasStaticShape())
      fail("results must be statically shaped tensors");
    resultTypes.push_back(type);
  }
  if (!useRandom && inputs.size() != argTypes.size())
    fail("'" + entry.getSymName() + "' takes " + llvm::Twine(argTypes.size()) +
         " arguments, got " + llvm::Twine(inputs.size()) +
         " --input files (or use --random-seed)");
  if (!outputs.empty() && outputs.size() != resultTypes.size())
    fail("'" + entry.getSymName() + "' returns " +
         llvm::Twine(resultTypes.size()) + " results, got " +
         llvm::Twine(outputs.size()) + " --output files");

  for (auto [index, path] : llvm::enumerate(outputs))
    for (unsigned other = 0; other < index; ++other)
      if (outputs[other] == path)
        fail("--output '" + path + "' is given twice");

  // Inputs first: a bad input fails before the compile.
  SmallVector<MemRefArg> args(argTypes.size() + resultTypes.size());
  std::mt19937 rng(randomSeed);
  for (auto [index, type] : llvm::enumerate(argTypes)) {
    if (useRandom) {
      if (roles[index] == la::OperandRole::SeqLens)
        fail("argument " + llvm::Twine(index) +
             " is cu_seqlens: give it as an --input .npy file");
      if (indexedPool(entry.getArgument(index)))
        fail("argument " + llvm::Twine(index) +
             " is state_indices: give it as an --input .npy file");
      args[index].array = randomArray(roles[index], type, rng);
    } else {
      args[index].array = loadInput(inputs[index], index, type);
      if (roles[index] == la::OperandRole::LogGate)
        checkLogGates(args[index].array, index);
      if (std::optional<int64_t> tokens =
              packedTokens(entry.getArgument(index));
          tokens && !ShapedType::isDynamic(*tokens))
        checkSeqLens(args[index].array, *tokens, index);
    }
  }
  // State indices against their pool's rows (the pool may come after them).
  for (unsigned index = 0; !useRandom && index < argTypes.size(); ++index) {
    Value pool = indexedPool(entry.getArgument(index));
    if (!pool)
      continue;
    int64_t rows = cast<ShapedType>(pool.getType()).getDimSize(0);
    if (auto poolArg = dyn_cast<BlockArgument>(pool);
        poolArg && poolArg.getOwner() == &entry.getBody().front())
      rows = args[poolArg.getArgNumber()].array.shape[0];
    if (!ShapedType::isDynamic(rows))
      checkStateIndices(args[index].array, rows, index);
  }
  if (!useRandom)
    checkCheckpointRows(entry, args);
  for (auto [index, type] : llvm::enumerate(resultTypes)) {
    npy::Array &array = args[argTypes.size() + index].array;
    array.dtype = dtypeOf(type.getElementType());
    array.shape.assign(type.getShape().begin(), type.getShape().end());
    array.data.assign(array.numElements() * array.elementSize(), 0);
  }

  // Compile.
  auto compileStart = std::chrono::steady_clock::now();
  entry->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                 UnitAttr::get(&context));
  std::string functionName = entry.getSymName().str();
  PassManager pm(&context);
  if (!crashReproducer.empty())
    pm.enableCrashReproducerGeneration(crashReproducer,
                                       /*genLocalReproducer=*/false);
  if (!printIRTreeDir.empty()) {
    context.disableMultithreading();
    pm.enableIRPrintingToFileTree(
        [](Pass *, Operation *) { return false; },
        [](Pass *, Operation *) { return true; },
        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/true,
        /*printAfterOnlyOnFailure=*/false, printIRTreeDir);
  }
  if (printIRAfterAll) {
    context.disableMultithreading();
    pm.enableIRPrinting([](Pass *, Operation *) { return false; },
                        [](Pass *, Operation *) { return true; },
                        /*printModuleScope=*/true,
                        /*printAfterOnlyOnChange=*/true,
                        /*printAfterOnlyOnFailure=*/false, llvm::outs());
  }
  if (onGPU || emulated || gpuSchedule) {
    la::LowerToNVVMOptions gpuOptions;
    // The GPU's defaults differ (see la-lower-to-nvvm); explicit flags win.
    if (chunkSize.getNumOccurrences())
      gpuOptions.chunkSize = chunkSize;
    if (valueTile.getNumOccurrences())
      gpuOptions.valueTile = valueTile;
    gpuOptions.chip = gpuChip;
    gpuOptions.tensorCores = tensorCores;
    gpuOptions.stateInSharedMemory = stateInSharedMemory;
    if (chunkParallel)
      gpuOptions.schedule = la::GPUSchedule::ChunkParallel;
    gpuOptions.mmaPrecision = mmaPrecision;
    if (failed(la::verifyLowerToNVVMOptions(
            gpuOptions, [](const llvm::Twine &message) -> LogicalResult {
              fail(message);
            })))
      return 1;
    if (onGPU)
      la::buildLowerToNVVMPipeline(pm, gpuOptions);
    else if (emulated)
      la::test::buildLowerToGPUEmulatorPipeline(pm, gpuOptions);
    else
      la::test::buildGPUScheduleOnCPUPipeline(pm, gpuOptions);
  }
  // la-lower-to-cpu's own defaults (one set, in Pipelines.h), except what
  // was given on the command line.
  la::LowerToCPUOptions pipelineOptions;
  auto given = [](auto &flag, auto &option) {
    if (flag.getNumOccurrences())
      option = flag;
  };
  given(chunkSize, pipelineOptions.chunkSize);
  given(sequential, pipelineOptions.sequential);
  given(parallel, pipelineOptions.parallel);
  given(fuse, pipelineOptions.fuse);
  given(rowTile, pipelineOptions.rowTile);
  given(laneTile, pipelineOptions.laneTile);
  given(valueTile, pipelineOptions.valueTile);
  given(packInputs, pipelineOptions.packInputs);
  given(sequenceTasks, pipelineOptions.sequenceTasks);
  given(prefetch, pipelineOptions.prefetch);
  given(gateBlock, pipelineOptions.gateBlock);
  given(gateSpreadLimit, pipelineOptions.gateSpreadLimit);
  // la-run compiles for the machine it runs on: the cost rule plans for
  // its threads unless told otherwise.
  pipelineOptions.threads = fuseThreads;
  pipelineOptions.hostAllocator = hostAllocator;
  // ... and for its vector registers.
  pipelineOptions.vectorBits =
      vectorBits != 0 ? int64_t(vectorBits) : la::getHostVectorBits();
  if (!onGPU && !emulated && !gpuSchedule) {
    if (failed(la::verifyLowerToCPUOptions(
            pipelineOptions, [](const llvm::Twine &message) -> LogicalResult {
              fail(message);
            })))
      return 1;
    la::buildLowerToCPUPipeline(pm, pipelineOptions);
  }
  if (failed(pm.run(*module)))
    return 1;

  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  auto transformer = la::makeHostOptimizingTransformer(3);
  ExecutionEngineOptions engineOptions;
  engineOptions.transformer = transformer;
  engineOptions.jitCodeGenOptLevel = llvm::CodeGenOptLevel::Aggressive;
  SmallVector<StringRef> sharedLibs = {LA_MLIR_C_RUNNER_UTILS};
  if (parallel)
    sharedLibs.push_back(LA_OPENMP_RUNTIME);
  engineOptions.sharedLibPaths = sharedLibs;
  auto engine = ExecutionEngine::create(*module, engineOptions);
  if (!engine)
    fail("JIT compilation failed: " + llvm::toString(engine.takeError()));
  // The host allocator's functions, from libla_host_runtime.so (linked).
  (*engine)->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap symbols;
    symbols[interner("_mlir_memref_to_llvm_alloc")] = {
        llvm::orc::ExecutorAddr::fromPtr(&_mlir_memref_to_llvm_alloc),
        llvm::JITSymbolFlags::Exported};
    symbols[interner("_mlir_memref_to_llvm_free")] = {
        llvm::orc::ExecutorAddr::fromPtr(&_mlir_memref_to_llvm_free),
        llvm::JITSymbolFlags::Exported};
    return symbols;
  });
  // Global constructors (the GPU path's module load) run here.
  (*engine)->initialize();
  if (onGPU)
    failOnGPUError("loading the kernels failed");
  auto packed = (*engine)->lookupPacked("_mlir_ciface_" + functionName);
  if (!packed)
    fail("cannot find the compiled function: " +
         llvm::toString(packed.takeError()));
  double compileMs = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - compileStart)
                         .count();

  // Run. On the GPU the function takes device memory: each argument is
  // copied to a device buffer, and the results back after the runs.
  SmallVector<void *> descriptorPointers, packedArgs;
  SmallVector<void *> deviceBuffers;
  for (MemRefArg &arg : args) {
    arg.bind();
    if (onGPU) {
      size_t bytes = arg.array.data.size();
      void *device = mgpuMemAlloc(bytes, /*stream=*/nullptr,
                                  /*isHostShared=*/false);
      if (!device)
        failOnGPUError("cannot allocate " + llvm::Twine(bytes) +
                       " bytes on the GPU");
      mgpuMemcpy(device, arg.array.data.data(), bytes, /*stream=*/nullptr);
      arg.descriptor[0] = arg.descriptor[1] = reinterpret_cast<int64_t>(device);
      deviceBuffers.push_back(device);
    }
    descriptorPointers.push_back(arg.descriptor.data());
  }
  if (onGPU) {
    mgpuStreamSynchronize(nullptr);
    failOnGPUError("copying the inputs to the GPU failed");
  }
  for (void *&pointer : descriptorPointers)
    packedArgs.push_back(&pointer);
  std::vector<double> times;
  for (unsigned r = 0; r < repeat; ++r) {
    auto start = std::chrono::steady_clock::now();
    (*packed)(packedArgs.data());
    if (onGPU) {
      // The launches are synchronous; a kernel fault shows here.
      laCudaSynchronize();
      failOnGPUError("the kernel failed");
    }
    times.push_back(std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - start)
                        .count());
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  llvm::outs() << "compile: " << llvm::format("%.1f", compileMs) << " ms\n"
               << "run: median "
               << llvm::format("%.3f", sorted[sorted.size() / 2]) << " ms, min "
               << llvm::format("%.3f", sorted.front()) << " ms over " << repeat
               << " runs\n";

  if (onGPU) {
    for (auto [index, type] : llvm::enumerate(resultTypes)) {
      npy::Array &array = args[argTypes.size() + index].array;
      mgpuMemcpy(array.data.data(), deviceBuffers[argTypes.size() + index],
                 array.data.size(), /*stream=*/nullptr);
    }
    mgpuStreamSynchronize(nullptr);
    failOnGPUError("copying the results from the GPU failed");
    for (void *device : deviceBuffers)
      mgpuMemFree(device, /*stream=*/nullptr);
  }

  SmallVector<StringRef> outputPaths;
  SmallVector<const npy::Array *> outputArrays;
  for (auto [index, type] : llvm::enumerate(resultTypes)) {
    const npy::Array &array = args[argTypes.size() + index].array;
    if (printOutputs)
      printSummary(index, array);
    if (!outputs.empty()) {
      outputPaths.push_back(outputs[index]);
      outputArrays.push_back(&array);
    }
  }
  // All of the outputs or none.
  if (llvm::Error error = npy::writeFiles(outputPaths, outputArrays))
    fail(llvm::toString(std::move(error)));
  return 0;
}
