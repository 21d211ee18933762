//===- ChunkedProgram.cpp - the level-2 program of a recurrence -----------===//

#include "ChunkedProgram.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::la;

int64_t mlir::la::chunkSizeFor(int64_t requested, Value q) {
  int64_t tokens = cast<ShapedType>(q.getType()).getDimSize(1);
  if (ShapedType::isDynamic(tokens))
    return requested;
  return std::max<int64_t>(1, std::min(requested, tokens));
}

void ChunkedProgramBuilder::prepare(OpFoldResult tokens) {
  time = tokens;
  AffineExpr t = getAffineSymbolExpr(0, b.getContext());
  numChunks = affine::makeComposedFoldedAffineApply(
      b, loc, t.ceilDiv(chunkSize), {time});
  padding = affine::makeComposedFoldedAffineApply(
      b, loc, t.ceilDiv(chunkSize) * chunkSize - t, {time});
}

ChunkedProgramBuilder::Result
ChunkedProgramBuilder::build(const Inputs &in, float scale,
                             Type outputElementType) {
  prepare(tensor::getMixedSize(b, loc, in.q, 1));
  Result result = buildChunked(
      {chunkify(in.q), chunkify(in.k), chunkify(in.v), chunkify(in.g),
       chunkify(in.gv), chunkify(in.beta), chunkify(in.a), chunkify(in.b),
       in.initialState, chunkify(in.transposedQuery), in.transposedElementType},
      scale, outputElementType);
  return {unchunkify(result.output), result.finalState,
          result.transposedOutput ? unchunkify(result.transposedOutput)
                                  : Value()};
}

Value ChunkedProgramBuilder::buildTransposedRead(const Inputs &in, Value keys,
                                                 Value values, Value extraKeys,
                                                 Value extraValues, Value gates,
                                                 Value valueGates, Value states,
                                                 float scale) {
  //   S_t x_t = exp(G_t) * (S_n (x_t * exp(C_t)))
  //           + sum_{s <= t} (x_t . (v_s * e^(C_t - C_s))) k_s * e^(G_t - G_s)
  // inside a chunk (S_n the state entering it; with a low-rank part v the
  // corrected values, and the general form's extra pair a second such
  // sum): chunk_intra and chunk_inter with the roles of keys and values
  // swapped, the key-side gates G on the output's channels and the
  // value-side gates C on the query's. Keys and key gates are repeated to
  // the value heads (C rows per chunk).
  auto keyType = cast<RankedTensorType>(keys.getType());
  int64_t heads = keyType.getDimSize(3);
  int64_t valueHeads = cast<RankedTensorType>(values.getType()).getDimSize(3);
  if (heads != valueHeads) {
    int64_t group = valueHeads / heads;
    keys = repeatHeads(b, loc, keys, /*headDim=*/3, group);
    if (gates)
      gates = repeatHeads(b, loc, gates, /*headDim=*/3, group);
    if (extraKeys)
      extraKeys = repeatHeads(b, loc, extraKeys, /*headDim=*/3, group);
  }
  // The gates of the query's channels: C, a scalar G, or both (C + G).
  bool scalarGates =
      gates && cast<RankedTensorType>(gates.getType()).getRank() == 4;
  Value queryGates = valueGates;
  if (scalarGates && !valueGates) {
    queryGates = gates;
  } else if (scalarGates) {
    AffineMap id = b.getMultiDimIdentityMap(5);
    queryGates = buildGeneric(
        b, loc, ValueRange{valueGates, gates},
        emptyTensor(b, loc, mixedSizes(b, loc, valueGates), b.getF32Type()),
        {id, dimMap(b.getContext(), 5, {0, 1, 2, 3}), id}, 5, 0,
        [](OpBuilder &nb, Location l, ValueRange args) {
          return addF(nb, l, args[0], args[1]);
        });
  }
  Value outputGates = scalarGates ? Value() : gates;
  SmallVector<int64_t> shape(
      cast<RankedTensorType>(in.transposedQuery.getType()).getShape());
  shape[4] = cast<RankedTensorType>(keys.getType()).getDimSize(4);
  FloatAttr scaleAttr = b.getF32FloatAttr(scale);
  auto intraType = RankedTensorType::get(shape, b.getF32Type());
  // The extra pair swapped too; chunk_intra takes it with the output's
  // gates only when they are scalar (or none), else as a second product.
  bool extraApart = extraKeys && outputGates;
  Value intra = ChunkIntraOp::create(
      b, loc, intraType, in.transposedQuery, values, keys, queryGates,
      outputGates, extraApart ? Value() : extraValues,
      extraApart ? Value() : extraKeys, scaleAttr);
  if (extraApart) {
    Value extra = ChunkIntraOp::create(
        b, loc, intraType, in.transposedQuery, extraValues, extraKeys,
        queryGates, outputGates, Value(), Value(), scaleAttr);
    AffineMap id = b.getMultiDimIdentityMap(5);
    intra = buildGeneric(
        b, loc, ValueRange{intra, extra},
        emptyTensor(b, loc, mixedSizes(b, loc, intra), b.getF32Type()),
        {id, id, id}, 5, 0, [](OpBuilder &nb, Location l, ValueRange args) {
          return addF(nb, l, args[0], args[1]);
        });
  }
  return ChunkInterOp::create(
      b, loc, RankedTensorType::get(shape, in.transposedElementType),
      in.transposedQuery, states, intra, queryGates, outputGates, scaleAttr,
      /*transposed_states=*/b.getUnitAttr());
}

