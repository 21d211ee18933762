//===- DistributeChunks.cpp - la-chunk's program as chunk-parallel tasks --===//
//
// The chunk-parallel GPU schedule. la-chunk's program runs each level-2 op
// over whole tensors: the cumulative gates, the WY factors, the state scan
// that materialises the state entering every chunk ([B,NC,HV,K,V]) and the
// intra-chunk and output products. Here each of those ops becomes an
// scf.forall of tasks, which la-tile-for-gpu maps onto thread blocks:
//   - la.chunk_cumsum, la.chunk_wy, la.chunk_intra and la.chunk_inter over
//     (batch, chunk, key head): every chunk of every head in parallel;
//   - la.chunk_state_scan over (batch, key head, value tile): the chunks of
//     a sequence in order inside the task, which does only the state update
//     (and, for the delta rule, the corrected values).
// Each task runs the same op on its slices ([1,1,C,1,...] per chunk; the
// whole sequence of one head and value tile for the scan), so the op's
// lowering (convert-la-to-linalg) is the one the fused schedule uses. A key
// head's task takes all of its HV / H value heads. An intra-chunk product
// read only by the output joins the output's tasks (one kernel).
//
//===----------------------------------------------------------------------===//

#include "la/Codegen/GPU/Passes.h"
#include "la/Dialect/La/LaOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::la {
#define GEN_PASS_DEF_LADISTRIBUTECHUNKSPASS
#include "la/Codegen/GPU/Passes.h.inc"
} // namespace mlir::la

using namespace mlir;
using namespace mlir::la;

namespace {
/// Where a chunk op's operand or result keeps its heads: time tensors
/// [B,NC,C,heads,...], the per-chunk states [B,NC,HV,K,V] and a state
/// [B,HV,K,V].
enum class Layout { Time, States, State };

/// An operand or result of a chunk op, with its layout and whether a value
/// tile of the scan slices its last dimension.
struct Part {
  Value value;
  Layout layout;
  bool valueColumns = false;
};

/// The task's position: batch, chunk (per-chunk ops only), key head and
/// value tile (the scan only).
struct TaskIndex {
  Value batch, chunk, head, valueTile;
};

class TaskSlicer {
public:
  TaskSlicer(bool scan, int64_t keyHeads, int64_t valueTile)
      : scan(scan), keyHeads(keyHeads), valueTile(valueTile) {}

  /// The tile of `part` that the task at `index` reads or writes. The
  /// offsets derived from the task's indices are built once per task body
  /// (the first call's insertion point must dominate the later ones).
  void tile(OpBuilder &b, Location loc, const Part &part,
            const TaskIndex &index, SmallVectorImpl<OpFoldResult> &offsets,
            SmallVectorImpl<int64_t> &sizes) {
    auto type = cast<RankedTensorType>(part.value.getType());
    unsigned rank = type.getRank();
    unsigned headDim =
        part.layout == Layout::Time ? 3 : part.layout == Layout::States ? 2 : 1;
    offsets.assign(rank, b.getIndexAttr(0));
    sizes.assign(type.getShape().begin(), type.getShape().end());
    offsets[0] = index.batch;
    sizes[0] = 1;
    if (!scan && part.layout != Layout::State) {
      offsets[1] = index.chunk;
      sizes[1] = 1;
    }
    // A key head's task takes its group of value heads.
    int64_t group = type.getDimSize(headDim) / keyHeads;
    offsets[headDim] = scaled(b, loc, index.head, group, headOffsets[group]);
    sizes[headDim] = group;
    if (scan && part.valueColumns && valueTile > 0) {
      offsets[rank - 1] =
          scaled(b, loc, index.valueTile, valueTile, columnOffset);
      sizes[rank - 1] = valueTile;
    }
  }

private:
  /// `x * factor`, built once into `cached`.
  static OpFoldResult scaled(OpBuilder &b, Location loc, Value x,
                             int64_t factor, Value &cached) {
    if (factor == 1)
      return x;
    if (!cached)
      cached = arith::MulIOp::create(
          b, loc, x, arith::ConstantIndexOp::create(b, loc, factor));
    return cached;
  }

