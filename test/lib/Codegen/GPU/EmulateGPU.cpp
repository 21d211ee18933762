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
// GPU), device buffers become host buffers. A tensor-core tile's 32 lanes
// run together: their fragments are gathered into matrices by the PTX
// layouts and the instruction computed on them (nvgpu.mma.sync for tf32 and
// f16, nvvm.mma.sync for bf16).
//
//===----------------------------------------------------------------------===//

#include "TestPasses.h"
#include "la/Dialect/La/LaDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::la {
#define GEN_PASS_DEF_LAEMULATEGPUPASS
#include "TestPasses.h.inc"
} // namespace mlir::la

using namespace mlir;
using namespace mlir::la;

/// `type` without its memory space.
static MemRefType inDefaultSpace(MemRefType type) {
  return MemRefType::get(type.getShape(), type.getElementType(),
                         type.getLayout());
}

/// The (row, column) of the m x n matrix that element `e` of register `r`
/// of lane `lane` holds in an mma.sync fragment, from the PTX ISA's
/// "Matrix Fragments for mma.m16n8k8" (tf32) and "mma.m16n8k16" (f16):
/// `operand` 0 is A (16 x k), 1 is B (k x 8, as (k, n)), 2 is C/D (16 x 8).
/// Written apart from la-map-to-gpu's loads, as the hardware's side.
static std::pair<int64_t, int64_t> fragmentPosition(unsigned operand, int64_t k,
                                                    int64_t lane, int64_t r,
                                                    int64_t e) {
  int64_t group = lane / 4, t = lane % 4;
  if (operand == 2)
    return {group + 8 * r, 2 * t + e};
  if (k == 8) // tf32: one element per register
    return operand == 0 ? std::make_pair(group + 8 * (r % 2), t + 4 * (r / 2))
                        : std::make_pair(t + 4 * r, group);
  return operand == 0
             ? std::make_pair(group + 8 * (r % 2), 2 * t + e + 8 * (r / 2))
             : std::make_pair(2 * t + e + 8 * r, group);
}

/// One mma.sync of la-map-to-gpu, either form: nvgpu.mma.sync (tf32, f16;
/// A and B 2-D vectors, registers x elements) or nvvm.mma.sync (bf16; A's
/// and B's registers i32 words of two bf16, C four f32, the result a struct
/// that the tile rebuilds into a 2 x 2 vector).
struct MmaInstruction {
  Operation *op = nullptr;
  /// A's and B's registers: the nvgpu vectors, or the NVVM words.
  SmallVector<Value> aRegisters, bRegisters;
  /// The 2 x 2 accumulator the instruction reads, and the one it makes
  /// (null where the tile reads or writes the four elements directly).
  Value accumulator, result;
  /// nvvm.mma.sync: the four accumulator elements it reads, and the
  /// llvm.extractvalue ops of its result.
  SmallVector<Value> accumulatorElements;
  SmallVector<LLVM::ExtractValueOp> resultElements;
  /// The ops from the instruction to `result` (not cloned per lane).
  SmallVector<Operation *> resultOps;
  int64_t k = 0;
  int64_t perRegister = 0;
};

