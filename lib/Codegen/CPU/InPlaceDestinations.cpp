//===- InPlaceDestinations.cpp - destinations bufferization writes in place
//===//
//
// One-shot bufferization gives each op's result the buffer of its `outs`
// operand when it can, and otherwise allocates a new buffer and copies. The
// chunked program, as lowered, makes it copy per chunk: the state update
// writes a new tensor while the old state is still read, CSE has merged the
// `tensor.empty` destinations of unrelated ops into one, and each chunk's
// output is computed in a temporary and then inserted into the task's
// output. Here the destinations are chosen so that every one of these is
// written in place.
//
//===----------------------------------------------------------------------===//

#include "la/Codegen/CPU/Passes.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Bufferization/Transforms/Transforms.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::la {
#define GEN_PASS_DEF_LAINPLACEDESTINATIONSPASS
#include "la/Codegen/CPU/Passes.h.inc"
} // namespace mlir::la

using namespace mlir;
using namespace mlir::la;

/// The input of `op` that reads `state` element by element at the output's
/// indices, if `op` is an element-wise map that ignores its `outs` value.
static std::optional<unsigned> elementwiseStateInput(linalg::GenericOp op,
                                                     Value state) {
  if (op.getNumDpsInits() != 1 || op.getNumParallelLoops() != op.getNumLoops())
    return std::nullopt;
  OpOperand *init = op.getDpsInitOperand(0);
  if (op.payloadUsesValueFromOperand(init))
    return std::nullopt;
  AffineMap outputMap = op.getMatchingIndexingMap(init);
  for (OpOperand *input : op.getDpsInputOperands())
    if (input->get() == state &&
        op.getMatchingIndexingMap(input) == outputMap &&
        input->get().getType() == init->get().getType())
      return input->getOperandNumber();
  return std::nullopt;
}

/// `head` rewritten to read and write `state` through its `outs` operand
/// instead of reading it as input `inputNumber`.
static linalg::GenericOp updateInPlace(RewriterBase &rewriter,
                                       linalg::GenericOp head,
                                       unsigned inputNumber, Value state) {
  SmallVector<Value> inputs;
  SmallVector<AffineMap> maps;
  for (OpOperand *input : head.getDpsInputOperands()) {
    if (input->getOperandNumber() == inputNumber)
      continue;
    inputs.push_back(input->get());
    maps.push_back(head.getMatchingIndexingMap(input));
  }
  maps.push_back(head.getMatchingIndexingMap(head.getDpsInitOperand(0)));
  rewriter.setInsertionPoint(head);
  auto updated = linalg::GenericOp::create(
      rewriter, head.getLoc(), head->getResultTypes(), inputs,
      ValueRange{state}, maps, head.getIteratorTypesArray());
  rewriter.inlineRegionBefore(head.getRegion(), updated.getRegion(),
                              updated.getRegion().end());
  Block &body = updated.getRegion().front();
  rewriter.replaceAllUsesWith(body.getArgument(inputNumber),
                              body.getArguments().back());
  body.eraseArgument(inputNumber);
  rewriter.replaceOp(head, updated->getResults());
  return updated;
}