  bool scan;
  int64_t keyHeads;
  int64_t valueTile;
  llvm::DenseMap<int64_t, Value> headOffsets;
  Value columnOffset;
};
} // namespace

/// The operands and results of a chunk op with their layouts, in the op's
/// order; the number of key heads is set from the op's keys (or its gates).
static void describe(Operation *op, SmallVectorImpl<Part> &operands,
                     SmallVectorImpl<Part> &results, int64_t &keyHeads) {
  auto time = [](Value v, bool valueColumns = false) {
    return Part{v, Layout::Time, valueColumns};
  };
  auto heads = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getDimSize(3);
  };
  auto add = [&](Part part) {
    if (part.value)
      operands.push_back(part);
  };
  if (auto cumsum = dyn_cast<ChunkCumsumOp>(op)) {
    keyHeads = heads(cumsum.getG());
    add(time(cumsum.getG()));
    results.push_back(time(cumsum.getResult()));
  } else if (auto wy = dyn_cast<ChunkWYOp>(op)) {
    keyHeads = heads(wy.getK());
    for (Value v : {wy.getK(), wy.getV(), wy.getBeta(), wy.getA(), wy.getB(),
                    wy.getGates(), wy.getPrevGates()})
      add(time(v));
    results.push_back(time(wy.getW()));
    results.push_back(time(wy.getU()));
  } else if (auto intra = dyn_cast<ChunkIntraOp>(op)) {
    keyHeads = heads(intra.getK());
    for (Value v :
         {intra.getQ(), intra.getK(), intra.getV(), intra.getGates(),
          intra.getValueGates(), intra.getExtraKeys(), intra.getExtraValues()})
      add(time(v));
    results.push_back(time(intra.getResult()));
  } else if (auto inter = dyn_cast<ChunkInterOp>(op)) {
    keyHeads = heads(inter.getQ());
    add(time(inter.getQ()));
    add(Part{inter.getStates(), Layout::States});
    add(time(inter.getIntra()));
    add(time(inter.getGates()));
    add(time(inter.getValueGates()));
    results.push_back(time(inter.getResult()));
  } else if (auto scanOp = dyn_cast<ChunkStateScanOp>(op)) {
    keyHeads = heads(scanOp.getK());
    // Value-side operands take the task's value columns.
    add(time(scanOp.getK()));
    add(time(scanOp.getV(), /*valueColumns=*/true));
    add(time(scanOp.getGates()));
    add(time(scanOp.getValueGates(), /*valueColumns=*/true));
    add(Part{scanOp.getInitialState(), Layout::State, true});
    add(time(scanOp.getCorrection()));
    add(time(scanOp.getExtraKeys()));
    add(time(scanOp.getExtraValues(), /*valueColumns=*/true));
    results.push_back(Part{scanOp.getStates(), Layout::States, true});
    results.push_back(Part{scanOp.getFinalState(), Layout::State, true});
    if (Value corrected = scanOp.getCorrected())
      results.push_back(time(corrected, /*valueColumns=*/true));
  }
}

