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

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/Transforms.h"
#include "mlir/IR/Dominance.h"
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
  if (valueTile > 0 && valueTile < columns && columns % valueTile == 0)
    return valueTile;
  return columns;
}

bool mlir::la::shouldFuse(RecurrenceOp op, FusionMode mode, int64_t threads,
                          int64_t valueTile) {
  if (mode == FusionMode::Materialized || op.getCuSeqlens())
    return false;
  if (mode == FusionMode::Fused)
    return true;
  // One task per (batch, value head); a dynamic batch counts as one.
  int64_t batch = op.getV().getType().getDimSize(0);
  int64_t valueHeads = op.getV().getType().getDimSize(2);
  if (ShapedType::isDynamic(valueHeads))
    return false;
  int64_t tasks = valueHeads * (ShapedType::isDynamic(batch) ? 1 : batch);
  if (int64_t columns = valueColumnsPerTask(op, valueTile))
    tasks *= op.getV().getType().getDimSize(3) / columns;
  return tasks >= threads;
}

/// A value computed by a structured op on tensors whose only users are in
/// `users`: its producer can be computed per chunk inside the loop instead.
static bool isFusibleProducer(Value x, ArrayRef<Operation *> users) {
  auto producer = x.getDefiningOp<linalg::LinalgOp>();
  return producer && producer.hasPureTensorSemantics() &&
         producer->getNumResults() == 1 &&
         isa<TilingInterface>(producer.getOperation()) &&
         llvm::all_of(x.getUsers(), [&](Operation *user) {
           return llvm::is_contained(users, user);
         });
}

/// Replaces `tile` (a slice of a fusible producer's result) by the producer
/// computed on that tile, and so on up the chain of fusible producers (the
/// feature map of q before its L2 norm, the gate activation after its bias,
/// ...). A producer is fusible once its only users are `recurrence` (the op
/// being rewritten), producers fused so far and slices in the loop: then it
/// is dead outside the loop. A producer read by two fused ops (the feature
/// map that both the sum of squares and the normalisation read) is computed
/// once per reading slice. Returns the value that replaces `tile`.
static Value fuseProducersInto(RewriterBase &rewriter, OpBuilder &b,
                               tensor::ExtractSliceOp tile,
                               Operation *recurrence) {
  Value result = tile.getResult();
  SmallVector<Operation *> dying = {recurrence};
  SmallVector<tensor::ExtractSliceOp> pending = {tile};
  SmallVector<Operation *> slices = {tile};
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t i = 0; i < pending.size(); ++i) {
      tensor::ExtractSliceOp slice = pending[i];
      SmallVector<Operation *> users = dying;
      users.append(slices.begin(), slices.end());
      if (!isFusibleProducer(slice.getSource(), users))
        continue;
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(slice);
      auto producer = cast<OpResult>(slice.getSource());
      FailureOr<TilingResult> tiled =
          tensor::replaceExtractSliceWithTiledProducer(b, slice, producer);
      if (failed(tiled) || tiled->tiledValues.size() != 1)
        continue;
      // Compare before anything is erased: a later slice may reuse the
      // memory of an erased one.
      if (result == slice.getResult())
        result = tiled->tiledValues.front();
      if (!llvm::is_contained(dying, producer.getOwner()))
        dying.push_back(producer.getOwner());
      llvm::erase(slices, slice.getOperation());
      pending.erase(pending.begin() + i);
      rewriter.replaceOp(slice, tiled->tiledValues.front());
      for (Operation *generated : tiled->generatedSlices) {
        if (auto next = dyn_cast<tensor::ExtractSliceOp>(generated)) {
          pending.push_back(next);
          slices.push_back(next);
        }
      }
      progress = true;
      break;
    }
  }
  return result;
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

