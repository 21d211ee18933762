//===- TileForGPU.cpp - tile la's linalg ops onto GPU blocks and threads --===//
//
// The GPU schedule of the fused chunked program (la-fuse-recurrence): each
// task of its scf.forall (batch, value head, value tile) becomes a thread
// block, the chunk loop runs inside the block, and every structured op of a
// chunk is split over the block's threads. This pass only marks and tiles,
// on tensors: the task forall gets #gpu.block mappings, and each linalg op
// inside it becomes an scf.forall over its parallel iterations with
// #gpu.thread mappings (one output element per iteration; the reductions
// stay inside the iteration). The result is still an ordinary program that
// the CPU pipeline can run, which checks the tiling without a GPU;
// la-map-to-gpu turns it into a gpu.launch.
//
//===----------------------------------------------------------------------===//

#include "la/Codegen/GPU/GPUTiling.h"
#include "la/Codegen/GPU/Passes.h"
#include "la/Dialect/La/LaDialect.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/TilingInterface.h"

namespace mlir::la {
#define GEN_PASS_DEF_LATILEFORGPUPASS
#include "la/Codegen/GPU/Passes.h.inc"
} // namespace mlir::la

using namespace mlir;
using namespace mlir::la;

/// Linear mapping attributes for a forall of `rank` dimensions listed
/// outermost first: the last dimension is linear_dim_0 (the fastest varying
/// one), so consecutive threads (or warps) take consecutive innermost
/// iterations.
static SmallVector<Attribute> linearMapping(MLIRContext *ctx, unsigned rank,
                                            bool warps) {
  SmallVector<Attribute> mapping;
  for (unsigned i = 0; i < rank; ++i) {
    auto id = static_cast<gpu::MappingId>(
        static_cast<uint64_t>(gpu::MappingId::LinearDim0) + rank - 1 - i);
    if (warps)
      mapping.push_back(gpu::GPUWarpMappingAttr::get(ctx, id));
    else
      mapping.push_back(gpu::GPUThreadMappingAttr::get(ctx, id));
  }
  return mapping;
}

/// Matches a body `yield(out + f(a) * g(b))` where f and g are an optional
/// negation of an optional extension of the input, and nothing else.
/// Returns whether each input is negated.
static std::optional<std::array<bool, 2>> matchMulAddBody(linalg::LinalgOp op) {
  Block &body = op->getRegion(0).front();
  if (body.getNumArguments() != 3)
    return std::nullopt;
  auto add = body.getTerminator()->getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!add)
    return std::nullopt;
  Value out = body.getArgument(2);
  Value product = add.getLhs() == out   ? add.getRhs()
                  : add.getRhs() == out ? add.getLhs()
                                        : Value();
  auto mul = product ? product.getDefiningOp<arith::MulFOp>() : nullptr;
  if (!mul)
    return std::nullopt;
  std::array<bool, 2> negated = {false, false};
  std::array<bool, 2> seen = {false, false};
  unsigned expectedOps = 3; // mulf, addf, yield
  for (Value factor : {mul.getLhs(), mul.getRhs()}) {
    bool negate = false;
    if (auto neg = factor.getDefiningOp<arith::NegFOp>()) {
      negate = true;
      factor = neg.getOperand();
      ++expectedOps;
    }
    if (auto ext = factor.getDefiningOp<arith::ExtFOp>()) {
      factor = ext.getIn();
      ++expectedOps;
    }
    auto arg = dyn_cast<BlockArgument>(factor);
    if (!arg || arg.getOwner() != &body || arg.getArgNumber() > 1 ||
        seen[arg.getArgNumber()])
      return std::nullopt;
    seen[arg.getArgNumber()] = true;
    negated[arg.getArgNumber()] = negate;
  }
  if (std::distance(body.begin(), body.end()) !=
      static_cast<std::ptrdiff_t>(expectedOps))
    return std::nullopt;
  return negated;
}

