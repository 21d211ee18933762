//===- FlushDenormals.cpp - denormal floats as zeros on x86 ---------------===//
//
// A state that decays over many tokens without new writes (a masked or
// all-but-zero stretch of values, strong gates) reaches the denormal range,
// where x86 cores take a microcode assist on every operation: a Gated
// DeltaNet forward whose values are zero in its second half ran 8x slower
// than the same call on unmasked values (docs/performance.md). This pass
// sets MXCSR's flush-to-zero and denormals-are-zero bits for the kernel's
// duration: at the function's entry and in each thread's task (an
// outermost scf.forall body, which OpenMP runs on its own threads), restoring
// the caller's bits before each return and at the end of each task. The LLVM
// intrinsics are x86's: la-lower-to-cpu adds this pass only on x86 hosts.
//
//===----------------------------------------------------------------------===//

#include "la/Codegen/CPU/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace mlir::la {
#define GEN_PASS_DEF_LAFLUSHDENORMALSPASS
#include "la/Codegen/CPU/Passes.h.inc"
} // namespace mlir::la

using namespace mlir;

namespace {
/// MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6) bits.
constexpr int32_t kFlushBits = 0x8040;

/// Saves MXCSR into a stack slot and sets the flush bits; returns the slot
/// and the saved value.
std::pair<Value, Value> flushDenormals(OpBuilder &b, Location loc) {
  MLIRContext *ctx = b.getContext();
  Type i32 = b.getI32Type();
  auto ptr = LLVM::LLVMPointerType::get(ctx);
  Value one =
      LLVM::ConstantOp::create(b, loc, b.getI64Type(), b.getI64IntegerAttr(1));
  Value slot = LLVM::AllocaOp::create(b, loc, ptr, i32, one, /*alignment=*/4);
  LLVM::CallIntrinsicOp::create(b, loc, b.getStringAttr("llvm.x86.sse.stmxcsr"),
                                ValueRange{slot});
  Value saved = LLVM::LoadOp::create(b, loc, i32, slot);
  Value bits = arith::ConstantIntOp::create(b, loc, kFlushBits, 32);
  Value flushed = arith::OrIOp::create(b, loc, saved, bits);
  LLVM::StoreOp::create(b, loc, flushed, slot);
  LLVM::CallIntrinsicOp::create(b, loc, b.getStringAttr("llvm.x86.sse.ldmxcsr"),
                                ValueRange{slot});
  return {slot, saved};
}

/// Restores the MXCSR value `saved` through `slot`.
void restore(OpBuilder &b, Location loc, Value slot, Value saved) {
  LLVM::StoreOp::create(b, loc, saved, slot);
  LLVM::CallIntrinsicOp::create(b, loc, b.getStringAttr("llvm.x86.sse.ldmxcsr"),
                                ValueRange{slot});
}

struct LaFlushDenormalsPass
    : la::impl::LaFlushDenormalsPassBase<LaFlushDenormalsPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    OpBuilder b(func.getContext());
    b.setInsertionPointToStart(&func.getBody().front());
    auto [slot, saved] = flushDenormals(b, func.getLoc());
    func.walk([&, slot = slot, saved = saved](func::ReturnOp ret) {
      b.setInsertionPoint(ret);
      restore(b, ret.getLoc(), slot, saved);
    });
    // Each task on its own thread: OpenMP's threads keep their own MXCSR.
    // (Only the outermost loops: the ones nested in them run on the same
    // thread.)
    func.walk([&](scf::ForallOp forall) {
      if (forall->getParentOfType<scf::ForallOp>())
        return;
      Block *body = forall.getBody();
      b.setInsertionPointToStart(body);
      auto [taskSlot, taskSaved] = flushDenormals(b, forall.getLoc());
      b.setInsertionPoint(body->getTerminator());
      restore(b, forall.getLoc(), taskSlot, taskSaved);
    });
  }
};
} // namespace