/// Computes `consumers` (collectFusibleConsumers) on one chunk of one
/// head: `oTile` is the chunk's [1,C,1,V] output at (batch, first token,
/// value head). Returns the sink's [1,C,1,V] tile.
static FailureOr<Value> fuseConsumersInto(RewriterBase &rewriter, OpBuilder &b,
                                          ArrayRef<linalg::LinalgOp> consumers,
                                          Value o, Value oTile, Value batch,
                                          Value firstToken, Value valueHead,
                                          int64_t chunkSize) {
  DenseMap<Value, Value> tiles;
  tiles[o] = oTile;
  for (linalg::LinalgOp consumer : consumers) {
    // The loops that index the output's B, T and HV take this chunk's
    // tile; the others (V, a reduction over V) their whole range.
    AffineMap outputMap =
        consumer.getMatchingIndexingMap(consumer.getDpsInitOperand(0));
    SmallVector<int64_t> ranges = consumer.getStaticLoopRanges();
    SmallVector<OpFoldResult> offsets(ranges.size(), b.getIndexAttr(0));
    SmallVector<OpFoldResult> sizes;
    for (int64_t range : ranges)
      sizes.push_back(b.getIndexAttr(range));
    for (auto [position, expr] : llvm::enumerate(outputMap.getResults())) {
      unsigned loop = cast<AffineDimExpr>(expr).getPosition();
      if (position == 0) {
        offsets[loop] = batch;
        sizes[loop] = b.getIndexAttr(1);
      } else if (position == 1) {
        offsets[loop] = firstToken;
        sizes[loop] = b.getIndexAttr(chunkSize);
      } else if (position == 2) {
        offsets[loop] = valueHead;
        sizes[loop] = b.getIndexAttr(1);
      }
    }
    FailureOr<TilingResult> tiled =
        cast<TilingInterface>(consumer.getOperation())
            .getTiledImplementation(b, offsets, sizes);
    if (failed(tiled) || tiled->tiledValues.size() != 1)
      return failure();
    // Slices of `o` and of earlier consumers read their tiles instead.
    for (Operation *generated : tiled->generatedSlices) {
      auto slice = dyn_cast<tensor::ExtractSliceOp>(generated);
      if (!slice)
        continue;
      auto it = tiles.find(slice.getSource());
      if (it == tiles.end()) {
        // An init filled with a constant is filled per tile instead (no
        // whole-tensor fill outside the loop).
        auto fill = slice.getSource().getDefiningOp<linalg::FillOp>();
        if (!fill)
          continue;
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(slice);
        FailureOr<TilingResult> filled =
            tensor::replaceExtractSliceWithTiledProducer(
                b, slice, cast<OpResult>(slice.getSource()));
        if (failed(filled) || filled->tiledValues.size() != 1)
          return failure();
        rewriter.replaceOp(slice, filled->tiledValues.front());
        continue;
      }
      if (it->second.getType() != slice.getType())
        return failure();
      rewriter.replaceOp(slice, it->second);
    }
    tiles[consumer->getResult(0)] = tiled->tiledValues.front();
  }
  return tiles[consumers.back()->getResult(0)];
}

namespace {
/// An operand of the fused program: chunked [B,NC,C,...], or [B,T,...] with
/// its producer to be fused per chunk.
struct Operand {
  Value value;
  bool chunked = true;
};

struct FuseRecurrence : OpRewritePattern<RecurrenceOp> {
  FuseRecurrence(MLIRContext *ctx, int64_t chunkSize, FusionMode mode,
                 int64_t threads, bool fuseProducers, int64_t valueTile,
                 bool packInputs)
      : OpRewritePattern(ctx), requestedChunkSize(chunkSize), mode(mode),
        threads(threads), fuseProducers(fuseProducers), valueTile(valueTile),
        packInputs(packInputs) {}

  LogicalResult matchAndRewrite(RecurrenceOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getGate() == GateKind::Fixed || op.getNormalizer())
      return rewriter.notifyMatchFailure(op, "simplify the recurrence first");
    if (!shouldFuse(op, mode, threads, valueTile))
      return rewriter.notifyMatchFailure(op, "left to la-chunk");
    int64_t chunkSize = chunkSizeFor(requestedChunkSize, op.getQ());
    auto kType = op.getK().getType();
    auto vType = op.getV().getType();
    int64_t heads = kType.getDimSize(2), valueHeads = vType.getDimSize(2);
    if (ShapedType::isDynamic(heads) || ShapedType::isDynamic(valueHeads))
      return rewriter.notifyMatchFailure(op, "needs static H and HV");
    int64_t group = valueHeads / heads;
    Location loc = op.getLoc();
    Type outputType = op.getO().getType().getElementType();
    float scale = op.getScale().convertToFloat();
    Type f32 = rewriter.getF32Type();
    // Value tiles: a task's columns, and their number (1 without tiles).
    int64_t columns = valueColumnsPerTask(op, valueTile);
    int64_t valueTiles =
        columns ? vType.getDimSize(3) / columns : static_cast<int64_t>(1);

