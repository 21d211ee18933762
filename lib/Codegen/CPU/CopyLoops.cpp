//===- CopyLoops.cpp - strided and dynamic memref.copy as loops -----------===//
//
// finalize-memref-to-llvm lowers a memref.copy to llvm.memcpy only when both
// sides are contiguous with a static shape (or have the identity layout);
// otherwise it calls the runtime's memrefCopy, which copies one element per
// memcpy call. Such a copy becomes loops over its outer dimensions that copy
// one row of the contiguous innermost dimension as a vector: LLVM does not
// vectorise the element loops of a linalg.copy between two strided memrefs
// that may alias (it unrolled a packed chunk's 64-element rows into scalar
// moves). Copies whose innermost dimension is dynamic or strided become a
// linalg.copy (element loops).
//
//===----------------------------------------------------------------------===//

#include "la/Codegen/CPU/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Utils/MemRefUtils.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::la {
#define GEN_PASS_DEF_LACOPYLOOPSPASS
#include "la/Codegen/CPU/Passes.h.inc"
} // namespace mlir::la

using namespace mlir;
using namespace mlir::la;

/// Whether finalize-memref-to-llvm copies a memref of `type` with memcpy
/// (its own rule, for each side of a copy).
static bool copiesWithMemcpy(Type type) {
  auto memrefType = dyn_cast<MemRefType>(type);
  return memrefType &&
         (memrefType.getLayout().isIdentity() ||
          (memrefType.hasStaticShape() && memrefType.getNumElements() > 0 &&
           memref::isStaticShapeAndContiguousRowMajor(memrefType)));
}

/// Rows longer than this are copied by element loops (a row is one vector).
static constexpr int64_t kMaxRowElements = 1024;

/// Whether `type`'s innermost dimension has a static size in
/// [1, kMaxRowElements] and unit stride, of elements of 32 bits or more, or
/// narrower ones filling whole 512-bit vectors (LLVM's x86 backend fails on
/// some vectors of f16 or bf16 of odd length: "Do not know how to soft
/// promote this operator's operand").
static bool hasVectorRows(MemRefType type) {
  SmallVector<int64_t> strides;
  int64_t offset;
  if (type.getRank() == 0 || !type.getElementType().isIntOrFloat() ||
      failed(type.getStridesAndOffset(strides, offset)) || strides.back() != 1)
    return false;
  int64_t length = type.getShape().back();
  int64_t bits = type.getElementTypeBitWidth();
  if (ShapedType::isDynamic(length) || length < 1 || length > kMaxRowElements)
    return false;
  return bits >= 32 || (bits * length) % 512 == 0;
}

/// Replaces `copy` (both sides with vector rows) by loops over the outer
/// dimensions whose body loads a row as one vector and stores it.
static void copyRowsAsVectors(memref::CopyOp copy) {
  OpBuilder b(copy);
  Location loc = copy.getLoc();
  Value source = copy.getSource(), target = copy.getTarget();
  auto type = cast<MemRefType>(source.getType());
  int64_t rank = type.getRank();
  auto rowType =
      VectorType::get({type.getShape().back()}, type.getElementType());
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  SmallVector<Value> indices;
  std::function<void(OpBuilder &, int64_t)> build = [&](OpBuilder &nested,
                                                        int64_t d) {
    if (d == rank - 1) {
      indices.push_back(zero);
      Value row = vector::LoadOp::create(nested, loc, rowType, source, indices);
      vector::StoreOp::create(nested, loc, row, target, indices);
      indices.pop_back();
      return;
    }
    Value upper =
        type.isDynamicDim(d)
            ? memref::DimOp::create(nested, loc, source, d).getResult()
            : arith::ConstantIndexOp::create(nested, loc, type.getDimSize(d))
                  .getResult();
    auto loop = scf::ForOp::create(nested, loc, zero, upper, one);
    OpBuilder inner = OpBuilder::atBlockBegin(loop.getBody());
    indices.push_back(loop.getInductionVar());
    build(inner, d + 1);
    indices.pop_back();
  };
  build(b, 0);
  copy.erase();
}

namespace {
struct LaCopyLoopsPass : la::impl::LaCopyLoopsPassBase<LaCopyLoopsPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<memref::CopyOp> copies;
    getOperation().walk([&](memref::CopyOp copy) {
      Type source = copy.getSource().getType();
      Type target = copy.getTarget().getType();
      if (isa<MemRefType>(source) && isa<MemRefType>(target) &&
          !(copiesWithMemcpy(source) && copiesWithMemcpy(target)))
        copies.push_back(copy);
    });
    for (memref::CopyOp copy : copies) {
      if (vectorRows &&
          hasVectorRows(cast<MemRefType>(copy.getSource().getType())) &&
          hasVectorRows(cast<MemRefType>(copy.getTarget().getType()))) {
        copyRowsAsVectors(copy);
        continue;
      }
      OpBuilder builder(copy);
      linalg::CopyOp::create(builder, copy.getLoc(), copy.getSource(),
                             copy.getTarget());
      copy.erase();
    }
  }
};
} // namespace