ChunkedProgramBuilder::Result
ChunkedProgramBuilder::buildChunked(const Inputs &in, float scale,
                                    Type outputElementType) {
  Value qc = in.q, kc = in.k, vc = in.v;
  Value gates, prevGates;
  if (in.g) {
    Value gc = in.g;
    auto gType = RankedTensorType::get(
        cast<RankedTensorType>(gc.getType()).getShape(), b.getF32Type());
    gates = ChunkCumsumOp::create(b, loc, gType, gc, /*exclusive=*/false);
    if (in.a)
      prevGates = ChunkCumsumOp::create(b, loc, gType, gc,
                                        /*exclusive=*/true);
  }
  Value valueGates;
  if (in.gv) {
    auto gvType = RankedTensorType::get(
        cast<RankedTensorType>(in.gv.getType()).getShape(), b.getF32Type());
    valueGates = ChunkCumsumOp::create(b, loc, gvType, in.gv,
                                       /*exclusive=*/false);
  }
  FloatAttr scaleAttr = b.getF32FloatAttr(scale);

  ArrayRef<int64_t> vShape = cast<RankedTensorType>(vc.getType()).getShape();
  ArrayRef<int64_t> kShape = cast<RankedTensorType>(kc.getType()).getShape();
  Type f32 = b.getF32Type();
  auto keyType = RankedTensorType::get(kShape, f32);
  auto intraType = RankedTensorType::get(vShape, f32);
  auto statesType = RankedTensorType::get(
      {vShape[0], vShape[1], vShape[3], kShape[4], vShape[4]}, f32);
  auto finalType =
      RankedTensorType::get({vShape[0], vShape[3], kShape[4], vShape[4]}, f32);
  IntegerAttr blockSize =
      b.getI64IntegerAttr(chunkSize % 16 == 0 ? 16 : chunkSize);

  // A low-rank part: the UT transform gives W and U, and the scan forms the
  // corrected values V' = U - W S_n. The delta rule pairs them with k in
  // place of v; the general form pairs them with b and keeps (k, v) as an
  // extra, uncorrected pair.
  Value keys = kc, values = vc, correction, extraKeys, extraValues;
  if (in.beta) {
    auto wy = ChunkWYOp::create(b, loc, keyType, intraType, kc, vc, in.beta,
                                Value(), Value(), gates, Value(), blockSize);
    values = wy.getU();
    correction = wy.getW();
  } else if (in.a) {
    Value bc = in.b;
    auto wy = ChunkWYOp::create(b, loc, keyType, intraType, kc, vc, Value(),
                                in.a, bc, gates, prevGates, blockSize);
    keys = bc;
    values = wy.getU();
    correction = wy.getW();
    extraKeys = kc;
    extraValues = vc;
  }
  SmallVector<Type> scanTypes = {statesType, finalType};
  if (correction)
    scanTypes.push_back(intraType);
  auto scan = ChunkStateScanOp::create(b, loc, scanTypes, keys, values, gates,
                                       valueGates, in.initialState, correction,
                                       extraKeys, extraValues);
  if (correction)
    values = scan.getCorrected();

  // Grouped query heads (q with HQ = G * HV heads, not H): the state work
  // above is per value head; the reads are per query head. The intra-chunk
  // product takes its keys, values and gates repeated per query head (C
  // rows of each per chunk: the C x C products are per query head anyway),
  // and chunk_inter reads each state for its G query heads.
  int64_t queryHeads = cast<RankedTensorType>(qc.getType()).getDimSize(3);
  SmallVector<int64_t> outputShape(vShape);
  if (!ShapedType::isDynamic(queryHeads) && !ShapedType::isDynamic(kShape[3]) &&
      !ShapedType::isDynamic(vShape[3]) && queryHeads != kShape[3]) {
    int64_t perKeyHead = queryHeads / kShape[3];
    int64_t perValueHead = queryHeads / vShape[3];
    auto repeat = [&](Value x, int64_t group) {
      return x ? repeatHeads(b, loc, x, /*headDim=*/3, group) : x;
    };
    keys = repeat(keys, perKeyHead);
    gates = repeat(gates, perKeyHead);
    extraKeys = repeat(extraKeys, perKeyHead);
    values = repeat(values, perValueHead);
    valueGates = repeat(valueGates, perValueHead);
    extraValues = repeat(extraValues, perValueHead);
    outputShape[3] = queryHeads;
    intraType = RankedTensorType::get(outputShape, f32);
  }
  Value intra =
      ChunkIntraOp::create(b, loc, intraType, qc, keys, values, gates,
                           valueGates, extraKeys, extraValues, scaleAttr);
  Value outputChunks = ChunkInterOp::create(
      b, loc, RankedTensorType::get(outputShape, outputElementType), qc,
      scan.getStates(), intra, gates, valueGates, scaleAttr,
      /*transposed_states=*/UnitAttr());
  Value transposedOutput;
  if (in.transposedQuery)
    transposedOutput =
        buildTransposedRead(in, keys, values, extraKeys, extraValues, gates,
                            valueGates, scan.getStates(), scale);
  return {outputChunks, scan.getFinalState(), transposedOutput};
}

