//===- Tile.cpp - tile and vectorise la's linalg ops for the CPU ----------===//
//
// Every structured op that la's lowering produces is a batch of small matrix
// products or element-wise maps over [B,NC,C,H,...] tensors. For the CPU each
// op is tiled twice: the outer parallel loops (batch, chunk, head: everything
// but the register tile) become an scf.forall that threads share, and the
// rest becomes an scf.for nest over register tiles of rows x vector lanes x
// reduction steps, which the vectoriser turns into vector.contract or
// element-wise vector ops. The accumulator tile is then hoisted out of the
// reduction loop so that it stays in registers.
//
//===----------------------------------------------------------------------===//

#include "la/Codegen/CPU/CPUTiling.h"
#include "la/Codegen/CPU/Passes.h"
#include "la/Dialect/La/LaDialect.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/Vector/Transforms/LoweringPatterns.h"
#include "mlir/Dialect/Vector/Transforms/VectorRewritePatterns.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/TilingInterface.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/LoopInvariantCodeMotionUtils.h"

namespace mlir::la {
#define GEN_PASS_DEF_LATILEPASS
#include "la/Codegen/CPU/Passes.h.inc"
} // namespace mlir::la

using namespace mlir;
using namespace mlir::la;

namespace {
/// addf(acc, mulf(a, b)) on vectors -> vector.fma(a, b, acc): the vectoriser
/// leaves a multiply and an add per reduction step, which LLVM does not
/// contract without fast-math flags.
struct ContractMulAddToFma : OpRewritePattern<arith::AddFOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(arith::AddFOp add,
                                PatternRewriter &rewriter) const override {
    if (!isa<VectorType>(add.getType()))
      return failure();
    for (unsigned i = 0; i < 2; ++i) {
      // The product may reach the add through a shape_cast that drops the
      // unit reduction dimension.
      Value product = add->getOperand(i);
      auto cast = product.getDefiningOp<vector::ShapeCastOp>();
      if (cast && cast->hasOneUse())
        product = cast.getSource();
      auto mul = product.getDefiningOp<arith::MulFOp>();
      if (!mul || !mul->hasOneUse())
        continue;
      Value lhs = mul.getLhs(), rhs = mul.getRhs();
      if (product != add->getOperand(i)) {
        lhs = vector::ShapeCastOp::create(rewriter, add.getLoc(), add.getType(),
                                          lhs);
        rhs = vector::ShapeCastOp::create(rewriter, add.getLoc(), add.getType(),
                                          rhs);
      }
      rewriter.replaceOpWithNewOp<vector::FMAOp>(add, lhs, rhs,
                                                 add->getOperand(1 - i));
      return success();
    }
    return failure();
  }
};

/// A reduction loop whose vector accumulator only takes fma(-a, b, acc)
/// (a product subtracted: the delta rule's U - W S, its backward's -a terms)
/// accumulates the negated sum instead: -acc0 in, fma(a, b, acc) per step,
/// the result negated after the loop. Exact (negation is), and it keeps the
/// negation out of the inner loop, where LLVM sinks it below the row's
/// broadcast: each broadcast from memory became a scalar load, an xor and a
/// register broadcast (measured on Gated DeltaNet's W S product).
struct HoistNegatedProductOutOfReduction : OpRewritePattern<scf::ForOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(scf::ForOp loop,
                                PatternRewriter &rewriter) const override {
    auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
    for (BlockArgument accumulator : loop.getRegionIterArgs()) {
      unsigned index = accumulator.getArgNumber() - loop.getNumInductionVars();
      if (!isa<VectorType>(accumulator.getType()) || !accumulator.hasOneUse())
        continue;
      auto fma = dyn_cast<vector::FMAOp>(*accumulator.getUsers().begin());
      if (!fma || fma.getAcc() != accumulator || !fma->hasOneUse() ||
          yield.getOperand(index) != fma.getResult())
        continue;
      for (unsigned operand = 0; operand < 2; ++operand) {
        auto negation = fma->getOperand(operand).getDefiningOp<arith::NegFOp>();
        if (!negation || !negation->hasOneUse())
          continue;
        Location loc = loop.getLoc();
        rewriter.setInsertionPoint(loop);
        Value init = loop.getInitArgs()[index];
        Value negatedInit = arith::NegFOp::create(rewriter, loc, init);
        rewriter.modifyOpInPlace(loop, [&] {
          loop.getInitArgsMutable()[index].assign(negatedInit);
        });
        rewriter.modifyOpInPlace(
            fma, [&] { fma->setOperand(operand, negation.getOperand()); });
        rewriter.eraseOp(negation);
        rewriter.setInsertionPointAfter(loop);
        Value result = loop.getResult(index);
        Value negatedResult = arith::NegFOp::create(rewriter, loc, result);
        rewriter.replaceAllUsesExcept(result, negatedResult,
                                      negatedResult.getDefiningOp());
        return success();
      }
    }
    return failure();
  }
};