std::optional<MmaContraction> mlir::la::getMmaContraction(linalg::LinalgOp op) {
  std::optional<std::array<bool, 2>> negated = matchMulAddBody(op);
  if (!negated || op.getNumDpsInputs() != 2 ||
      (!op.hasPureTensorSemantics() && !op.hasPureBufferSemantics()))
    return std::nullopt;
  if (!llvm::all_of(op.getIndexingMapsArray(),
                    [](AffineMap map) { return map.isProjectedPermutation(); }))
    return std::nullopt;
  // f32 accumulators; f32, bf16 or f16 inputs (converted to the
  // instruction's type as they are loaded).
  for (OpOperand &operand : op->getOpOperands()) {
    Type element = getElementTypeOrSelf(operand.get().getType());
    bool isInit = op.isDpsInit(&operand);
    if (isInit ? !element.isF32()
               : !(element.isF32() || element.isBF16() || element.isF16()))
      return std::nullopt;
  }
  FailureOr<linalg::ContractionDimensions> dims =
      linalg::inferContractionDims(op);
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (failed(dims) || dims->k.size() != 1 ||
      llvm::any_of(ranges, ShapedType::isDynamic))
    return std::nullopt;
  // The innermost non-unit loop of a kind; every other one must be a unit.
  auto single = [&](ArrayRef<unsigned> loops) -> std::optional<unsigned> {
    std::optional<unsigned> found;
    for (unsigned loop : loops) {
      if (ranges[loop] == 1)
        continue;
      if (found)
        return std::nullopt;
      found = loop;
    }
    return found;
  };
  std::optional<unsigned> m = single(dims->m), n = single(dims->n);
  unsigned k = dims->k.front();
  if (!m || !n || ranges[*m] % 16 || ranges[*n] % 8 || ranges[k] % 16)
    return std::nullopt;
  for (unsigned batch : dims->batch)
    if (ranges[batch] != 1)
      return std::nullopt;
  MmaContraction result{*m, *n, k};
  result.negated[0] = (*negated)[0];
  result.negated[1] = (*negated)[1];
  return result;
}

bool mlir::la::isWarpForall(scf::ForallOp forall) {
  std::optional<ArrayAttr> mapping = forall.getMapping();
  return mapping && !mapping->empty() &&
         llvm::all_of(*mapping, llvm::IsaPred<gpu::GPUWarpMappingAttr>);
}

/// Tiles a tensor-core contraction into 16 x 8 output tiles (the whole
/// reduction in each), one per iteration of a forall mapped onto warps.
static LogicalResult tileOntoWarps(RewriterBase &rewriter, linalg::LinalgOp op,
                                   MmaContraction mma) {
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  SmallVector<OpFoldResult> tileSizes(ranges.size(), rewriter.getIndexAttr(0));
  tileSizes[mma.m] = rewriter.getIndexAttr(16);
  tileSizes[mma.n] = rewriter.getIndexAttr(8);
  scf::SCFTilingOptions options;
  options.setLoopType(scf::SCFTilingOptions::LoopType::ForallOp);
  options.setTileSizes(tileSizes);
  options.setMapping(linearMapping(rewriter.getContext(), 2, /*warps=*/true));
  rewriter.setInsertionPoint(op);
  FailureOr<scf::SCFTilingResult> result = scf::tileUsingSCF(
      rewriter, cast<TilingInterface>(op.getOperation()), options);
  if (failed(result))
    return op->emitOpError("could not be tiled onto the GPU's warps");
  rewriter.replaceOp(op, result->replacements);
  return success();
}

bool mlir::la::isBlockForall(scf::ForallOp forall) {
  std::optional<ArrayAttr> mapping = forall.getMapping();
  return mapping && !mapping->empty() &&
         llvm::all_of(*mapping, llvm::IsaPred<gpu::GPUBlockMappingAttr>);
}

bool mlir::la::isThreadForall(scf::ForallOp forall) {
  std::optional<ArrayAttr> mapping = forall.getMapping();
  return mapping && !mapping->empty() &&
         llvm::all_of(*mapping, llvm::IsaPred<gpu::GPUThreadMappingAttr>);
}