Value ChunkedProgramBuilder::chunkify(Value x) {
  if (!x)
    return x;
  auto type = cast<RankedTensorType>(x.getType());
  int64_t rank = type.getRank();
  if (!isZeroInteger(padding)) {
    SmallVector<OpFoldResult> low(rank, b.getIndexAttr(0));
    SmallVector<OpFoldResult> high(rank, b.getIndexAttr(0));
    high[1] = padding;
    Value zero =
        arith::ConstantOp::create(b, loc, b.getZeroAttr(type.getElementType()));
    x = tensor::PadOp::create(b, loc, Type(), x, low, high, zero);
  }
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, x);
  SmallVector<OpFoldResult> chunkedSizes = {sizes[0], numChunks,
                                            b.getIndexAttr(chunkSize)};
  chunkedSizes.append(sizes.begin() + 2, sizes.end());
  SmallVector<ReassociationIndices> reassociation = {{0}, {1, 2}};
  for (int64_t d = 2; d < rank; ++d)
    reassociation.push_back({d + 1});
  auto chunkedType =
      RankedTensorType::get(staticShape(chunkedSizes), type.getElementType());
  return tensor::ExpandShapeOp::create(b, loc, chunkedType, x, reassociation,
                                       chunkedSizes);
}

Value ChunkedProgramBuilder::unchunkify(Value x) {
  SmallVector<ReassociationIndices> reassociation = {{0}, {1, 2}, {3}, {4}};
  Value collapsed = tensor::CollapseShapeOp::create(b, loc, x, reassociation);
  if (isZeroInteger(padding))
    return collapsed;
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, collapsed);
  sizes[1] = time;
  SmallVector<OpFoldResult> offsets(4, b.getIndexAttr(0));
  SmallVector<OpFoldResult> strides(4, b.getIndexAttr(1));
  auto type = RankedTensorType::get(
      staticShape(sizes), cast<RankedTensorType>(x.getType()).getElementType());
  return tensor::ExtractSliceOp::create(b, loc, type, collapsed, offsets, sizes,
                                        strides);
}