/// For each iteration argument of `loop` whose yielded value is the end of a
/// chain of destination-passing ops that starts with an element-wise map of
/// the argument (state' = decay(state), then state' += ...): move the chain
/// to the end of the body, after the argument's other readers, and make its
/// first op update the argument in place.
static void updateStatesInPlace(RewriterBase &rewriter, scf::ForOp loop) {
  Block *body = loop.getBody();
  auto yield = cast<scf::YieldOp>(body->getTerminator());
  for (auto [state, yielded] :
       llvm::zip(loop.getRegionIterArgs(), yield.getOperands())) {
    if (!isa<RankedTensorType>(state.getType()))
      continue;
    // Walk up the chain of tied destinations: each link is used only by the
    // next one (or the yield) and lives in the loop's body.
    SmallVector<Operation *> chain;
    Value link = yielded;
    std::optional<unsigned> stateInput;
    while (true) {
      auto op = link.getDefiningOp<DestinationStyleOpInterface>();
      if (!op || op->getBlock() != body || !link.hasOneUse() ||
          op->getNumResults() != 1)
        break;
      chain.push_back(op);
      auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
      if (generic && (stateInput = elementwiseStateInput(generic, state)))
        break;
      link = op.getDpsInitOperand(0)->get();
      if (op.getNumDpsInits() != 1)
        break;
    }
    if (!stateInput)
      continue;
    // Only the head may read the state: the rest of the chain runs after it
    // has been overwritten.
    Value carried = state; // lambdas may not capture bindings in C++17
    bool othersReadState = llvm::any_of(
        ArrayRef<Operation *>(chain).drop_back(), [&](Operation *op) {
          return llvm::is_contained(op->getOperands(), carried);
        });
    if (othersReadState)
      continue;
    for (Operation *op : llvm::reverse(chain))
      rewriter.moveOpBefore(op, yield);
    updateInPlace(rewriter, cast<linalg::GenericOp>(chain.back()), *stateInput,
                  state);
  }
}

/// Clones `op` (a `tensor.empty`, or a `linalg.fill` of one) before each of
/// its users but the first, so that no two ops share a destination.
static void cloneForEachUser(RewriterBase &rewriter, Operation *op) {
  SmallVector<OpOperand *> uses;
  for (OpOperand &use : op->getResult(0).getUses())
    uses.push_back(&use);
  // The first user in program order keeps `op` (use lists are unordered).
  llvm::stable_sort(uses, [](OpOperand *a, OpOperand *b) {
    Operation *x = a->getOwner(), *y = b->getOwner();
    return x != y && x->getBlock() == y->getBlock() && x->isBeforeInBlock(y);
  });
  for (OpOperand *use : ArrayRef<OpOperand *>(uses).drop_front()) {
    rewriter.setInsertionPoint(use->getOwner());
    Operation *clone = nullptr;
    if (auto fill = dyn_cast<linalg::FillOp>(op)) {
      Operation *empty = fill.getOutputs()[0].getDefiningOp();
      Value init = rewriter.clone(*empty)->getResult(0);
      clone = linalg::FillOp::create(rewriter, fill.getLoc(),
                                     fill.getInputs()[0], init);
    } else {
      clone = rewriter.clone(*op);
    }
    rewriter.modifyOpInPlace(use->getOwner(),
                             [&] { use->set(clone->getResult(0)); });
  }
}

/// The `tensor.empty` that `value`'s buffer starts as, following tied
/// destinations through destination-passing ops and loops.
static tensor::EmptyOp destinationRoot(Value value) {
  if (auto empty = value.getDefiningOp<tensor::EmptyOp>())
    return empty;
  OpOperand *destination = findEmptyDestination(value);
  return destination ? destination->get().getDefiningOp<tensor::EmptyOp>()
                     : tensor::EmptyOp();
}

/// A function result that is a collapsed view of a tensor built in a
/// `tensor.empty` (the output, chunked [B,NC,C,...] while it is computed):
/// the empty gets the result's shape and is expanded, so that after
/// bufferization the result is the allocation itself, which
/// buffer-results-to-out-params replaces by the caller's buffer instead of
/// copying into it.
static void allocateResultsInTheirShape(RewriterBase &rewriter,
                                        func::FuncOp func) {
  func.walk([&](func::ReturnOp ret) {
    for (Value result : ret.getOperands()) {
      auto collapse = result.getDefiningOp<tensor::CollapseShapeOp>();
      if (!collapse || !collapse.getResultType().hasStaticShape())
        continue;
      tensor::EmptyOp empty = destinationRoot(collapse.getSrc());
      if (!empty || !empty->hasOneUse())
        continue;
      rewriter.setInsertionPoint(empty);
      Value whole = tensor::EmptyOp::create(
          rewriter, empty.getLoc(), collapse.getResultType().getShape(),
          collapse.getResultType().getElementType());
      rewriter.replaceOpWithNewOp<tensor::ExpandShapeOp>(
          empty, empty.getType(), whole, collapse.getReassociationIndices());
    }
  });
}

