//===- FuseRecurrence.cpp - the chunked program fused per head ------------===//
//
// la-chunk builds one program over whole tensors: every level-2 op runs over
// all batches, chunks and heads, and the state entering every chunk is
// materialised ([B,NC,HV,K,V]) between the scan and the output. Here the same
// level-2 ops run on one (batch, value head) and one chunk at a time, inside
// an scf.forall over (batch, value head) and an scf.for over chunks that
// carries the state: each chunk's output is computed from the state while it
// is in cache, no per-chunk state is written, and the forall's iterations are
// the threads' tasks. That is the better schedule when there are enough
// (batch, head) tasks for the threads; otherwise the materialised program
// also runs chunks in parallel (in its intra-chunk and output ops).
//
//===----------------------------------------------------------------------===//

#include "ChunkedProgram.h"
#include "la/Dialect/La/LaPasses.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/Transforms.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/Iterators.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/TilingInterface.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include "llvm/Support/Threading.h"

namespace mlir {
namespace la {
#define GEN_PASS_DEF_LAFUSERECURRENCEPASS
#include "la/Dialect/La/LaPasses.h.inc"
} // namespace la
} // namespace mlir

using namespace mlir;
using namespace mlir::la;

FailureOr<FusionMode> mlir::la::parseFusionMode(StringRef name) {
  if (name == "auto")
    return FusionMode::Auto;
  if (name == "fused")
    return FusionMode::Fused;
  if (name == "materialized")
    return FusionMode::Materialized;
  return failure();
}

/// The value columns of one task: `valueTile` when it divides a static V
/// into more than one tile, else the whole V (0 when V is dynamic).
static int64_t valueColumnsPerTask(RecurrenceOp op, int64_t valueTile) {
  int64_t columns = op.getV().getType().getDimSize(3);
  if (ShapedType::isDynamic(columns))
    return 0;
  // A read from the value side sums over all of V.
  if (op.getTransposedQuery())
    return columns;
  if (valueTile > 0 && valueTile < columns && columns % valueTile == 0)
    return valueTile;
  return columns;
}

bool mlir::la::shouldFuse(RecurrenceOp op, FusionMode mode, int64_t threads,
                          int64_t valueTile, bool sequenceTasks) {
  // Packed sequences are tasks (under any mode) or la-chunk's.
  if (op.getCuSeqlens())
    return sequenceTasks;
  if (mode == FusionMode::Materialized)
    return false;
  if (mode == FusionMode::Fused)
    return true;
  // One task per (batch, value head). A dynamic batch is taken to give
  // every thread a task (a kernel compiled for any B serves training
  // batches; one that meets fewer tasks than threads runs, on fewer threads).
  int64_t batch = op.getV().getType().getDimSize(0);
  int64_t valueHeads = op.getV().getType().getDimSize(2);
  if (ShapedType::isDynamic(valueHeads))
    return false;
  // The tasks read and write a state pool's rows where they are; elsewhere
  // the rows would be gathered and scattered.
  if (ShapedType::isDynamic(batch) || op.getStateIndices())
    return true;
  int64_t tasks = valueHeads * batch;
  if (int64_t columns = valueColumnsPerTask(op, valueTile))
    tasks *= op.getV().getType().getDimSize(3) / columns;
  return tasks >= threads;
}

/// The structured ops that compute the time-indexed inputs of `consumer`
/// (q, k, v, the gates, beta, a, b) and nothing else: linalg ops on tensors
/// with one result, every user of which is `consumer` or another op of the
/// set (the feature map of q before its L2 norm, whose sum of squares and
/// normalisation both read it; the gate activation after its bias; ...).
/// Tiling fuses exactly these into its loops, where they die outside.
static llvm::SmallPtrSet<Operation *, 8>
collectFusibleProducers(RecurrenceOp consumer) {
  SmallVector<Operation *> candidates;
  SmallVector<Value> worklist = {consumer.getQ(), consumer.getK(),
                                 consumer.getV()};
  for (Value x :
       {consumer.getG(), consumer.getGv(), consumer.getBeta(), consumer.getA(),
        consumer.getB(), consumer.getTransposedQuery()})
    if (x)
      worklist.push_back(x);
  while (!worklist.empty()) {
    auto producer = worklist.pop_back_val().getDefiningOp<linalg::LinalgOp>();
    if (!producer || !producer.hasPureTensorSemantics() ||
        producer->getNumResults() != 1 ||
        !isa<TilingInterface>(producer.getOperation()) ||
        llvm::is_contained(candidates, producer.getOperation()))
      continue;
    // Upstream tiling takes an operand's tile at the map of the loop tile's
    // first index: right for projected permutations, wrong for a reversed
    // time axis (`T - 1 - t`, the backward's inputs) or a widened head
    // axis (`hv floordiv G`). Those producers stay outside the loops.
    if (!llvm::all_of(producer.getIndexingMapsArray(), [](AffineMap map) {
          return map.isProjectedPermutation();
        }))
      continue;
    candidates.push_back(producer);
    for (Value input : producer.getDpsInputs())
      worklist.push_back(input);
  }
  llvm::SmallPtrSet<Operation *, 8> fusible;
  bool grown = true;
  while (grown) {
    grown = false;
    for (Operation *candidate : candidates) {
      if (fusible.contains(candidate))
        continue;
      if (llvm::all_of(candidate->getResult(0).getUsers(), [&](Operation *u) {
            return u == consumer.getOperation() || fusible.contains(u);
          })) {
        fusible.insert(candidate);
        grown = true;
      }
    }
  }
  return fusible;
}

