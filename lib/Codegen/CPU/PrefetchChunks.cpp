//===- PrefetchChunks.cpp - prefetch the next chunk's input slices --------===//
//
// The fused chunk loop reads, per chunk, C rows of each input that are a
// whole [H, D] row apart; at H * D * 4 bytes = 4 KiB each row starts a new
// page, and hardware prefetchers stop at page boundaries, so every row's
// first line is a demand miss to memory. Prefetching the next chunk's rows
// at the start of this chunk hides that latency behind this chunk's work.
//
//===----------------------------------------------------------------------===//

#include "la/Codegen/CPU/Passes.h"
#include "la/Dialect/La/LaDialect.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

namespace mlir::la {
#define GEN_PASS_DEF_LAPREFETCHCHUNKSPASS
#include "la/Codegen/CPU/Passes.h.inc"
} // namespace mlir::la

using namespace mlir;
using namespace mlir::la;

/// Bytes per prefetch: one cache line.
static constexpr int64_t kCacheLineBytes = 64;
/// A slice needing more prefetches than this is left alone.
static constexpr int64_t kMaxPrefetchesPerSlice = 4096;

/// The memref that a chain of views of `value` starts from.
static Value viewRoot(Value value) {
  while (auto view = value.getDefiningOp<ViewLikeOpInterface>())
    value = view.getViewSource();
  return value;
}

/// Whether every access to `buffer` (through its views) only reads it.
static bool isOnlyRead(Value buffer) {
  for (Operation *user : buffer.getUsers()) {
    if (auto view = dyn_cast<ViewLikeOpInterface>(user)) {
      if (view.getViewSource() == buffer && !isOnlyRead(view->getResult(0)))
        return false;
      continue;
    }
    auto effects = dyn_cast<MemoryEffectOpInterface>(user);
    if (!effects)
      return false;
    SmallVector<MemoryEffects::EffectInstance> instances;
    effects.getEffects(instances);
    for (const MemoryEffects::EffectInstance &instance : instances)
      if (isa<MemoryEffects::Write, MemoryEffects::Free>(
              instance.getEffect()) &&
          (!instance.getValue() || instance.getValue() == buffer))
        return false;
  }
  return true;
}

/// Prefetches every cache line of `view` (static shape, known strides).
static LogicalResult prefetchLines(OpBuilder &b, Location loc, Value view,
                                   int64_t locality) {
  auto type = cast<MemRefType>(view.getType());
  SmallVector<int64_t> strides;
  int64_t offset;
  if (!type.hasStaticShape() ||
      failed(type.getStridesAndOffset(strides, offset)) ||
      !type.getElementType().isIntOrFloat())
    return failure();
  int64_t elementBytes =
      std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
  int64_t lineElements = std::max<int64_t>(1, kCacheLineBytes / elementBytes);
  // Loops over the non-unit dimensions; the innermost one steps over the
  // elements of a line when they are closer than a line apart.
  ArrayRef<int64_t> shape = type.getShape();
  SmallVector<int64_t> steps(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 1)
      continue;
    if (!ShapedType::isDynamic(strides[d]) && strides[d] > 0 &&
        strides[d] < lineElements)
      steps[d] = lineElements / strides[d];
    break;
  }
  int64_t prefetches = 1;
  for (auto [size, step] : llvm::zip(shape, steps))
    prefetches *= llvm::divideCeil(size, step);
  if (prefetches > kMaxPrefetchesPerSlice)
    return failure();

  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  SmallVector<Value> indices(shape.size(), zero);
  std::function<void(OpBuilder &, unsigned)> build = [&](OpBuilder &nested,
                                                         unsigned d) {
    if (d == shape.size()) {
      memref::PrefetchOp::create(nested, loc, view, indices,
                                 /*isWrite=*/false,
                                 static_cast<uint32_t>(locality),
                                 /*isDataCache=*/true);
      return;
    }
    if (shape[d] == 1)
      return build(nested, d + 1);
    Value upper = arith::ConstantIndexOp::create(nested, loc, shape[d]);
    Value step = arith::ConstantIndexOp::create(nested, loc, steps[d]);
    auto loop = scf::ForOp::create(nested, loc, zero, upper, step);
    OpBuilder inner = OpBuilder::atBlockBegin(loop.getBody());
    indices[d] = loop.getInductionVar();
    build(inner, d + 1);
  };
  build(b, 0);
  return success();
}

