//===- MapToGPU.cpp - la-tile-for-gpu's loops as a gpu.launch -------------===//
//
// After bufferization, the GPU schedule is an scf.forall mapped onto blocks
// whose body holds the chunk loop, buffers for the chunk's intermediates and
// scf.forall loops mapped onto threads. This pass makes it a kernel:
//   - the block forall becomes a gpu.launch over the same grid;
//   - the intermediates' buffers move to shared memory, packed by lifetime
//     (two buffers whose uses do not overlap share bytes) into the launch's
//     dynamic shared memory;
//   - each thread forall becomes a loop of the block's threads over its
//     linearized iterations (thread t takes t, t + threads, ...) followed by
//     a barrier, and so does each copy between buffers;
//   - around the launch, an output buffer copied to the result is replaced
//     by the result itself; other host allocations become gpu.alloc.
// The function then takes device pointers: callers pass GPU memory.
//
//===----------------------------------------------------------------------===//

#include "la/Dialect/La/LaPasses.h"
#include "la/Dialect/La/LaTiling.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

#include "llvm/ADT/DenseMap.h"

namespace mlir::la {
#define GEN_PASS_DEF_LAMAPTOGPUPASS
#include "la/Dialect/La/LaPasses.h.inc"
} // namespace mlir::la

using namespace mlir;
using namespace mlir::la;

//===----------------------------------------------------------------------===//
// Shared memory
//===----------------------------------------------------------------------===//

namespace {
/// A buffer placed in shared memory: its op, bytes, lifetime (positions in
/// a pre-order walk of the task body) and byte offset.
struct SharedBuffer {
  memref::AllocOp alloc;
  int64_t bytes = 0;
  int64_t start = 0, end = 0;
  int64_t offset = 0;
};
} // namespace

/// Shared memory offsets are aligned for 16-byte vector accesses.
constexpr int64_t kSharedAlignment = 16;

/// Numbers the ops under `root` in pre-order; `last[op]` is the largest
/// number inside `op` (op itself when it has no regions).
static void numberOps(Operation *root, DenseMap<Operation *, int64_t> &first,
                      DenseMap<Operation *, int64_t> &last) {
  int64_t counter = 0;
  std::function<void(Operation *)> visit = [&](Operation *op) {
    first[op] = counter++;
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (Operation &nested : block)
          visit(&nested);
    last[op] = counter - 1;
  };
  visit(root);
}

/// The users of `value` and of the views derived from it.
static void collectUsersThroughViews(Value value,
                                     SmallVectorImpl<Operation *> &users) {
  for (Operation *user : value.getUsers()) {
    users.push_back(user);
    if (isa<ViewLikeOpInterface>(user))
      for (Value result : user->getResults())
        collectUsersThroughViews(result, users);
  }
}

