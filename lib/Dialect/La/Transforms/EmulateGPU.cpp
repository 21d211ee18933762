//===- EmulateGPU.cpp - run la-map-to-gpu's kernels on the CPU ------------===//
//
// A test device for the GPU path where there is no GPU: each gpu.launch that
// la-map-to-gpu built becomes loops over its blocks, and each of its loops
// of threads or warps (`for i = tid to n step threads`, marked
// la.distributed) a loop over all n iterations. Every such loop is followed
// by a barrier in the kernel and its iterations are independent, so running
// them in order gives the kernel's results; values outside those loops are
// the same in every thread. The dynamic shared memory becomes one host
// buffer per launch (with its views, packing and reuse exactly as on the
// GPU), device buffers become host buffers. Tensor cores (mma.sync, a
// collective of 32 lanes) are not emulated.
//
//===----------------------------------------------------------------------===//

#include "la/Dialect/La/LaPasses.h"
#include "la/Dialect/La/LaTiling.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::la {
#define GEN_PASS_DEF_LAEMULATEGPUPASS
#include "la/Dialect/La/LaPasses.h.inc"
} // namespace mlir::la

using namespace mlir;
using namespace mlir::la;

/// `type` without its memory space.
static MemRefType inDefaultSpace(MemRefType type) {
  return MemRefType::get(type.getShape(), type.getElementType(),
                         type.getLayout());
}

/// The launch's body as loops over its blocks, run by one thread.
static LogicalResult emulateLaunch(RewriterBase &rewriter,
                                   gpu::LaunchOp launch) {
  WalkResult tensorCores = launch.getBody().walk([](Operation *op) {
    return isa<nvgpu::MmaSyncOp, NVVM::MmaOp>(op) ? WalkResult::interrupt()
                                                  : WalkResult::advance();
  });
  if (tensorCores.wasInterrupted())
    return launch.emitOpError(
        "uses tensor cores (mma.sync), which la-emulate-gpu does not emulate");
  Location loc = launch.getLoc();
  rewriter.setInsertionPoint(launch);
  Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
  Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);

  // The dynamic shared memory: one host buffer for all the blocks, which
  // run one after the other.
  Value shared;
  if (Value size = launch.getDynamicSharedMemorySize()) {
    Value bytes = arith::IndexCastOp::create(rewriter, loc,
                                             rewriter.getIndexType(), size);
    shared = memref::AllocOp::create(
        rewriter, loc,
        MemRefType::get({ShapedType::kDynamic}, rewriter.getI8Type()),
        ValueRange{bytes});
  }

  gpu::KernelDim3 grid = launch.getGridSizeOperandValues();
  SmallVector<Value> blockIds;
  Block *innermost = nullptr;
  for (Value count : {grid.z, grid.y, grid.x}) {
    auto loop = scf::ForOp::create(rewriter, loc, zero, count, one);
    blockIds.push_back(loop.getInductionVar());
    rewriter.setInsertionPoint(loop.getBody()->getTerminator());
    innermost = loop.getBody();
  }
  gpu::KernelDim3 blockSize = launch.getBlockSizeOperandValues();
  Block &body = launch.getBody().front();
  SmallVector<Value> replacements = {blockIds[2], blockIds[1], blockIds[0],
                                     zero,        zero,        zero,
                                     grid.x,      grid.y,      grid.z,
                                     blockSize.x, blockSize.y, blockSize.z};
  if (body.getNumArguments() != replacements.size())
    return launch.emitOpError("has memory attributions, which la-map-to-gpu "
                              "does not create");
  rewriter.eraseOp(body.getTerminator());
  rewriter.inlineBlockBefore(&body, innermost->getTerminator(), replacements);

  SmallVector<Operation *> ops;
  innermost->walk([&](Operation *op) { ops.push_back(op); });
  for (Operation *op : ops) {
    if (isa<gpu::BarrierOp>(op)) {
      rewriter.eraseOp(op);
    } else if (auto loop = dyn_cast<scf::ForOp>(op)) {
      if (loop->hasAttr(kDistributedLoopAttr))
        rewriter.modifyOpInPlace(loop, [&] {
          loop.setLowerBound(zero);
          loop.setStep(one);
        });
    } else if (isa<gpu::DynamicSharedMemoryOp>(op)) {
      // Its views, in the default memory space; the casts back to it go.
      for (Operation *user : llvm::make_early_inc_range(op->getUsers())) {
        auto view = dyn_cast<memref::ViewOp>(user);
        if (!view)
          return user->emitOpError("uses the shared memory other than "
                                   "through memref.view");
        rewriter.setInsertionPoint(view);
        auto hostView = memref::ViewOp::create(
            rewriter, view.getLoc(), inDefaultSpace(view.getType()), shared,
            view.getByteShift(), view.getSizes());
        for (Operation *viewUser :
             llvm::make_early_inc_range(view->getUsers())) {
          auto cast = dyn_cast<memref::MemorySpaceCastOp>(viewUser);
          if (!cast || cast.getType() != hostView.getType())
            return viewUser->emitOpError(
                "uses a shared-memory view other than through a cast to the "
                "default memory space");
          rewriter.replaceOp(cast, hostView.getResult());
        }
        rewriter.eraseOp(view);
      }
      rewriter.eraseOp(op);
    }
  }
  rewriter.setInsertionPointAfter(launch);
  if (shared)
    memref::DeallocOp::create(rewriter, loc, shared);
  rewriter.eraseOp(launch);
  return success();
}

/// Device buffers become host buffers; the waits between them go.
static void emulateHostSide(RewriterBase &rewriter, func::FuncOp func) {
  SmallVector<Operation *> ops;
  func.walk([&](Operation *op) {
    if (isa<gpu::AllocOp, gpu::DeallocOp, gpu::WaitOp>(op))
      ops.push_back(op);
  });
  for (Operation *op : ops) {
    rewriter.setInsertionPoint(op);
    if (auto alloc = dyn_cast<gpu::AllocOp>(op)) {
      Value buffer = memref::AllocOp::create(
          rewriter, alloc.getLoc(), alloc.getType(), alloc.getDynamicSizes());
      rewriter.replaceAllUsesWith(alloc.getMemref(), buffer);
    } else if (auto dealloc = dyn_cast<gpu::DeallocOp>(op)) {
      memref::DeallocOp::create(rewriter, dealloc.getLoc(),
                                dealloc.getMemref());
    }
  }
  // In reverse: the users of each token go before the op that makes it.
  for (Operation *op : llvm::reverse(ops))
    rewriter.eraseOp(op);
}

namespace {
struct LaEmulateGPUPass : la::impl::LaEmulateGPUPassBase<LaEmulateGPUPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<gpu::LaunchOp> launches;
    getOperation().walk(
        [&](gpu::LaunchOp launch) { launches.push_back(launch); });
    IRRewriter rewriter(&getContext());
    for (gpu::LaunchOp launch : launches)
      if (failed(emulateLaunch(rewriter, launch)))
        return signalPassFailure();
    emulateHostSide(rewriter, getOperation());
  }
};
} // namespace