/// Tiles `op` into an scf.forall over its parallel iterations, one output
/// element per iteration, mapped to threads. Unit dimensions are not tiled;
/// an op whose parallel dimensions are all units gets a one-iteration loop,
/// so that one thread runs it.
static LogicalResult tileOntoThreads(RewriterBase &rewriter,
                                     linalg::LinalgOp op) {
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
  SmallVector<OpFoldResult> tileSizes(ranges.size(), rewriter.getIndexAttr(0));
  unsigned tiled = 0;
  std::optional<unsigned> firstParallel;
  for (auto [dim, range] : llvm::enumerate(ranges)) {
    if (iterators[dim] != utils::IteratorType::parallel)
      continue;
    if (!firstParallel)
      firstParallel = dim;
    if (range == 1)
      continue;
    tileSizes[dim] = rewriter.getIndexAttr(1);
    ++tiled;
  }
  if (!firstParallel)
    return op->emitOpError(
        "has no parallel dimension to split over the GPU's threads");
  if (tiled == 0) {
    tileSizes[*firstParallel] = rewriter.getIndexAttr(1);
    tiled = 1;
  }
  scf::SCFTilingOptions options;
  options.setLoopType(scf::SCFTilingOptions::LoopType::ForallOp);
  options.setTileSizes(tileSizes);
  options.setMapping(linearMapping(rewriter.getContext(), tiled,
                                   /*warps=*/false));
  rewriter.setInsertionPoint(op);
  FailureOr<scf::SCFTilingResult> result = scf::tileUsingSCF(
      rewriter, cast<TilingInterface>(op.getOperation()), options);
  if (failed(result))
    return op->emitOpError("could not be tiled onto the GPU's threads");
  rewriter.replaceOp(op, result->replacements);
  return success();
}

/// Whether `value` is written into `dest`'s tensor: a chain of destination
/// style ops (and insert_slice) whose tied init leads back to `dest`.
static bool isWrittenInto(Value value, Value dest) {
  while (value != dest) {
    Operation *def = value.getDefiningOp();
    if (auto insert = dyn_cast_or_null<tensor::InsertSliceOp>(def)) {
      value = insert.getDest();
      continue;
    }
    auto dps = dyn_cast_or_null<DestinationStyleOpInterface>(def);
    if (!dps)
      return false;
    value = dps.getTiedOpOperand(cast<OpResult>(value))->get();
  }
  return true;
}

/// Makes every tensor that a loop inside the task yields a write into its
/// iteration argument, copying it there where it is computed elsewhere (the
/// next state, from the scan's fresh tensor): bufferization then keeps one
/// buffer per loop-carried value, which la-map-to-gpu places in shared
/// memory, instead of a new allocation per iteration.
static void copyYieldsIntoIterArgs(RewriterBase &rewriter, Operation *root) {
  root->walk([&](scf::ForOp loop) {
    auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
    for (unsigned i = 0, e = yield.getNumOperands(); i < e; ++i) {
      Value arg = loop.getRegionIterArgs()[i];
      Value yielded = yield.getOperand(i);
      if (!isa<RankedTensorType>(arg.getType()) || isWrittenInto(yielded, arg))
        continue;
      rewriter.setInsertionPoint(yield);
      Value copy =
          linalg::CopyOp::create(rewriter, yield.getLoc(), yielded, arg)
              .getResult(0);
      rewriter.modifyOpInPlace(yield, [&] { yield->setOperand(i, copy); });
    }
  });
}