/// shape_cast(broadcast(x)) where the broadcast only prepends dimensions and
/// the shape_cast only drops unit dimensions -> broadcast(shape_cast(x)).
/// Upstream's shape_cast canonicalisation (MLIR 22) folds this pair into
/// broadcast(x) whenever x broadcasts to the result type, which is wrong when
/// the prepended and the kept dimensions have equal sizes:
///   x : 8x1 -> broadcast 8x1x1x8x1 -> shape_cast 8x8  (r[l][i] = x[i])
/// would become broadcast 8x1 -> 8x8 (r[i][l] = x[i]). This pattern runs
/// first, with a higher benefit, and leaves nothing for that fold.
struct ShapeCastOfPrependingBroadcast : OpRewritePattern<vector::ShapeCastOp> {
  ShapeCastOfPrependingBroadcast(MLIRContext *ctx)
      : OpRewritePattern(ctx, /*benefit=*/10) {}

  LogicalResult matchAndRewrite(vector::ShapeCastOp cast,
                                PatternRewriter &rewriter) const override {
    auto broadcast = cast.getSource().getDefiningOp<vector::BroadcastOp>();
    if (!broadcast)
      return failure();
    auto sourceType = dyn_cast<VectorType>(broadcast.getSourceType());
    VectorType broadcastType = broadcast.getResultVectorType();
    if (!sourceType || sourceType.isScalable() || broadcastType.isScalable())
      return failure();
    ArrayRef<int64_t> sourceShape = sourceType.getShape();
    ArrayRef<int64_t> fullShape = broadcastType.getShape();
    size_t prefix = fullShape.size() - sourceShape.size();
    if (fullShape.drop_front(prefix) != sourceShape)
      return failure(); // not a pure prepend
    auto nonUnit = [](ArrayRef<int64_t> shape) {
      SmallVector<int64_t> kept;
      for (int64_t d : shape)
        if (d != 1)
          kept.push_back(d);
      return kept;
    };
    if (nonUnit(fullShape) !=
        SmallVector<int64_t>(cast.getResultVectorType().getShape()))
      return failure(); // the shape_cast does more than drop unit dims
    SmallVector<int64_t> keptSource = nonUnit(sourceShape);
    Value source = broadcast.getSource();
    if (keptSource.empty()) {
      source = vector::ExtractOp::create(
          rewriter, cast.getLoc(), source,
          SmallVector<int64_t>(sourceShape.size(), 0));
    } else if (keptSource.size() != sourceShape.size()) {
      source = vector::ShapeCastOp::create(
          rewriter, cast.getLoc(),
          VectorType::get(keptSource, sourceType.getElementType()), source);
    }
    rewriter.replaceOpWithNewOp<vector::BroadcastOp>(
        cast, cast.getResultVectorType(), source);
    return success();
  }
};

/// The loops of one op that form its register tile.
struct RegisterTileDims {
  /// The output's innermost loop: vector lanes.
  std::optional<unsigned> lanes;
  /// An output loop that some input does not read (so that a loaded vector
  /// is reused across it): the rows of the tile.
  std::optional<unsigned> rows;
};
} // namespace

/// An op on tensors with one result whose maps are projected permutations:
/// the ops la-tile tiles (on register tiles or, first, by one along their
/// dynamic parallel loops).
static bool hasTileableForm(linalg::LinalgOp op) {
  return op.hasPureTensorSemantics() && op.getNumDpsInits() == 1 &&
         llvm::all_of(op.getIndexingMapsArray(), [](AffineMap map) {
           return map.isProjectedPermutation();
         });
}

/// For each loop of `op`: whether it is parallel with a run-time range.
/// Those are tiled by one (tileDynamicParallelLoops) before the register
/// tile, which must be static; a dynamic reduction loop is stepped one
/// iteration at a time inside the register tile instead.
static SmallVector<bool> getDynamicParallelLoops(linalg::LinalgOp op) {
  SmallVector<bool> dynamicParallel;
  for (auto [range, iterator] :
       llvm::zip(op.getStaticLoopRanges(), op.getIteratorTypesArray()))
    dynamicParallel.push_back(ShapedType::isDynamic(range) &&
                              iterator == utils::IteratorType::parallel);
  return dynamicParallel;
}

bool mlir::la::isTileableForCPU(linalg::LinalgOp op) {
  return hasTileableForm(op) &&
         !llvm::is_contained(getDynamicParallelLoops(op), true);
}