static FailureOr<MmaInstruction> describeMma(Operation *op) {
  MmaInstruction mma;
  mma.op = op;
  mma.resultOps.push_back(op);
  if (auto nvgpuMma = dyn_cast<nvgpu::MmaSyncOp>(op)) {
    mma.k = nvgpuMma.getMmaShapeAsArray()[2];
    mma.perRegister =
        cast<VectorType>(nvgpuMma.getMatrixA().getType()).getDimSize(1);
    mma.aRegisters = {nvgpuMma.getMatrixA()};
    mma.bRegisters = {nvgpuMma.getMatrixB()};
    mma.accumulator = nvgpuMma.getMatrixC();
    mma.result = nvgpuMma.getResult();
    return mma;
  }
  auto nvvmMma = cast<NVVM::MmaOp>(op);
  mma.k = 16;
  mma.perRegister = 2;
  mma.aRegisters.assign(nvvmMma.getOperandA().begin(),
                        nvvmMma.getOperandA().end());
  mma.bRegisters.assign(nvvmMma.getOperandB().begin(),
                        nvvmMma.getOperandB().end());
  // C: four f32, vector.extract of one 2 x 2 vector unless folded; the
  // result: llvm.extractvalue ops, into one vector.from_elements unless
  // folded.
  mma.accumulatorElements.assign(nvvmMma.getOperandC().begin(),
                                 nvvmMma.getOperandC().end());
  if (auto first =
          mma.accumulatorElements.front().getDefiningOp<vector::ExtractOp>())
    mma.accumulator = first.getSource();
  vector::FromElementsOp rebuilt;
  for (Operation *user : nvvmMma->getUsers()) {
    auto element = dyn_cast<LLVM::ExtractValueOp>(user);
    if (!element || element.getPosition().size() != 1)
      return failure();
    mma.resultElements.push_back(element);
    mma.resultOps.push_back(user);
    for (Operation *next : user->getUsers())
      if (auto vector = dyn_cast<vector::FromElementsOp>(next))
        rebuilt = vector;
  }
  if (rebuilt) {
    mma.resultOps.push_back(rebuilt);
    mma.result = rebuilt.getResult();
  }
  return mma;
}