    ChunkedProgramBuilder whole(rewriter, loc, chunkSize);
    whole.prepare(tensor::getMixedSize(rewriter, loc, op.getQ(), 1));
    // An operand whose producer is fused is sliced per chunk from [B,T,...]
    // (no padding: T must be a multiple of the chunk size); the others are
    // chunked to [B,NC,C,...] first.
    int64_t tokens = op.getQ().getType().getDimSize(1);
    bool chunksDivide =
        !ShapedType::isDynamic(tokens) && tokens % chunkSize == 0;
    auto prepare = [&](Value x) -> Operand {
      if (!x)
        return {};
      if (fuseProducers && chunksDivide &&
          isFusibleProducer(x, {op.getOperation()}))
        return {x, /*chunked=*/false};
      return {whole.chunkify(x), /*chunked=*/true};
    };
    Operand q = prepare(op.getQ()), k = prepare(op.getK()),
            v = prepare(op.getV()), g = prepare(op.getG()),
            beta = prepare(op.getBeta()), a = prepare(op.getA()),
            bb = prepare(op.getB());
    SmallVector<OpFoldResult> vSizes = {
        tensor::getMixedSize(rewriter, loc, op.getV(), 0), whole.getNumChunks(),
        rewriter.getIndexAttr(chunkSize), rewriter.getIndexAttr(valueHeads),
        tensor::getMixedSize(rewriter, loc, op.getV(), 3)};
    SmallVector<OpFoldResult> kSizes = {
        vSizes[0], vSizes[1], vSizes[2], rewriter.getIndexAttr(heads),
        tensor::getMixedSize(rewriter, loc, op.getK(), 3)};
    // The output's consumers computed per chunk inside the loop, when all
    // of V is in one task (RMSNorm reduces over V) and chunks need no
    // padding.
    Value o = op->getResult(0);
    SmallVector<linalg::LinalgOp> consumers;
    if (fuseProducers && chunksDivide && valueTiles == 1)
      consumers = collectFusibleConsumers(rewriter, op, o);
    Type fusedOutputType =
        consumers.empty()
            ? outputType
            : getElementTypeOrSelf(consumers.back()->getResult(0).getType());
    Value outputInit = emptyTensor(rewriter, loc, vSizes, fusedOutputType);
    Value finalInit = emptyTensor(
        rewriter, loc, {vSizes[0], vSizes[3], kSizes[4], vSizes[4]}, f32);

    SmallVector<OpFoldResult> taskCounts = {vSizes[0], vSizes[3]};
    if (valueTiles > 1)
      taskCounts.push_back(rewriter.getIndexAttr(valueTiles));
    // Mapped, so that no canonicalization folds a one-task forall.
    SmallVector<Attribute> taskDims;
    for (int64_t dim = 0, e = taskCounts.size(); dim < e; ++dim)
      taskDims.push_back(TaskMappingAttr::get(rewriter.getContext(), dim));
    auto forall = scf::ForallOp::create(rewriter, loc, taskCounts,
                                        ValueRange{outputInit, finalInit},
                                        rewriter.getArrayAttr(taskDims));
    OpBuilder::InsertionGuard guard(rewriter);
    rewriter.setInsertionPointToStart(forall.getBody());
    Value batch = forall.getInductionVar(0);
    Value valueHead = forall.getInductionVar(1);
    // The first value column of this task, and the task's columns.
    OpFoldResult firstColumn = rewriter.getIndexAttr(0);
    OpFoldResult taskColumns = vSizes[4];
    if (valueTiles > 1) {
      firstColumn = arith::MulIOp::create(
                        rewriter, loc, forall.getInductionVar(2),
                        arith::ConstantIndexOp::create(rewriter, loc, columns))
                        .getResult();
      taskColumns = rewriter.getIndexAttr(columns);
    }
    Value keyHead = valueHead;
    if (group != 1)
      keyHead = arith::DivUIOp::create(
          rewriter, loc, valueHead,
          arith::ConstantIndexOp::create(rewriter, loc, group));
    Value outputs = forall.getRegionIterArgs()[0];
    Value finals = forall.getRegionIterArgs()[1];
    SmallVector<OpFoldResult> stateSizes = {rewriter.getIndexAttr(1),
                                            rewriter.getIndexAttr(1), kSizes[4],
                                            taskColumns};
    SmallVector<OpFoldResult> stateOffsets = {
        batch, valueHead, rewriter.getIndexAttr(0), firstColumn};
    Value initialState =
        op.getNonZeroInitialState()
            ? tensor::ExtractSliceOp::create(
                  rewriter, loc, op.getInitialState(), stateOffsets, stateSizes,
                  SmallVector<OpFoldResult>(4, rewriter.getIndexAttr(1)))
                  .getResult()
            : filledTensor(rewriter, loc, stateSizes, f32, 0.0);
    initialState = tensor::CastOp::create(
        rewriter, loc, RankedTensorType::get(staticShape(stateSizes), f32),
        initialState);