static RegisterTileDims findRegisterTileDims(linalg::LinalgOp op) {
  RegisterTileDims dims;
  OpOperand *init = op.getDpsInitOperand(0);
  AffineMap outMap = op.getMatchingIndexingMap(init);
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (outMap.getNumResults() == 0)
    return dims;
  dims.lanes = outMap.getDimPosition(outMap.getNumResults() - 1);
  auto readByAllInputs = [&](unsigned dim) {
    return llvm::all_of(op.getDpsInputOperands(), [&](OpOperand *input) {
      AffineMap map = op.getMatchingIndexingMap(input);
      return map.getNumResults() == 0 || map.isFunctionOfDim(dim);
    });
  };
  // Innermost first: the row loop that gives reuse, else any wide one.
  std::optional<unsigned> fallback;
  for (int64_t r = static_cast<int64_t>(outMap.getNumResults()) - 2; r >= 0;
       --r) {
    unsigned dim = outMap.getDimPosition(r);
    if (ranges[dim] <= 1)
      continue;
    if (!readByAllInputs(dim)) {
      dims.rows = dim;
      return dims;
    }
    if (!fallback)
      fallback = dim;
  }
  dims.rows = fallback;
  return dims;
}

static SmallVector<OpFoldResult> indexAttrs(OpBuilder &b,
                                            ArrayRef<int64_t> values) {
  return llvm::map_to_vector(
      values, [&](int64_t v) -> OpFoldResult { return b.getIndexAttr(v); });
}

/// Peels the last, partial iteration off each loop so that the main loop
/// body sees full tiles of static shape.
static void peelPartialTiles(RewriterBase &rewriter,
                             ArrayRef<LoopLikeOpInterface> loops) {
  for (LoopLikeOpInterface loop : loops) {
    auto forOp = dyn_cast<scf::ForOp>(loop.getOperation());
    if (!forOp)
      continue;
    std::optional<int64_t> lb = getConstantIntValue(forOp.getLowerBound());
    std::optional<int64_t> ub = getConstantIntValue(forOp.getUpperBound());
    std::optional<int64_t> step = getConstantIntValue(forOp.getStep());
    if (!lb || !ub || !step || (*ub - *lb) % *step == 0)
      continue;
    scf::ForOp partial;
    (void)scf::peelForLoopAndSimplifyBounds(rewriter, forOp, partial);
  }
}

/// Makes `loop` stop at min(`end`, its upper bound); `end` is built before
/// the loop.
static void capUpperBound(RewriterBase &rewriter, scf::ForOp loop, Value end) {
  Value bound = arith::MinSIOp::create(rewriter, loop.getLoc(), end,
                                       loop.getUpperBound());
  rewriter.modifyOpInPlace(loop,
                           [&] { loop.getUpperBoundMutable().assign(bound); });
}

/// The register-tile loops of a `[row, column]` triangle mark (the column
/// loop nested in the row loop, its range whole tiles, so that every tile
/// keeps its static size), or none.
static std::optional<std::pair<scf::ForOp, scf::ForOp>>
triangleLoops(DenseI64ArrayAttr dims, ArrayRef<int64_t> ranges,
              ArrayRef<int64_t> innerSizes,
              ArrayRef<LoopLikeOpInterface> innerLoops) {
  if (!dims || dims.size() != 2)
    return std::nullopt;
  int64_t row = dims[0], column = dims[1];
  int64_t numLoops = innerSizes.size();
  if (row < 0 || column < 0 || row >= numLoops || column >= numLoops ||
      row >= column || innerSizes[row] <= 0 || innerSizes[column] <= 0 ||
      ranges[column] % innerSizes[column] != 0)
    return std::nullopt;
  // The inner loops are the tiled dims in order.
  auto loopOf = [&](int64_t dim) {
    return innerLoops[llvm::count_if(innerSizes.take_front(dim),
                                     [](int64_t s) { return s > 0; })];
  };
  auto rowLoop = dyn_cast<scf::ForOp>(loopOf(row).getOperation());
  auto columnLoop = dyn_cast<scf::ForOp>(loopOf(column).getOperation());
  if (!rowLoop || !columnLoop || !rowLoop->isProperAncestor(columnLoop))
    return std::nullopt;
  return std::make_pair(rowLoop, columnLoop);
}