/// The fusion rule of both tilings: the producers of the inputs in
/// `fusible` and, when `fuseInits` (the task loop, over parallel dims
/// only), a `linalg.fill` init (the zero state, filled per task) other than
/// `wholeInit` (packed sequences' output, zero between the sequences too).
/// The chunk loop never fuses an init: its state is the accumulator it
/// carries.
static scf::SCFTileAndFuseOptions::ControlFnTy
fusionRule(const llvm::SmallPtrSet<Operation *, 8> &fusible, bool fuseInits,
           Value wholeInit) {
  return [&fusible, fuseInits, wholeInit](tensor::ExtractSliceOp,
                                          OpResult producer,
                                          bool isDestinationOperand)
             -> std::optional<scf::SCFTileAndFuseOptions::ControlFnResult> {
    if (isDestinationOperand) {
      if (fuseInits && isa<linalg::FillOp>(producer.getOwner()) &&
          producer != wholeInit)
        return scf::SCFTileAndFuseOptions::ControlFnResult{};
      return std::nullopt;
    }
    if (!fusible.contains(producer.getOwner()))
      return std::nullopt;
    return scf::SCFTileAndFuseOptions::ControlFnResult{};
  };
}

/// Makes `value` available before `point`: it is already (it dominates
/// `point`), or it is made by side-effect-free ops without regions whose
/// operands can be made available, which are then moved before `point` (a
/// consumer's `tensor.empty` and `linalg.fill` inits, constants).
static bool makeAvailableBefore(RewriterBase &rewriter, Value value,
                                Operation *point, DominanceInfo &dominance) {
  if (dominance.properlyDominates(value, point))
    return true;
  Operation *def = value.getDefiningOp();
  if (!def || def->getNumResults() != 1 || def->getBlock() != point->getBlock())
    return false;
  auto fill = dyn_cast<linalg::FillOp>(def);
  bool movable = (isMemoryEffectFree(def) && def->getNumRegions() == 0) ||
                 (fill && fill.hasPureTensorSemantics());
  if (!movable)
    return false;
  for (Value operand : def->getOperands())
    if (!makeAvailableBefore(rewriter, operand, point, dominance))
      return false;
  rewriter.moveOpBefore(def, point);
  return true;
}

/// The insertions that `loop` (an scf.forall or scf.for built by tiling)
/// makes of the results `consumer` reads.
static SmallVector<Operation *> insertionsReadBy(Operation *consumer,
                                                 Operation *loop) {
  SmallVector<Operation *> slices;
  for (Value operand : consumer->getOperands()) {
    auto result = dyn_cast<OpResult>(operand);
    if (!result || result.getOwner() != loop)
      continue;
    unsigned index = result.getResultNumber();
    Operation *insert = nullptr;
    if (auto forall = dyn_cast<scf::ForallOp>(loop)) {
      for (Operation &op : forall.getTerminator().getYieldingOps())
        if (auto parallel = dyn_cast<tensor::ParallelInsertSliceOp>(op))
          if (parallel.getDest() == forall.getRegionIterArgs()[index])
            insert = parallel;
    } else if (auto forOp = dyn_cast<scf::ForOp>(loop)) {
      insert = forOp.getBody()
                   ->getTerminator()
                   ->getOperand(index)
                   .getDefiningOp<tensor::InsertSliceOp>();
    }
    if (insert && !llvm::is_contained(slices, insert))
      slices.push_back(insert);
  }
  return slices;
}

/// Fuses `consumer` of the loop nest `loops` (outermost first) into its
/// innermost loop, one loop at a time (upstream consumer fusion, given the
/// insertions it reads at each level). `loops` is updated as the loops
/// gain results.
static LogicalResult
fuseConsumerIntoLoops(RewriterBase &rewriter, Operation *consumer,
                      MutableArrayRef<LoopLikeOpInterface> loops) {
  for (unsigned level = 0; level < loops.size(); ++level) {
    SmallVector<Operation *> slices =
        insertionsReadBy(consumer, loops[level].getOperation());
    if (slices.empty())
      return failure();
    FailureOr<scf::SCFFuseConsumerOfSliceResult> fused =
        scf::tileAndFuseConsumerOfSlices(rewriter, slices,
                                         loops.slice(level, 1));
    if (failed(fused) || fused->tiledOps.size() != 1) {
      return failure();
    }
    if (consumer->use_empty())
      rewriter.eraseOp(consumer);
    // The next level fuses the tile computed in this loop.
    consumer = fused->tiledOps.front();
    if (level + 1 < loops.size()) {
      // The inner loop was rebuilt with more results only when this one
      // is innermost; find it again (it is the op that defines the
      // consumer's operand in this loop's body).
      for (Value operand : consumer->getOperands())
        if (auto inner = operand.getDefiningOp<LoopLikeOpInterface>())
          if (loops[level]->isProperAncestor(inner))
            loops[level + 1] = inner;
      // Its other operands (the slices this level made) must be available
      // at the inner loop, as upstream consumer fusion requires.
      DominanceInfo dominance;
      Operation *inner = loops[level + 1].getOperation();
      for (Value operand : consumer->getOperands())
        if (operand.getDefiningOp() != inner &&
            !makeAvailableBefore(rewriter, operand, inner, dominance))
          return failure();
    }
  }
  return success();
}