namespace {
/// The part of an input that one iteration of a chunk loop reads: per
/// dimension, the chunk (the induction variable itself, one entry of a
/// chunked [B,NC,C,...] view, or the induction variable plus a row of the
/// chunk, `chunkRows` = the loop's step rows of [B,T,...]), an index fixed
/// for the loop (the task's head), or the whole dimension (indices that
/// inner loops vary).
struct ChunkSlice {
  Value input;
  SmallVector<Value> fixedIndices; // null: the chunk or the whole dimension.
  int64_t chunkDim;
  int64_t chunkRows;

  bool operator==(const ChunkSlice &other) const {
    return input == other.input && fixedIndices == other.fixedIndices &&
           chunkDim == other.chunkDim && chunkRows == other.chunkRows;
  }
};
} // namespace

/// The rows of `loop`'s chunk that `index` selects: 1 when it is the
/// induction variable, the loop's (constant) step when it is the induction
/// variable plus an index that varies inside the loop (`affine.apply` of
/// `s0 + s1`, as tiling writes a row of the tile); nullopt otherwise.
static std::optional<int64_t> chunkRowsOf(scf::ForOp loop, Value index) {
  if (index == loop.getInductionVar())
    return 1;
  auto apply = index.getDefiningOp<affine::AffineApplyOp>();
  std::optional<int64_t> step = getConstantIntValue(loop.getStep());
  if (!apply || !step || apply.getMapOperands().size() != 2)
    return std::nullopt;
  AffineMap map = apply.getAffineMap();
  AffineExpr sum = getAffineSymbolExpr(0, map.getContext()) +
                   getAffineSymbolExpr(1, map.getContext());
  if (map.getNumDims() != 0 || map.getNumResults() != 1 ||
      map.getResult(0) != sum)
    return std::nullopt;
  ValueRange operands = apply.getMapOperands();
  Value row = operands[0] == loop.getInductionVar()   ? operands[1]
              : operands[1] == loop.getInductionVar() ? operands[0]
                                                      : Value();
  if (!row || !loop->isProperAncestor(row.getParentBlock()->getParentOp()))
    return std::nullopt;
  return *step;
}

/// The slice of `input` that an access at `indices` inside `loop` reads per
/// iteration, if `input` is a read-only view of a function argument defined
/// outside the loop, exactly one index is the induction variable, and the
/// dimensions read whole are static (the chunk's dimension and those at a
/// fixed index may be dynamic: a dynamic T). `vectorDims` are the dimensions
/// a vector access spans from its index.
static std::optional<ChunkSlice> chunkSliceOf(scf::ForOp loop, Value input,
                                              ValueRange indices,
                                              ArrayRef<unsigned> vectorDims) {
  auto type = dyn_cast<MemRefType>(input.getType());
  if (!type || loop->isAncestor(input.getParentBlock()->getParentOp()))
    return std::nullopt;
  Value root = viewRoot(input);
  auto argument = dyn_cast<BlockArgument>(root);
  if (!argument ||
      !isa<FunctionOpInterface>(argument.getOwner()->getParentOp()) ||
      !isOnlyRead(root))
    return std::nullopt;
  ChunkSlice slice{input, SmallVector<Value>(indices.size()), -1, 0};
  for (auto [d, index] : llvm::enumerate(indices)) {
    if (std::optional<int64_t> rows = chunkRowsOf(loop, index)) {
      if (slice.chunkDim >= 0 || llvm::is_contained(vectorDims, d))
        return std::nullopt;
      slice.chunkDim = d;
      slice.chunkRows = *rows;
    } else if (!loop->isAncestor(index.getParentBlock()->getParentOp()) &&
               !llvm::is_contained(vectorDims, d)) {
      slice.fixedIndices[d] = index;
    }
  }
  if (slice.chunkDim < 0)
    return std::nullopt;
  for (auto [d, fixed] : llvm::enumerate(slice.fixedIndices))
    if (!fixed && static_cast<int64_t>(d) != slice.chunkDim &&
        type.isDynamicDim(d))
      return std::nullopt;
  return slice;
}

