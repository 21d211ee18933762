//===- Pipelines.h - la's pass pipelines ------------------------*- C++ -*-===//

#ifndef LA_PIPELINES_PIPELINES_H
#define LA_PIPELINES_PIPELINES_H

#include "la/Dialect/La/LaPassOptions.h"

#include "mlir/Pass/PassOptions.h"

#include <functional>
#include <string>

namespace llvm {
class Error;
class Module;
} // namespace llvm

namespace mlir {
class OpPassManager;
namespace la {

/// Options of `la-lower-to-cpu`.
struct LowerToCPUOptions : public PassPipelineOptions<LowerToCPUOptions> {
  PassOptions::Option<int64_t> chunkSize{
      *this, "chunk-size", llvm::cl::desc("tokens per chunk (> 0)"),
      llvm::cl::init(64)};
  PassOptions::Option<bool> sequential{
      *this, "sequential",
      llvm::cl::desc("lower the plain recurrence token by token instead of "
                     "the chunked algorithm"),
      llvm::cl::init(false)};
  PassOptions::Option<FusionMode> fuse{
      *this, "fuse",
      llvm::cl::desc("la-fuse-recurrence's mode: auto (fused when B * HV >= "
                     "threads), fused or materialized"),
      llvm::cl::init(FusionMode::Auto),
      llvm::cl::values(
          clEnumValN(FusionMode::Auto, "auto", "the cost rule"),
          clEnumValN(FusionMode::Fused, "fused", "always fused"),
          clEnumValN(FusionMode::Materialized, "materialized", "never fused"))};
  PassOptions::Option<bool> transposedReads{
      *this, "transposed-reads",
      llvm::cl::desc("la-expand-recurrence-grad's transposed-reads: the "
                     "adjoint G read from both sides instead of G^T as "
                     "recurrences of its own"),
      llvm::cl::init(true)};
  PassOptions::Option<bool> tile{
      *this, "tile",
      llvm::cl::desc("tile and vectorise the structured ops (la-tile)"),
      llvm::cl::init(true)};
  PassOptions::Option<int64_t> vectorBits{
      *this, "vector-bits",
      llvm::cl::desc("the target's vector registers in bits (512: AVX-512, "
                     "256: AVX2, 128: SSE or NEON); chooses la-tile's "
                     "register tile where row-tile and lane-tile are 0: 8 "
                     "rows x 32 lanes at 512, 6 x 16 at 256, 6 x 8 at 128 "
                     "(la-run and the Python package pass the host's)"),
      llvm::cl::init(512)};
  PassOptions::Option<int64_t> rowTile{
      *this, "row-tile",
      llvm::cl::desc("rows of la-tile's register tile (0: from vector-bits)"),
      llvm::cl::init(0)};
  PassOptions::Option<int64_t> laneTile{
      *this, "lane-tile",
      llvm::cl::desc(
          "vector lanes of la-tile's register tile (0: from vector-bits)"),
      llvm::cl::init(0)};
  PassOptions::Option<bool> parallel{
      *this, "parallel",
      llvm::cl::desc("run the parallel loops of the lowered linalg ops with "
                     "OpenMP (the caller must load libomp)"),
      llvm::cl::init(false)};
  PassOptions::Option<int64_t> valueTile{
      *this, "value-tile",
      llvm::cl::desc("la-fuse-recurrence's value columns per task (0: all)"),
      llvm::cl::init(0)};
  PassOptions::Option<int64_t> threads{
      *this, "threads",
      llvm::cl::desc("with parallel: the threads la-fuse-recurrence's cost "
                     "rule plans for (0: the compiling machine's hardware "
                     "threads; without parallel, 1)"),
      llvm::cl::init(1)};
  PassOptions::Option<bool> packInputs{
      *this, "pack-inputs",
      llvm::cl::desc("fused schedule: copy each chunk of the inputs into a "
                     "compact buffer before the ops read it "
                     "(la-fuse-recurrence's pack-inputs)"),
      llvm::cl::init(true)};
  PassOptions::Option<bool> peelTail{
      *this, "peel-tail",
      llvm::cl::desc("fused schedule: peel a last, partial chunk off the "
                     "chunk loop (la-fuse-recurrence's peel-tail); off: the "
                     "partial chunk is padded inside the loop, so one chunk "
                     "program serves every chunk (half the code)"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> sequenceTasks{
      *this, "sequence-tasks",
      llvm::cl::desc("fused schedule: packed sequences as tasks of their "
                     "own, (sequence, value head) on the threads "
                     "(la-fuse-recurrence's sequence-tasks); off: a loop "
                     "over the sequences, each one's heads on the threads"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> prefetch{
      *this, "prefetch",
      llvm::cl::desc("fused schedule: prefetch the next chunk's inputs "
                     "(la-prefetch-chunks)"),
      llvm::cl::init(true)};
  PassOptions::Option<int64_t> gateBlock{
      *this, "gate-block",
      llvm::cl::desc("rows per block of the channel-gate score products "
                     "(convert-la-to-linalg's gate-block; 0: unblocked)"),
      llvm::cl::init(8)};
  PassOptions::Option<double> gateSpreadLimit{
      *this, "gate-spread-limit",
      llvm::cl::desc("chunks whose cumulative channel gates stay within this "
                     "distance of the chunk's first row take one plain score "
                     "product (convert-la-to-linalg's gate-spread-limit; 0: "
                     "always the blocked form)"),
      llvm::cl::init(32.0)};
  PassOptions::Option<bool> flushDenormals{
      *this, "flush-denormals",
      llvm::cl::desc("on x86 hosts, treat denormal floats as zeros while "
                     "the kernel runs (la-flush-denormals: MXCSR's FTZ and "
                     "DAZ bits, restored on return); elsewhere no effect"),
      llvm::cl::init(true)};
  PassOptions::Option<bool> outlineTasks{
      *this, "outline-tasks",
      llvm::cl::desc("one thread: each outermost task loop a function of its "
                     "own where there are several (la-outline-tasks), so "
                     "that their parts compile in parallel"),
      llvm::cl::init(true)};
  PassOptions::Option<bool> outlineChunkParts{
      *this, "outline-chunk-parts",
      llvm::cl::desc("one thread: the large loop nests of each chunk loop "
                     "functions of their own (la-outline-chunk-parts), which "
                     "clang compiles faster than one large function"),
      llvm::cl::init(true)};
  PassOptions::Option<bool> copyLoops{
      *this, "copy-loops",
      llvm::cl::desc("strided and dynamic memref.copy ops as loops "
                     "(la-copy-loops) instead of the runtime's "
                     "element-by-element memrefCopy; off: as "
                     "finalize-memref-to-llvm lowers them (tests use it to "
                     "see copies that in-place writes should have avoided)"),
      llvm::cl::init(true)};
  PassOptions::Option<bool> hostAllocator{
      *this, "host-allocator",
      llvm::cl::desc(
          "allocate through _mlir_memref_to_llvm_alloc/free "
          "(finalize-memref-to-llvm's generic functions), which "
          "libla_host_runtime.so defines with a cache of large blocks "
          "between calls (la-run and the Python package load it); off: "
          "malloc and free"),
      llvm::cl::init(false)};
};

/// Options of `la-lower-to-nvvm`.
/// The defaults (chunks of 16 tokens, 16 value columns per block, 256
/// threads) are the fastest of a sweep on an H200 (docs/performance.md: GLA
/// and Gated DeltaNet at K = V = 128, with and without tensor cores, 2-2.4x
/// faster than 32, 32 and 128); they keep a block's buffers for K = V = 128
/// within sm_90's 227 KB of shared memory for every variant.
struct LowerToNVVMOptions : public PassPipelineOptions<LowerToNVVMOptions> {
  PassOptions::Option<int64_t> chunkSize{
      *this, "chunk-size", llvm::cl::desc("tokens per chunk (> 0)"),
      llvm::cl::init(16)};
  PassOptions::Option<int64_t> valueTile{
      *this, "value-tile",
      llvm::cl::desc("value columns per block (0: all of V)"),
      llvm::cl::init(16)};
  PassOptions::Option<int64_t> threadsPerBlock{
      *this, "threads-per-block", llvm::cl::desc("threads of each block"),
      llvm::cl::init(256)};
  PassOptions::Option<GPUSchedule> schedule{
      *this, "schedule",
      llvm::cl::desc("fused (one block per batch, value head and value "
                     "tile, its chunks in order) or chunk-parallel (every "
                     "chunk in parallel, only the state scan in order)"),
      llvm::cl::init(GPUSchedule::Fused),
      llvm::cl::values(
          clEnumValN(GPUSchedule::Fused, "fused",
                     "la-fuse-recurrence's tasks, the chunks in order"),
          clEnumValN(GPUSchedule::ChunkParallel, "chunk-parallel",
                     "la-chunk's ops as tasks (la-distribute-chunks)"))};
  PassOptions::Option<bool> tensorCores{
      *this, "tensor-cores",
      llvm::cl::desc("f32 contractions on tensor cores (mma.sync, tf32)"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> stageInputs{
      *this, "stage-inputs",
      llvm::cl::desc("copy each chunk of the inputs into shared memory "
                     "before the ops read it"),
      llvm::cl::init(true)};
  PassOptions::Option<bool> stateInSharedMemory{
      *this, "state-in-shared-memory",
      llvm::cl::desc("keep the running state in shared memory, the final "
                     "state written once (not yet measured on a GPU)"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> fpContract{
      *this, "fp-contract",
      llvm::cl::desc("let LLVM fuse the kernels' multiplies and adds into "
                     "FMAs (fastmath<contract>)"),
      llvm::cl::init(true)};
  PassOptions::Option<MmaPrecision> mmaPrecision{
      *this, "mma-precision",
      llvm::cl::desc("with tensor-cores: the instructions' input type, tf32, "
                     "bf16 or f16 (f32 accumulation)"),
      llvm::cl::init(MmaPrecision::TF32),
      llvm::cl::values(
          clEnumValN(MmaPrecision::TF32, "tf32", "mma.sync m16n8k8, tf32"),
          clEnumValN(MmaPrecision::BF16, "bf16", "m16n8k16, bf16"),
          clEnumValN(MmaPrecision::F16, "f16", "m16n8k16, f16"))};
  PassOptions::Option<int64_t> sharedMemoryLimit{
      *this, "shared-memory-limit",
      llvm::cl::desc("shared memory per block, in bytes"),
      llvm::cl::init(232448)};
  PassOptions::Option<std::string> chip{
      *this, "chip",
      llvm::cl::desc("the GPU architecture (sm_80, sm_90a, ...)"),
      llvm::cl::init("sm_90a")};
  PassOptions::Option<std::string> features{
      *this, "features", llvm::cl::desc("PTX features (+ptx80, ...)"),
      llvm::cl::init("+ptx80")};
  PassOptions::Option<std::string> format{
      *this, "format",
      llvm::cl::desc("what the kernels become: bin (cubin, through ptxas), "
                     "isa (PTX) or fatbin"),
      llvm::cl::init("bin")};
  PassOptions::Option<int64_t> optLevel{
      *this, "opt-level", llvm::cl::desc("NVVM optimisation level"),
      llvm::cl::init(3)};
  PassOptions::Option<std::string> cudaToolkit{
      *this, "cuda-toolkit",
      llvm::cl::desc("the CUDA toolkit (ptxas, libdevice); default: "
                     "$CUDA_ROOT, $CUDA_HOME, $CUDA_PATH or /usr/local/cuda"),
      llvm::cl::init("")};
  PassOptions::Option<std::string> ptxasOptions{
      *this, "ptxas-options",
      llvm::cl::desc("options for ptxas (format=bin), e.g. -v"),
      llvm::cl::init("")};
};

/// The CUDA toolkit directory `la-lower-to-nvvm` uses: `requested` when
/// given, else $CUDA_ROOT, $CUDA_HOME, $CUDA_PATH, else /usr/local/cuda.
std::string resolveCUDAToolkit(llvm::StringRef requested);

/// Builds the pipeline from `la.attention` on tensors to host LLVM code that
/// launches cubin kernels: the fused chunked program (la-fuse-recurrence,
/// mode fused), la-tile-for-gpu, bufferization, la-map-to-gpu, then MLIR's
/// gpu-lower-to-nvvm pipeline (outlining, NVVM, gpu-module-to-binary and
/// gpu-to-llvm). The function's memrefs are device memory; the host code
/// calls the mgpu* functions of libla_cuda_runtime.
void buildLowerToNVVMPipeline(OpPassManager &pm,
                              const LowerToNVVMOptions &options);

/// The part of `la-lower-to-nvvm` up to la-map-to-gpu (gpu.launch ops on
/// buffers), for inspecting the kernels before NVVM.
void buildLowerToGPUPipeline(OpPassManager &pm,
                             const LowerToNVVMOptions &options);

/// The start of `la-lower-to-gpu`, on tensors: the fused chunked program
/// (la-fuse-recurrence, mode fused; la-chunk for what does not fuse),
/// convert-la-to-linalg with the GPU's options and la-tile-for-gpu's block,
/// thread and warp loops. (The test devices run it on the CPU.)
void buildGPUScheduleOnTensorsPipeline(OpPassManager &pm,
                                       const LowerToNVVMOptions &options);

/// One-shot bufferization of the whole module with identity layouts at
/// function boundaries and results as out-parameters (the caller owns every
/// output), as both pipelines bufferize. `allowReturnAllocsFromLoops` as
/// one-shot-bufferize's option.
void buildBufferizationPipeline(OpPassManager &pm,
                                bool allowReturnAllocsFromLoops);

/// The end of la-lower-to-cpu: buffers to the LLVM dialect, through loops
/// (OpenMP with `parallel`) and, with `vectors`, la-tile's vector register
/// tiles; with `hostAllocator`, allocations call finalize-memref-to-llvm's
/// generic functions (libla_host_runtime.so); with `copyLoops`, strided and
/// dynamic copies become loops (la-copy-loops). (The GPU emulator of
/// test/lib ends with it too.)
void buildLowerBuffersToLLVMPipeline(OpPassManager &pm, bool parallel,
                                     bool vectors, bool hostAllocator = false,
                                     bool copyLoops = true);

/// The register tile la-lower-to-cpu gives la-tile: `row-tile` x
/// `lane-tile` where given, else the one for `vector-bits` (about 12-16
/// accumulator registers and room for the operands: AVX-512 has 32 vector
/// registers, AVX2 and SSE 16).
struct RegisterTile {
  int64_t rows;
  int64_t lanes;
};
RegisterTile getRegisterTile(const LowerToCPUOptions &options);

/// The vector width, in bits, of the machine this process runs on (512 with
/// AVX-512F, 256 with AVX, else 128): what la-run and the Python package,
/// which compile for that machine, pass as la-lower-to-cpu's `vector-bits`.
/// la-opt's pipelines never ask, so their IR does not depend on the host.
int64_t getHostVectorBits();

/// Builds the pipeline from `la.attention` on tensors to the LLVM dialect:
/// la-lower-to-recurrence, la-chunk (unless sequential), convert-la-to-linalg,
/// bufferization with results as out-parameters, loops, and the conversions
/// to LLVM. Functions then take their results as trailing memref arguments.
/// Check the options first with verifyLowerToCPUOptions (the registered
/// pipeline does); la-chunk also reports a bad chunk size when it runs.
void buildLowerToCPUPipeline(OpPassManager &pm,
                             const LowerToCPUOptions &options);

/// LLVM's -O`optLevel` pipeline for the host CPU, for ExecutionEngine's
/// `transformer`: with the host's TargetMachine the optimiser knows the
/// vector width and the costs of the CPU the code will run on.
std::function<llvm::Error(llvm::Module *)>
makeHostOptimizingTransformer(unsigned optLevel);

/// Checks the options of `la-lower-to-cpu` (ranges, enum values), reporting
/// the first bad one through `emitError` (whose result is returned).
/// Callers of buildLowerToCPUPipeline check them first; the registered
/// pipeline does.
LogicalResult
verifyLowerToCPUOptions(const LowerToCPUOptions &options,
                        function_ref<LogicalResult(const Twine &)> emitError);

/// The same for the options of `la-lower-to-gpu` and `la-lower-to-nvvm` (and
/// the test pipeline `la-lower-to-gpu-emulator`).
LogicalResult
verifyLowerToNVVMOptions(const LowerToNVVMOptions &options,
                         function_ref<LogicalResult(const Twine &)> emitError);

/// Registers `la-lower-to-cpu`, `la-lower-to-gpu` and `la-lower-to-nvvm` with
/// the global pipeline registry. Each one checks its options and fails with a
/// diagnostic (not a fatal error) when nested below `builtin.module`.
void registerPipelines();

/// Registers a pipeline with la-lower-to-nvvm's options the same way (the
/// test devices register la-lower-to-gpu-emulator with it).
void registerGPUPipeline(StringRef name, StringRef description,
                         void (*build)(OpPassManager &,
                                       const LowerToNVVMOptions &));

/// Writes the Markdown reference of the pipelines registerPipelines
/// registers: each one's description and its options with their defaults
/// and help (docs/reference/LaPipelines.md, written by la-pipeline-doc).
void printPipelineReference(llvm::raw_ostream &os);

} // namespace la
} // namespace mlir

#endif // LA_PIPELINES_PIPELINES_H