/// The consumers of the recurrence's output `o` that can run per chunk
/// inside the fused loop (the output's RMSNorm, its gating, ...): linalg
/// ops on tensors with projected-permutation maps whose outputs are
/// [B,T,HV,V] or [B,T,HV] (a reduction over V) and whose other operands can
/// be made available before the recurrence. Every result but one (the
/// sink, [B,T,HV,V]) must be used only inside the set. Returns them in
/// program order, the sink last; empty when there is no such set.
static SmallVector<linalg::LinalgOp>
collectFusibleConsumers(RewriterBase &rewriter, RecurrenceOp op, Value o) {
  SmallVector<linalg::LinalgOp> set;
  SmallVector<Operation *> pending(o.getUsers().begin(), o.getUsers().end());
  auto oType = cast<RankedTensorType>(o.getType());
  if (!oType.hasStaticShape() || pending.empty())
    return {};
  // Users that qualify join the set; the others stay outside it.
  auto qualifies = [&](Operation *candidate) {
    auto linalgOp = dyn_cast<linalg::LinalgOp>(candidate);
    if (!linalgOp || !linalgOp.hasPureTensorSemantics() ||
        linalgOp->getNumResults() != 1 || !isa<TilingInterface>(candidate) ||
        candidate->getBlock() != op->getBlock() ||
        !llvm::all_of(linalgOp.getIndexingMapsArray(), [](AffineMap map) {
          return map.isProjectedPermutation();
        }))
      return false;
    auto type = cast<RankedTensorType>(candidate->getResult(0).getType());
    return type.hasStaticShape() && type.getRank() >= 3 &&
           type.getRank() <= 4 &&
           type.getShape().take_front(3) == oType.getShape().take_front(3) &&
           (type.getRank() == 3 || type.getDimSize(3) == oType.getDimSize(3));
  };
  while (!pending.empty()) {
    Operation *next = pending.pop_back_val();
    auto linalgOp = dyn_cast<linalg::LinalgOp>(next);
    if (!qualifies(next) || llvm::is_contained(set, linalgOp))
      continue;
    set.push_back(linalgOp);
    for (Operation *user : next->getResult(0).getUsers())
      pending.push_back(user);
  }
  auto inSet = [&](Operation *candidate) {
    auto linalgOp = dyn_cast<linalg::LinalgOp>(candidate);
    return linalgOp && llvm::is_contained(set, linalgOp);
  };
  // Every user of `o` must be in the set (o itself is not materialised).
  if (set.empty() || !llvm::all_of(o.getUsers(), inSet))
    return {};
  // Program order; exactly one result, a [B,T,HV,V] one, leaves the set.
  llvm::sort(set, [](linalg::LinalgOp a, linalg::LinalgOp b) {
    return a->isBeforeInBlock(b);
  });
  unsigned sinks = 0;
  for (linalg::LinalgOp consumer : set)
    if (!llvm::all_of(consumer->getResult(0).getUsers(), inSet))
      ++sinks;
  if (sinks != 1 || llvm::all_of(set.back()->getResult(0).getUsers(), inSet) ||
      cast<RankedTensorType>(set.back()->getResult(0).getType()).getRank() != 4)
    return {};
  // The other operands must be available at the recurrence.
  DominanceInfo dominance;
  for (linalg::LinalgOp consumer : set)
    for (Value operand : consumer->getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (operand == o || (def && inSet(def)))
        continue;
      if (!makeAvailableBefore(rewriter, operand, op, dominance))
        return {};
    }
  return set;
}

/// Fills the consumers' inits per task: each `linalg.fill` that initialises
/// a result of the task forall is fused into it (upstream producer fusion
/// through the forall's shared outputs), so no work is left outside the
/// tasks (which a GPU grid could not run).
///
/// `whole` (a state pool, packed sequences' output: tensors whose rows the
/// tasks do not all write) stays whole.
static void fuseFilledInits(RewriterBase &rewriter, scf::ForallOp forall,
                            ArrayRef<Value> whole) {
  SmallVector<tensor::ExtractSliceOp> slices;
  for (auto [init, arg] :
       llvm::zip(forall.getOutputs(), forall.getRegionIterArgs())) {
    if (!init.getDefiningOp<linalg::FillOp>() ||
        llvm::is_contained(whole, init))
      continue;
    for (Operation *user : arg.getUsers())
      if (auto slice = dyn_cast<tensor::ExtractSliceOp>(user))
        slices.push_back(slice);
  }
  SmallVector<LoopLikeOpInterface> loops = {
      cast<LoopLikeOpInterface>(forall.getOperation())};
  for (tensor::ExtractSliceOp slice : slices) {
    rewriter.setInsertionPoint(slice);
    if (scf::tileAndFuseProducerOfSlice(rewriter, slice, loops))
      rewriter.eraseOp(slice);
  }
}

/// Whether `value` is a slice of a tensor that the function computes (not
/// one of its arguments): a loop's carried tensor, another loop's result
/// (the segments of la.attention's checkpoints write o into theirs). The
/// tasks write it in place, where a fresh tensor would be copied back.
static bool isSliceOfComputedTensor(Value value) {
  auto slice = value.getDefiningOp<tensor::ExtractSliceOp>();
  if (!slice)
    return false;
  auto argument = dyn_cast<BlockArgument>(slice.getSource());
  return !argument ||
         !isa<FunctionOpInterface>(argument.getOwner()->getParentOp());
}