/// Replaces the chunk ops `group` (in program order; one scan, or per-chunk
/// ops of one task space whose later ops may read the earlier ones'
/// results) by one scf.forall of tasks that each run them on their slices.
/// A result read only inside the group stays in the task.
static LogicalResult distribute(RewriterBase &rewriter,
                                ArrayRef<Operation *> group,
                                int64_t valueTile) {
  struct Described {
    SmallVector<Part> operands, results;
  };
  SmallVector<Described> ops(group.size());
  int64_t keyHeads = 0;
  for (auto [op, described] : llvm::zip(group, ops)) {
    int64_t heads = 0;
    describe(op, described.operands, described.results, heads);
    if (!keyHeads)
      keyHeads = heads;
    for (Value v : op->getOperands())
      if (!cast<RankedTensorType>(v.getType()).hasStaticShape())
        return op->emitOpError("needs static shapes for the chunk-parallel "
                               "GPU schedule");
    if (auto inter = dyn_cast<ChunkInterOp>(op);
        inter && inter.getStates().getType().getDimSize(2) !=
                     inter.getIntra().getType().getDimSize(3))
      return op->emitOpError(
          "reads each state for several output heads (grouped query "
          "heads), which the chunk-parallel GPU schedule does not "
          "distribute yet; use the fused schedule");
  }
  auto inGroup = [&](Operation *op) { return llvm::is_contained(group, op); };
  bool scan = isa<ChunkStateScanOp>(group.front());
  auto valueType = cast<RankedTensorType>(
      ops.front().operands[scan ? 1 : 0].value.getType());
  int64_t batch = valueType.getDimSize(0);
  int64_t chunks = valueType.getDimSize(1);
  int64_t columns = scan ? valueType.getDimSize(4) : 0;
  if (scan &&
      (valueTile <= 0 || valueTile >= columns || columns % valueTile != 0))
    valueTile = 0; // one task per key head: all of V
  SmallVector<OpFoldResult> upperBounds = {rewriter.getIndexAttr(batch)};
  if (!scan)
    upperBounds.push_back(rewriter.getIndexAttr(chunks));
  upperBounds.push_back(rewriter.getIndexAttr(keyHeads));
  if (scan && valueTile > 0)
    upperBounds.push_back(rewriter.getIndexAttr(columns / valueTile));
  SmallVector<Attribute> mapping;
  for (int64_t dim = 0, e = upperBounds.size(); dim < e; ++dim)
    mapping.push_back(TaskMappingAttr::get(rewriter.getContext(), dim));

  // The results that leave the group, each the output of the forall.
  SmallVector<Part> outputs;
  for (const Described &described : ops)
    for (const Part &part : described.results)
      if (llvm::any_of(part.value.getUsers(),
                       [&](Operation *user) { return !inGroup(user); }))
        outputs.push_back(part);

  Operation *last = group.back();
  Location loc = last->getLoc();
  rewriter.setInsertionPoint(last);
  // Each output gets a buffer of its own (not a tensor.empty, which CSE
  // would merge with another of its type into one buffer).
  SmallVector<Value> inits;
  for (const Part &output : outputs)
    inits.push_back(bufferization::AllocTensorOp::create(
        rewriter, loc, cast<RankedTensorType>(output.value.getType()),
        ValueRange{}));
  TaskSlicer slicer(scan, keyHeads, valueTile);
  auto forall = scf::ForallOp::create(
      rewriter, loc, upperBounds, inits, rewriter.getArrayAttr(mapping),
      [&](OpBuilder &b, Location l, ValueRange args) {
        ValueRange ivs = args.take_front(upperBounds.size());
        ValueRange shared = args.drop_front(upperBounds.size());
        TaskIndex index;
        unsigned next = 0;
        index.batch = ivs[next++];
        if (!scan)
          index.chunk = ivs[next++];
        index.head = ivs[next++];
        if (scan && valueTile > 0)
          index.valueTile = ivs[next++];
        SmallVector<OpFoldResult> offsets;
        SmallVector<int64_t> sizes;
        auto indexAttrs = [&](ArrayRef<int64_t> values) {
          return llvm::map_to_vector(values, [&](int64_t x) -> OpFoldResult {
            return b.getIndexAttr(x);
          });
        };
        // The offsets of each output's tile, first: la-tile-for-gpu's
        // results-in-outputs computes a tile in its output's slice only
        // where the slice's offsets are defined before the op.
        SmallVector<SmallVector<OpFoldResult>> outputOffsets;
        for (const Part &output : outputs) {
          slicer.tile(b, l, output, index, offsets, sizes);
          outputOffsets.push_back(offsets);
        }
        // Each operand from outside the group is sliced once; one from
        // inside is the tile its op computed.
        IRMapping tiles;
        for (auto [op, described] : llvm::zip(group, ops)) {
          for (const Part &part : described.operands) {
            if (tiles.contains(part.value))
              continue;
            slicer.tile(b, l, part, index, offsets, sizes);
            SmallVector<OpFoldResult> ones(sizes.size(), b.getIndexAttr(1));
            tiles.map(part.value,
                      tensor::ExtractSliceOp::create(b, l, part.value, offsets,
                                                     indexAttrs(sizes), ones)
                          .getResult());
          }
          SmallVector<Value> tileOperands = llvm::map_to_vector(
              op->getOperands(), [&](Value v) { return tiles.lookup(v); });
          SmallVector<Type> tileTypes;
          for (const Part &part : described.results) {
            slicer.tile(b, l, part, index, offsets, sizes);
            tileTypes.push_back(RankedTensorType::get(
                sizes,
                cast<RankedTensorType>(part.value.getType()).getElementType()));
          }
          OperationState state(l, op->getName(), tileOperands, tileTypes,
                               op->getAttrs());
          Operation *tileOp = b.create(state);
          for (auto [result, tile] :
               llvm::zip(op->getResults(), tileOp->getResults()))
            tiles.map(result, tile);
        }
        auto inParallel = scf::InParallelOp::create(b, l);
        b.setInsertionPointToStart(inParallel.getBody());
        for (auto [i, output] : llvm::enumerate(outputs)) {
          Value tile = tiles.lookup(output.value);
          auto tileType = cast<RankedTensorType>(tile.getType());
          SmallVector<OpFoldResult> ones(tileType.getRank(), b.getIndexAttr(1));
          tensor::ParallelInsertSliceOp::create(
              b, l, tile, shared[i], outputOffsets[i],
              indexAttrs(tileType.getShape()), ones);
        }
      });
  for (auto [output, result] : llvm::zip(outputs, forall.getResults()))
    rewriter.replaceAllUsesWith(output.value, result);
  for (Operation *op : llvm::reverse(group))
    rewriter.eraseOp(op);
  return success();
}

