//===- LaTransformOps.cpp - transform-dialect ops of la -------------------===//

#include "la/Dialect/La/TransformOps/LaTransformOps.h"

#include "la/Codegen/CPU/CPUTiling.h"
#include "la/Conversion/LaToLinalg.h"
#include "la/Dialect/La/LaDialect.h"
#include "la/Dialect/La/LaPasses.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::la;

//===----------------------------------------------------------------------===//
// Pattern descriptors
//===----------------------------------------------------------------------===//

void transform::ApplyLaLowerToRecurrencePatternsOp::populatePatterns(
    RewritePatternSet &patterns) {
  populateLowerToRecurrencePatterns(patterns);
}

void transform::ApplyLaSimplifyRecurrencePatternsOp::populatePatterns(
    RewritePatternSet &patterns) {
  populateSimplifyRecurrencePatterns(patterns);
}

void transform::ApplyLaExpandRecurrenceGradPatternsOp::populatePatterns(
    RewritePatternSet &patterns) {
  populateSimplifyRecurrencePatterns(patterns);
  populateExpandRecurrenceGradPatterns(patterns);
}

void transform::ApplyLaChunkPatternsOp::populatePatterns(
    RewritePatternSet &patterns) {
  populateSimplifyRecurrencePatterns(patterns);
  populateChunkPatterns(patterns, getChunkSize());
}

/// The chunk-size rule of the pattern descriptors that chunk.
static LogicalResult verifyChunkSize(Operation *op, int64_t chunkSize) {
  if (chunkSize <= 0)
    return op->emitOpError("chunk_size must be > 0, got ") << chunkSize;
  return success();
}

LogicalResult transform::ApplyLaChunkPatternsOp::verify() {
  return verifyChunkSize(*this, getChunkSize());
}

void transform::ApplyLaFuseRecurrencePatternsOp::populatePatterns(
    RewritePatternSet &patterns) {
  populateSimplifyRecurrencePatterns(patterns);
  populateFuseRecurrencePatterns(patterns, getChunkSize(),
                                 *parseFusionMode(getMode()), getThreads(),
                                 /*fuseProducers=*/true, getValueTile());
}

LogicalResult transform::ApplyLaFuseRecurrencePatternsOp::verify() {
  if (failed(verifyChunkSize(*this, getChunkSize())))
    return failure();
  if (failed(parseFusionMode(getMode())))
    return emitOpError("mode must be auto, fused or materialized, got '")
           << getMode() << "'";
  if (getThreads() <= 0)
    return emitOpError("threads must be > 0, got ") << getThreads();
  if (getValueTile() < 0)
    return emitOpError("value_tile must be >= 0, got ") << getValueTile();
  return success();
}

void transform::ApplyLaToLinalgPatternsOp::populatePatterns(
    RewritePatternSet &patterns) {
  populateSimplifyRecurrencePatterns(patterns);
  populateChunkedToLinalgPatterns(patterns);
  populateRecurrenceToLoopsPatterns(patterns);
}

//===----------------------------------------------------------------------===//
// TileForCPUOp
//===----------------------------------------------------------------------===//

LogicalResult transform::LaTileForCPUOp::verify() {
  if (getRowTile() < 1 || getLaneTile() < 1 || getReductionTile() < 1)
    return emitOpError("tile sizes must be >= 1");
  return success();
}

DiagnosedSilenceableFailure
transform::LaTileForCPUOp::applyToOne(transform::TransformRewriter &rewriter,
                                      linalg::LinalgOp target,
                                      transform::ApplyToEachResultList &results,
                                      transform::TransformState &state) {
  // As la-tile does, an op of another form (dynamic shapes, the floordiv
  // maps of grouped value heads, the delta rule's triangular solve) stays
  // as it is, to be lowered to scalar loops: a schedule that matches every
  // LinalgOp works for every variant.
  if (!isTileableForCPU(target)) {
    results.push_back(target);
    results.push_back(target);
    return DiagnosedSilenceableFailure::success();
  }
  CPUTilingOptions options;
  options.rowTile = getRowTile();
  options.laneTile = getLaneTile();
  options.reductionTile = getReductionTile();
  options.distribute = getDistribute();
  FailureOr<CPUTilingResult> tiled = tileForCPU(rewriter, target, options);
  if (failed(tiled)) {
    DiagnosedSilenceableFailure diag = emitSilenceableError()
                                       << "could not tile the payload op";
    diag.attachNote(target->getLoc()) << "payload op: " << *target;
    return diag;
  }
  Operation *outermost = nullptr;
  if (!tiled->outerLoops.empty())
    outermost = tiled->outerLoops.front();
  else if (!tiled->innerLoops.empty())
    outermost = tiled->innerLoops.front();
  // An op that is already one register tile needs no loop.
  if (!outermost)
    outermost = tiled->tiledOp;
  results.push_back(tiled->tiledOp);
  results.push_back(outermost);
  return DiagnosedSilenceableFailure::success();
}