/// Stages each slice that a task reads from a tensor defined outside it
/// (the inputs in global memory): a copy into a fresh tensor, which
/// bufferization and la-map-to-gpu place in shared memory, so that the
/// block reads each chunk of its inputs once, with consecutive threads on
/// consecutive elements, and its ops then read shared memory.
static void stageInputSlices(RewriterBase &rewriter, scf::ForallOp tasks) {
  // A slice that is only sliced further (a task's whole sequence, which the
  // chunk loop slices per chunk: la-distribute-chunks's scan) is not staged
  // itself; its slices are.
  auto onlySliced = [](tensor::ExtractSliceOp slice) {
    return llvm::all_of(slice->getUsers(),
                        llvm::IsaPred<tensor::ExtractSliceOp>);
  };
  llvm::SmallPtrSet<Operation *, 8> readsInput;
  SmallVector<tensor::ExtractSliceOp> slices;
  tasks.getBody()->walk([&](tensor::ExtractSliceOp slice) {
    Value source = slice.getSource();
    Region *sourceRegion = source.getParentRegion();
    Operation *sourceSlice = source.getDefiningOp<tensor::ExtractSliceOp>();
    if (!sourceRegion->isProperAncestor(&tasks.getRegion()) &&
        !(sourceSlice && readsInput.contains(sourceSlice)))
      return;
    readsInput.insert(slice);
    if (slice.getType().hasStaticShape() && !onlySliced(slice))
      slices.push_back(slice);
  });
  for (tensor::ExtractSliceOp slice : slices) {
    rewriter.setInsertionPointAfter(slice);
    Location loc = slice.getLoc();
    Value empty =
        tensor::EmptyOp::create(rewriter, loc, slice.getType().getShape(),
                                slice.getType().getElementType());
    auto copy = linalg::CopyOp::create(rewriter, loc, slice.getResult(), empty);
    rewriter.replaceAllUsesExcept(slice.getResult(), copy.getResult(0), copy);
  }
}

/// Gives each tensor that a loop of the task carries (the running state) a
/// buffer of the task's own, in place of the task's slice of an output (the
/// final state) that its initial value is written into: the producer of the
/// initial value (a fill or the copy of the initial state, which do not
/// read their destination) writes a fresh tensor instead. la-map-to-gpu
/// then places the state in shared memory, and the output slice is written
/// once, after the loop, instead of read and written in global memory at
/// every chunk.
static void keepLoopStatesInTask(RewriterBase &rewriter, scf::ForallOp tasks) {
  auto isTaskOutputSlice = [&](Value value) {
    auto slice = value.getDefiningOp<tensor::ExtractSliceOp>();
    if (!slice || !slice.getType().hasStaticShape())
      return false;
    auto arg = dyn_cast<BlockArgument>(slice.getSource());
    return arg && arg.getOwner() == tasks.getBody() &&
           llvm::is_contained(tasks.getRegionIterArgs(), arg);
  };
  for (auto loop : tasks.getBody()->getOps<scf::ForOp>()) {
    for (Value init : loop.getInitArgs()) {
      auto producer = init.getDefiningOp<linalg::LinalgOp>();
      if (!producer || producer->getNumResults() != 1 ||
          !producer.hasPureTensorSemantics())
        continue;
      OpOperand *destination = producer.getDpsInitOperand(0);
      if (!isTaskOutputSlice(destination->get()) ||
          producer.payloadUsesValueFromOperand(destination))
        continue;
      auto type = cast<RankedTensorType>(destination->get().getType());
      rewriter.setInsertionPoint(producer);
      Value fresh = tensor::EmptyOp::create(
          rewriter, producer.getLoc(), type.getShape(), type.getElementType());
      rewriter.modifyOpInPlace(producer, [&] { destination->set(fresh); });
    }
  }
}

/// Computes each tile that the task writes into an output in that output's
/// slice: the `tensor.empty` its chain of destinations starts from (the
/// scan's per-chunk states and corrected values) is replaced, in that use
/// only, by the slice that the task's parallel insertion writes. Otherwise
/// the tile would be a buffer of the block (shared memory), copied out at
/// the end. Upstream's empty-tensor elimination does this for every use of
/// the (CSE-merged) tensor.empty, which made two staged inputs of one shape
/// share the output's slice.
static void computeResultsInOutputs(RewriterBase &rewriter,
                                    scf::ForallOp tasks) {
  DominanceInfo dominance;
  for (Operation &op : tasks.getTerminator().getYieldingOps()) {
    auto insert = dyn_cast<tensor::ParallelInsertSliceOp>(op);
    if (!insert)
      continue;
    OpOperand *destination = findEmptyDestination(insert.getSource());
    if (!destination)
      continue;
    Operation *user = destination->getOwner();
    bool available = llvm::all_of(insert->getOperands(), [&](Value operand) {
      return operand == insert.getSource() ||
             dominance.properlyDominates(operand, user);
    });
    if (!available || insert.getSourceType() !=
                          cast<RankedTensorType>(destination->get().getType()))
      continue;
    rewriter.setInsertionPoint(user);
    Value slice = tensor::ExtractSliceOp::create(
        rewriter, insert.getLoc(), insert.getSourceType(), insert.getDest(),
        insert.getMixedOffsets(), insert.getMixedSizes(),
        insert.getMixedStrides());
    rewriter.modifyOpInPlace(user, [&] { destination->set(slice); });
  }
}