/// For an op marked `la.lower_triangular = [row, column]` (`lower`: nothing
/// with column > row matters) whose register tile has both loops, the
/// column loop of the tile at rows [r, r + R) stops at r + R instead of its
/// end: about half the terms of a causal C x C product are skipped (a
/// quarter of the entries of a C x C score matrix with 32-lane column
/// tiles). A column tile that starts before r + R is computed whole, past
/// r + R too, which is harmless by the mark. For `la.upper_triangular`
/// (nothing with column < row matters) the column loop starts at the column
/// tile holding column r instead of at 0.
static void cutAtDiagonal(RewriterBase &rewriter, DenseI64ArrayAttr dims,
                          bool lower, ArrayRef<int64_t> ranges,
                          ArrayRef<int64_t> innerSizes,
                          ArrayRef<LoopLikeOpInterface> innerLoops) {
  auto loops = triangleLoops(dims, ranges, innerSizes, innerLoops);
  if (!loops)
    return;
  scf::ForOp rowLoop = loops->first, columnLoop = loops->second;
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPoint(columnLoop);
  Location loc = columnLoop.getLoc();
  Value row = rowLoop.getInductionVar();
  if (lower) {
    Value rows =
        arith::ConstantIndexOp::create(rewriter, loc, innerSizes[dims[0]]);
    capUpperBound(rewriter, columnLoop,
                  arith::AddIOp::create(rewriter, loc, row, rows));
    return;
  }
  Value tile =
      arith::ConstantIndexOp::create(rewriter, loc, innerSizes[dims[1]]);
  Value tiles = arith::DivUIOp::create(rewriter, loc, row, tile);
  Value start = arith::MulIOp::create(rewriter, loc, tiles, tile);
  Value bound =
      arith::MaxSIOp::create(rewriter, loc, start, columnLoop.getLowerBound());
  rewriter.modifyOpInPlace(
      columnLoop, [&] { columnLoop.getLowerBoundMutable().assign(bound); });
}

/// For an op marked `la.block_causal = [block, column, size]` (entries with
/// column >= block * size are never read), the column loop of the register
/// tile stops at block * size, the block index coming from the outer loops.
static void stopAtBlock(RewriterBase &rewriter, DenseI64ArrayAttr dims,
                        ArrayRef<int64_t> outerSizes,
                        ArrayRef<LoopLikeOpInterface> outerLoops,
                        ArrayRef<int64_t> innerSizes,
                        ArrayRef<LoopLikeOpInterface> innerLoops) {
  if (!dims || dims.size() != 3)
    return;
  int64_t block = dims[0], column = dims[1], size = dims[2];
  int64_t numLoops = innerSizes.size();
  if (block < 0 || column < 0 || block >= numLoops || column >= numLoops ||
      size < 1 || outerSizes[block] != 1 ||
      (innerSizes[column] <= 0 && outerSizes[column] != 1))
    return;
  auto position = [](ArrayRef<int64_t> sizes, int64_t dim) {
    return llvm::count_if(sizes.take_front(dim),
                          [](int64_t s) { return s > 0; });
  };
  SmallVector<Operation *> outerOps, innerOps;
  for (LoopLikeOpInterface loop : outerLoops)
    outerOps.push_back(loop.getOperation());
  for (LoopLikeOpInterface loop : innerLoops)
    innerOps.push_back(loop.getOperation());
  Value blockIndex;
  Operation *blockLoop = nullptr;
  int64_t outer = position(outerSizes, block);
  if (outerOps.size() == 1 && isa<scf::ForallOp>(outerOps[0])) {
    blockLoop = outerOps[0];
    blockIndex = cast<scf::ForallOp>(blockLoop).getInductionVar(outer);
  } else if (outer < static_cast<int64_t>(outerOps.size())) {
    if (auto loop = dyn_cast<scf::ForOp>(outerOps[outer])) {
      blockLoop = loop;
      blockIndex = loop.getInductionVar();
    }
  }
  // The column loop is a register-tile loop, or an outer one nested in the
  // block's loop.
  Operation *columnOp = nullptr;
  if (innerSizes[column] > 0)
    columnOp = innerOps[position(innerSizes, column)];
  else if (!(outerOps.size() == 1 && isa<scf::ForallOp>(outerOps[0])))
    columnOp = outerOps[position(outerSizes, column)];
  auto columnLoop = dyn_cast_or_null<scf::ForOp>(columnOp);
  if (!blockIndex || !columnLoop || !blockLoop->isProperAncestor(columnLoop))
    return;
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPoint(columnLoop);
  capUpperBound(
      rewriter, columnLoop,
      arith::MulIOp::create(
          rewriter, columnLoop.getLoc(), blockIndex,
          arith::ConstantIndexOp::create(rewriter, columnLoop.getLoc(), size)));
}