//===----------------------------------------------------------------------===//
// DecomposeOp
//===----------------------------------------------------------------------===//

DiagnosedSilenceableFailure
transform::LaDecomposeOp::apply(transform::TransformRewriter &rewriter,
                                transform::TransformResults &results,
                                transform::TransformState &state) {
  SmallVector<Operation *> produced;
  for (Operation *target : state.getPayloadOps(getTarget())) {
    auto aggregated = dyn_cast<linalg::AggregatedOpInterface>(target);
    if (!aggregated) {
      DiagnosedSilenceableFailure diag =
          emitSilenceableError()
          << "payload op does not implement AggregatedOpInterface";
      diag.attachNote(target->getLoc()) << "payload op";
      return diag;
    }
    rewriter.setInsertionPoint(target);
    FailureOr<SmallVector<Value>> values =
        aggregated.decomposeOperation(rewriter);
    if (failed(values)) {
      DiagnosedSilenceableFailure diag =
          emitSilenceableError() << "could not decompose the payload op";
      diag.attachNote(target->getLoc()) << "payload op";
      return diag;
    }
    for (Value value : *values)
      if (Operation *definition = value.getDefiningOp())
        if (!llvm::is_contained(produced, definition))
          produced.push_back(definition);
    rewriter.replaceOp(target, *values);
  }
  results.set(cast<OpResult>(getDecomposed()), produced);
  return DiagnosedSilenceableFailure::success();
}

//===----------------------------------------------------------------------===//
// VectorizeForCPUOp
//===----------------------------------------------------------------------===//

DiagnosedSilenceableFailure transform::LaVectorizeForCPUOp::applyToOne(
    transform::TransformRewriter &rewriter, Operation *target,
    transform::ApplyToEachResultList &results,
    transform::TransformState &state) {
  if (failed(vectorizeForCPU(rewriter, target))) {
    DiagnosedDefiniteFailure diag =
        emitDefiniteFailure() << "vectorisation patterns did not converge";
    diag.attachNote(target->getLoc())
        << "in payload op '" << target->getName() << "'";
    return diag;
  }
  results.push_back(target);
  return DiagnosedSilenceableFailure::success();
}

//===----------------------------------------------------------------------===//
// Registration
//===----------------------------------------------------------------------===//

#define GET_OP_CLASSES
#include "la/Dialect/La/TransformOps/LaTransformOps.cpp.inc"

namespace {
class LaTransformDialectExtension
    : public transform::TransformDialectExtension<LaTransformDialectExtension> {
public:
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(LaTransformDialectExtension)

  using Base::Base;

  void init() {
    declareDependentDialect<LaDialect>();
    declareDependentDialect<linalg::LinalgDialect>();
    declareGeneratedDialect<affine::AffineDialect>();
    declareGeneratedDialect<arith::ArithDialect>();
    declareGeneratedDialect<math::MathDialect>();
    declareGeneratedDialect<scf::SCFDialect>();
    declareGeneratedDialect<tensor::TensorDialect>();
    declareGeneratedDialect<vector::VectorDialect>();
    registerTransformOps<
#define GET_OP_LIST
#include "la/Dialect/La/TransformOps/LaTransformOps.cpp.inc"
        >();
  }
};
} // namespace

void mlir::la::registerTransformDialectExtension(DialectRegistry &registry) {
  registry.addExtensions<LaTransformDialectExtension>();
}
