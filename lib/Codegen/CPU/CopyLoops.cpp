//===- CopyLoops.cpp - strided and dynamic memref.copy as loops -----------===//
//
// finalize-memref-to-llvm lowers a memref.copy to llvm.memcpy only when both
// sides are contiguous with a static shape (or have the identity layout);
// otherwise it calls the runtime's memrefCopy, which copies one element per
// memcpy call. A linalg.copy becomes plain loops instead, which LLVM
// vectorises along the unit-stride innermost dimension.
//
//===----------------------------------------------------------------------===//

#include "la/Codegen/CPU/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Utils/MemRefUtils.h"

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

namespace {
struct LaCopyLoopsPass : la::impl::LaCopyLoopsPassBase<LaCopyLoopsPass> {
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
      OpBuilder builder(copy);
      linalg::CopyOp::create(builder, copy.getLoc(), copy.getSource(),
                             copy.getTarget());
      copy.erase();
    }
  }
};
} // namespace