    // This task's output: [1,NC,C,1,V] at (batch, valueHead).
    SmallVector<OpFoldResult> taskOffsets(5, rewriter.getIndexAttr(0));
    taskOffsets[0] = batch;
    taskOffsets[3] = valueHead;
    taskOffsets[4] = firstColumn;
    SmallVector<OpFoldResult> taskSizes = vSizes;
    taskSizes[0] = taskSizes[3] = rewriter.getIndexAttr(1);
    taskSizes[4] = taskColumns;
    SmallVector<OpFoldResult> unitStrides(5, rewriter.getIndexAttr(1));
    Value taskOutput = tensor::ExtractSliceOp::create(
        rewriter, loc, outputs, taskOffsets, taskSizes, unitStrides);

    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    Value numChunks =
        getValueOrCreateConstantIndexOp(rewriter, loc, whole.getNumChunks());
    bool consumerFusionFailed = false;
    auto loop = scf::ForOp::create(
        rewriter, loc, zero, numChunks, one,
        ValueRange{initialState, taskOutput},
        [&](OpBuilder &b, Location l, Value n, ValueRange iterArgs) {
          // One chunk of one head: [B,NC,C,H,...] -> [1,1,C,1,...], or
          // [B,T,H,...] -> [1,C,1,...] with the producers fused, expanded.
          // `value` slices the last (value) dimension to the task's columns.
          auto slice = [&](Operand x, Value head, bool value = false) -> Value {
            if (!x.value)
              return x.value;
            auto type = cast<RankedTensorType>(x.value.getType());
            int64_t rank = type.getRank();
            SmallVector<OpFoldResult> offsets(rank, b.getIndexAttr(0));
            SmallVector<OpFoldResult> sizes = mixedSizes(b, l, x.value);
            SmallVector<OpFoldResult> unitStrides(rank, b.getIndexAttr(1));
            offsets[0] = batch;
            sizes[0] = b.getIndexAttr(1);
            if (value) {
              offsets.back() = firstColumn;
              sizes.back() = taskColumns;
            }
            if (x.chunked) {
              offsets[1] = n;
              offsets[3] = head;
              sizes[1] = sizes[3] = b.getIndexAttr(1);
              Value chunkSlice = tensor::ExtractSliceOp::create(
                  b, l, x.value, offsets, sizes, unitStrides);
              if (!packInputs)
                return chunkSlice;
              // A compact copy: the slice's rows lie [H, D] apart.
              return linalg::CopyOp::create(
                         b, l, chunkSlice,
                         emptyTensor(b, l, mixedSizes(b, l, chunkSlice),
                                     type.getElementType()))
                  .getResult(0);
            }
            offsets[1] =
                arith::MulIOp::create(
                    b, l, n, arith::ConstantIndexOp::create(b, l, chunkSize))
                    .getResult();
            offsets[2] = head;
            sizes[1] = b.getIndexAttr(chunkSize);
            sizes[2] = b.getIndexAttr(1);
            auto tile = tensor::ExtractSliceOp::create(b, l, x.value, offsets,
                                                       sizes, unitStrides);
            Value fused = fuseProducersInto(rewriter, b, tile, op);
            SmallVector<OpFoldResult> expanded = {b.getIndexAttr(1),
                                                  b.getIndexAttr(1)};
            expanded.append(sizes.begin() + 1, sizes.end());
            SmallVector<ReassociationIndices> reassociation = {{0, 1}};
            for (int64_t d = 1; d < rank; ++d)
              reassociation.push_back({d + 1});
            return tensor::ExpandShapeOp::create(
                b, l,
                RankedTensorType::get(staticShape(expanded),
                                      type.getElementType()),
                fused, reassociation, expanded);
          };
          ChunkedProgramBuilder chunk(b, l, chunkSize);
          ChunkedProgramBuilder::Result result = chunk.buildChunked(
              {slice(q, keyHead), slice(k, keyHead),
               slice(v, valueHead, /*value=*/true), slice(g, keyHead),
               slice(beta, keyHead), slice(a, keyHead), slice(bb, keyHead),
               iterArgs[0]},
              scale, outputType);
          Value chunkOutput = result.output;
          if (!consumers.empty()) {
            // [1,1,C,1,V] -> [1,C,1,V], the consumers' tile, and back.
            Value oTile = tensor::CollapseShapeOp::create(
                b, l, chunkOutput,
                SmallVector<ReassociationIndices>{{0, 1}, {2}, {3}, {4}});
            Value firstToken = arith::MulIOp::create(
                b, l, n, arith::ConstantIndexOp::create(b, l, chunkSize));
            FailureOr<Value> fused =
                fuseConsumersInto(rewriter, b, consumers, o, oTile, batch,
                                  firstToken, valueHead, chunkSize);
            if (failed(fused)) {
              consumerFusionFailed = true;
            } else {
              auto tileType = cast<RankedTensorType>(fused->getType());
              SmallVector<int64_t> shape = {1};
              shape.append(tileType.getShape().begin(),
                           tileType.getShape().end());
              chunkOutput = tensor::ExpandShapeOp::create(
                  b, l, RankedTensorType::get(shape, tileType.getElementType()),
                  *fused,
                  SmallVector<ReassociationIndices>{{0, 1}, {2}, {3}, {4}});
            }
          }
          Value written = insertAt(b, l, chunkOutput, iterArgs[1],
                                   /*dim=*/1, n);
          scf::YieldOp::create(b, l, ValueRange{result.finalState, written});
        });