FailureOr<CPUTilingResult>
mlir::la::tileForCPU(RewriterBase &rewriter, linalg::LinalgOp op,
                     const CPUTilingOptions &options) {
  if (!isTileableForCPU(op))
    return rewriter.notifyMatchFailure(
        op, "needs tensors, one init, static loop ranges and "
            "projected-permutation maps");
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
  RegisterTileDims dims = findRegisterTileDims(op);
  // Read now: tiling replaces `op`.
  auto *laDialect = op->getContext()->getLoadedDialect<LaDialect>();
  DenseI64ArrayAttr lowerTriangular, upperTriangular, blockCausal;
  if (laDialect) {
    lowerTriangular = laDialect->getLowerTriangularAttrHelper().getAttr(op);
    upperTriangular = laDialect->getUpperTriangularAttrHelper().getAttr(op);
    blockCausal = laDialect->getBlockCausalAttrHelper().getAttr(op);
  }
  unsigned numLoops = ranges.size();

  // Level 1: the loops outside the register tile, one iteration per thread
  // task.
  SmallVector<int64_t> outerSizes(numLoops, 0), innerSizes(numLoops, 0);
  bool anyOuter = false;
  // Rows pay off where loaded vectors are reused (products) or where an
  // input is read across the lanes (a transpose: rows x lanes blocks are
  // loaded row-wise and transposed in registers). Any other element-wise op
  // gets one row per tile, which keeps its code (an exp polynomial, say)
  // one row long.
  bool hasReduction =
      llvm::is_contained(iterators, utils::IteratorType::reduction);
  bool readsAcrossLanes =
      dims.lanes && llvm::any_of(op.getDpsInputOperands(), [&](OpOperand *in) {
        AffineMap map = op.getMatchingIndexingMap(in);
        return map.getNumResults() > 0 && map.isFunctionOfDim(*dims.lanes) &&
               map.getDimPosition(map.getNumResults() - 1) != *dims.lanes;
      });
  int64_t rowTile = hasReduction || readsAcrossLanes ? options.rowTile : 1;
  // A product without rows (a matrix-vector product: decoding's chunks of
  // one token read the state this way) gets the rows' share of the register
  // budget as lanes, in whole lane tiles: each reduction step then reads a
  // long contiguous run of a row of the matrix instead of lane-tile-wide
  // pieces at a row stride, and the accumulators still fill the registers.
  // (An input read across the lanes is loaded as a transpose, whose cost
  // grows with the tile: those keep the lane tile.)
  int64_t laneTile = options.laneTile;
  if (hasReduction && !readsAcrossLanes && !dims.rows && dims.lanes &&
      ranges[*dims.lanes] > options.laneTile)
    laneTile =
        std::min(options.rowTile * options.laneTile,
                 ranges[*dims.lanes] / options.laneTile * options.laneTile);
  for (unsigned d = 0; d < numLoops; ++d) {
    // A row tile of one is an outer loop like the others: in its own place
    // in the nest, where la.block_causal can bound the loops inside it.
    if (d == dims.lanes || (d == dims.rows && rowTile > 1)) {
      innerSizes[d] = std::min(d == dims.lanes ? laneTile : rowTile, ranges[d]);
      continue;
    }
    if (iterators[d] == utils::IteratorType::reduction) {
      innerSizes[d] = ShapedType::isDynamic(ranges[d])
                          ? 1
                          : std::min(options.reductionTile, ranges[d]);
      continue;
    }
    if (ranges[d] > 1) {
      outerSizes[d] = 1;
      anyOuter = true;
    }
  }

  CPUTilingResult result;
  Operation *current = op;
  OpBuilder::InsertionGuard guard(rewriter);
  // Tiles `current` by `sizes`, making `current` the op on one tile.
  auto tileStep = [&](ArrayRef<int64_t> sizes,
                      scf::SCFTilingOptions::LoopType loopType,
                      SmallVectorImpl<LoopLikeOpInterface> &loops) {
    scf::SCFTilingOptions tiling;
    tiling.setTileSizes(indexAttrs(rewriter, sizes));
    tiling.setLoopType(loopType);
    rewriter.setInsertionPoint(current);
    FailureOr<scf::SCFTilingResult> tiled =
        scf::tileUsingSCF(rewriter, cast<TilingInterface>(current), tiling);
    if (failed(tiled))
      return failure();
    rewriter.replaceOp(current, tiled->replacements);
    current = tiled->tiledOps.back();
    loops.append(tiled->loops.begin(), tiled->loops.end());
    return success();
  };
  // Inside a task of an enclosing scf.forall (la-fuse-recurrence's tasks)
  // the outer loops stay sequential: as nested OpenMP regions they would run
  // on one thread anyway, each entry paying for a region. So do the loops of
  // a small op inside a loop (a row of a loop over tokens: the backward's
  // reverse cumulative sums and time flips would enter a region per token).
  int64_t work = 1;
  for (int64_t range : ranges)
    work = ShapedType::isDynamic(range)
               ? kMinDistributedWork
               : std::min(work * range, kMinDistributedWork);
  bool smallInLoop =
      work < kMinDistributedWork && op->getParentOfType<scf::ForOp>();
  bool distribute = options.distribute &&
                    !op->getParentOfType<scf::ForallOp>() && !smallInLoop;
  if (anyOuter &&
      failed(tileStep(outerSizes,
                      distribute ? scf::SCFTilingOptions::LoopType::ForallOp
                                 : scf::SCFTilingOptions::LoopType::ForOp,
                      result.outerLoops)))
    return failure();
  if (llvm::any_of(innerSizes, [](int64_t s) { return s > 0; })) {
    if (failed(tileStep(innerSizes, scf::SCFTilingOptions::LoopType::ForOp,
                        result.innerLoops)))
      return failure();
    cutAtDiagonal(rewriter, lowerTriangular, /*lower=*/true, ranges, innerSizes,
                  result.innerLoops);
    cutAtDiagonal(rewriter, upperTriangular, /*lower=*/false, ranges,
                  innerSizes, result.innerLoops);
    stopAtBlock(rewriter, blockCausal, outerSizes, result.outerLoops,
                innerSizes, result.innerLoops);
    peelPartialTiles(rewriter, result.innerLoops);
  }
  result.tiledOp = current;
  return result;
}

