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
//     by the result itself; other host allocations become gpu.alloc;
//   - the structured ops and copies outside the tasks (padding, the
//     backward's per-token products) become kernels of their own, one
//     parallel iteration per thread, and loops of them kernels of one block.
// The function then takes device pointers: callers pass GPU memory.
//
//===----------------------------------------------------------------------===//

#include "la/Codegen/GPU/GPUTiling.h"
#include "la/Codegen/GPU/Passes.h"
#include "la/Dialect/La/LaDialect.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/TilingInterface.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::la {
#define GEN_PASS_DEF_LAMAPTOGPUPASS
#include "la/Codegen/GPU/Passes.h.inc"
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

/// Emits `for i = threadId to count step threads { body(i) }` and a barrier
/// after it.
static void
distributeOverThreads(RewriterBase &rewriter, Location loc, Value count,
                      Value threadId, Value threads,
                      function_ref<void(OpBuilder &, Location, Value)> body) {
  auto loop = scf::ForOp::create(rewriter, loc, threadId, count, threads);
  getLaDialect(loop).getDistributedAttrHelper().setAttr(loop,
                                                        rewriter.getUnitAttr());
  {
    // The body is built once the loop is in place (affine folding looks at
    // the enclosing regions).
    OpBuilder::InsertionGuard guard(rewriter);
    rewriter.setInsertionPoint(loop.getBody()->getTerminator());
    body(rewriter, loc, loop.getInductionVar());
  }
  gpu::BarrierOp::create(rewriter, loc);
}