/// Runs an mma.sync tile of la-map-to-gpu for all 32 lanes of the warp:
/// the tile's code before the reduction loop (its index math and
/// accumulator loads), each step's fragment loads, and the code after it
/// (the stores) run once per lane into scratch fragments, and each step's
/// instruction is computed on the matrices that the fragments make up.
static LogicalResult emulateMma(RewriterBase &rewriter, Operation *mmaOp,
                                Value lane) {
  FailureOr<MmaInstruction> described = describeMma(mmaOp);
  if (failed(described))
    return mmaOp->emitOpError("is not in la-map-to-gpu's form for emulation");
  MmaInstruction &mma = *described;
  // The reduction loop, or none when it had one step (canonicalization
  // folds it): then the instruction itself splits the tile's code.
  auto kLoop = dyn_cast<scf::ForOp>(mmaOp->getParentOp());
  if (kLoop &&
      getLaDialect(kLoop).getDistributedAttrHelper().isAttrPresent(kLoop))
    kLoop = nullptr; // the warps' loop: the tile is straight-line code
  if (kLoop && (kLoop.getNumRegionIterArgs() != 1 ||
                mma.accumulator != kLoop.getRegionIterArgs()[0]))
    return mmaOp->emitOpError("is not in la-map-to-gpu's form for emulation");
  Operation *split = kLoop ? kLoop.getOperation() : mmaOp;
  Block *tile = split->getBlock();
  SmallVector<Operation *> pre, post;
  for (Operation &op : *tile) {
    if (&op == split || &op == tile->getTerminator() ||
        llvm::is_contained(mma.resultOps, &op))
      continue;
    (op.isBeforeInBlock(split) ? pre : post).push_back(&op);
  }
  Location loc = mmaOp->getLoc();
  Type f32 = rewriter.getF32Type();
  int64_t k = mma.k;
  int64_t perRegister = mma.perRegister;
  rewriter.setInsertionPoint(split);
  auto index = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(rewriter, loc, v);
  };
  Value zero = index(0), one = index(1), lanes = index(32);
  // Scratch buffers at the function's entry: the tile runs inside loops
  // (chunks, warp tiles), where stack allocations would pile up.
  auto function = mmaOp->getParentOfType<FunctionOpInterface>();
  auto scratch = [&](ArrayRef<int64_t> shape) -> Value {
    OpBuilder::InsertionGuard guard(rewriter);
    rewriter.setInsertionPointToStart(&function.getFunctionBody().front());
    return memref::AllocaOp::create(rewriter, loc, MemRefType::get(shape, f32));
  };
  Value aFragments = scratch({32, 4, perRegister});
  Value bFragments = scratch({32, 2, perRegister});
  Value cFragments = scratch({32, 2, 2});
  Value aMatrix = scratch({16, k}), bMatrix = scratch({k, 8}),
        cMatrix = scratch({16, 8});

  // Stores the elements of `registers` at fragments[lane][r][e], as f32:
  // each value is a 2-D vector (registers x elements), or one register, an
  // i32 word of two bf16.
  auto storeFragment = [&](OpBuilder &b, ArrayRef<Value> registers,
                           Value fragments, Value laneValue) {
    SmallVector<SmallVector<Value>> elements;
    // Four f32: the accumulator's elements, row-major.
    if (registers.size() == 4 && registers.front().getType() == f32) {
      elements = {{registers[0], registers[1]}, {registers[2], registers[3]}};
      registers = {};
    }
    for (Value value : registers) {
      if (value.getType().isInteger(32)) {
        Value word = vector::FromElementsOp::create(
            b, loc, VectorType::get({1}, value.getType()), value);
        Value pair = vector::BitCastOp::create(
            b, loc, VectorType::get({2}, b.getBF16Type()), word);
        elements.push_back(
            {vector::ExtractOp::create(b, loc, pair, ArrayRef<int64_t>{0}),
             vector::ExtractOp::create(b, loc, pair, ArrayRef<int64_t>{1})});
        continue;
      }
      auto type = cast<VectorType>(value.getType());
      for (int64_t r = 0; r < type.getDimSize(0); ++r) {
        elements.emplace_back();
        for (int64_t e = 0; e < type.getDimSize(1); ++e)
          elements.back().push_back(vector::ExtractOp::create(
              b, loc, value, ArrayRef<int64_t>{r, e}));
      }
    }
    for (auto [r, row] : llvm::enumerate(elements))
      for (auto [e, element] : llvm::enumerate(row)) {
        Value value = element;
        if (value.getType() != f32)
          value = arith::ExtFOp::create(b, loc, f32, value);
        memref::StoreOp::create(
            b, loc, value, fragments,
            ValueRange{laneValue, arith::ConstantIndexOp::create(b, loc, r),
                       arith::ConstantIndexOp::create(b, loc, e)});
      }
  };
  auto mapped = [](IRMapping &mapping, ArrayRef<Value> values) {
    SmallVector<Value> result;
    for (Value value : values)
      result.push_back(mapping.lookup(value));
    return result;
  };
  // A loop over the lanes that runs the tile's code before the reduction
  // loop (with `lane` the loop's), then `body`.
  auto forEachLane =
      [&](function_ref<void(OpBuilder &, IRMapping &, Value)> body) {
        auto loop = scf::ForOp::create(rewriter, loc, zero, lanes, one);
        OpBuilder::InsertionGuard guard(rewriter);
        rewriter.setInsertionPoint(loop.getBody()->getTerminator());
        IRMapping mapping;
        mapping.map(lane, loop.getInductionVar());
        for (Operation *op : pre)
          rewriter.clone(*op, mapping);
        body(rewriter, mapping, loop.getInductionVar());
      };

  // The accumulators.
  forEachLane([&](OpBuilder &b, IRMapping &mapping, Value laneValue) {
    if (kLoop || mma.accumulator) {
      Value init = kLoop ? kLoop.getInitArgs()[0] : mma.accumulator;
      storeFragment(b, {mapping.lookup(init)}, cFragments, laneValue);
    } else {
      storeFragment(b, mapped(mapping, mma.accumulatorElements), cFragments,
                    laneValue);
    }
  });
  // Each step: every lane's A and B fragments, then the instruction.
  scf::ForOp steps;
  if (kLoop) {
    // The bounds are constants, possibly made among the tile's code that
    // goes.
    std::optional<int64_t> lower = getConstantIntValue(kLoop.getLowerBound()),
                           upper = getConstantIntValue(kLoop.getUpperBound()),
                           step = getConstantIntValue(kLoop.getStep());
    if (!lower || !upper || !step)
      return mmaOp->emitOpError("needs a reduction loop with constant bounds "
                                "for emulation");
    // One op per statement: argument evaluation order is the compiler's.
    Value lowerValue = index(*lower);
    Value upperValue = index(*upper);
    Value stepValue = index(*step);
    steps =
        scf::ForOp::create(rewriter, loc, lowerValue, upperValue, stepValue);
  }
  {
    OpBuilder::InsertionGuard guard(rewriter);
    if (steps)
      rewriter.setInsertionPoint(steps.getBody()->getTerminator());
    forEachLane([&](OpBuilder &b, IRMapping &mapping, Value laneValue) {
      if (kLoop) {
        mapping.map(kLoop.getInductionVar(), steps.getInductionVar());
        for (Operation &op : kLoop.getBody()->without_terminator())
          if (!llvm::is_contained(mma.resultOps, &op))
            b.clone(op, mapping);
      }
      storeFragment(b, mapped(mapping, mma.aRegisters), aFragments, laneValue);
      storeFragment(b, mapped(mapping, mma.bRegisters), bFragments, laneValue);
    });
    // Fragments -> matrices (the hardware's layout), D = A B + C, back.
    auto move = [&](Value fragments, Value matrix, unsigned operand,
                    int64_t registers, int64_t elements, bool toMatrix) {
      for (int64_t l = 0; l < 32; ++l)
        for (int64_t r = 0; r < registers; ++r)
          for (int64_t e = 0; e < elements; ++e) {
            auto [row, col] = fragmentPosition(operand, k, l, r, e);
            SmallVector<Value> fragmentIndex = {index(l), index(r), index(e)};
            SmallVector<Value> matrixIndex = {index(row), index(col)};
            Value from = toMatrix ? fragments : matrix;
            Value to = toMatrix ? matrix : fragments;
            Value element = memref::LoadOp::create(
                rewriter, loc, from, toMatrix ? fragmentIndex : matrixIndex);
            memref::StoreOp::create(rewriter, loc, element, to,
                                    toMatrix ? matrixIndex : fragmentIndex);
          }
    };
    move(aFragments, aMatrix, 0, 4, perRegister, true);
    move(bFragments, bMatrix, 1, 2, perRegister, true);
    move(cFragments, cMatrix, 2, 2, 2, true);
    scf::ForOp::create(
        rewriter, loc, zero, index(16), one, ValueRange{},
        [&](OpBuilder &b, Location l, Value i, ValueRange) {
          scf::ForOp::create(
              b, l, zero, index(8), one, ValueRange{},
              [&](OpBuilder &b, Location l, Value j, ValueRange) {
                Value acc =
                    memref::LoadOp::create(b, l, cMatrix, ValueRange{i, j});
                auto sum = scf::ForOp::create(
                    b, l, zero, index(k), one, ValueRange{acc},
                    [&](OpBuilder &b, Location l, Value kk, ValueRange iter) {
                      Value x = memref::LoadOp::create(b, l, aMatrix,
                                                       ValueRange{i, kk});
                      Value y = memref::LoadOp::create(b, l, bMatrix,
                                                       ValueRange{kk, j});
                      Value product = arith::MulFOp::create(b, l, x, y);
                      scf::YieldOp::create(b, l,
                                           ValueRange{arith::AddFOp::create(
                                               b, l, iter[0], product)});
                    });
                memref::StoreOp::create(b, l, sum.getResult(0), cMatrix,
                                        ValueRange{i, j});
                scf::YieldOp::create(b, l);
              });
          scf::YieldOp::create(b, l);
        });
    move(cFragments, cMatrix, 2, 2, 2, false);
  }
  // The code after the loop, with each lane's accumulator.
  forEachLane([&](OpBuilder &b, IRMapping &mapping, Value laneValue) {
    SmallVector<Value> elements;
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t e = 0; e < 2; ++e)
        elements.push_back(memref::LoadOp::create(
            b, loc, cFragments,
            ValueRange{laneValue, arith::ConstantIndexOp::create(b, loc, r),
                       arith::ConstantIndexOp::create(b, loc, e)}));
    Value acc = vector::FromElementsOp::create(
        b, loc, VectorType::get({2, 2}, f32), elements);
    if (kLoop) {
      mapping.map(kLoop.getResult(0), acc);
    } else {
      if (mma.result)
        mapping.map(mma.result, acc);
      for (LLVM::ExtractValueOp element : mma.resultElements)
        mapping.map(element.getResult(),
                    elements[element.getPosition().front()]);
    }
    for (Operation *op : post)
      b.clone(*op, mapping);
  });
  for (Operation *op : llvm::reverse(post))
    rewriter.eraseOp(op);
  if (kLoop) {
    rewriter.eraseOp(kLoop);
  } else {
    for (Operation *op : llvm::reverse(mma.resultOps))
      rewriter.eraseOp(op);
  }
  for (Operation *op : llvm::reverse(pre))
    rewriter.eraseOp(op);
  return success();
}