/// Makes each task read its tile of a shared output's initial value (the
/// initial state) from that value, and write into a fresh tensor: the tasks'
/// tiles are disjoint, so the values read are the same, and bufferization
/// then needs no copy of a read-only input (a function argument) outside the
/// tasks, where the GPU path could not run it. An argument marked
/// `la.in_place` stays the shared output: each task reads its tile there and
/// writes it back, so the state is updated in the caller's buffer. So do
/// the tensors in `whole` (a state pool, packed sequences' output): the
/// rows no task writes pass through.
static void readInitsOutsideTasks(RewriterBase &rewriter, scf::ForallOp forall,
                                  ArrayRef<Value> whole) {
  for (unsigned index = 0, e = forall.getOutputs().size(); index < e; ++index) {
    Value init = forall.getOutputs()[index];
    BlockArgument arg = forall.getRegionIterArgs()[index];
    if (init.getDefiningOp<tensor::EmptyOp>() || isInPlaceArgument(init) ||
        llvm::is_contained(whole, init) || isSliceOfComputedTensor(init))
      continue;
    SmallVector<tensor::ExtractSliceOp> reads;
    bool onlyTiles = llvm::all_of(arg.getUsers(), [&](Operation *user) {
      if (auto slice = dyn_cast<tensor::ExtractSliceOp>(user)) {
        reads.push_back(slice);
        return true;
      }
      return isa<tensor::ParallelInsertSliceOp>(user);
    });
    if (!onlyTiles)
      continue;
    for (tensor::ExtractSliceOp slice : reads)
      rewriter.modifyOpInPlace(slice,
                               [&] { slice.getSourceMutable().assign(init); });
    rewriter.setInsertionPoint(forall);
    Value fresh = emptyTensor(
        rewriter, forall.getLoc(), mixedSizes(rewriter, forall.getLoc(), init),
        cast<RankedTensorType>(init.getType()).getElementType());
    rewriter.modifyOpInPlace(
        forall, [&] { forall.getOutputsMutable()[index].assign(fresh); });
  }
}

/// Stops writing the tiles of results that nothing reads (the recurrence's
/// own output once its consumers are fused, a final state nobody returns):
/// the task loop no longer inserts them and the chunk loop forwards the
/// iteration argument, so the ops that computed the tiles die and
/// canonicalization drops the loop-carried values.
static void dropUnreadTileResults(RewriterBase &rewriter, scf::ForallOp forall,
                                  scf::ForOp loop) {
  // Consumer fusion leaves the insertions it computed operand tiles from,
  // unused.
  forall.walk<WalkOrder::PostOrder, ReverseIterator>([&](Operation *op) {
    if (op != loop && isOpTriviallyDead(op))
      rewriter.eraseOp(op);
  });
  for (auto [result, arg] :
       llvm::zip(forall.getResults(), forall.getRegionIterArgs())) {
    if (!result.use_empty())
      continue;
    for (Operation *user : llvm::make_early_inc_range(arg.getUsers()))
      if (isa<tensor::ParallelInsertSliceOp>(user))
        rewriter.eraseOp(user);
  }
  // Besides the insertion, the argument may only be the output init of a
  // chunk's recurrence (whose values it does not read): the state, which
  // the chunk reads, stays carried.
  auto onlyOutputInit = [](Operation *user) {
    auto slice = dyn_cast<tensor::ExtractSliceOp>(user);
    return slice && llvm::all_of(slice->getUses(), [](OpOperand &use) {
             auto chunk = dyn_cast<RecurrenceOp>(use.getOwner());
             return chunk && chunk.isDpsInit(&use) &&
                    use.get() != chunk.getInitialState();
           });
  };
  auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
  for (unsigned index = 0, e = loop.getNumResults(); index < e; ++index) {
    BlockArgument arg = loop.getRegionIterArgs()[index];
    auto insert =
        yield.getOperand(index).getDefiningOp<tensor::InsertSliceOp>();
    if (!loop.getResult(index).use_empty() || !insert ||
        insert.getDest() != arg || !insert->hasOneUse() ||
        !llvm::all_of(arg.getUsers(), [&](Operation *user) {
          return user == insert.getOperation() || onlyOutputInit(user);
        }))
      continue;
    rewriter.modifyOpInPlace(yield, [&] { yield->setOperand(index, arg); });
    rewriter.eraseOp(insert);
  }
}