/// Gives every vector.transfer_write into a tensor the tensor's rank
/// (leading unit dimensions, an identity map). One-shot bufferization's model
/// of vector.transfer_write (MLIR 22) decides whether a write overwrites its
/// whole destination by pairing the destination's dimensions with the
/// vector's from the front: vector<8x32xf32> written at offset 0 into
/// tensor<1x1x8x34xf32> counts as covering it, so an out-of-place write got
/// a fresh buffer without the destination's other columns. At full rank the
/// dimensions pair up as they should. (Writes with a mask or another map
/// are left alone; la-tile makes minor-identity ones.)
static void writeTensorsAtFullRank(RewriterBase &rewriter, Operation *root) {
  SmallVector<vector::TransferWriteOp> writes;
  root->walk([&](vector::TransferWriteOp write) {
    auto tensorType = dyn_cast<RankedTensorType>(write.getShapedType());
    if (tensorType && !write.getMask() &&
        write.getVectorType().getRank() < tensorType.getRank() &&
        write.getPermutationMap().isMinorIdentity() &&
        !write.getVectorType().isScalable())
      writes.push_back(write);
  });
  for (vector::TransferWriteOp write : writes) {
    VectorType vectorType = write.getVectorType();
    int64_t missing = write.getShapedType().getRank() - vectorType.getRank();
    SmallVector<int64_t> shape(missing, 1);
    llvm::append_range(shape, vectorType.getShape());
    // The leading dimensions are indexed at their offsets, in bounds as the
    // original write is.
    SmallVector<bool> inBounds(missing, true);
    llvm::append_range(inBounds, write.getInBoundsValues());
    rewriter.setInsertionPoint(write);
    Value full = vector::ShapeCastOp::create(
        rewriter, write.getLoc(),
        VectorType::get(shape, vectorType.getElementType()), write.getVector());
    auto replacement = vector::TransferWriteOp::create(
        rewriter, write.getLoc(), full, write.getBase(), write.getIndices(),
        ArrayRef<bool>(inBounds));
    rewriter.replaceOp(write, replacement->getResults());
  }
}