/// The launch's body as loops over its blocks, run by one thread.
static LogicalResult emulateLaunch(RewriterBase &rewriter,
                                   gpu::LaunchOp launch) {
  // Tensor-core tiles: the 32 lanes of each warp together.
  SmallVector<Operation *> mmas;
  launch.getBody().walk([&](Operation *op) {
    if (isa<nvgpu::MmaSyncOp, NVVM::MmaOp>(op))
      mmas.push_back(op);
  });
  if (!mmas.empty()) {
    Operation *laneOp = nullptr;
    launch.getBody().walk([&](Operation *op) {
      if (getLaDialect(op).getLaneAttrHelper().isAttrPresent(op))
        laneOp = op;
    });
    if (!laneOp)
      return launch.emitOpError("has mma.sync but no lane (la.lane) value");
    for (Operation *mma : mmas)
      if (failed(emulateMma(rewriter, mma, laneOp->getResult(0))))
        return failure();
  }
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

  // Collected by kind first: rewriting the shared memory erases views and
  // casts that a list of every op would still hold.
  SmallVector<gpu::BarrierOp> barriers;
  SmallVector<scf::ForOp> distributed;
  SmallVector<gpu::DynamicSharedMemoryOp> sharedMemoryOps;
  innermost->walk([&](Operation *op) {
    if (auto barrier = dyn_cast<gpu::BarrierOp>(op))
      barriers.push_back(barrier);
    else if (auto loop = dyn_cast<scf::ForOp>(op);
             loop &&
             getLaDialect(loop).getDistributedAttrHelper().isAttrPresent(loop))
      distributed.push_back(loop);
    else if (auto memory = dyn_cast<gpu::DynamicSharedMemoryOp>(op))
      sharedMemoryOps.push_back(memory);
  });
  for (gpu::BarrierOp barrier : barriers)
    rewriter.eraseOp(barrier);
  for (scf::ForOp loop : distributed)
    rewriter.modifyOpInPlace(loop, [&] {
      loop.setLowerBound(zero);
      loop.setStep(one);
    });
  for (gpu::DynamicSharedMemoryOp op : sharedMemoryOps) {
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
      for (Operation *viewUser : llvm::make_early_inc_range(view->getUsers())) {
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
  rewriter.setInsertionPointAfter(launch);
  if (shared)
    memref::DeallocOp::create(rewriter, loc, shared);
  rewriter.eraseOp(launch);
  return success();
}

/// Device buffers become host buffers, copies between them memref.copy;
/// the waits between them go.
static void emulateHostSide(RewriterBase &rewriter, func::FuncOp func) {
  SmallVector<Operation *> ops;
  func.walk([&](Operation *op) {
    if (isa<gpu::AllocOp, gpu::DeallocOp, gpu::WaitOp, gpu::MemcpyOp>(op))
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
    } else if (auto memcpy = dyn_cast<gpu::MemcpyOp>(op)) {
      memref::CopyOp::create(rewriter, memcpy.getLoc(), memcpy.getSrc(),
                             memcpy.getDst());
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