namespace {
/// A recurrence tiled into one loop: the tile's recurrence and the loop.
struct TiledRecurrence {
  RecurrenceOp tile;
  LoopLikeOpInterface loop;
};

/// Tiles `op` with `tiling` (one loop), fusing the producers in `fusible`
/// (and fill inits when `fuseInits`), and replaces it by the loop.
FailureOr<TiledRecurrence>
tileAndFuse(RewriterBase &rewriter, RecurrenceOp op,
            const scf::SCFTilingOptions &tiling,
            const llvm::SmallPtrSet<Operation *, 8> &fusible, bool fuseInits,
            Value wholeInit = Value()) {
  scf::SCFTileAndFuseOptions options;
  options.setTilingOptions(tiling).setFusionControlFn(
      fusionRule(fusible, fuseInits, wholeInit));
  FailureOr<scf::SCFTileAndFuseResult> tiled =
      scf::tileConsumerAndFuseProducersUsingSCF(
          rewriter, cast<TilingInterface>(op.getOperation()), options);
  if (failed(tiled) || tiled->loops.size() != 1)
    return failure();
  auto tile = cast<RecurrenceOp>(tiled->tiledAndFusedOps.front());
  for (OpResult result : op->getResults())
    rewriter.replaceAllUsesWith(result, tiled->replacements.lookup(result));
  rewriter.eraseOp(op);
  return TiledRecurrence{tile, tiled->loops.front()};
}

/// Copies each input of `chunk` that is a slice (not a fused producer's
/// tile) into a compact tensor of its own.
void packInputSlices(RewriterBase &rewriter, RecurrenceOp chunk) {
  for (OpOperand &operand : chunk->getOpOperands()) {
    if (chunk.isDpsInit(&operand) || operand.get() == chunk.getCuSeqlens())
      continue;
    auto slice = operand.get().getDefiningOp<tensor::ExtractSliceOp>();
    if (!slice)
      continue;
    rewriter.setInsertionPoint(chunk);
    Location loc = slice.getLoc();
    Value compact = emptyTensor(rewriter, loc, mixedSizes(rewriter, loc, slice),
                                slice.getType().getElementType());
    Value copy =
        linalg::CopyOp::create(rewriter, loc, slice.getResult(), compact)
            .getResult(0);
    rewriter.modifyOpInPlace(chunk, [&] { operand.set(copy); });
  }
}

/// A chunk of a run-time number of tokens (at most `chunkSize`: the loop's
/// last chunk may be partial) as a recurrence over exactly `chunkSize`
/// tokens, so that one static chunk program serves every chunk and none is
/// peeled off for the tail: each time-indexed input is packed into a chunk
/// buffer whose remaining rows (none in a full chunk) are zero tokens,
/// which leave the state unchanged (k = 0, beta = a = b = 0, log-gate 0),
/// and the output is sliced back. The padding goes after the tokens in the
/// order they are processed (before them in time for a reverse recurrence),
/// as the decomposition pads. Returns null when a size other than T is
/// dynamic.
static RecurrenceOp padChunk(RewriterBase &rewriter, RecurrenceOp chunk,
                             int64_t chunkSize) {
  auto isStaticBesidesTime = [](Value x) {
    if (!x)
      return true;
    ArrayRef<int64_t> shape = cast<RankedTensorType>(x.getType()).getShape();
    return !ShapedType::isDynamic(shape[0]) &&
           llvm::none_of(shape.drop_front(2), ShapedType::isDynamic);
  };
  RecurrenceParts parts = RecurrenceParts::of(chunk);
  if (!llvm::all_of(ValueRange{parts.q, parts.k, parts.v, parts.g, parts.gv,
                               parts.beta, parts.a, parts.b, parts.oInit,
                               parts.transposedQuery, parts.transposedOInit},
                    isStaticBesidesTime))
    return nullptr;
  Location loc = chunk.getLoc();
  rewriter.setInsertionPoint(chunk);
  OpFoldResult tokens = mixedSizes(rewriter, loc, parts.q)[1];
  if (auto slice = parts.q.getDefiningOp<tensor::ExtractSliceOp>())
    tokens = slice.getMixedSizes()[1];
  AffineExpr size = rewriter.getAffineSymbolExpr(0);
  OpFoldResult padding = affine::makeComposedFoldedAffineApply(
      rewriter, loc, chunkSize - size, {tokens});
  OpFoldResult zero = rewriter.getIndexAttr(0);
  bool reverse = chunk.getReverse();
  OpFoldResult firstToken = reverse ? padding : zero;
  OpFoldResult firstPad = reverse ? zero : tokens;
  // The rows [first, first + count) of a [B,C,...] tensor.
  auto rows = [&](RankedTensorType type, OpFoldResult first,
                  OpFoldResult count) {
    SmallVector<OpFoldResult> offsets(type.getRank(), zero);
    SmallVector<OpFoldResult> sizes;
    SmallVector<OpFoldResult> strides(type.getRank(), rewriter.getIndexAttr(1));
    for (int64_t extent : type.getShape())
      sizes.push_back(rewriter.getIndexAttr(extent));
    offsets[1] = first;
    sizes[1] = count;
    return std::make_tuple(offsets, sizes, strides);
  };
  // `x`'s type with C rows.
  auto chunkTypeOf = [&](Value x) {
    auto type = cast<RankedTensorType>(x.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[1] = chunkSize;
    return RankedTensorType::get(shape, type.getElementType());
  };
  auto pad = [&](Value x) -> Value {
    if (!x)
      return x;
    auto type = cast<RankedTensorType>(x.getType());
    RankedTensorType chunkType = chunkTypeOf(x);
    Value packed = tensor::EmptyOp::create(rewriter, loc, chunkType.getShape(),
                                           type.getElementType());
    auto [offsets, sizes, strides] = rows(chunkType, firstToken, tokens);
    packed = tensor::InsertSliceOp::create(rewriter, loc, x, packed, offsets,
                                           sizes, strides);
    auto [padOffsets, padSizes, padStrides] =
        rows(chunkType, firstPad, padding);
    Value zeroValue = arith::ConstantOp::create(
        rewriter, loc, rewriter.getZeroAttr(type.getElementType()));
    Value padRows = tensor::ExtractSliceOp::create(
        rewriter, loc, packed, padOffsets, padSizes, padStrides);
    Value zeros =
        linalg::FillOp::create(rewriter, loc, zeroValue, padRows).getResult(0);
    return tensor::InsertSliceOp::create(rewriter, loc, zeros, packed,
                                         padOffsets, padSizes, padStrides);
  };
  for (Value *x : {&parts.q, &parts.k, &parts.v, &parts.g, &parts.gv,
                   &parts.beta, &parts.a, &parts.b, &parts.transposedQuery})
    *x = pad(*x);
  // Outputs of C rows; the tokens' rows are sliced back.
  auto chunkInit = [&](Value init) -> Value {
    if (!init)
      return init;
    RankedTensorType type = chunkTypeOf(init);
    return tensor::EmptyOp::create(rewriter, loc, type.getShape(),
                                   type.getElementType());
  };
  parts.oInit = chunkInit(parts.oInit);
  parts.transposedOInit = chunkInit(parts.transposedOInit);
  RecurrenceOp padded = parts.build(rewriter, loc);
  auto tokenRows = [&](Value output, Type type) -> Value {
    auto [offsets, sizes, strides] =
        rows(cast<RankedTensorType>(output.getType()), firstToken, tokens);
    Value sliced = tensor::ExtractSliceOp::create(rewriter, loc, output,
                                                  offsets, sizes, strides);
    if (sliced.getType() != type)
      sliced = tensor::CastOp::create(rewriter, loc, type, sliced);
    return sliced;
  };
  SmallVector<Value> results = {
      tokenRows(padded.getO(), chunk.getO().getType()), padded.getFinalState()};
  if (Value transposed = padded.getTransposedO())
    results.push_back(tokenRows(transposed, chunk.getTransposedO().getType()));
  rewriter.replaceOp(chunk, results);
  return padded;
}

struct FuseRecurrence : OpRewritePattern<RecurrenceOp> {
  FuseRecurrence(MLIRContext *ctx, int64_t chunkSize, FusionMode mode,
                 int64_t threads, bool fuseProducers, int64_t valueTile,
                 bool packInputs, bool peelTail, bool chunk, bool sequenceTasks)
      : OpRewritePattern(ctx), requestedChunkSize(chunkSize), mode(mode),
        threads(threads), fuseProducers(fuseProducers), valueTile(valueTile),
        packInputs(packInputs), peelTail(peelTail), chunk(chunk),
        sequenceTasks(sequenceTasks) {}

  LogicalResult matchAndRewrite(RecurrenceOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getGate() == GateKind::Fixed || op.getNormalizer())
      return rewriter.notifyMatchFailure(op, "simplify the recurrence first");
    if (!shouldFuse(op, mode, threads, valueTile, sequenceTasks))
      return rewriter.notifyMatchFailure(op, "left to la-chunk");
    if (op.getK().getType().isDynamicDim(2) ||
        op.getV().getType().isDynamicDim(2))
      return rewriter.notifyMatchFailure(op, "needs static H and HV");
    if (auto parent = op->getParentOfType<scf::ForallOp>())
      if (std::optional<ArrayAttr> mapping = parent.getMapping())
        if (llvm::any_of(*mapping, llvm::IsaPred<TaskMappingAttr>))
          return rewriter.notifyMatchFailure(op, "already a task");
    int64_t chunkSize = chunkSizeFor(requestedChunkSize, op.getQ());
    int64_t columns = valueColumnsPerTask(op, valueTile);
    bool valueTiles = columns && columns < op.getV().getType().getDimSize(3);
    // Packed sequences: tasks of one sequence each, whose T is its length.
    bool packed = static_cast<bool>(op.getCuSeqlens());
    int64_t tokens =
        packed ? ShapedType::kDynamic : op.getQ().getType().getDimSize(1);
    bool staticTime = !ShapedType::isDynamic(tokens);
    // Neighbours fuse into chunks of a T that needs no padding.
    bool fuseNeighbours =
        chunk && fuseProducers && staticTime && tokens % chunkSize == 0;
    SmallVector<linalg::LinalgOp> consumers;
    if (fuseNeighbours && !valueTiles)
      consumers = collectFusibleConsumers(rewriter, op, op.getO());
    bool partialChunk = !staticTime || tokens % chunkSize != 0;
    // A state pool (state indices): the tasks' shared output, kept whole.
    SmallVector<Value> whole;
    if (op.getStateIndices())
      whole.push_back(op.getInitialState());
    rewriter.setInsertionPoint(op);
    // Packed sequences' output: zero outside every sequence, filled before
    // the tasks write their sequences' rows.
    Value packedOutput;
    if (packed) {
      Location loc = op.getLoc();
      packedOutput =
          filledTensor(rewriter, loc, mixedSizes(rewriter, loc, op.getOInit()),
                       op.getO().getType().getElementType(), 0.0);
      rewriter.modifyOpInPlace(
          op, [&] { op.getOutputsMutable()[0].assign(packedOutput); });
      whole.push_back(packedOutput);
      if (Value transposedInit = op.getTransposedOInit()) {
        Value packedTransposed = filledTensor(
            rewriter, loc, mixedSizes(rewriter, loc, transposedInit),
            op.getTransposedO().getType().getElementType(), 0.0);
        rewriter.modifyOpInPlace(
            op, [&] { op.getOutputsMutable()[2].assign(packedTransposed); });
        whole.push_back(packedTransposed);
      }
    }
    // Tasks: an scf.forall over (batch, value head[, value tile]), mapped
    // so that no canonicalization folds a one-task forall.
    llvm::SmallPtrSet<Operation *, 8> producers;
    if (fuseNeighbours)
      producers = collectFusibleProducers(op);
    SmallVector<OpFoldResult> taskTiles = {
        rewriter.getIndexAttr(1), rewriter.getIndexAttr(0),
        rewriter.getIndexAttr(1),
        rewriter.getIndexAttr(valueTiles ? columns : 0)};
    SmallVector<Attribute> taskDims;
    for (int64_t dim = 0, e = valueTiles ? 3 : 2; dim < e; ++dim)
      taskDims.push_back(TaskMappingAttr::get(rewriter.getContext(), dim));
    scf::SCFTilingOptions taskTiling;
    taskTiling.setLoopType(scf::SCFTilingOptions::LoopType::ForallOp)
        .setTileSizes(taskTiles)
        .setMapping(taskDims);
    FailureOr<TiledRecurrence> tasks = tileAndFuse(
        rewriter, op, taskTiling, producers, /*fuseInits=*/true, packedOutput);
    if (failed(tasks))
      return op.emitOpError("could not be tiled into (batch, head) tasks");
    RecurrenceOp task = tasks->tile;
    auto forall = cast<scf::ForallOp>(tasks->loop.getOperation());
    if (valueTiles) {
      // Task indices (steps of 1), as la-tile-for-gpu maps them on blocks.
      FailureOr<scf::ForallOp> normalized = normalizeForallOp(rewriter, forall);
      if (failed(normalized))
        return forall.emitOpError("could not be normalized");
      forall = *normalized;
    }
    if (!chunk) {
      // Tasks only: each task's recurrence is left whole (for the token
      // loop of convert-la-to-linalg).
      fuseFilledInits(rewriter, forall, whole);
      readInitsOutsideTasks(rewriter, forall, whole);
      return success();
    }

    // Chunks: an scf.for over T that carries the state, each chunk's
    // producers computed in it.
    rewriter.setInsertionPoint(task);
    llvm::SmallPtrSet<Operation *, 8> taskProducers;
    if (fuseNeighbours)
      taskProducers = collectFusibleProducers(task);
    scf::SCFTilingOptions chunkTiling;
    chunkTiling.setTileSizes(
        {rewriter.getIndexAttr(0), rewriter.getIndexAttr(chunkSize),
         rewriter.getIndexAttr(0), rewriter.getIndexAttr(0)});
    FailureOr<TiledRecurrence> chunks = tileAndFuse(
        rewriter, task, chunkTiling, taskProducers, /*fuseInits=*/false);
    if (failed(chunks))
      return task.emitOpError("could not be tiled into chunks");
    RecurrenceOp chunk = chunks->tile;

    // The output's consumers, per chunk (upstream consumer fusion).
    SmallVector<LoopLikeOpInterface> loops = {
        cast<LoopLikeOpInterface>(forall.getOperation()), chunks->loop};
    for (linalg::LinalgOp consumer : consumers) {
      Location consumerLoc = consumer.getLoc();
      if (failed(fuseConsumerIntoLoops(rewriter, consumer, loops)))
        return emitError(consumerLoc)
               << "could not fuse this consumer of la.recurrence's output "
                  "into its chunk loop";
    }

    // Initial values of the task loop's results are computed or read per
    // task.
    auto tasksLoop = cast<scf::ForallOp>(loops.front().getOperation());
    fuseFilledInits(rewriter, tasksLoop, whole);
    readInitsOutsideTasks(rewriter, tasksLoop, whole);
    dropUnreadTileResults(rewriter, tasksLoop,
                          cast<scf::ForOp>(loops.back().getOperation()));

    // A T that is not a multiple of C leaves a last, partial chunk: each
    // chunk is packed into C rows, zero tokens after a partial one's
    // (padChunk), so that one static program serves every chunk; or, with
    // peel-tail, the last chunk is peeled off into a loop of its own whose
    // program the decomposition pads.
    auto chunkLoop = cast<scf::ForOp>(loops.back().getOperation());
    SmallVector<RecurrenceOp> chunkOps = {chunk};
    scf::ForOp tailLoop;
    if (peelTail && partialChunk &&
        succeeded(
            scf::peelForLoopAndSimplifyBounds(rewriter, chunkLoop, tailLoop)) &&
        tailLoop)
      tailLoop.walk([&](RecurrenceOp tail) { chunkOps.push_back(tail); });
    for (RecurrenceOp chunkOp : chunkOps) {
      if (!peelTail && partialChunk)
        if (RecurrenceOp padded = padChunk(rewriter, chunkOp, chunkSize))
          chunkOp = padded;
      if (packInputs)
        packInputSlices(rewriter, chunkOp);
      // Each chunk is the chunk program (its decomposition).
      rewriter.setInsertionPoint(chunkOp);
      FailureOr<SmallVector<Value>> program =
          cast<linalg::AggregatedOpInterface>(chunkOp.getOperation())
              .decomposeOperation(rewriter);
      if (failed(program))
        return chunkOp.emitOpError("could not be decomposed into the chunk "
                                   "program");
      rewriter.replaceOp(chunkOp, *program);
    }
    getLaDialect(chunkLoop).getFusedChunkLoopAttrHelper().setAttr(
        chunkLoop, rewriter.getUnitAttr());
    return success();
  }

  int64_t requestedChunkSize;
  FusionMode mode;
  int64_t threads;
  bool fuseProducers;
  int64_t valueTile;
  bool packInputs;
  bool peelTail;
  bool chunk;
  bool sequenceTasks;
};

/// A recurrence over packed sequences -> an scf.for over the sequences, each
/// the recurrence of one sequence (B = 1, its tokens [start, end) as a
/// dynamic T, its row of the initial state), so that FuseRecurrence chunks
/// it like any recurrence instead of la-chunk's whole-sequence program.
struct SplitPackedSequences : OpRewritePattern<RecurrenceOp> {
  SplitPackedSequences(MLIRContext *ctx, FusionMode mode, int64_t threads,
                       int64_t valueTile)
      : OpRewritePattern(ctx), mode(mode), threads(threads),
        valueTile(valueTile) {}