LogicalResult mlir::la::vectorizeForCPU(RewriterBase &rewriter,
                                        Operation *root) {
  // Canonicalise first: a peeled tile's sizes are constants only once the
  // affine.min ops are folded into the slice types.
  MLIRContext *ctx = root->getContext();
  RewritePatternSet canonicalization(ctx);
  for (Dialect *dialect : ctx->getLoadedDialects())
    dialect->getCanonicalizationPatterns(canonicalization);
  for (RegisteredOperationName name : ctx->getRegisteredOperations())
    name.getCanonicalizationPatterns(canonicalization, ctx);
  if (failed(applyPatternsGreedily(root, std::move(canonicalization))))
    return failure();

  // Collect first: vectorising replaces ops.
  SmallVector<linalg::LinalgOp> candidates;
  root->walk([&](linalg::LinalgOp op) {
    if (!op.hasPureTensorSemantics())
      return;
    if (llvm::any_of(op.getStaticLoopRanges(), ShapedType::isDynamic))
      return;
    // Only register tiles: a large untiled op would become a huge vector.
    int64_t elements = 1;
    for (int64_t range : op.getStaticLoopRanges())
      elements *= range;
    if (elements > kMaxVectorElements)
      return;
    candidates.push_back(op);
  });
  for (linalg::LinalgOp op : candidates) {
    rewriter.setInsertionPoint(op);
    FailureOr<linalg::VectorizationResult> vectorized = linalg::vectorize(
        rewriter, op, /*inputVectorSizes=*/{}, /*inputScalableVecDims=*/{},
        /*vectorizeNDExtract=*/false, /*flatten1DDepthwiseConv=*/false,
        /*assumeDynamicDimsMatchVecSizes=*/false,
        /*createNamedContraction=*/true);
    if (failed(vectorized))
      continue; // stays a linalg op: lowered to scalar loops later
    rewriter.replaceOp(op, vectorized->replacements);
  }

  // Fold the tensor slices into the transfers and keep accumulators in
  // registers across reduction loops.
  RewritePatternSet foldPatterns(ctx);
  tensor::populateFoldTensorSubsetIntoVectorTransferPatterns(foldPatterns);
  vector::TransferReadOp::getCanonicalizationPatterns(foldPatterns, ctx);
  vector::TransferWriteOp::getCanonicalizationPatterns(foldPatterns, ctx);
  if (failed(applyPatternsGreedily(root, std::move(foldPatterns))))
    return failure();
  SmallVector<scf::ForOp> loops;
  root->walk([&](scf::ForOp loop) { loops.push_back(loop); });
  // Innermost loops were collected first (post-order).
  for (scf::ForOp loop : loops)
    hoistLoopInvariantSubsets(rewriter, loop);

  // Then the register-level form: strided or broadcast reads become
  // minor-identity reads plus vector.transpose / vector.broadcast (a row of
  // loads, not a gather), unit dimensions are dropped so that 1-D vectors
  // remain, multiply-adds become FMAs and exp becomes a polynomial (LLVM
  // would call libm once per lane).
  RewritePatternSet vectorPatterns(ctx);
  vector::populateVectorTransferPermutationMapLoweringPatterns(vectorPatterns);
  vector::populateCastAwayVectorLeadingOneDimPatterns(vectorPatterns);
  vector::populateDropUnitDimWithShapeCastPatterns(vectorPatterns);
  vector::MultiDimReductionOp::getCanonicalizationPatterns(vectorPatterns, ctx);
  vector::ShapeCastOp::getCanonicalizationPatterns(vectorPatterns, ctx);
  vector::BroadcastOp::getCanonicalizationPatterns(vectorPatterns, ctx);
  vector::TransposeOp::getCanonicalizationPatterns(vectorPatterns, ctx);
  vectorPatterns.add<ContractMulAddToFma, ShapeCastOfPrependingBroadcast,
                     HoistNegatedProductOutOfReduction>(ctx);
  populateMathPolynomialApproximationPatterns(
      vectorPatterns,
      [](StringRef name) { return name == "exp" || name == "math.exp"; });
  if (failed(applyPatternsGreedily(root, std::move(vectorPatterns))))
    return failure();
  writeTensorsAtFullRank(rewriter, root);
  return success();
}

/// The dim that `op` reverses when it is a copy along one reversed dim (the
/// time flips of `reverse` recurrences: input map the identity but for
/// `n - 1 - d`, body a yield of the input), with static loop ranges.
static std::optional<unsigned> getReversedDim(linalg::GenericOp op) {
  if (!op.hasPureTensorSemantics() || op.getNumDpsInputs() != 1 ||
      op.getNumDpsInits() != 1 || op.getNumParallelLoops() != op.getNumLoops())
    return std::nullopt;
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (llvm::any_of(ranges, ShapedType::isDynamic))
    return std::nullopt;
  Block &body = op.getRegion().front();
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  if (body.getOperations().size() != 1 ||
      yield.getValues().front() != body.getArgument(0))
    return std::nullopt;
  AffineMap output = op.getIndexingMapsArray()[1];
  AffineMap input = op.getIndexingMapsArray()[0];
  if (!output.isIdentity() || input.getNumResults() != ranges.size())
    return std::nullopt;
  std::optional<unsigned> reversed;
  MLIRContext *ctx = op.getContext();
  for (auto [dim, expr] : llvm::enumerate(input.getResults())) {
    if (expr == getAffineDimExpr(dim, ctx))
      continue;
    if (reversed || expr != getAffineConstantExpr(ranges[dim] - 1, ctx) -
                                getAffineDimExpr(dim, ctx))
      return std::nullopt;
    reversed = dim;
  }
  return reversed;
}