/// Prefetches, at the start of each iteration of `loop`, the input slices
/// that iteration `iv + distance * step` reads.
static void prefetchAhead(scf::ForOp loop, int64_t distance, int64_t locality) {
  SmallVector<ChunkSlice> slices;
  auto record = [&](Value input, ValueRange indices,
                    ArrayRef<unsigned> vectorDims) {
    std::optional<ChunkSlice> slice =
        chunkSliceOf(loop, input, indices, vectorDims);
    if (slice && !llvm::is_contained(slices, *slice))
      slices.push_back(*slice);
  };
  loop.getBody()->walk([&](Operation *op) {
    if (auto read = dyn_cast<vector::TransferReadOp>(op)) {
      // The memref dimensions the vector's dimensions run along.
      SmallVector<unsigned> dims;
      for (AffineExpr result : read.getPermutationMap().getResults())
        if (auto dim = dyn_cast<AffineDimExpr>(result))
          dims.push_back(dim.getPosition());
      record(read.getBase(), read.getIndices(), dims);
    } else if (auto load = dyn_cast<vector::LoadOp>(op)) {
      unsigned rank = load.getIndices().size();
      SmallVector<unsigned> dims;
      for (unsigned d = rank - load.getVectorType().getRank(); d < rank; ++d)
        dims.push_back(d);
      record(load.getBase(), load.getIndices(), dims);
    } else if (auto load = dyn_cast<memref::LoadOp>(op)) {
      record(load.getMemRef(), load.getIndices(), {});
    }
  });
  if (slices.empty())
    return;

  Location loc = loop.getLoc();
  OpBuilder b = OpBuilder::atBlockBegin(loop.getBody());
  Value ahead = arith::MulIOp::create(
      b, loc, loop.getStep(),
      arith::ConstantOp::create(b, loc, b.getIndexAttr(distance)));
  Value next = arith::AddIOp::create(b, loc, loop.getInductionVar(), ahead);
  // The whole of iteration `next` is in range (a chunk of rows too).
  Value nextEnd = arith::AddIOp::create(b, loc, next, loop.getStep());
  Value inRange = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle,
                                        nextEnd, loop.getUpperBound());
  auto guard = scf::IfOp::create(b, loc, inRange, /*withElseRegion=*/false);
  OpBuilder then = guard.getThenBodyBuilder();
  for (const ChunkSlice &slice : slices) {
    ArrayRef<int64_t> shape =
        cast<MemRefType>(slice.input.getType()).getShape();
    SmallVector<OpFoldResult> offsets, sizes,
        strides(shape.size(), then.getIndexAttr(1));
    for (auto [d, fixed] : llvm::enumerate(slice.fixedIndices)) {
      bool whole = !fixed && static_cast<int64_t>(d) != slice.chunkDim;
      offsets.push_back(static_cast<int64_t>(d) == slice.chunkDim
                            ? OpFoldResult(next)
                        : fixed ? getAsOpFoldResult(fixed)
                                : OpFoldResult(then.getIndexAttr(0)));
      sizes.push_back(then.getIndexAttr(
          whole                                       ? shape[d]
          : static_cast<int64_t>(d) == slice.chunkDim ? slice.chunkRows
                                                      : 1));
    }
    auto view = memref::SubViewOp::create(then, loc, slice.input, offsets,
                                          sizes, strides);
    if (failed(prefetchLines(then, loc, view, locality)))
      view->erase();
  }
}

namespace {
struct LaPrefetchChunksPass
    : la::impl::LaPrefetchChunksPassBase<LaPrefetchChunksPass> {
  using Base::Base;

  void runOnOperation() override {
    if (distance < 1) {
      getOperation()->emitError()
          << "la-prefetch-chunks: 'distance' must be >= 1, got "
          << static_cast<int64_t>(distance);
      return signalPassFailure();
    }
    if (locality < 0 || locality > 3) {
      getOperation()->emitError()
          << "la-prefetch-chunks: 'locality' must be in [0, 3], got "
          << static_cast<int64_t>(locality);
      return signalPassFailure();
    }
    SmallVector<scf::ForOp> loops;
    getOperation().walk([&](scf::ForOp loop) {
      if (getLaDialect(loop).getFusedChunkLoopAttrHelper().isAttrPresent(loop))
        loops.push_back(loop);
    });
    for (scf::ForOp loop : loops)
      prefetchAhead(loop, distance, locality);
  }
};
} // namespace