/// The product of `sizes` (folded when they are constants).
static Value productOf(OpBuilder &b, Location loc,
                       ArrayRef<OpFoldResult> sizes) {
  AffineExpr product = b.getAffineConstantExpr(1);
  for (unsigned i = 0; i < sizes.size(); ++i)
    product = product * b.getAffineSymbolExpr(i);
  return getValueOrCreateConstantIndexOp(
      b, loc,
      affine::makeComposedFoldedAffineApply(
          b, loc, AffineMap::get(0, sizes.size(), product), sizes));
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
  Value total = productOf(rewriter, loc, counts);
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
/// buffers) -> the warp's mma.sync steps over K, with fragments loaded in
/// the layouts of PTX's mma.sync (lane = 4 * group + t):
///   m16n8k8 on tf32: A (group [+8], t [+4]); B (k = t [+4], n = group);
///   m16n8k16 on f16/bf16: A (group [+8], 2t + {0,1} [+8]);
///                         B (k = 2t + {0,1} [+8], n = group);
///   C (both): (group [+8], 2t + {0,1}).
/// The operands are converted to the instruction's type as they are loaded;
/// the accumulator stays f32.
static LogicalResult rewriteAsMma(RewriterBase &rewriter, linalg::LinalgOp op,
                                  Value lane, MmaPrecision precision) {
  std::optional<MmaContraction> mma = getMmaContraction(op);
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (!mma || !op.hasPureBufferSemantics() || ranges[mma->m] != 16 ||
      ranges[mma->n] != 8)
    return op->emitOpError("is not a 16 x 8 tensor-core tile on buffers");
  Location loc = op.getLoc();
  MLIRContext *ctx = rewriter.getContext();
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
  Value twoT = arith::MulIOp::create(rewriter, loc, t, index(2));
  // Which input holds the rows (m) and which the columns (n).
  OpOperand *lhs = op.getDpsInputOperand(0), *rhs = op.getDpsInputOperand(1);
  if (!op.getMatchingIndexingMap(lhs).isFunctionOfDim(mma->m))
    std::swap(lhs, rhs);
  OpOperand *out = op.getDpsInitOperand(0);
  Type f32 = rewriter.getF32Type();
  Type operandType = precision == MmaPrecision::TF32 ? f32
                     : precision == MmaPrecision::F16
                         ? Type(rewriter.getF16Type())
                         : Type(rewriter.getBF16Type());
  // Element (m, n, k) of `operand`, as `type`.
  auto loadRaw = [&](OpOperand *operand, Value m, Value n, Value k,
                     Type type) -> Value {
    SmallVector<Value> loops(ranges.size(), zero);
    loops[mma->m] = m;
    loops[mma->n] = n;
    loops[mma->k] = k;
    Value element = memref::LoadOp::create(rewriter, loc, operand->get(),
                                           operandIndices(op, *operand, loops));
    Type from = element.getType();
    if (from == type)
      return element;
    if (from.getIntOrFloatBitWidth() < type.getIntOrFloatBitWidth())
      return arith::ExtFOp::create(rewriter, loc, type, element);
    return arith::TruncFOp::create(rewriter, loc, type, element);
  };
  // The same, negated where the body negates that input.
  auto load = [&](OpOperand *operand, Value m, Value n, Value k,
                  Type type) -> Value {
    Value element = loadRaw(operand, m, n, k, type);
    if (operand != out && mma->negated[operand->getOperandNumber()])
      element = arith::NegFOp::create(rewriter, loc, element);
    return element;
  };

  // The accumulator fragment, row-major in a 2 x 2 vector.
  SmallVector<std::pair<Value, Value>> accPositions = {
      {group, twoT},
      {group, plus(twoT, 1)},
      {plus(group, 8), twoT},
      {plus(group, 8), plus(twoT, 1)}};
  SmallVector<Value> accElements;
  for (auto [row, col] : accPositions)
    accElements.push_back(load(out, row, col, zero, f32));
  auto accType = VectorType::get({2, 2}, f32);
  Value acc =
      vector::FromElementsOp::create(rewriter, loc, accType, accElements);

  int64_t kStep = precision == MmaPrecision::TF32 ? 8 : 16;
  Value kUpper = index(ranges[mma->k]);
  Value kStepValue = index(kStep);
  auto loop = scf::ForOp::create(rewriter, loc, zero, kUpper, kStepValue,
                                 ValueRange{acc});
  {
    OpBuilder::InsertionGuard guard(rewriter);
    rewriter.setInsertionPointToStart(loop.getBody());
    Value k0 = loop.getInductionVar();
    Value current = loop.getRegionIterArgs()[0];
    Value next;
    if (precision == MmaPrecision::TF32) {
      Value kt = arith::AddIOp::create(rewriter, loc, k0, t);
      Value kt4 = plus(kt, 4);
      Value a = vector::FromElementsOp::create(
          rewriter, loc, VectorType::get({4, 1}, f32),
          ValueRange{load(lhs, group, zero, kt, f32),
                     load(lhs, plus(group, 8), zero, kt, f32),
                     load(lhs, group, zero, kt4, f32),
                     load(lhs, plus(group, 8), zero, kt4, f32)});
      Value b = vector::FromElementsOp::create(
          rewriter, loc, VectorType::get({2, 1}, f32),
          ValueRange{load(rhs, zero, group, kt, f32),
                     load(rhs, zero, group, kt4, f32)});
      next = nvgpu::MmaSyncOp::create(rewriter, loc, a, b, current,
                                      ArrayRef<int64_t>{16, 8, 8},
                                      /*tf32Enabled=*/true);
    } else {
      // Registers of two 16-bit elements: A's four, B's two.
      Value k2t = arith::AddIOp::create(rewriter, loc, k0, twoT);
      SmallVector<SmallVector<Value, 2>> aRegs, bRegs;
      for (int64_t r = 0; r < 4; ++r) {
        Value row = plus(group, r % 2 ? 8 : 0);
        Value col = plus(k2t, r >= 2 ? 8 : 0);
        aRegs.push_back({load(lhs, row, zero, col, operandType),
                         load(lhs, row, zero, plus(col, 1), operandType)});
      }
      for (int64_t r = 0; r < 2; ++r) {
        Value k = plus(k2t, r ? 8 : 0);
        bRegs.push_back({load(rhs, zero, group, k, operandType),
                         load(rhs, zero, group, plus(k, 1), operandType)});
      }
      if (precision == MmaPrecision::F16) {
        SmallVector<Value> aElements, bElements;
        for (auto &reg : aRegs)
          aElements.append(reg.begin(), reg.end());
        for (auto &reg : bRegs)
          bElements.append(reg.begin(), reg.end());
        Value a = vector::FromElementsOp::create(
            rewriter, loc, VectorType::get({4, 2}, operandType), aElements);
        Value b = vector::FromElementsOp::create(
            rewriter, loc, VectorType::get({2, 2}, operandType), bElements);
        next = nvgpu::MmaSyncOp::create(rewriter, loc, a, b, current,
                                        ArrayRef<int64_t>{16, 8, 16});
      } else {
        // nvgpu.mma.sync has no bf16 lowering: NVVM's op on the registers
        // as i32.
        Type i32 = rewriter.getI32Type();
        auto pack = [&](ArrayRef<Value> pair) -> Value {
          Value pairVector = vector::FromElementsOp::create(
              rewriter, loc, VectorType::get({2}, operandType), pair);
          Value word = vector::BitCastOp::create(
              rewriter, loc, VectorType::get({1}, i32), pairVector);
          return vector::ExtractOp::create(rewriter, loc, word,
                                           ArrayRef<int64_t>{0});
        };
        SmallVector<Value> aWords, bWords, cValues;
        for (auto &reg : aRegs)
          aWords.push_back(pack(reg));
        for (auto &reg : bRegs)
          bWords.push_back(pack(reg));
        for (int64_t i = 0; i < 4; ++i)
          cValues.push_back(vector::ExtractOp::create(
              rewriter, loc, current, ArrayRef<int64_t>{i / 2, i % 2}));
        auto resultType =
            LLVM::LLVMStructType::getLiteral(ctx, {f32, f32, f32, f32});
        Value result = NVVM::MmaOp::create(
            rewriter, loc, resultType, aWords, bWords, cValues,
            ArrayRef<int64_t>{16, 8, 16}, /*b1Op=*/std::nullopt,
            /*intOverflow=*/std::nullopt,
            std::array<NVVM::MMATypes, 2>{NVVM::MMATypes::bf16,
                                          NVVM::MMATypes::bf16},
            std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                           NVVM::MMALayout::col});
        SmallVector<Value> dValues;
        for (int64_t i = 0; i < 4; ++i)
          dValues.push_back(LLVM::ExtractValueOp::create(rewriter, loc, result,
                                                         ArrayRef<int64_t>{i}));
        next = vector::FromElementsOp::create(rewriter, loc, accType, dValues);
      }
    }
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
                                          Value threads,
                                          MmaPrecision precision) {
  Location loc = forall.getLoc();
  rewriter.setInsertionPoint(forall);
  Value warpSize = arith::ConstantIndexOp::create(rewriter, loc, 32);
  Value warp = arith::DivUIOp::create(rewriter, loc, threadId, warpSize);
  auto lane = arith::RemUIOp::create(rewriter, loc, threadId, warpSize);
  getLaDialect(lane).getLaneAttrHelper().setAttr(lane, rewriter.getUnitAttr());
  Value warps = arith::DivUIOp::create(rewriter, loc, threads, warpSize);
  SmallVector<linalg::LinalgOp> tiles;
  forall.getBody()->walk([&](linalg::LinalgOp op) { tiles.push_back(op); });
  if (tiles.size() != 1)
    return forall.emitOpError("must hold one contraction tile per warp");
  if (failed(distributeForall(rewriter, forall, warp, warps)))
    return failure();
  return rewriteAsMma(rewriter, tiles.front(), lane, precision);
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
  Value total = productOf(rewriter, loc, sizes);
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

/// Clones into `launch`, at the start of its body, what its ops read that
/// the host computed from device memory: the function's top-level loads
/// (packed sequences' offsets, which canonicalization hoists out of a loop
/// or a forall over one sequence) and the side-effect-free ops between them
/// and the kernel (index arithmetic, views, an scf.if choosing a view). The
/// originals die once no kernel uses them (launchWorkOutsideTasks erases
/// them).
static void cloneDeviceScalarsInto(RewriterBase &rewriter,
                                   gpu::LaunchOp launch) {
  Block *host = launch->getBlock();
  llvm::SetVector<Operation *> slice;
  SmallVector<Value> worklist;
  auto pushOperands = [&](Region &region) {
    region.walk([&](Operation *nested) {
      for (Value operand : nested->getOperands())
        worklist.push_back(operand);
    });
  };
  pushOperands(launch.getBody());
  bool readsMemory = false;
  while (!worklist.empty()) {
    Operation *producer = worklist.pop_back_val().getDefiningOp();
    if (!producer || producer->getBlock() != host || slice.contains(producer))
      continue;
    bool load = isa<memref::LoadOp>(producer);
    if (!load && !isMemoryEffectFree(producer))
      continue;
    readsMemory |= load;
    slice.insert(producer);
    for (Value operand : producer->getOperands())
      worklist.push_back(operand);
    for (Region &region : producer->getRegions())
      pushOperands(region);
  }
  if (!readsMemory)
    return;
  SmallVector<Operation *> ordered = slice.takeVector();
  llvm::sort(ordered,
             [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  IRMapping mapping;
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPointToStart(&launch.getBody().front());
  for (Operation *producer : ordered)
    rewriter.clone(*producer, mapping);
  launch.getBody().walk([&](Operation *nested) {
    for (OpOperand &operand : nested->getOpOperands())
      if (Value clone = mapping.lookupOrNull(operand.get()))
        if (clone.getDefiningOp() != nested)
          rewriter.modifyOpInPlace(nested, [&] { operand.set(clone); });
  });
}

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
  // The block size as the constant it is, not the launch's block-size
  // argument: thread loops get a static step, so after
  // gpu-launch-sink-index-computations their trip counts fold and unroll.
  Value blockThreads = threads;
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
    if (failed(distributeWarpForall(rewriter, forall, threadId, blockThreads,
                                    options.mmaPrecision)))
      return failure();
  for (memref::CopyOp copy : copies)
    distributeCopy(rewriter, copy, threadId, blockThreads);

  // Everything that computes must now be inside a thread loop.
  WalkResult leftover = body.walk([&](Operation *op) {
    bool inThreadLoop = false;
    for (Operation *parent = op->getParentOp(); parent != launch;
         parent = parent->getParentOp())
      inThreadLoop |=
          getLaDialect(parent).getDistributedAttrHelper().isAttrPresent(parent);
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
  return launch;
}

//===----------------------------------------------------------------------===//
// Work outside the tasks
//===----------------------------------------------------------------------===//

/// Emits, at the rewriter's insertion point, the part of `op` (on buffers)
/// at its parallel iteration `i`, linearized over the parallel loops: the
/// op's tile with every parallel loop at one iteration and the reductions
/// whole (convert-linalg-to-loops later makes it scalar code).
static LogicalResult emitParallelIteration(RewriterBase &rewriter, Location loc,
                                           linalg::LinalgOp op,
                                           ArrayRef<Range> loops, Value i) {
  SmallVector<unsigned> parallel;
  op.getParallelDims(parallel);
  SmallVector<OpFoldResult> parallelSizes;
  for (unsigned dim : parallel)
    parallelSizes.push_back(loops[dim].size);
  SmallVector<OpFoldResult> offsets, sizes;
  for (const Range &loop : loops) {
    offsets.push_back(loop.offset);
    sizes.push_back(loop.size);
  }
  SmallVector<Value> indices = {i};
  if (parallel.size() > 1)
    indices = affine::AffineDelinearizeIndexOp::create(rewriter, loc, i,
                                                       parallelSizes)
                  .getResults();
  for (auto [dim, index] : llvm::zip(parallel, indices)) {
    offsets[dim] = index;
    sizes[dim] = rewriter.getIndexAttr(1);
  }
  FailureOr<TilingResult> tile =
      cast<TilingInterface>(op.getOperation())
          .getTiledImplementation(rewriter, offsets, sizes);
  if (failed(tile))
    return op->emitOpError("could not be split into one-element tiles for "
                           "the GPU's threads");
  return success();
}

/// The number of parallel iterations of `op`.
static Value parallelIterations(RewriterBase &rewriter, Location loc,
                                linalg::LinalgOp op, ArrayRef<Range> loops) {
  SmallVector<unsigned> parallel;
  op.getParallelDims(parallel);
  SmallVector<OpFoldResult> sizes;
  for (unsigned dim : parallel)
    sizes.push_back(loops[dim].size);
  return productOf(rewriter, loc, sizes);
}

/// A memref.copy outside the kernels as the equivalent linalg.copy.
static linalg::LinalgOp asLinalgCopy(RewriterBase &rewriter,
                                     memref::CopyOp copy) {
  rewriter.setInsertionPoint(copy);
  auto linalgCopy = linalg::CopyOp::create(rewriter, copy.getLoc(),
                                           copy.getSource(), copy.getTarget());
  rewriter.eraseOp(copy);
  return cast<linalg::LinalgOp>(linalgCopy.getOperation());
}

/// A structured op on buffers outside the tasks (an element-wise product, a
/// sum over heads, a copy) -> a kernel of its own: one parallel iteration
/// per thread, `threads-per-block` of them per block, each thread's
/// reductions in a loop of its own.
static LogicalResult launchPerIteration(RewriterBase &rewriter,
                                        linalg::LinalgOp op,
                                        const GPUMappingOptions &options) {
  Location loc = op.getLoc();
  rewriter.setInsertionPoint(op);
  SmallVector<Range> loops = op.createLoopRanges(rewriter, loc);
  Value total = parallelIterations(rewriter, loc, op, loops);
  Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
  Value threads =
      arith::ConstantIndexOp::create(rewriter, loc, options.threadsPerBlock);
  AffineExpr count, width;
  bindSymbols(rewriter.getContext(), count, width);
  Value blocks = getValueOrCreateConstantIndexOp(
      rewriter, loc,
      affine::makeComposedFoldedAffineApply(rewriter, loc, count.ceilDiv(width),
                                            {total, threads}));
  auto launch =
      gpu::LaunchOp::create(rewriter, loc, blocks, one, one, threads, one, one);
  rewriter.setInsertionPointToEnd(&launch.getBody().front());
  auto terminator = gpu::TerminatorOp::create(rewriter, loc);
  rewriter.setInsertionPoint(terminator);
  // Block b takes iterations [b * threads, min((b + 1) * threads, total)):
  // a thread loop from the thread's index, as in the tasks.
  AffineExpr block, all;
  bindSymbols(rewriter.getContext(), block, width, all);
  SmallVector<OpFoldResult> operands = {launch.getBlockIds().x, threads, total};
  Value first = affine::makeComposedAffineApply(
      rewriter, loc, AffineMap::get(0, 3, block * width), operands);
  Value inBlock = affine::makeComposedAffineMin(
      rewriter, loc,
      AffineMap::get(0, 3, {width, all - block * width}, rewriter.getContext()),
      operands);
  LogicalResult result = success();
  distributeOverThreads(rewriter, loc, inBlock, launch.getThreadIds().x,
                        threads, [&](OpBuilder &, Location l, Value j) {
                          Value i =
                              arith::AddIOp::create(rewriter, l, first, j);
                          result =
                              emitParallelIteration(rewriter, l, op, loops, i);
                        });
  if (failed(result))
    return failure();
  rewriter.eraseOp(op);
  return success();
}

/// A loop outside the tasks (a reverse cumulative sum over tokens, a loop
/// over packed sequences) -> a kernel of one block that runs it: each
/// structured op or copy in it is split over the block's threads with a
/// barrier after it, as in the tasks; the rest (indices, bounds) every
/// thread computes alike.
static LogicalResult launchInOneBlock(RewriterBase &rewriter, Operation *loop,
                                      const GPUMappingOptions &options) {
  if (loop->getNumResults() != 0)
    return loop->emitOpError(
        "runs outside the attention's GPU tasks and returns values, which "
        "la-map-to-gpu cannot place on the GPU (a kernel returns nothing; "
        "token-by-token programs have no GPU form yet)");
  WalkResult allocates = loop->walk([&](Operation *op) {
    if (isa<memref::AllocOp, memref::AllocaOp, scf::ForallOp>(op)) {
      op->emitOpError("runs in a loop outside the attention's GPU tasks, "
                      "which la-map-to-gpu cannot place on the GPU (a kernel "
                      "allocates nothing; token-by-token programs have no "
                      "GPU form yet)");
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (allocates.wasInterrupted())
    return failure();
  Location loc = loop->getLoc();
  rewriter.setInsertionPoint(loop);
  Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
  Value threads =
      arith::ConstantIndexOp::create(rewriter, loc, options.threadsPerBlock);
  auto launch =
      gpu::LaunchOp::create(rewriter, loc, one, one, one, threads, one, one);
  rewriter.setInsertionPointToEnd(&launch.getBody().front());
  auto terminator = gpu::TerminatorOp::create(rewriter, loc);
  rewriter.moveOpBefore(loop, terminator);
  Value threadId = launch.getThreadIds().x;
  Value blockThreads = threads; // static, as in the tasks' launches

  SmallVector<Operation *> work;
  loop->walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (isa<linalg::LinalgOp, memref::CopyOp>(op)) {
      work.push_back(op);
      return WalkResult::skip();
    }
    return WalkResult::advance();
  });
  for (Operation *op : work) {
    if (auto copy = dyn_cast<memref::CopyOp>(op)) {
      distributeCopy(rewriter, copy, threadId, blockThreads);
      continue;
    }
    auto linalgOp = cast<linalg::LinalgOp>(op);
    if (!linalgOp.hasPureBufferSemantics())
      return op->emitOpError("must be bufferized before la-map-to-gpu");
    Location opLoc = op->getLoc();
    rewriter.setInsertionPoint(op);
    SmallVector<Range> loops = linalgOp.createLoopRanges(rewriter, opLoc);
    Value total = parallelIterations(rewriter, opLoc, linalgOp, loops);
    LogicalResult result = success();
    distributeOverThreads(rewriter, opLoc, total, threadId, blockThreads,
                          [&](OpBuilder &, Location l, Value i) {
                            result = emitParallelIteration(rewriter, l,
                                                           linalgOp, loops, i);
                          });
    if (failed(result))
      return failure();
    rewriter.eraseOp(op);
  }
  return success();
}

/// Whether `op` holds a kernel (tasks mapped to a launch inside it): then it
/// is host control flow around launches (checkpoints' loop over segments)
/// rather than work for one kernel.
static bool holdsKernels(Operation *op) {
  return op->walk([](gpu::LaunchOp) { return WalkResult::interrupt(); })
      .wasInterrupted();
}

/// Gives the work left outside the tasks in `block` (structured ops,
/// copies, and loops of them) kernels of their own, in program order; a
/// loop or branch around tasks stays on the host, and its body is given
/// kernels the same way.
static LogicalResult launchWorkInHostBlock(RewriterBase &rewriter, Block &block,
                                           const GPUMappingOptions &options) {
  SmallVector<Operation *> ops;
  for (Operation &op : block)
    ops.push_back(&op);
  for (Operation *op : ops) {
    if (auto copy = dyn_cast<memref::CopyOp>(op))
      op = asLinalgCopy(rewriter, copy);
    if (auto linalgOp = dyn_cast<linalg::LinalgOp>(op)) {
      if (!linalgOp.hasPureBufferSemantics())
        return op->emitOpError("must be bufferized before la-map-to-gpu");
      if (failed(launchPerIteration(rewriter, linalgOp, options)))
        return failure();
      continue;
    }
    if (!isa<scf::ForOp, scf::IfOp>(op) || isMemoryEffectFree(op))
      continue;
    if (holdsKernels(op)) {
      // Host scalars (a running row offset) may flow out; buffers may not.
      if (llvm::any_of(op->getResultTypes(), llvm::IsaPred<MemRefType>))
        return op->emitOpError(
            "runs the GPU's kernels in a loop or branch that returns buffers, "
            "which la-map-to-gpu cannot keep on the host (they would "
            "outlive the iteration that allocates them)");
      for (Region &region : op->getRegions())
        for (Block &body : region)
          if (failed(launchWorkInHostBlock(rewriter, body, options)))
            return failure();
      continue;
    }
    if (failed(launchInOneBlock(rewriter, op, options)))
      return failure();
  }
  // Loads whose values the kernels now read themselves (and what only they
  // used).
  for (auto launch : block.getOps<gpu::LaunchOp>())
    cloneDeviceScalarsInto(rewriter, launch);
  SmallVector<Operation *> remaining;
  for (Operation &op : block)
    remaining.push_back(&op);
  for (Operation *op : llvm::reverse(remaining))
    if (op->use_empty() && !op->hasTrait<OpTrait::IsTerminator>() &&
        (isa<memref::LoadOp>(op) || isMemoryEffectFree(op)))
      rewriter.eraseOp(op);
  return success();
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

/// Host allocations become device allocations, freed before the function
/// returns (the launches are synchronous); global constants that a kernel
/// reads are read inside it (kernel outlining then copies them into the
/// GPU module); anything else that touches memory outside the kernels has
/// no GPU form here and is an error.
static LogicalResult prepareHostSide(RewriterBase &rewriter,
                                     func::FuncOp func) {
  // The host's ops: the function body's and, inside loops and branches
  // around kernels, theirs.
  SmallVector<Operation *> hostOps;
  std::function<void(Block &)> collect = [&](Block &block) {
    for (Operation &op : block) {
      if (isa<scf::ForOp, scf::IfOp>(op) && holdsKernels(&op)) {
        for (Region &region : op.getRegions())
          for (Block &body : region)
            collect(body);
        continue;
      }
      hostOps.push_back(&op);
    }
  };
  collect(func.getBody().front());
  auto tokenType = gpu::AsyncTokenType::get(rewriter.getContext());
  // gpu-to-llvm lowers the asynchronous forms: each allocation and free is
  // wrapped between gpu.wait ops.
  auto waitFor = [&](Location loc) {
    return gpu::WaitOp::create(rewriter, loc, tokenType, ValueRange{})
        .getAsyncToken();
  };
  SmallVector<Value> deviceBuffers;
  // Integer arguments that the host reads (packed sequences' offsets that
  // bound a host loop) are copied to host memory once, at the entry.
  DenseMap<Value, Value> hostCopies;
  auto hostCopyOf = [&](Value argument) -> Value {
    Value &copy = hostCopies[argument];
    if (copy)
      return copy;
    OpBuilder::InsertionGuard guard(rewriter);
    Block &entry = func.getBody().front();
    rewriter.setInsertionPointToStart(&entry);
    Location loc = argument.getLoc();
    auto type = cast<MemRefType>(argument.getType());
    SmallVector<Value> sizes;
    for (int64_t dim = 0; dim < type.getRank(); ++dim)
      if (type.isDynamicDim(dim))
        sizes.push_back(memref::DimOp::create(rewriter, loc, argument, dim));
    copy = memref::AllocOp::create(
        rewriter, loc, MemRefType::get(type.getShape(), type.getElementType()),
        sizes);
    auto memcpy = gpu::MemcpyOp::create(
        rewriter, loc, tokenType, ValueRange{waitFor(loc)}, copy, argument);
    gpu::WaitOp::create(rewriter, loc, Type(),
                        ValueRange{memcpy.getAsyncToken()});
    rewriter.setInsertionPoint(entry.getTerminator());
    memref::DeallocOp::create(rewriter, loc, copy);
    return copy;
  };
  for (Operation *op : hostOps) {
    if (isa<scf::YieldOp>(op))
      continue;
    if (auto load = dyn_cast<memref::LoadOp>(op)) {
      auto argument = dyn_cast<BlockArgument>(load.getMemRef());
      if (argument && argument.getOwner() == &func.getBody().front() &&
          isa<IntegerType>(load.getType())) {
        Value copy = hostCopyOf(argument);
        rewriter.modifyOpInPlace(load,
                                 [&] { load.getMemrefMutable().assign(copy); });
        continue;
      }
    }
    if (auto global = dyn_cast<memref::GetGlobalOp>(op)) {
      for (OpOperand &use : llvm::make_early_inc_range(global->getUses())) {
        auto launch = use.getOwner()->getParentOfType<gpu::LaunchOp>();
        if (!launch)
          continue;
        OpBuilder::InsertionGuard guard(rewriter);
        rewriter.setInsertionPointToStart(&launch.getBody().front());
        Operation *clone = rewriter.clone(*global);
        rewriter.modifyOpInPlace(use.getOwner(),
                                 [&] { use.set(clone->getResult(0)); });
      }
      if (global->use_empty())
        rewriter.eraseOp(global);
      continue;
    }
    if (isa<gpu::LaunchOp, func::ReturnOp, ViewLikeOpInterface>(op) ||
        isMemoryEffectFree(op))
      continue;
    if (auto alloc = dyn_cast<memref::AllocOp>(op)) {
      Location loc = alloc.getLoc();
      rewriter.setInsertionPoint(alloc);
      auto deviceAlloc = gpu::AllocOp::create(
          rewriter, loc, alloc.getType(), tokenType, ValueRange{waitFor(loc)},
          alloc.getDynamicSizes(), alloc.getSymbolOperands(),
          /*hostShared=*/false);
      gpu::WaitOp::create(rewriter, loc, Type(),
                          ValueRange{deviceAlloc.getAsyncToken()});
      rewriter.replaceOp(alloc, deviceAlloc.getMemref());
      deviceBuffers.push_back(deviceAlloc.getMemref());
      continue;
    }
    if (isa<memref::DeallocOp>(op)) {
      // Freed below, after the last launch.
      rewriter.eraseOp(op);
      continue;
    }
    return op->emitOpError(
        "runs outside the attention's GPU tasks, which la-map-to-gpu cannot "
        "place on the GPU (structured ops, copies and loops of them get "
        "kernels of their own; nothing else may touch device memory on the "
        "host)");
  }
  for (Value buffer : deviceBuffers) {
    // Freed at the end of the block that allocated it (a host loop's
    // iteration, or the function).
    Operation *terminator = buffer.getDefiningOp()->getBlock()->getTerminator();
    Location loc = buffer.getLoc();
    rewriter.setInsertionPoint(terminator);
    auto free = gpu::DeallocOp::create(rewriter, loc, tokenType,
                                       ValueRange{waitFor(loc)}, buffer);
    gpu::WaitOp::create(rewriter, loc, Type(),
                        ValueRange{free.getAsyncToken()});
  }
  return success();
}

LogicalResult mlir::la::mapToGPU(RewriterBase &rewriter, func::FuncOp func,
                                 const GPUMappingOptions &options) {
  // Tasks in the function's body or in host loops around them (the
  // checkpoints' loop over segments launches each segment's tasks).
  SmallVector<scf::ForallOp> tasks;
  func.walk<WalkOrder::PreOrder>([&](scf::ForallOp forall) {
    if (!isBlockForall(forall))
      return WalkResult::advance();
    tasks.push_back(forall);
    return WalkResult::skip();
  });
  for (scf::ForallOp forall : tasks)
    if (failed(mapTasksToLaunch(rewriter, forall, options)))
      return failure();
  forwardOutputCopies(rewriter, func);
  if (failed(launchWorkInHostBlock(rewriter, func.getBody().front(), options)))
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
    options.mmaPrecision = mmaPrecision;
    IRRewriter rewriter(&getContext());
    if (failed(mapToGPU(rewriter, getOperation(), options)))
      return signalPassFailure();
  }
};
} // namespace