  LogicalResult matchAndRewrite(RecurrenceOp op,
                                PatternRewriter &rewriter) const override {
    Value cuSeqlens = op.getCuSeqlens();
    if (!cuSeqlens)
      return rewriter.notifyMatchFailure(op, "no packed sequences");
    if (op.getStateIndices())
      return rewriter.notifyMatchFailure(op, "decompose the state pool first");
    if (op.getGate() == GateKind::Fixed || op.getNormalizer())
      return rewriter.notifyMatchFailure(op, "simplify the recurrence first");
    // Would the cost rule fuse one sequence's recurrence (B = 1)?
    int64_t valueHeads = op.getV().getType().getDimSize(2);
    if (mode == FusionMode::Materialized || ShapedType::isDynamic(valueHeads))
      return rewriter.notifyMatchFailure(op, "left to la-chunk");
    int64_t tasks = valueHeads;
    if (int64_t columns = valueColumnsPerTask(op, valueTile))
      tasks *= op.getV().getType().getDimSize(3) / columns;
    if (mode != FusionMode::Fused && tasks < threads)
      return rewriter.notifyMatchFailure(op, "too few tasks per sequence");

    Location loc = op.getLoc();
    RecurrenceParts parts = RecurrenceParts::of(op);
    Type outputType = op.getO().getType().getElementType();
    SmallVector<OpFoldResult> outputSizes =
        mixedSizes(rewriter, loc, op.getOInit());
    // Tokens outside every sequence stay zero.
    Value outputInit =
        filledTensor(rewriter, loc, outputSizes, outputType, 0.0);
    Value finalInit = emptyTensor(
        rewriter, loc, mixedSizes(rewriter, loc, op.getInitialState()),
        rewriter.getF32Type());
    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    Value offsets = tensor::DimOp::create(rewriter, loc, cuSeqlens, 0);
    Value numSequences = arith::SubIOp::create(rewriter, loc, offsets, one);
    Value tokens = tensor::DimOp::create(rewriter, loc, op.getQ(), 1);
    Value initialState = op.getNonZeroInitialState();
    SmallVector<Value> inits = {outputInit, finalInit};
    if (Value transposedInit = op.getTransposedOInit())
      inits.push_back(
          filledTensor(rewriter, loc, mixedSizes(rewriter, loc, transposedInit),
                       op.getTransposedO().getType().getElementType(), 0.0));
    auto loop = scf::ForOp::create(
        rewriter, loc, zero, numSequences, one, inits,
        [&](OpBuilder &b, Location l, Value n, ValueRange iterArgs) {
          std::pair<Value, Value> bounds =
              extractSequenceBounds(b, l, cuSeqlens, n, tokens);
          Value start = bounds.first;
          Value length = arith::SubIOp::create(b, l, bounds.second, start);
          RecurrenceParts sequence = parts;
          sequence.cuSeqlens = Value();
          for (Value *x :
               {&sequence.q, &sequence.k, &sequence.v, &sequence.g,
                &sequence.gv, &sequence.beta, &sequence.a, &sequence.b,
                &sequence.transposedQuery, &sequence.transposedOInit})
            if (*x)
              *x = sliceDim(b, l, *x, 1, start, length);
          SmallVector<OpFoldResult> sizes = mixedSizes(b, l, sequence.v);
          sequence.oInit = emptyTensor(b, l, sizes, outputType);
          if (initialState) {
            sequence.initialState =
                sliceDim(b, l, initialState, 0, n, b.getIndexAttr(1));
          } else {
            SmallVector<OpFoldResult> stateSizes =
                mixedSizes(b, l, op.getInitialState());
            stateSizes[0] = b.getIndexAttr(1);
            sequence.initialState = zeroTensor(b, l, stateSizes);
          }
          RecurrenceOp recurrence = sequence.build(b, l);
          Value output =
              insertAt(b, l, recurrence.getO(), iterArgs[0], 1, start);
          Value finalState =
              insertAt(b, l, recurrence.getFinalState(), iterArgs[1], 0, n);
          SmallVector<Value> yields = {output, finalState};
          if (Value transposed = recurrence.getTransposedO())
            yields.push_back(insertAt(b, l, transposed, iterArgs[2], 1, start));
          scf::YieldOp::create(b, l, yields);
        });
    replaceWithCasts(rewriter, op, SmallVector<Value>(loop.getResults()));
    return success();
  }