LogicalResult mlir::la::tileForGPU(RewriterBase &rewriter, scf::ForallOp tasks,
                                   bool tensorCores, bool stageInputs,
                                   bool stateInSharedMemory,
                                   bool resultsInOutputs) {
  if (!tasks.isNormalized())
    return tasks.emitOpError(
        "must be normalized (lower bounds 0, steps 1) to map onto blocks");
  if (tasks.getRank() > 3)
    return tasks.emitOpError("has ")
           << tasks.getRank() << " dimensions; a grid has at most 3";
  MLIRContext *ctx = rewriter.getContext();
  SmallVector<Attribute> blocks;
  for (int64_t i = 0, e = tasks.getRank(); i < e; ++i)
    blocks.push_back(gpu::GPUBlockMappingAttr::get(
        ctx, static_cast<gpu::MappingId>(
                 static_cast<uint64_t>(gpu::MappingId::DimX) + i)));
  rewriter.modifyOpInPlace(
      tasks, [&] { tasks.setMappingAttr(rewriter.getArrayAttr(blocks)); });
  copyYieldsIntoIterArgs(rewriter, tasks.getBody()->getParentOp());
  if (resultsInOutputs)
    computeResultsInOutputs(rewriter, tasks);
  if (stateInSharedMemory)
    keepLoopStatesInTask(rewriter, tasks);
  if (stageInputs)
    stageInputSlices(rewriter, tasks);

  SmallVector<linalg::LinalgOp> ops;
  tasks.getBody()->walk([&](linalg::LinalgOp op) {
    auto parent = op->getParentOfType<scf::ForallOp>();
    if (parent == tasks)
      ops.push_back(op);
  });
  for (linalg::LinalgOp op : ops) {
    if (!op.hasPureTensorSemantics())
      return op->emitOpError("must work on tensors to be tiled for the GPU");
    if (tensorCores) {
      if (std::optional<MmaContraction> mma = getMmaContraction(op)) {
        if (failed(tileOntoWarps(rewriter, op, *mma)))
          return failure();
        continue;
      }
    }
    if (failed(tileOntoThreads(rewriter, op)))
      return failure();
  }
  return success();
}

namespace {
struct LaTileForGPUPass : la::impl::LaTileForGPUPassBase<LaTileForGPUPass> {
  using Base::Base;

  void runOnOperation() override {
    // The task foralls: the outermost scf.forall loops of the function.
    SmallVector<scf::ForallOp> tasks;
    getOperation()->walk([&](scf::ForallOp forall) {
      if (!forall->getParentOfType<scf::ForallOp>())
        tasks.push_back(forall);
    });
    IRRewriter rewriter(&getContext());
    // Loops outside the tasks too (a reverse sum over tokens, la-chunk's
    // scan when the program did not fuse): they then bufferize without a
    // fresh buffer per iteration, and la-map-to-gpu runs them in a kernel
    // of one block (or reports what it cannot).
    copyYieldsIntoIterArgs(rewriter, getOperation());
    for (scf::ForallOp forall : tasks) {
      if (isBlockForall(forall))
        continue;
      if (failed(tileForGPU(rewriter, forall, tensorCores, stageInputs,
                            stateInSharedMemory, resultsInOutputs)))
        return signalPassFailure();
    }
  }
};
} // namespace
