//===- AggregatedOpInterfaceImpl.cpp - la.recurrence decomposed -----------===//
//
// A recurrence over C tokens is one chunk of the chunked algorithm: the
// masked intra-chunk product, the WY/UT form of a low-rank transition, the
// state update and the output from the initial state (docs/chunking.md).
// Tiling T by C and decomposing each tile is chunking with the state carried
// by the tile loop.
//
//===----------------------------------------------------------------------===//

#include "la/Dialect/La/AggregatedOpInterfaceImpl.h"

#include "ChunkedProgram.h"
#include "la/Dialect/La/LaDialect.h"
#include "la/Dialect/La/LaOps.h"
#include "la/Dialect/La/LaPasses.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Interfaces/ValueBoundsOpInterface.h"

#include "llvm/Support/MathExtras.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::la;

namespace {
struct RecurrenceDecomposition
    : linalg::AggregatedOpInterface::ExternalModel<RecurrenceDecomposition,
                                                   RecurrenceOp> {
  FailureOr<SmallVector<Value>> decomposeOperation(Operation *operation,
                                                   OpBuilder &b) const {
    auto op = cast<RecurrenceOp>(operation);
    // The chunk program takes the simplified forms, and one sequence per
    // batch row (packed sequences restart at run-time offsets).
    if (op.getGate() == GateKind::Fixed || op.getNormalizer() ||
        op.getCuSeqlens() || op.getStateIndices())
      return failure();
    // One chunk of all the tokens. A dynamic T known to be a constant (a
    // full tile of a peeled loop) is cast to it; otherwise (a partial tile)
    // it is padded to its bound with zero tokens, which leave the state
    // unchanged (k = 0, beta = a = b = 0, log-gate 0). Either way the chunk
    // has a static size, rounded up to a multiple of 16 (a power of two
    // below 16) by padding: the sizes la-tile's register tiles and the WY
    // blocks divide (a 63-row chunk would run as scalar loops).
    int64_t tokens = op.getQ().getType().getDimSize(1);
    bool padded = false, exactSize = false;
    if (ShapedType::isDynamic(tokens)) {
      FailureOr<int64_t> exact = ValueBoundsConstraintSet::computeConstantBound(
          presburger::BoundType::EQ, {op.getQ(), 1});
      if (succeeded(exact)) {
        exactSize = true;
        tokens = *exact;
      } else {
        FailureOr<int64_t> bound =
            ValueBoundsConstraintSet::computeConstantBound(
                presburger::BoundType::UB, {op.getQ(), 1},
                /*stopCondition=*/nullptr, /*closedUB=*/true);
        if (failed(bound))
          return failure();
        padded = true;
        tokens = *bound;
      }
      int64_t tileable =
          tokens >= 16 ? static_cast<int64_t>(llvm::alignTo(tokens, 16))
                       : static_cast<int64_t>(
                             llvm::PowerOf2Ceil(std::max<int64_t>(tokens, 1)));
      if (tileable != tokens) {
        padded = true;
        exactSize = false;
        tokens = tileable;
      }
    }
    if (tokens < 1 || tokens > kMaxChunkSize)
      return failure();
    Location loc = op.getLoc();
    OpFoldResult time = tensor::getMixedSize(b, loc, op.getQ(), 1);
    // A reverse recurrence is the forward one on its tokens flipped: the
    // padding goes before them, so that the flip puts it after.
    bool reverse = op.getReverse();
    auto padTime = [&](Value x) -> Value {
      if (!x)
        return x;
      if (!padded && !exactSize)
        return reverse ? flipTime(b, loc, x) : x;
      auto type = cast<RankedTensorType>(x.getType());
      SmallVector<int64_t> shape(type.getShape());
      shape[1] = tokens;
      Value fixed;
      if (exactSize) {
        fixed = tensor::CastOp::create(
            b, loc, RankedTensorType::get(shape, type.getElementType()), x);
      } else {
        SmallVector<OpFoldResult> low(type.getRank(), b.getIndexAttr(0));
        SmallVector<OpFoldResult> high = low;
        AffineExpr t = b.getAffineSymbolExpr(0);
        (reverse ? low : high)[1] =
            affine::makeComposedFoldedAffineApply(b, loc, tokens - t, {time});
        Value zero = arith::ConstantOp::create(
            b, loc, b.getZeroAttr(type.getElementType()));
        fixed = tensor::PadOp::create(
            b, loc, RankedTensorType::get(shape, type.getElementType()), x, low,
            high, zero);
      }
      return reverse ? flipTime(b, loc, fixed) : fixed;
    };
    ChunkedProgramBuilder program(b, loc, tokens);
    ChunkedProgramBuilder::Result result = program.build(
        {padTime(op.getQ()), padTime(op.getK()), padTime(op.getV()),
         padTime(op.getG()), padTime(op.getGv()), padTime(op.getBeta()),
         padTime(op.getA()), padTime(op.getB()), op.getNonZeroInitialState(),
         padTime(op.getTransposedQuery()),
         op.getTransposedO() ? op.getTransposedO().getType().getElementType()
                             : Type()},
        op.getScale().convertToFloat(), op.getO().getType().getElementType());
    // The outputs' token rows, in time order and without the padding.
    auto unpadTime = [&](Value output) -> Value {
      if (reverse)
        output = flipTime(b, loc, output);
      if (!padded)
        return output;
      SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, output);
      sizes[1] = time;
      SmallVector<OpFoldResult> offsets(4, b.getIndexAttr(0));
      if (reverse) {
        AffineExpr t = b.getAffineSymbolExpr(0);
        offsets[1] =
            affine::makeComposedFoldedAffineApply(b, loc, tokens - t, {time});
      }
      return tensor::ExtractSliceOp::create(
                 b, loc, output, offsets, sizes,
                 SmallVector<OpFoldResult>(4, b.getIndexAttr(1)))
          .getResult();
    };
    SmallVector<Value> values = {unpadTime(result.output), result.finalState};
    if (result.transposedOutput)
      values.push_back(unpadTime(result.transposedOutput));
    for (auto [value, type] : llvm::zip(values, op->getResultTypes()))
      if (value.getType() != type)
        value = tensor::CastOp::create(b, loc, type, value);
    return values;
  }
};
} // namespace

void mlir::la::registerAggregatedOpInterfaceExternalModels(
    DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, LaDialect *) {
    RecurrenceOp::attachInterface<RecurrenceDecomposition>(*ctx);
  });
  registerSlidingWindowHybridDecomposition(registry);
}
