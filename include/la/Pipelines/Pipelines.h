//===- Pipelines.h - la's pass pipelines ------------------------*- C++ -*-===//

#ifndef LA_PIPELINES_PIPELINES_H
#define LA_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassOptions.h"

#include <functional>

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
  PassOptions::Option<std::string> fuse{
      *this, "fuse",
      llvm::cl::desc("la-fuse-recurrence's mode: auto (fused when B * HV >= "
                     "threads), fused or materialized"),
      llvm::cl::init("auto")};
  PassOptions::Option<bool> tile{
      *this, "tile",
      llvm::cl::desc("tile and vectorise the structured ops (la-tile)"),
      llvm::cl::init(true)};
  PassOptions::Option<int64_t> rowTile{
      *this, "row-tile", llvm::cl::desc("rows of la-tile's register tile"),
      llvm::cl::init(8)};
  PassOptions::Option<int64_t> laneTile{
      *this, "lane-tile",
      llvm::cl::desc("vector lanes of la-tile's register tile"),
      llvm::cl::init(32)};
  PassOptions::Option<bool> parallel{
      *this, "parallel",
      llvm::cl::desc("run the parallel loops of the lowered linalg ops with "
                     "OpenMP (the caller must load libomp)"),
      llvm::cl::init(false)};
  PassOptions::Option<int64_t> valueTile{
      *this, "value-tile",
      llvm::cl::desc("la-fuse-recurrence's value columns per task (0: all)"),
      llvm::cl::init(0)};
  PassOptions::Option<bool> gpuSchedule{
      *this, "gpu-schedule",
      llvm::cl::desc("run the GPU's schedule (the fused program, "
                     "la-tile-for-gpu's block and thread loops) on the CPU, "
                     "sequentially: checks the GPU tiling without a GPU"),
      llvm::cl::init(false)};
};

/// Builds the pipeline from `la.attention` on tensors to the LLVM dialect:
/// la-lower-to-recurrence, la-chunk (unless sequential), convert-la-to-linalg,
/// bufferization with results as out-parameters, loops, and the conversions
/// to LLVM. Functions then take their results as trailing memref arguments.
/// An invalid chunk size is reported by la-chunk when the pipeline runs.
void buildLowerToCPUPipeline(OpPassManager &pm,
                             const LowerToCPUOptions &options);

/// LLVM's -O`optLevel` pipeline for the host CPU, for ExecutionEngine's
/// `transformer`: with the host's TargetMachine the optimiser knows the
/// vector width and the costs of the CPU the code will run on.
std::function<llvm::Error(llvm::Module *)>
makeHostOptimizingTransformer(unsigned optLevel);

/// Registers `la-lower-to-cpu` with the global pipeline registry.
void registerPipelines();

} // namespace la
} // namespace mlir

#endif // LA_PIPELINES_PIPELINES_H