/// Rewrites each reversing copy into an scf.for over the reversed dim whose
/// body copies one slice with identity maps: the map `n - 1 - d` is not a
/// projected permutation, so the copy would neither be tiled nor vectorised
/// (a scalar loop per element), while each slice's copy is.
static void splitReversedCopies(RewriterBase &rewriter, Operation *root) {
  SmallVector<std::pair<linalg::GenericOp, unsigned>> copies;
  root->walk([&](linalg::GenericOp op) {
    if (std::optional<unsigned> dim = getReversedDim(op))
      copies.emplace_back(op, *dim);
  });
  for (auto [op, reversedDim] : copies) {
    // (A lambda may not capture a structured binding in C++17.)
    unsigned dim = reversedDim;
    rewriter.setInsertionPoint(op);
    Location loc = op.getLoc();
    int64_t count = op.getStaticLoopRanges()[dim];
    unsigned rank = op.getNumLoops();
    AffineMap id = rewriter.getMultiDimIdentityMap(rank);
    Value source = op.getDpsInputs().front();
    Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
    Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
    Value end = arith::ConstantIndexOp::create(rewriter, loc, count);
    auto loop = scf::ForOp::create(
        rewriter, loc, zero, end, one, ValueRange{op.getDpsInits().front()},
        [&](OpBuilder &b, Location l, Value index, ValueRange args) {
          Value last = arith::ConstantIndexOp::create(b, l, count - 1);
          Value from = arith::SubIOp::create(b, l, last, index);
          Value row = sliceDim(b, l, source, dim, from, b.getIndexAttr(1));
          Value slot = sliceDim(b, l, args[0], dim, index, b.getIndexAttr(1));
          Value copied = buildGeneric(
              b, l, ValueRange{row}, slot, {id, id}, rank, 0,
              [](OpBuilder &, Location, ValueRange a) { return a[0]; });
          Value written = insertAt(b, l, copied, args[0], dim, index);
          scf::YieldOp::create(b, l, written);
        });
    rewriter.replaceOp(op, loop.getResults());
  }
}

/// Tiles the dynamic parallel loops of each structured op by 1 (the Python
/// package's kernels have a run-time B and T: the backward's element-wise
/// maps between its recurrences, over [B,T,H,K]; sums over a run-time
/// number of tokens), so that the op on each tile has static parallel
/// ranges and is tiled and vectorised like the others (tileForCPU steps a
/// dynamic reduction loop one iteration at a time); the loops over the
/// dynamic dims are the threads' (an scf.forall) outside any task or loop.
/// Otherwise such an op stays whole and is lowered to scalar loops on one
/// thread.
static void tileDynamicParallelLoops(RewriterBase &rewriter, Operation *root,
                                     bool distribute) {
  SmallVector<linalg::LinalgOp> ops;
  root->walk([&](linalg::LinalgOp op) {
    if (hasTileableForm(op) && isa<TilingInterface>(op.getOperation()) &&
        llvm::is_contained(getDynamicParallelLoops(op), true))
      ops.push_back(op);
  });
  for (linalg::LinalgOp op : ops) {
    SmallVector<OpFoldResult> sizes;
    for (bool dynamicParallel : getDynamicParallelLoops(op))
      sizes.push_back(rewriter.getIndexAttr(dynamicParallel ? 1 : 0));
    bool threads = distribute && !op->getParentOfType<scf::ForallOp>() &&
                   !op->getParentOfType<scf::ForOp>();
    scf::SCFTilingOptions tiling;
    tiling.setTileSizes(sizes);
    tiling.setLoopType(threads ? scf::SCFTilingOptions::LoopType::ForallOp
                               : scf::SCFTilingOptions::LoopType::ForOp);
    rewriter.setInsertionPoint(op);
    FailureOr<scf::SCFTilingResult> tiled = scf::tileUsingSCF(
        rewriter, cast<TilingInterface>(op.getOperation()), tiling);
    if (succeeded(tiled))
      rewriter.replaceOp(op, tiled->replacements);
  }
}

namespace {
struct LaTilePass : public la::impl::LaTilePassBase<LaTilePass> {
  using LaTilePassBase::LaTilePassBase;

  void runOnOperation() override {
    CPUTilingOptions options;
    options.rowTile = rowTile;
    options.laneTile = laneTile;
    options.reductionTile = reductionTile;
    options.distribute = distribute;
    if (options.rowTile < 1 || options.laneTile < 1 ||
        options.reductionTile < 1) {
      getOperation()->emitError("la-tile: tile sizes must be >= 1");
      return signalPassFailure();
    }
    IRRewriter rewriter(&getContext());
    splitReversedCopies(rewriter, getOperation());
    tileDynamicParallelLoops(rewriter, getOperation(), distribute);
    SmallVector<linalg::LinalgOp> ops;
    getOperation()->walk([&](linalg::LinalgOp op) { ops.push_back(op); });
    // tileForCPU leaves ops of another form as they are (they are lowered
    // to scalar loops later).
    for (linalg::LinalgOp op : ops)
      (void)tileForCPU(rewriter, op, options);
    if (vectorize && failed(vectorizeForCPU(rewriter, getOperation())))
      return signalPassFailure();
  }
};
} // namespace