  FusionMode mode;
  int64_t threads;
  int64_t valueTile;
};

struct LaFuseRecurrencePass
    : la::impl::LaFuseRecurrencePassBase<LaFuseRecurrencePass> {
  using Base::Base;

  void runOnOperation() override {
    if (chunkSize <= 0 || chunkSize > kMaxChunkSize) {
      getOperation()->emitError()
          << "la-fuse-recurrence: 'chunk-size' must be in [1, " << kMaxChunkSize
          << "], got " << static_cast<int64_t>(chunkSize);
      return signalPassFailure();
    }
    if (threads < 0) {
      getOperation()->emitError()
          << "la-fuse-recurrence: 'threads' must be >= 0, got "
          << static_cast<int64_t>(threads);
      return signalPassFailure();
    }
    int64_t threadCount =
        threads > 0 ? static_cast<int64_t>(threads)
                    : static_cast<int64_t>(
                          llvm::hardware_concurrency().compute_thread_count());
    RewritePatternSet patterns(&getContext());
    populateSimplifyRecurrencePatterns(patterns);
    if (valueTile < 0) {
      getOperation()->emitError()
          << "la-fuse-recurrence: 'value-tile' must be >= 0, got "
          << static_cast<int64_t>(valueTile);
      return signalPassFailure();
    }
    populateFuseRecurrencePatterns(
        patterns, chunkSize, mode, threadCount, fuseProducers, valueTile,
        packInputs, peelTail, chunk, splitSequences, sequenceTasks);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace

void mlir::la::populateFuseRecurrencePatterns(
    RewritePatternSet &patterns, int64_t chunkSize, FusionMode mode,
    int64_t threads, bool fuseProducers, int64_t valueTile, bool packInputs,
    bool peelTail, bool chunk, bool splitSequences, bool sequenceTasks) {
  patterns.add<FuseRecurrence>(patterns.getContext(), chunkSize, mode, threads,
                               fuseProducers, valueTile, packInputs, peelTail,
                               chunk, sequenceTasks);
  if (chunk && splitSequences && !sequenceTasks) {
    patterns.add<SplitPackedSequences>(patterns.getContext(), mode, threads,
                                       valueTile);
    populateDecomposeStateIndicesPatterns(patterns,
                                          /*packedSequencesOnly=*/true);
  }
  // A chunk's slice of a task's slice is one slice of the input (what a
  // GPU block stages, what a CPU prefetch follows).
  tensor::populateMergeConsecutiveInsertExtractSlicePatterns(patterns);
}