/// An insertion of a collapsed tile (a decomposed chunk's [1,1,C,1,V]
/// output collapsed to the [1,C,1,V] tile of the task's output) whose
/// source is built in a `tensor.empty`: the empty becomes the expanded
/// slice of the insertion's destination, so that the tile is written in
/// place. (Upstream empty-tensor elimination does this for an insertion of
/// the tile itself; it stops at the reshape.)
static void insertCollapsedTilesInPlace(RewriterBase &rewriter,
                                        func::FuncOp func) {
  DominanceInfo dominance(func);
  SmallVector<tensor::InsertSliceOp> inserts;
  func.walk([&](tensor::InsertSliceOp insert) { inserts.push_back(insert); });
  for (tensor::InsertSliceOp insert : inserts) {
    auto collapse = insert.getSource().getDefiningOp<tensor::CollapseShapeOp>();
    if (!collapse || !collapse->hasOneUse())
      continue;
    tensor::EmptyOp empty = destinationRoot(collapse.getSrc());
    if (!empty || !empty->hasOneUse() ||
        insert.getSourceType() != collapse.getResultType())
      continue;
    // The slice is taken where the empty was: its operands must be there.
    if (!llvm::all_of(insert->getOperands().drop_front(), [&](Value v) {
          return dominance.properlyDominates(v, empty);
        }))
      continue;
    rewriter.setInsertionPoint(empty);
    Value slice = tensor::ExtractSliceOp::create(
        rewriter, insert.getLoc(), insert.getSourceType(), insert.getDest(),
        insert.getMixedOffsets(), insert.getMixedSizes(),
        insert.getMixedStrides());
    rewriter.replaceOpWithNewOp<tensor::ExpandShapeOp>(
        empty, empty.getType(), slice, collapse.getReassociationIndices());
  }
}

namespace {
struct LaInPlaceDestinationsPass
    : la::impl::LaInPlaceDestinationsPassBase<LaInPlaceDestinationsPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    IRRewriter rewriter(&getContext());

    SmallVector<scf::ForOp> loops;
    func.walk([&](scf::ForOp loop) { loops.push_back(loop); });
    for (scf::ForOp loop : loops)
      updateStatesInPlace(rewriter, loop);

    // Fills first: a fill's clone clones its empty, which is then single-use.
    SmallVector<Operation *> shared;
    func.walk([&](linalg::FillOp fill) {
      if (fill.getOutputs()[0].getDefiningOp<tensor::EmptyOp>() &&
          fill.hasPureTensorSemantics() && !fill->getResult(0).hasOneUse())
        shared.push_back(fill);
    });
    func.walk([&](tensor::EmptyOp empty) {
      if (!empty->use_empty() && !empty->hasOneUse())
        shared.push_back(empty);
    });
    for (Operation *op : shared)
      cloneForEachUser(rewriter, op);

    allocateResultsInTheirShape(rewriter, func);
    insertCollapsedTilesInPlace(rewriter, func);
    if (failed(bufferization::eliminateEmptyTensors(rewriter, func)))
      return signalPassFailure();

    SmallVector<tensor::EmptyOp> empties;
    func.walk([&](tensor::EmptyOp empty) { empties.push_back(empty); });
    for (tensor::EmptyOp empty : empties) {
      // Those that the rewrites above left without users go.
      if (empty->use_empty()) {
        rewriter.eraseOp(empty);
        continue;
      }
      rewriter.setInsertionPoint(empty);
      rewriter.replaceOpWithNewOp<bufferization::AllocTensorOp>(
          empty, empty.getType(), empty.getDynamicSizes());
    }
  }
};
} // namespace