namespace {
struct LaDistributeChunksPass
    : la::impl::LaDistributeChunksPassBase<LaDistributeChunksPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    // The chunk ops outside any task: the function's own and those in host
    // loops around them (the checkpoints' loop over segments, one program
    // per segment).
    SmallVector<Operation *> chunkOps;
    func.walk<WalkOrder::PreOrder>([&](Operation *op) {
      if (isa<scf::ForallOp>(op))
        return WalkResult::skip();
      if (isa<ChunkCumsumOp, ChunkWYOp, ChunkStateScanOp, ChunkIntraOp,
              ChunkInterOp>(op))
        chunkOps.push_back(op);
      return WalkResult::advance();
    });
    // An intra-chunk product read only by its chunk's output runs in the
    // output's task: one kernel, the product in shared memory.
    SmallVector<SmallVector<Operation *, 2>> groups;
    llvm::SmallPtrSet<Operation *, 4> joined;
    for (Operation *op : chunkOps)
      if (auto inter = dyn_cast<ChunkInterOp>(op))
        if (auto intra = inter.getIntra().getDefiningOp<ChunkIntraOp>())
          if (intra->hasOneUse() && intra->getBlock() == op->getBlock())
            joined.insert(intra);
    for (Operation *op : chunkOps) {
      if (joined.contains(op))
        continue;
      groups.push_back({op});
      if (auto inter = dyn_cast<ChunkInterOp>(op))
        if (Operation *intra = inter.getIntra().getDefiningOp();
            intra && joined.contains(intra))
          groups.back().insert(groups.back().begin(), intra);
    }
    IRRewriter rewriter(&getContext());
    for (ArrayRef<Operation *> group : groups)
      if (failed(distribute(rewriter, group, valueTile)))
        return signalPassFailure();
  }
};
} // namespace