    getLaDialect(loop).getFusedChunkLoopAttrHelper().setAttr(
        loop, rewriter.getUnitAttr());
    rewriter.setInsertionPointToStart(forall.getTerminator().getBody());
    tensor::ParallelInsertSliceOp::create(rewriter, loc, loop.getResult(1),
                                          outputs, taskOffsets, taskSizes,
                                          unitStrides);
    tensor::ParallelInsertSliceOp::create(
        rewriter, loc, loop.getResult(0), finals, stateOffsets, stateSizes,
        SmallVector<OpFoldResult>(4, rewriter.getIndexAttr(1)));

    rewriter.setInsertionPointAfter(forall);
    Value output = whole.unchunkify(forall.getResult(0));
    if (consumerFusionFailed)
      return op.emitOpError("could not fuse the output's consumers into the "
                            "chunk loop");
    if (!consumers.empty()) {
      // The sink's users read the fused result; the consumers and `o` die.
      rewriter.replaceAllUsesWith(consumers.back()->getResult(0), output);
      for (linalg::LinalgOp consumer : llvm::reverse(consumers))
        rewriter.eraseOp(consumer);
      output = tensor::EmptyOp::create(
          rewriter, loc, cast<RankedTensorType>(o.getType()).getShape(),
          outputType);
    }
    replaceWithCasts(rewriter, op, {output, forall.getResult(1)});
    return success();
  }

  int64_t requestedChunkSize;
  FusionMode mode;
  int64_t threads;
  bool fuseProducers;
  int64_t valueTile;
  bool packInputs;
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
    populateFuseRecurrencePatterns(patterns, chunkSize, mode, threadCount,
                                   fuseProducers, valueTile, packInputs);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace

void mlir::la::populateFuseRecurrencePatterns(
    RewritePatternSet &patterns, int64_t chunkSize, FusionMode mode,
    int64_t threads, bool fuseProducers, int64_t valueTile, bool packInputs) {
  patterns.add<FuseRecurrence>(patterns.getContext(), chunkSize, mode, threads,
                               fuseProducers, valueTile, packInputs);
}