/// Plans the shared memory of the buffers allocated in `tasks` (outside the
/// thread loops): each gets an offset such that buffers alive at the same
/// time do not overlap. Returns the bytes needed.
static FailureOr<int64_t>
planSharedMemory(scf::ForallOp tasks, SmallVectorImpl<SharedBuffer> &plan) {
  DenseMap<Operation *, int64_t> first, last;
  numberOps(tasks, first, last);
  WalkResult walk = tasks.getBody()->walk([&](memref::AllocOp alloc) {
    auto forall = alloc->getParentOfType<scf::ForallOp>();
    if (forall != tasks)
      return WalkResult::advance();
    MemRefType type = alloc.getType();
    if (!type.hasStaticShape() || !type.getLayout().isIdentity() ||
        !type.getElementType().isIntOrFloat()) {
      alloc.emitOpError("needs a static shape, an identity layout and a "
                        "scalar element type to live in shared memory");
      return WalkResult::interrupt();
    }
    SharedBuffer buffer;
    buffer.alloc = alloc;
    buffer.bytes = type.getNumElements() *
                   llvm::divideCeil(type.getElementTypeBitWidth(), 8);
    buffer.start = first[alloc];
    buffer.end = buffer.start;
    SmallVector<Operation *> users;
    collectUsersThroughViews(alloc.getResult(), users);
    for (Operation *user : users) {
      Operation *ancestor = alloc->getBlock()->findAncestorOpInBlock(*user);
      if (ancestor)
        buffer.end = std::max(buffer.end, last[ancestor]);
    }
    plan.push_back(buffer);
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();

  // First fit, largest buffers first: the lowest offset that overlaps no
  // placed buffer alive at the same time.
  SmallVector<SharedBuffer *> order;
  for (SharedBuffer &buffer : plan)
    order.push_back(&buffer);
  llvm::sort(order, [](SharedBuffer *a, SharedBuffer *b) {
    return a->bytes != b->bytes ? a->bytes > b->bytes : a->start < b->start;
  });
  SmallVector<SharedBuffer *> placed;
  int64_t total = 0;
  for (SharedBuffer *buffer : order) {
    SmallVector<std::pair<int64_t, int64_t>> taken;
    for (SharedBuffer *other : placed)
      if (other->start <= buffer->end && buffer->start <= other->end)
        taken.push_back({other->offset, other->offset + other->bytes});
    llvm::sort(taken);
    int64_t offset = 0;
    for (auto [begin, end] : taken) {
      if (offset + buffer->bytes <= begin)
        break;
      offset = std::max<int64_t>(offset, llvm::alignTo(end, kSharedAlignment));
    }
    buffer->offset = offset;
    total = std::max(total, offset + buffer->bytes);
    placed.push_back(buffer);
  }
  return total;
}

/// Replaces each planned buffer by a view of the dynamic shared memory at
/// its offset, cast back to the default memory space so that its users keep
/// their types (the NVPTX backend infers the shared address space).
static void placeInSharedMemory(RewriterBase &rewriter, Value sharedMemory,
                                ArrayRef<SharedBuffer> plan) {
  auto workgroup = gpu::AddressSpaceAttr::get(rewriter.getContext(),
                                              gpu::AddressSpace::Workgroup);
  for (const SharedBuffer &buffer : plan) {
    memref::AllocOp alloc = buffer.alloc;
    Location loc = alloc.getLoc();
    rewriter.setInsertionPoint(alloc);
    MemRefType type = alloc.getType();
    auto sharedType = MemRefType::get(type.getShape(), type.getElementType(),
                                      MemRefLayoutAttrInterface(), workgroup);
    Value offset = arith::ConstantIndexOp::create(rewriter, loc, buffer.offset);
    Value view = memref::ViewOp::create(rewriter, loc, sharedType, sharedMemory,
                                        offset, ValueRange{});
    rewriter.replaceOpWithNewOp<memref::MemorySpaceCastOp>(alloc, type, view);
  }
}

//===----------------------------------------------------------------------===//
// Threads
//===----------------------------------------------------------------------===//

/// Marks the loops that distribute work over threads or warps while the
/// pass runs.
constexpr llvm::StringLiteral kDistributedAttr = "la.distributed";

/// Emits `for i = threadId to count step threads { body(i) }` and a barrier
/// after it.
static void
distributeOverThreads(RewriterBase &rewriter, Location loc, Value count,
                      Value threadId, Value threads,
                      function_ref<void(OpBuilder &, Location, Value)> body) {
  auto loop = scf::ForOp::create(rewriter, loc, threadId, count, threads);
  loop->setAttr(kDistributedAttr, rewriter.getUnitAttr());
  {
    // The body is built once the loop is in place (affine folding looks at
    // the enclosing regions).
    OpBuilder::InsertionGuard guard(rewriter);
    rewriter.setInsertionPoint(loop.getBody()->getTerminator());
    body(rewriter, loc, loop.getInductionVar());
  }
  gpu::BarrierOp::create(rewriter, loc);
}

/// The iterations of each dimension of `forall`.
static SmallVector<OpFoldResult> iterationCounts(OpBuilder &b,
                                                 scf::ForallOp forall) {
  SmallVector<OpFoldResult> counts;
  AffineExpr lb, ub, step;
  bindSymbols(b.getContext(), lb, ub, step);
  for (auto [lower, upper, stride] :
       llvm::zip(forall.getMixedLowerBound(), forall.getMixedUpperBound(),
                 forall.getMixedStep()))
    counts.push_back(affine::makeComposedFoldedAffineApply(
        b, forall.getLoc(), (ub - lb).ceilDiv(step), {lower, upper, stride}));
  return counts;
}

/// A thread forall (buffers, no results) -> a loop of the block's threads
/// over its linearized iterations, then a barrier. `threadId` and `threads`
/// may also be a warp's index and the warps of the block.
static LogicalResult distributeForall(RewriterBase &rewriter,
                                      scf::ForallOp forall, Value threadId,
                                      Value threads) {
  if (forall.getNumResults() != 0)
    return forall.emitOpError("must be bufferized before la-map-to-gpu");
  Location loc = forall.getLoc();
  rewriter.setInsertionPoint(forall);
  SmallVector<OpFoldResult> counts = iterationCounts(rewriter, forall);
  AffineExpr product = rewriter.getAffineConstantExpr(1);
  for (unsigned i = 0; i < counts.size(); ++i)
    product = product * rewriter.getAffineSymbolExpr(i);
  Value total = getValueOrCreateConstantIndexOp(
      rewriter, loc,
      affine::makeComposedFoldedAffineApply(
          rewriter, loc, AffineMap::get(0, counts.size(), product), counts));
  distributeOverThreads(
      rewriter, loc, total, threadId, threads,
      [&](OpBuilder &b, Location l, Value i) {
        auto indices =
            affine::AffineDelinearizeIndexOp::create(b, l, i, counts);
        SmallVector<Value> ivs;
        for (auto [index, lower, stride] :
             llvm::zip(indices.getResults(), forall.getMixedLowerBound(),
                       forall.getMixedStep())) {
          AffineExpr x, lb, st;
          bindSymbols(b.getContext(), x, lb, st);
          ivs.push_back(getValueOrCreateConstantIndexOp(
              b, l,
              affine::makeComposedFoldedAffineApply(b, l, lb + x * st,
                                                    {index, lower, stride})));
        }
        // The body, without its (empty) in_parallel terminator.
        Block *body = forall.getBody();
        rewriter.eraseOp(body->getTerminator());
        rewriter.inlineBlockBefore(body, b.getInsertionBlock(),
                                   b.getInsertionPoint(), ivs);
      });
  rewriter.eraseOp(forall);
  return success();
}

/// The indices into `operand` of `op` for loop values `loops` (unit loops
/// at 0): its indexing map is a projected permutation.
static SmallVector<Value>
operandIndices(linalg::LinalgOp op, OpOperand &operand, ArrayRef<Value> loops) {
  SmallVector<Value> indices;
  for (AffineExpr expr : op.getMatchingIndexingMap(&operand).getResults())
    indices.push_back(loops[cast<AffineDimExpr>(expr).getPosition()]);
  return indices;
}

/// A 16 x 8 x K tensor-core contraction (la-tile-for-gpu's warp tile, on
/// buffers) -> the warp's mma.sync m16n8k8 steps over K, in the fragment
/// layouts of PTX's mma.m16n8k8 for tf32: lane = 4 * group + t holds
///   A: (group, t), (group + 8, t), (group, t + 4), (group + 8, t + 4);
///   B: (k = t, n = group), (k = t + 4, n = group);
///   C: (group, 2t), (group, 2t + 1), (group + 8, 2t), (group + 8, 2t + 1).
static LogicalResult rewriteAsMma(RewriterBase &rewriter, linalg::LinalgOp op,
                                  Value lane) {
  std::optional<MmaContraction> mma = getMmaContraction(op);
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (!mma || !op.hasPureBufferSemantics() || ranges[mma->m] != 16 ||
      ranges[mma->n] != 8)
    return op->emitOpError("is not a 16 x 8 tensor-core tile on buffers");
  Location loc = op.getLoc();
  rewriter.setInsertionPoint(op);
  auto index = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(rewriter, loc, v);
  };
  auto plus = [&](Value v, int64_t c) -> Value {
    return c ? arith::AddIOp::create(rewriter, loc, v, index(c)).getResult()
             : v;
  };
  Value zero = index(0);
  Value group = arith::DivUIOp::create(rewriter, loc, lane, index(4));
  Value t = arith::RemUIOp::create(rewriter, loc, lane, index(4));
  // Which input holds the rows (m) and which the columns (n).
  OpOperand *lhs = op.getDpsInputOperand(0), *rhs = op.getDpsInputOperand(1);
  if (!op.getMatchingIndexingMap(lhs).isFunctionOfDim(mma->m))
    std::swap(lhs, rhs);
  OpOperand *out = op.getDpsInitOperand(0);
  auto load = [&](OpOperand *operand, Value m, Value n, Value k) -> Value {
    SmallVector<Value> loops(ranges.size(), zero);
    loops[mma->m] = m;
    loops[mma->n] = n;
    loops[mma->k] = k;
    return memref::LoadOp::create(rewriter, loc, operand->get(),
                                  operandIndices(op, *operand, loops));
  };
  Type f32 = rewriter.getF32Type();

  // The accumulator fragment, row-major in a 2 x 2 vector.
  Value twoT = arith::MulIOp::create(rewriter, loc, t, index(2));
  SmallVector<std::pair<Value, Value>> accPositions = {
      {group, twoT},
      {group, plus(twoT, 1)},
      {plus(group, 8), twoT},
      {plus(group, 8), plus(twoT, 1)}};
  SmallVector<Value> accElements;
  for (auto [row, col] : accPositions)
    accElements.push_back(load(out, row, col, zero));
  Value acc = vector::FromElementsOp::create(
      rewriter, loc, VectorType::get({2, 2}, f32), accElements);

  auto loop = scf::ForOp::create(rewriter, loc, zero, index(ranges[mma->k]),
                                 index(8), ValueRange{acc});
  {
    OpBuilder::InsertionGuard guard(rewriter);
    rewriter.setInsertionPointToStart(loop.getBody());
    Value kt = arith::AddIOp::create(rewriter, loc, loop.getInductionVar(), t);
    Value kt4 = plus(kt, 4);
    Value a = vector::FromElementsOp::create(
        rewriter, loc, VectorType::get({4, 1}, f32),
        ValueRange{
            load(lhs, group, zero, kt), load(lhs, plus(group, 8), zero, kt),
            load(lhs, group, zero, kt4), load(lhs, plus(group, 8), zero, kt4)});
    Value b = vector::FromElementsOp::create(
        rewriter, loc, VectorType::get({2, 1}, f32),
        ValueRange{load(rhs, zero, group, kt), load(rhs, zero, group, kt4)});
    Value next = nvgpu::MmaSyncOp::create(
        rewriter, loc, a, b, loop.getRegionIterArgs()[0],
        ArrayRef<int64_t>{16, 8, 8}, /*tf32Enabled=*/true);
    scf::YieldOp::create(rewriter, loc, next);
  }
  for (auto [i, position] : llvm::enumerate(accPositions)) {
    Value element = vector::ExtractOp::create(
        rewriter, loc, loop.getResult(0),
        ArrayRef<int64_t>{static_cast<int64_t>(i / 2),
                          static_cast<int64_t>(i % 2)});
    SmallVector<Value> loops(ranges.size(), zero);
    loops[mma->m] = position.first;
    loops[mma->n] = position.second;
    memref::StoreOp::create(rewriter, loc, element, out->get(),
                            operandIndices(op, *out, loops));
  }
  rewriter.eraseOp(op);
  return success();
}

/// A warp forall (la-tile-for-gpu's tensor-core tiles) -> a loop of the
/// block's warps over its linearized iterations, each warp running its
/// tile's contraction as mma.sync, then a barrier.
static LogicalResult distributeWarpForall(RewriterBase &rewriter,
                                          scf::ForallOp forall, Value threadId,
                                          Value threads) {
  Location loc = forall.getLoc();
  rewriter.setInsertionPoint(forall);
  Value warpSize = arith::ConstantIndexOp::create(rewriter, loc, 32);
  Value warp = arith::DivUIOp::create(rewriter, loc, threadId, warpSize);
  Value lane = arith::RemUIOp::create(rewriter, loc, threadId, warpSize);
  Value warps = arith::DivUIOp::create(rewriter, loc, threads, warpSize);
  SmallVector<linalg::LinalgOp> tiles;
  forall.getBody()->walk([&](linalg::LinalgOp op) { tiles.push_back(op); });
  if (tiles.size() != 1)
    return forall.emitOpError("must hold one contraction tile per warp");
  if (failed(distributeForall(rewriter, forall, warp, warps)))
    return failure();
  return rewriteAsMma(rewriter, tiles.front(), lane);
}

/// memref.copy inside a kernel -> every thread copies elements t,
/// t + threads, ...; then a barrier.
static void distributeCopy(RewriterBase &rewriter, memref::CopyOp copy,
                           Value threadId, Value threads) {
  Location loc = copy.getLoc();
  rewriter.setInsertionPoint(copy);
  auto type = cast<MemRefType>(copy.getSource().getType());
  SmallVector<OpFoldResult> sizes =
      memref::getMixedSizes(rewriter, loc, copy.getSource());
  AffineExpr product = rewriter.getAffineConstantExpr(1);
  for (unsigned i = 0; i < sizes.size(); ++i)
    product = product * rewriter.getAffineSymbolExpr(i);
  Value total = getValueOrCreateConstantIndexOp(
      rewriter, loc,
      affine::makeComposedFoldedAffineApply(
          rewriter, loc, AffineMap::get(0, sizes.size(), product), sizes));
  Value source = copy.getSource(), target = copy.getTarget();
  distributeOverThreads(
      rewriter, loc, total, threadId, threads,
      [&](OpBuilder &b, Location l, Value i) {
        SmallVector<Value> indices;
        if (type.getRank() > 0)
          indices = affine::AffineDelinearizeIndexOp::create(b, l, i, sizes)
                        .getResults();
        Value element = memref::LoadOp::create(b, l, source, indices);
        memref::StoreOp::create(b, l, element, target, indices);
      });
  rewriter.eraseOp(copy);
}

//===----------------------------------------------------------------------===//
// Launch
//===----------------------------------------------------------------------===//

FailureOr<gpu::LaunchOp>
mlir::la::mapTasksToLaunch(RewriterBase &rewriter, scf::ForallOp tasks,
                           const GPUMappingOptions &options) {
  if (!isBlockForall(tasks))
    return tasks.emitOpError("is not mapped onto GPU blocks (run "
                             "la-tile-for-gpu first)");
  if (tasks.getNumResults() != 0)
    return tasks.emitOpError("must be bufferized before la-map-to-gpu");
  if (!tasks.isNormalized() || tasks.getRank() > 3)
    return tasks.emitOpError("must be normalized with at most 3 dimensions");

  SmallVector<SharedBuffer> plan;
  FailureOr<int64_t> sharedBytes = planSharedMemory(tasks, plan);
  if (failed(sharedBytes))
    return failure();
  if (*sharedBytes > options.sharedMemoryLimit)
    return tasks.emitOpError("needs ")
           << *sharedBytes << " bytes of shared memory for a chunk's buffers, "
           << "more than the limit of " << options.sharedMemoryLimit
           << " (try a smaller chunk size or value tiles)";

  Location loc = tasks.getLoc();
  rewriter.setInsertionPoint(tasks);
  SmallVector<Value> grid;
  for (OpFoldResult bound : tasks.getMixedUpperBound())
    grid.push_back(getValueOrCreateConstantIndexOp(rewriter, loc, bound));
  Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
  grid.resize(3, one);
  Value threads =
      arith::ConstantIndexOp::create(rewriter, loc, options.threadsPerBlock);
  Value sharedSize = arith::ConstantOp::create(
      rewriter, loc, rewriter.getI32IntegerAttr(*sharedBytes));
  auto launch = gpu::LaunchOp::create(rewriter, loc, grid[0], grid[1], grid[2],
                                      threads, one, one, sharedSize);
  Block &body = launch.getBody().front();
  rewriter.setInsertionPointToEnd(&body);
  auto terminator = gpu::TerminatorOp::create(rewriter, loc);

  // The task's body, with the block ids for the forall's indices.
  gpu::KernelDim3 blockIds = launch.getBlockIds();
  SmallVector<Value> ids = {blockIds.x, blockIds.y, blockIds.z};
  ids.resize(tasks.getRank());
  rewriter.eraseOp(tasks.getBody()->getTerminator());
  rewriter.inlineBlockBefore(tasks.getBody(), terminator, ids);
  rewriter.eraseOp(tasks);

  rewriter.setInsertionPointToStart(&body);
  Value threadId = launch.getThreadIds().x;
  Value blockThreads = launch.getBlockSize().x;
  if (!plan.empty()) {
    auto bytesType = MemRefType::get(
        {ShapedType::kDynamic}, rewriter.getI8Type(),
        MemRefLayoutAttrInterface(),
        gpu::AddressSpaceAttr::get(rewriter.getContext(),
                                   gpu::AddressSpace::Workgroup));
    Value sharedMemory =
        gpu::DynamicSharedMemoryOp::create(rewriter, loc, bytesType);
    placeInSharedMemory(rewriter, sharedMemory, plan);
  }

  SmallVector<scf::ForallOp> threadLoops, warpLoops;
  SmallVector<memref::CopyOp> copies;
  SmallVector<Operation *> deallocs;
  body.walk([&](Operation *op) {
    if (auto forall = dyn_cast<scf::ForallOp>(op)) {
      if (forall->getParentOfType<scf::ForallOp>())
        return;
      if (isThreadForall(forall))
        threadLoops.push_back(forall);
      else if (isWarpForall(forall))
        warpLoops.push_back(forall);
    } else if (auto copy = dyn_cast<memref::CopyOp>(op)) {
      if (!copy->getParentOfType<scf::ForallOp>())
        copies.push_back(copy);
    } else if (isa<memref::DeallocOp>(op)) {
      deallocs.push_back(op);
    }
  });
  for (Operation *dealloc : deallocs)
    rewriter.eraseOp(dealloc);
  for (scf::ForallOp forall : threadLoops)
    if (failed(distributeForall(rewriter, forall, threadId, blockThreads)))
      return failure();
  if (!warpLoops.empty() && options.threadsPerBlock % 32)
    return warpLoops.front().emitOpError(
               "needs whole warps: threads-per-block must be a multiple of "
               "32, got ")
           << options.threadsPerBlock;
  for (scf::ForallOp forall : warpLoops)
    if (failed(distributeWarpForall(rewriter, forall, threadId, blockThreads)))
      return failure();
  for (memref::CopyOp copy : copies)
    distributeCopy(rewriter, copy, threadId, blockThreads);

  // Everything that computes must now be inside a thread loop.
  WalkResult leftover = body.walk([&](Operation *op) {
    bool inThreadLoop = false;
    for (Operation *parent = op->getParentOp(); parent != launch;
         parent = parent->getParentOp())
      inThreadLoop |= parent->hasAttr(kDistributedAttr);
    if (inThreadLoop)
      return WalkResult::advance();
    if (isa<linalg::LinalgOp, scf::ForallOp, memref::AllocOp, memref::AllocaOp>(
            op)) {
      op->emitOpError("is not distributed over the GPU's threads (only "
                      "la-tile-for-gpu's thread loops and copies are)");
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (leftover.wasInterrupted())
    return failure();
  body.walk([](scf::ForOp loop) { loop->removeAttr(kDistributedAttr); });
  return launch;
}

//===----------------------------------------------------------------------===//
// Host side
//===----------------------------------------------------------------------===//

/// `copy(collapse_shape(alloc), result)` where the alloc is only written
/// through views before the copy: the alloc becomes `expand_shape(result)`
/// and the copy goes (the kernel writes its output in place).
static void forwardOutputCopies(RewriterBase &rewriter, func::FuncOp func) {
  SmallVector<memref::CopyOp> copies;
  for (auto copy : func.getBody().getOps<memref::CopyOp>())
    copies.push_back(copy);
  for (memref::CopyOp copy : copies) {
    auto collapse = copy.getSource().getDefiningOp<memref::CollapseShapeOp>();
    if (!collapse || !collapse->hasOneUse())
      continue;
    auto alloc = collapse.getSrc().getDefiningOp<memref::AllocOp>();
    auto targetType = cast<MemRefType>(copy.getTarget().getType());
    if (!alloc || !targetType.getLayout().isIdentity() ||
        !collapse.getResultType().getLayout().isIdentity())
      continue;
    // The target must be available where the alloc is.
    Value target = copy.getTarget();
    if (auto arg = dyn_cast<BlockArgument>(target)) {
      if (arg.getOwner() != &func.getBody().front())
        continue;
    } else {
      continue;
    }
    rewriter.setInsertionPoint(alloc);
    Value expanded = memref::ExpandShapeOp::create(
        rewriter, alloc.getLoc(), alloc.getType().getShape(), target,
        collapse.getReassociationIndices());
    rewriter.eraseOp(copy);
    rewriter.eraseOp(collapse);
    rewriter.replaceOp(alloc, expanded);
  }
}

/// Host allocations become device allocations; anything else that touches
/// memory outside the kernels has no GPU form here and is an error.
static LogicalResult prepareHostSide(RewriterBase &rewriter,
                                     func::FuncOp func) {
  forwardOutputCopies(rewriter, func);
  SmallVector<Operation *> hostOps;
  for (Operation &op : func.getBody().getOps())
    hostOps.push_back(&op);
  for (Operation *op : hostOps) {
    if (isa<gpu::LaunchOp, func::ReturnOp, ViewLikeOpInterface>(op) ||
        isMemoryEffectFree(op))
      continue;
    if (auto alloc = dyn_cast<memref::AllocOp>(op)) {
      rewriter.setInsertionPoint(alloc);
      rewriter.replaceOpWithNewOp<gpu::AllocOp>(
          alloc, alloc.getType(), /*asyncToken=*/Type(),
          /*asyncDependencies=*/ValueRange{}, alloc.getDynamicSizes(),
          alloc.getSymbolOperands(), /*hostShared=*/false);
      continue;
    }
    if (auto dealloc = dyn_cast<memref::DeallocOp>(op)) {
      rewriter.setInsertionPoint(dealloc);
      rewriter.replaceOpWithNewOp<gpu::DeallocOp>(
          dealloc, /*asyncToken=*/Type(), ValueRange{}, dealloc.getMemref());
      continue;
    }
    return op->emitOpError(
        "runs outside the attention's GPU tasks, which la-map-to-gpu cannot "
        "place on the GPU (the GPU path needs T to be a multiple of the "
        "chunk size and the operands' producers to be fusible)");
  }
  return success();
}

LogicalResult mlir::la::mapToGPU(RewriterBase &rewriter, func::FuncOp func,
                                 const GPUMappingOptions &options) {
  SmallVector<scf::ForallOp> tasks;
  for (auto forall : func.getBody().getOps<scf::ForallOp>())
    if (isBlockForall(forall))
      tasks.push_back(forall);
  for (scf::ForallOp forall : tasks)
    if (failed(mapTasksToLaunch(rewriter, forall, options)))
      return failure();
  return prepareHostSide(rewriter, func);
}

namespace {
struct LaMapToGPUPass : la::impl::LaMapToGPUPassBase<LaMapToGPUPass> {
  using Base::Base;

  void runOnOperation() override {
    if (threadsPerBlock <= 0 || threadsPerBlock > 1024) {
      getOperation()->emitError()
          << "la-map-to-gpu: 'threads-per-block' must be in [1, 1024], got "
          << static_cast<int64_t>(threadsPerBlock);
      return signalPassFailure();
    }
    GPUMappingOptions options;
    options.threadsPerBlock = threadsPerBlock;
    options.sharedMemoryLimit = sharedMemoryLimit;
    IRRewriter rewriter(&getContext());
    if (failed(mapToGPU(rewriter, getOperation(), options)))
      return signalPassFailure();
  }
};
} // namespace
