//===- DeriveBackward.cpp - gradient functions of la programs -------------===//
//
// Reverse-mode differentiation at the level of la's ops: every la.attention
// and la.recurrence has a gradient op of the same level, so a function of
// them is differentiated by visiting its ops backwards and summing adjoints;
// no per-variant backward is written anywhere.
//
//===----------------------------------------------------------------------===//

#include "la/Dialect/La/LaPasses.h"
#include "la/Dialect/La/LaUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir {
namespace la {
#define GEN_PASS_DEF_LADERIVEBACKWARDPASS
#include "la/Dialect/La/LaPasses.h.inc"
} // namespace la
} // namespace mlir

using namespace mlir;
using namespace mlir::la;

static bool isFloatTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && isa<FloatType>(tensor.getElementType());
}

/// `x` with element type `element` (extf/truncf per element), or `x`.
static Value convertElements(OpBuilder &b, Location loc, Value x,
                             Type element) {
  auto type = cast<RankedTensorType>(x.getType());
  if (type.getElementType() == element)
    return x;
  AffineMap id = b.getMultiDimIdentityMap(type.getRank());
  return buildGeneric(b, loc, ValueRange{x},
                      emptyTensor(b, loc, mixedSizes(b, loc, x), element),
                      {id, id}, type.getRank(), 0,
                      [&](OpBuilder &nb, Location l, ValueRange args) {
                        return castFloat(nb, l, args[0], element);
                      });
}

/// `x` with the static shape of `like` (a tensor.cast where they differ).
static Value castShape(OpBuilder &b, Location loc, Value x, Type like) {
  auto type = cast<RankedTensorType>(x.getType());
  auto target = RankedTensorType::get(cast<RankedTensorType>(like).getShape(),
                                      type.getElementType());
  if (type == target)
    return x;
  return tensor::CastOp::create(b, loc, target, x);
}

//===----------------------------------------------------------------------===//
// Element-wise maps
//===----------------------------------------------------------------------===//
//
// A linalg.generic of parallel loops whose body computes its one result from
// its inputs (a feature map, a gate activation such as
// `-exp(A_log) * softplus(g + dt_bias)`, a sigmoid beta) is differentiated
// by reverse mode over its scalar body: the gradient of input i is one
// linalg.generic over the same loops that recomputes the body, runs its ops
// backwards from the cotangent and sums the adjoint of argument i over the
// loops that input i does not index (a broadcast input's gradient is a
// reduction).
//
// A generic that accumulates into its output, `out + f(inputs)` (a
// contraction such as a feature map's `x W`, with reduction loops), is
// differentiated the same way: the gradient of input i is the adjoint of
// `f`'s argument i, summed over the loops input i does not index, and the
// output's initial value gets the result's adjoint unchanged.

/// Whether `op` of an element-wise body has a rule below.
static bool hasScalarAdjointRule(Operation *op) {
  return isa<arith::AddFOp, arith::SubFOp, arith::MulFOp, arith::DivFOp,
             arith::NegFOp, arith::MaximumFOp, arith::MaxNumFOp,
             arith::MinimumFOp, arith::MinNumFOp, arith::SelectOp,
             arith::ExtFOp, arith::TruncFOp, arith::CmpFOp, arith::ConstantOp,
             math::ExpOp, math::LogOp, math::Log1pOp, math::TanhOp,
             math::SqrtOp, math::RsqrtOp, math::AbsFOp>(op);
}

/// Whether `generic`'s body yields `out + f(inputs)`, `out` its output's
/// element read by that addition only: an accumulation (a contraction).
static bool isAccumulation(linalg::GenericOp generic) {
  BlockArgument out =
      generic.getMatchingBlockArgument(generic.getDpsInitOperand(0));
  if (!out.hasOneUse())
    return false;
  auto sum = dyn_cast<arith::AddFOp>(out.use_begin()->getOwner());
  Operation *terminator = generic.getRegion().front().getTerminator();
  return sum && terminator->getOperand(0) == sum.getResult() &&
         sum.getLhs() != sum.getRhs();
}

/// Checks that `generic` is an element-wise map or an accumulation
/// la-derive-backward differentiates; emits the reason where it is not.
static LogicalResult checkElementwiseMap(linalg::GenericOp generic) {
  auto onPath = [&]() {
    return generic.emitOpError()
           << "is on the path from an argument to a result ";
  };
  if (generic.getNumDpsInits() != 1 || generic->getNumResults() != 1)
    return onPath() << "with " << generic.getNumDpsInits()
                    << " outputs; la-derive-backward differentiates "
                       "element-wise maps with one";
  Block &body = generic.getRegion().front();
  bool readsOutput =
      !generic.getMatchingBlockArgument(generic.getDpsInitOperand(0))
           .use_empty();
  bool accumulation = readsOutput && isAccumulation(generic);
  if (readsOutput && !accumulation)
    return onPath() << "and reads its output other than as 'out + f(inputs)'; "
                       "la-derive-backward differentiates element-wise maps "
                       "of their inputs and accumulations into their output";
  if (generic.getNumReductionLoops() != 0 && !accumulation)
    return onPath() << "and has reduction loops but does not yield 'out + "
                       "f(inputs)'; la-derive-backward differentiates "
                       "element-wise maps (parallel loops) and accumulations "
                       "(contractions)";
  AffineMap outputMap =
      generic.getMatchingIndexingMap(generic.getDpsInitOperand(0));
  if (accumulation ? !outputMap.isProjectedPermutation()
                   : !outputMap.isPermutation())
    return onPath() << "and its output's indexing map is not a "
                    << (accumulation ? "projected permutation" : "permutation")
                    << "; la-derive-backward differentiates element-wise maps "
                       "and accumulations";
  for (OpOperand *input : generic.getDpsInputOperands())
    if (!generic.getMatchingIndexingMap(input).isProjectedPermutation())
      return onPath() << "and input #" << input->getOperandNumber()
                      << "'s indexing map is not a projected permutation; "
                         "la-derive-backward differentiates element-wise maps "
                         "of (broadcast) inputs";
  for (Operation &op : body.without_terminator()) {
    if (hasScalarAdjointRule(&op))
      continue;
    return op.emitOpError()
           << "in an element-wise map on the path from an argument to a "
              "result has no derivative in la-derive-backward (it "
              "differentiates arith add, sub, mul, div, neg, max, min, "
              "select, extf, truncf and math exp, log, log1p, tanh, sqrt, "
              "rsqrt, absf)";
  }
  return success();
}

namespace {
/// Reverse mode over one element-wise body, cloned into a gradient
/// generic: `primal` maps the body's values to their recomputed copies.
class ScalarAdjoints {
public:
  ScalarAdjoints(OpBuilder &b, Location loc, IRMapping &primal)
      : b(b), loc(loc), primal(primal) {}

  /// Runs `body`'s ops backwards from `seed`, the adjoint of its yielded
  /// value.
  void run(Block &body, Value seed) {
    Value yielded = body.getTerminator()->getOperand(0);
    add(yielded, castFloat(b, loc, seed, yielded.getType()));
    for (Operation &op : llvm::reverse(body.without_terminator()))
      if (op.getNumResults() == 1)
        if (Value a = adjoints.lookup(op.getResult(0)))
          propagate(&op, a);
  }

  Value lookup(Value original) const { return adjoints.lookup(original); }

private:
  Value p(Value original) { return primal.lookupOrDefault(original); }

  /// The constant `value` of `x`'s float type.
  Value constantLike(Value x, double value) {
    return arith::ConstantOp::create(b, loc,
                                     b.getFloatAttr(x.getType(), value));
  }

  void add(Value original, Value adjoint) {
    if (!isa<FloatType>(original.getType()))
      return;
    Value &slot = adjoints[original];
    slot = slot ? arith::AddFOp::create(b, loc, slot, adjoint).getResult()
                : adjoint;
  }

  /// select(c, a, 0) and select(c, 0, a) into `onTrue` and `onFalse`.
  void route(Value c, Value a, Value onTrue, Value onFalse) {
    Value zero = constantLike(a, 0.0);
    Value toTrue = arith::SelectOp::create(b, loc, c, a, zero);
    add(onTrue, toTrue);
    Value toFalse = arith::SelectOp::create(b, loc, c, zero, a);
    add(onFalse, toFalse);
  }

  void propagate(Operation *op, Value a) {
    Value r = p(op->getResult(0));
    if (auto add_ = dyn_cast<arith::AddFOp>(op)) {
      add(add_.getLhs(), a);
      add(add_.getRhs(), a);
    } else if (auto sub = dyn_cast<arith::SubFOp>(op)) {
      add(sub.getLhs(), a);
      Value negated = arith::NegFOp::create(b, loc, a);
      add(sub.getRhs(), negated);
    } else if (auto mul = dyn_cast<arith::MulFOp>(op)) {
      Value dLhs = arith::MulFOp::create(b, loc, a, p(mul.getRhs()));
      add(mul.getLhs(), dLhs);
      Value dRhs = arith::MulFOp::create(b, loc, a, p(mul.getLhs()));
      add(mul.getRhs(), dRhs);
    } else if (auto div = dyn_cast<arith::DivFOp>(op)) {
      // d(x/y) = dx / y - (x/y) dy / y.
      Value dLhs = arith::DivFOp::create(b, loc, a, p(div.getRhs()));
      add(div.getLhs(), dLhs);
      Value scaled = arith::MulFOp::create(b, loc, dLhs, r);
      Value dRhs = arith::NegFOp::create(b, loc, scaled);
      add(div.getRhs(), dRhs);
    } else if (auto neg = dyn_cast<arith::NegFOp>(op)) {
      Value negated = arith::NegFOp::create(b, loc, a);
      add(neg.getOperand(), negated);
    } else if (isa<arith::MaximumFOp, arith::MaxNumFOp>(op)) {
      // The larger operand takes the gradient (the first on a tie).
      Value c =
          arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGE,
                                p(op->getOperand(0)), p(op->getOperand(1)));
      route(c, a, op->getOperand(0), op->getOperand(1));
    } else if (isa<arith::MinimumFOp, arith::MinNumFOp>(op)) {
      Value c =
          arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLE,
                                p(op->getOperand(0)), p(op->getOperand(1)));
      route(c, a, op->getOperand(0), op->getOperand(1));
    } else if (auto select = dyn_cast<arith::SelectOp>(op)) {
      route(p(select.getCondition()), a, select.getTrueValue(),
            select.getFalseValue());
    } else if (auto ext = dyn_cast<arith::ExtFOp>(op)) {
      add(ext.getIn(), castFloat(b, loc, a, ext.getIn().getType()));
    } else if (auto trunc = dyn_cast<arith::TruncFOp>(op)) {
      add(trunc.getIn(), castFloat(b, loc, a, trunc.getIn().getType()));
    } else if (auto exp = dyn_cast<math::ExpOp>(op)) {
      Value d = arith::MulFOp::create(b, loc, a, r);
      add(exp.getOperand(), d);
    } else if (auto log = dyn_cast<math::LogOp>(op)) {
      Value d = arith::DivFOp::create(b, loc, a, p(log.getOperand()));
      add(log.getOperand(), d);
    } else if (auto log1p = dyn_cast<math::Log1pOp>(op)) {
      Value one = constantLike(a, 1.0);
      Value onePlus = arith::AddFOp::create(b, loc, one, p(log1p.getOperand()));
      Value d = arith::DivFOp::create(b, loc, a, onePlus);
      add(log1p.getOperand(), d);
    } else if (auto tanh = dyn_cast<math::TanhOp>(op)) {
      // d tanh = (1 - tanh^2) dx.
      Value one = constantLike(a, 1.0);
      Value square = arith::MulFOp::create(b, loc, r, r);
      Value slope = arith::SubFOp::create(b, loc, one, square);
      Value d = arith::MulFOp::create(b, loc, a, slope);
      add(tanh.getOperand(), d);
    } else if (auto sqrt = dyn_cast<math::SqrtOp>(op)) {
      // d sqrt(x) = dx / (2 sqrt(x)).
      Value twice = arith::AddFOp::create(b, loc, r, r);
      Value d = arith::DivFOp::create(b, loc, a, twice);
      add(sqrt.getOperand(), d);
    } else if (auto rsqrt = dyn_cast<math::RsqrtOp>(op)) {
      // d x^(-1/2) = -x^(-3/2) / 2 dx = -r^3 / 2 dx.
      Value half = constantLike(a, -0.5);
      Value square = arith::MulFOp::create(b, loc, r, r);
      Value cube = arith::MulFOp::create(b, loc, square, r);
      Value slope = arith::MulFOp::create(b, loc, cube, half);
      Value d = arith::MulFOp::create(b, loc, a, slope);
      add(rsqrt.getOperand(), d);
    } else if (auto abs = dyn_cast<math::AbsFOp>(op)) {
      Value x = p(abs.getOperand());
      Value negative = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT,
                                             x, constantLike(x, 0.0));
      Value negated = arith::NegFOp::create(b, loc, a);
      Value d = arith::SelectOp::create(b, loc, negative, negated, a);
      add(abs.getOperand(), d);
    }
    // cmpf and constants carry no gradient.
  }

  OpBuilder &b;
  Location loc;
  IRMapping &primal;
  DenseMap<Value, Value> adjoints;
};
} // namespace

/// The gradient of `generic`'s input operand `input` (f32, the input's
/// shape) given `dResult`, the adjoint of its result.
static Value elementwiseInputGradient(OpBuilder &b, linalg::GenericOp generic,
                                      OpOperand *input, IRMapping &primal,
                                      Value dResult) {
  Location loc = generic.getLoc();
  AffineMap inputMap = generic.getMatchingIndexingMap(input);
  AffineMap outputMap =
      generic.getMatchingIndexingMap(generic.getDpsInitOperand(0));
  unsigned numLoops = generic.getNumLoops();
  SmallVector<utils::IteratorType> iterators(numLoops,
                                             utils::IteratorType::reduction);
  for (AffineExpr result : inputMap.getResults())
    iterators[cast<AffineDimExpr>(result).getPosition()] =
        utils::IteratorType::parallel;

  SmallVector<Value> inputs;
  SmallVector<AffineMap> maps;
  for (OpOperand *operand : generic.getDpsInputOperands()) {
    inputs.push_back(primal.lookupOrDefault(operand->get()));
    maps.push_back(generic.getMatchingIndexingMap(operand));
  }
  inputs.push_back(dResult);
  maps.push_back(outputMap);
  Value primalInput = primal.lookupOrDefault(input->get());
  Value init = zeroTensor(b, loc, mixedSizes(b, loc, primalInput));
  maps.push_back(inputMap);
  if (isAccumulation(generic)) {
    // A contraction's input gradient is a contraction too (dW = x^T dz):
    // its loops ordered as a matrix product's, the gradient's dims in its
    // order, then the reduced ones, so that la-tile takes it as one.
    SmallVector<unsigned> order;
    for (AffineExpr result : inputMap.getResults())
      order.push_back(cast<AffineDimExpr>(result).getPosition());
    for (unsigned loop = 0; loop < numLoops; ++loop)
      if (iterators[loop] == utils::IteratorType::reduction)
        order.push_back(loop);
    // Loop `order[i]` of the forward becomes loop i.
    SmallVector<AffineExpr> renamed(numLoops);
    for (auto [position, loop] : llvm::enumerate(order))
      renamed[loop] = b.getAffineDimExpr(position);
    for (AffineMap &map : maps)
      map = map.replaceDimsAndSymbols(renamed, {}, numLoops, 0);
    SmallVector<utils::IteratorType> reordered;
    for (unsigned loop : order)
      reordered.push_back(iterators[loop]);
    iterators = reordered;
  }

  Block &body = generic.getRegion().front();
  unsigned inputIndex = input->getOperandNumber();
  auto gradient = linalg::GenericOp::create(
      b, loc, init.getType(), inputs, ValueRange{init}, maps, iterators,
      [&](OpBuilder &nb, Location l, ValueRange args) {
        IRMapping scalars;
        for (auto [original, copy] :
             llvm::zip(body.getArguments().drop_back(),
                       args.take_front(generic.getNumDpsInputs())))
          scalars.map(original, copy);
        // An accumulation's `out` enters its sum only: its value does not
        // change the inputs' adjoints.
        BlockArgument out = body.getArguments().back();
        if (!out.use_empty())
          scalars.map(out, arith::ConstantOp::create(
                               nb, l, nb.getFloatAttr(out.getType(), 0.0)));
        for (Operation &op : body.without_terminator())
          nb.clone(op, scalars);
        ScalarAdjoints adjoints(nb, l, scalars);
        adjoints.run(body, args[generic.getNumDpsInputs()]);
        Value adjoint = adjoints.lookup(body.getArgument(inputIndex));
        Value sum = args.back();
        if (adjoint) {
          Value extended = extendToF32(nb, l, adjoint);
          sum = arith::AddFOp::create(nb, l, sum, extended);
        }
        linalg::YieldOp::create(nb, l, sum);
      });
  return gradient.getResult(0);
}

/// The gradient of linalg.softmax's input (f32): with y its result and dy
/// the result's adjoint, `dx = y * (dy - sum_d y dy)` over its dimension d.
static Value softmaxInputGradient(OpBuilder &b, linalg::SoftmaxOp softmax,
                                  IRMapping &primal, Value dResult) {
  Location loc = softmax.getLoc();
  Value y = primal.lookup(softmax.getResult()[0]);
  auto type = cast<RankedTensorType>(y.getType());
  unsigned rank = type.getRank();
  uint64_t dim = softmax.getDimension();
  // Loops in the tensor's order, the softmax's dimension moved last (the
  // reduction of buildGeneric's row sum).
  SmallVector<AffineExpr> order;
  for (unsigned d = 0; d < rank; ++d)
    if (d != dim)
      order.push_back(b.getAffineDimExpr(d < dim ? d : d - 1));
  order.insert(order.begin() + dim, b.getAffineDimExpr(rank - 1));
  AffineMap full = AffineMap::get(rank, 0, order, b.getContext());
  AffineMap rows = b.getMultiDimIdentityMap(rank).getMajorSubMap(rank - 1);
  SmallVector<OpFoldResult> sizes = mixedSizes(b, loc, y);
  SmallVector<OpFoldResult> rowSizes(sizes);
  rowSizes.erase(rowSizes.begin() + dim);
  Value dotInit = zeroTensor(b, loc, rowSizes);
  Value dot =
      buildGeneric(b, loc, ValueRange{y, dResult}, dotInit, {full, full, rows},
                   rank - 1, 1, [](OpBuilder &nb, Location l, ValueRange args) {
                     Value product = mulExtended(nb, l, args[0], args[1]);
                     return addF(nb, l, args[2], product);
                   });
  AffineMap id = b.getMultiDimIdentityMap(rank);
  AffineMap rowOf =
      AffineMap::get(rank, 0,
                     llvm::to_vector(llvm::make_filter_range(
                         id.getResults(),
                         [&](AffineExpr e) {
                           return cast<AffineDimExpr>(e).getPosition() != dim;
                         })),
                     b.getContext());
  return buildGeneric(b, loc, ValueRange{y, dResult, dot},
                      emptyTensor(b, loc, sizes, b.getF32Type()),
                      {id, id, rowOf, id}, rank, 0,
                      [](OpBuilder &nb, Location l, ValueRange args) {
                        Value yv = extendToF32(nb, l, args[0]);
                        Value dy = extendToF32(nb, l, args[1]);
                        Value diff = arith::SubFOp::create(nb, l, dy, args[2]);
                        return mulF(nb, l, yv, diff);
                      });
}

namespace {
/// The adjoints of one function being differentiated: original value ->
/// its adjoint in the gradient function (f32, or the cotangent's type).
class Adjoints {
public:
  Adjoints(OpBuilder &builder) : b(builder) {}

  Value lookup(Value primal) const { return adjoints.lookup(primal); }

  /// Adds `gradient` to the adjoint of `primal` (summed in f32).
  void accumulate(Value primal, Value gradient) {
    gradient = castShape(b, gradient.getLoc(), gradient, primal.getType());
    Value &slot = adjoints[primal];
    if (!slot) {
      slot = gradient;
      return;
    }
    Location loc = gradient.getLoc();
    auto type = cast<RankedTensorType>(slot.getType());
    AffineMap id = b.getMultiDimIdentityMap(type.getRank());
    Value lhs = slot;
    slot = buildGeneric(
        b, loc, ValueRange{lhs, gradient},
        emptyTensor(b, loc, mixedSizes(b, loc, lhs), b.getF32Type()),
        {id, id, id}, type.getRank(), 0,
        [](OpBuilder &nb, Location l, ValueRange args) {
          Value x = extendToF32(nb, l, args[0]);
          Value y = extendToF32(nb, l, args[1]);
          return addF(nb, l, x, y);
        });
  }

private:
  OpBuilder &b;
  DenseMap<Value, Value> adjoints;
};

struct LaDeriveBackwardPass
    : la::impl::LaDeriveBackwardPassBase<LaDeriveBackwardPass> {
  using Base::Base;

  void runOnOperation() override;

private:
  FailureOr<func::FuncOp> derive(func::FuncOp forward, SymbolTable &symbols);
  LogicalResult differentiate(Operation *op, OpBuilder &b, IRMapping &primal,
                              Adjoints &adjoints,
                              const DenseSet<Value> &active);
};
} // namespace

/// Collects the values of `body` that depend on a float tensor argument;
/// fails, with a diagnostic, at an op on that path la cannot differentiate.
static LogicalResult findActive(Block &body, DenseSet<Value> &active) {
  for (BlockArgument arg : body.getArguments())
    if (isFloatTensor(arg.getType()))
      active.insert(arg);
  for (Operation &op : body.without_terminator()) {
    bool dependsOnInput = false;
    op.walk([&](Operation *nested) {
      for (Value operand : nested->getOperands())
        dependsOnInput |= active.contains(operand);
    });
    // Shape queries (tensor.dim) and other ops without float tensor results
    // carry no gradient.
    if (!dependsOnInput || llvm::none_of(op.getResultTypes(), isFloatTensor))
      continue;
    if (auto generic = dyn_cast<linalg::GenericOp>(op)) {
      if (failed(checkElementwiseMap(generic)))
        return failure();
    } else if (auto softmax = dyn_cast<linalg::SoftmaxOp>(op);
               softmax && !softmax.hasPureTensorSemantics()) {
      return op.emitOpError() << "is on the path from an argument to a "
                                 "result on buffers; la-derive-backward "
                                 "differentiates linalg.softmax on tensors";
    } else if (!isa<AttentionOp, RecurrenceOp, SlidingWindowHybridOp,
                    tensor::CastOp, linalg::SoftmaxOp, tensor::InsertSliceOp,
                    tensor::ExtractSliceOp>(op)) {
      return op.emitOpError()
             << "is on the path from an argument to a result, and "
                "la-derive-backward differentiates only la.attention, "
                "la.recurrence, la.sliding_window_hybrid, linalg.softmax, "
                "tensor.cast, tensor.insert_slice, tensor.extract_slice, "
                "element-wise linalg.generic maps and accumulations (compute "
                "it outside the function, or on inputs that need no "
                "gradient)";
    }
    for (Value result : op.getResults())
      if (isFloatTensor(result.getType()))
        active.insert(result);
  }
  return success();
}

/// f32 tensor types of the shapes of `values` (the gradient ops' results).
static SmallVector<Type> gradientTypes(ArrayRef<Value> values) {
  SmallVector<Type> types;
  for (Value value : values)
    if (value)
      types.push_back(RankedTensorType::get(
          cast<RankedTensorType>(value.getType()).getShape(),
          Float32Type::get(value.getContext())));
  return types;
}

/// The adjoint of `result` as a d_o: the element type of `like`, or zeros.
static Value outputCotangent(OpBuilder &b, Location loc, Value adjoint,
                             Value primalResult, Type element) {
  if (!adjoint)
    return filledTensor(b, loc, mixedSizes(b, loc, primalResult), element, 0.0);
  return convertElements(b, loc, adjoint, element);
}

LogicalResult
LaDeriveBackwardPass::differentiate(Operation *op, OpBuilder &b,
                                    IRMapping &primal, Adjoints &adjoints,
                                    const DenseSet<Value> &active) {
  Location loc = op->getLoc();
  auto accumulate = [&](Value forwardOperand, Value gradient) {
    if (forwardOperand && gradient && active.contains(forwardOperand))
      adjoints.accumulate(forwardOperand, gradient);
  };

  if (auto cast = dyn_cast<tensor::CastOp>(op)) {
    if (Value adjoint = adjoints.lookup(cast.getResult()))
      accumulate(cast.getSource(), adjoint);
    return success();
  }

  if (auto generic = dyn_cast<linalg::GenericOp>(op)) {
    Value dResult = adjoints.lookup(generic->getResult(0));
    if (!dResult)
      return success();
    for (OpOperand *input : generic.getDpsInputOperands())
      if (active.contains(input->get()))
        accumulate(input->get(), elementwiseInputGradient(b, generic, input,
                                                          primal, dResult));
    // An accumulation's initial value (a bias, say) enters its result once.
    Value init = generic.getDpsInitOperand(0)->get();
    if (isAccumulation(generic) && active.contains(init))
      accumulate(init, dResult);
    return success();
  }

  if (auto softmax = dyn_cast<linalg::SoftmaxOp>(op)) {
    if (Value dResult = adjoints.lookup(softmax.getResult()[0]))
      accumulate(softmax.getInput(),
                 softmaxInputGradient(b, softmax, primal, dResult));
    return success();
  }

  // A slice's offsets, sizes and strides in the gradient function.
  auto mappedList = [&](ArrayRef<OpFoldResult> list) {
    SmallVector<OpFoldResult> result;
    for (OpFoldResult item : list)
      result.push_back(isa<Value>(item) ? OpFoldResult(primal.lookupOrDefault(
                                              cast<Value>(item)))
                                        : item);
    return result;
  };
  // `source` inserted into `dest` where `slice` reads or writes.
  auto insertAt = [&](Value source, Value dest,
                      OffsetSizeAndStrideOpInterface slice) -> Value {
    return tensor::InsertSliceOp::create(
        b, loc, source, dest, mappedList(slice.getMixedOffsets()),
        mappedList(slice.getMixedSizes()), mappedList(slice.getMixedStrides()));
  };

  if (auto insert = dyn_cast<tensor::InsertSliceOp>(op)) {
    // The slice's adjoint is the result's adjoint there; the destination's
    // is the rest of it (zeros where the slice was written).
    Value dResult = adjoints.lookup(insert.getResult());
    if (!dResult)
      return success();
    auto sourceType = cast<RankedTensorType>(insert.getSourceType());
    auto dSourceType =
        RankedTensorType::get(sourceType.getShape(), b.getF32Type());
    Value f32Result = convertElements(b, loc, dResult, b.getF32Type());
    if (active.contains(insert.getSource())) {
      Value dSource = tensor::ExtractSliceOp::create(
          b, loc, dSourceType, f32Result, mappedList(insert.getMixedOffsets()),
          mappedList(insert.getMixedSizes()),
          mappedList(insert.getMixedStrides()));
      accumulate(insert.getSource(), dSource);
    }
    if (active.contains(insert.getDest())) {
      Value zeros = zeroTensor(
          b, loc, mixedSizes(b, loc, primal.lookup(insert.getSource())));
      accumulate(insert.getDest(), insertAt(zeros, f32Result, insert));
    }
    return success();
  }

  if (auto extract = dyn_cast<tensor::ExtractSliceOp>(op)) {
    // The source's adjoint: the result's where it was read, zeros elsewhere.
    Value dResult = adjoints.lookup(extract.getResult());
    if (!dResult)
      return success();
    Value zeros = zeroTensor(
        b, loc, mixedSizes(b, loc, primal.lookup(extract.getSource())));
    Value f32Result = convertElements(b, loc, dResult, b.getF32Type());
    accumulate(extract.getSource(), insertAt(f32Result, zeros, extract));
    return success();
  }

  // The adjoint of an optional final state, as its f32 cotangent.
  auto finalStateCotangent = [&](Value finalState) -> Value {
    Value adjoint = finalState ? adjoints.lookup(finalState) : Value();
    if (!adjoint)
      return Value();
    return castShape(b, loc, convertElements(b, loc, adjoint, b.getF32Type()),
                     finalState.getType());
  };

  if (auto attention = dyn_cast<AttentionOp>(op)) {
    Value dO = adjoints.lookup(attention.getO());
    Value dFinal = finalStateCotangent(attention.getFinalState());
    if (!dO && !dFinal)
      return success();
    Value pO = primal.lookup(attention.getO());
    dO = outputCotangent(b, loc, dO, pO,
                         attention.getV().getType().getElementType());
    auto mapped = [&](Value v) { return v ? primal.lookup(v) : Value(); };
    Value inputs[] = {
        attention.getQ(),     attention.getK(),           attention.getV(),
        attention.getG(),     attention.getGv(),          attention.getBeta(),
        attention.getErase(), attention.getWrite(),       attention.getA(),
        attention.getB(),     attention.getInitialState()};
    auto grad = AttentionGradOp::create(
        b, loc, gradientTypes(inputs), mapped(attention.getQ()),
        mapped(attention.getK()), mapped(attention.getV()),
        mapped(attention.getG()), mapped(attention.getGv()),
        mapped(attention.getBeta()), mapped(attention.getErase()),
        mapped(attention.getWrite()), mapped(attention.getA()),
        mapped(attention.getB()), mapped(attention.getInitialState()),
        mapped(attention.getCuSeqlens()), dO, dFinal, attention.getUpdateAttr(),
        attention.getGateAttr(), attention.getLogDecayAttr(),
        attention.getScaleAttr(), attention.getNormalizerAttr(),
        attention.getEpsAttr(), attention.getQkL2normAttr(),
        attention.getAllowNegEigvalAttr(), attention.getEraseReadKeyAttr(),
        attention.getReverseAttr(), b.getI64IntegerAttr(checkpoint));
    accumulate(attention.getQ(), grad.getDq());
    accumulate(attention.getK(), grad.getDk());
    accumulate(attention.getV(), grad.getDv());
    accumulate(attention.getG(), grad.getDg());
    accumulate(attention.getGv(), grad.getDgv());
    accumulate(attention.getBeta(), grad.getDbeta());
    accumulate(attention.getErase(), grad.getDerase());
    accumulate(attention.getWrite(), grad.getDwrite());
    accumulate(attention.getA(), grad.getDa());
    accumulate(attention.getB(), grad.getDb());
    accumulate(attention.getInitialState(), grad.getDInitialState());
    return success();
  }

  if (auto hybrid = dyn_cast<SlidingWindowHybridOp>(op)) {
    Value dO = adjoints.lookup(hybrid.getO());
    Value dFinal = finalStateCotangent(hybrid.getFinalState());
    if (!dO && !dFinal)
      return success();
    // The adjoint program is built from the recomputed forward op (its
    // operands are the gradient function's), in f32.
    auto recomputed =
        primal.lookup(hybrid.getO()).getDefiningOp<SlidingWindowHybridOp>();
    dO = outputCotangent(b, loc, dO, recomputed.getO(), b.getF32Type());
    SlidingWindowHybridGradients grads =
        buildSlidingWindowHybridGradients(b, recomputed, dO, dFinal);
    accumulate(hybrid.getQ(), grads.dq);
    accumulate(hybrid.getK(), grads.dk);
    accumulate(hybrid.getV(), grads.dv);
    accumulate(hybrid.getFeatureQ(), grads.dFeatureQ);
    accumulate(hybrid.getFeatureK(), grads.dFeatureK);
    accumulate(hybrid.getInitialState(), grads.dInitialState);
    return success();
  }

  auto recurrence = cast<RecurrenceOp>(op);
  Value dO = adjoints.lookup(recurrence.getO());
  Value dFinal = adjoints.lookup(recurrence.getFinalState());
  if (!dO && !dFinal)
    return success();
  dO = outputCotangent(b, loc, dO, primal.lookup(recurrence.getO()),
                       recurrence.getO().getType().getElementType());
  if (dFinal)
    dFinal = convertElements(b, loc, dFinal, b.getF32Type());
  auto mapped = [&](Value v) { return v ? primal.lookup(v) : Value(); };
  Value state = recurrence.getInitialState();
  if (dFinal)
    dFinal = castShape(b, loc, dFinal, state.getType());

  // A reverse recurrence is the forward one on its tokens flipped; with
  // cu_seqlens its sequences then come in reverse order too (offsets
  // T - cu[N - i], states flipped along N). Its gradient is the forward
  // recurrence's on the flipped operands, flipped back.
  ReverseFlips flips(b, loc, recurrence.getReverse(),
                     mapped(recurrence.getCuSeqlens()),
                     mapped(recurrence.getQ()));
  auto forwardOperand = [&](Value x) { return flips.tokens(mapped(x)); };

  Value inputs[] = {recurrence.getQ(),    recurrence.getK(),
                    recurrence.getV(),    state,
                    recurrence.getG(),    recurrence.getGv(),
                    recurrence.getBeta(), recurrence.getA(),
                    recurrence.getB()};
  // One op per statement: the IR must not depend on the order in which
  // the host compiler evaluates arguments.
  Value q = forwardOperand(recurrence.getQ());
  Value k = forwardOperand(recurrence.getK());
  Value v = forwardOperand(recurrence.getV());
  Value g = forwardOperand(recurrence.getG());
  Value gv = forwardOperand(recurrence.getGv());
  Value beta = forwardOperand(recurrence.getBeta());
  Value lowA = forwardOperand(recurrence.getA());
  Value lowB = forwardOperand(recurrence.getB());
  Value initial = flips.sequences(mapped(state));
  dO = flips.tokens(dO);
  dFinal = flips.sequences(dFinal);
  auto grad = RecurrenceGradOp::create(
      b, loc, gradientTypes(inputs), q, k, v, g, gv, beta, lowA, lowB,
      flips.offsets(), initial, dO, dFinal, recurrence.getGateAttr(),
      recurrence.getLogDecayAttr(), recurrence.getLowRankAttr(),
      recurrence.getScaleAttr(), recurrence.getNormalizerAttr(),
      recurrence.getEpsAttr(), b.getI64IntegerAttr(checkpoint));
  accumulate(recurrence.getQ(), flips.tokens(grad.getDq()));
  accumulate(recurrence.getK(), flips.tokens(grad.getDk()));
  accumulate(recurrence.getV(), flips.tokens(grad.getDv()));
  accumulate(state, flips.sequences(grad.getDInitialState()));
  accumulate(recurrence.getG(), flips.tokens(grad.getDg()));
  accumulate(recurrence.getGv(), flips.tokens(grad.getDgv()));
  accumulate(recurrence.getBeta(), flips.tokens(grad.getDbeta()));
  accumulate(recurrence.getA(), flips.tokens(grad.getDa()));
  accumulate(recurrence.getB(), flips.tokens(grad.getDb()));
  return success();
}

FailureOr<func::FuncOp> LaDeriveBackwardPass::derive(func::FuncOp forward,
                                                     SymbolTable &symbols) {
  Block &body = forward.getBody().front();
  DenseSet<Value> active;
  if (!forward.getBody().hasOneBlock())
    return forward.emitOpError(
        "has several blocks; la-derive-backward needs one");
  if (failed(findActive(body, active)))
    return failure();
  // A pool of states is serving's (decode updates it in place); training
  // passes each sequence's state.
  for (Operation &op : body)
    if (auto attention = dyn_cast<AttentionOp>(op);
        attention && attention.getStateIndices())
      return attention.emitOpError(
          "with 'state_indices' cannot be differentiated (pass the "
          "sequences' initial states instead of a pool)");
    else if (attention && attention.getCheckpoints())
      // Serving's too; training that reads a checkpoint differentiates
      // the segments as separate calls.
      return attention.emitOpError(
          "with 'checkpoint_every' cannot be differentiated yet (split the "
          "sequence at the checkpoints instead)");
    else if (auto recurrence = dyn_cast<RecurrenceOp>(op);
             recurrence && recurrence.getStateIndices())
      return recurrence.emitOpError(
          "with 'state_indices' cannot be differentiated (pass the "
          "sequences' initial states instead of a pool)");
  for (auto recurrence : body.getOps<RecurrenceOp>()) {
    if (recurrence.hasQueryGroups())
      return recurrence.emitOpError(
          "with grouped query heads cannot be differentiated yet (the "
          "gradient of an la.attention with grouped query heads can: its "
          "lowering repeats the states per query head)");
    if (recurrence.getTransposedQuery())
      return recurrence.emitOpError(
          "with 'transposed_query' cannot be differentiated yet (its "
          "value-side read is the backward's own form)");
  }

  std::string name = (forward.getSymName() + suffix).str();
  if (symbols.lookup(name))
    return forward.emitOpError()
           << "cannot get the gradient function '" << name
           << "': the name is taken (choose another 'suffix')";

  // (arguments..., one cotangent per result) -> one gradient per float
  // tensor argument.
  FunctionType type = forward.getFunctionType();
  SmallVector<Type> argTypes(type.getInputs());
  llvm::append_range(argTypes, type.getResults());
  SmallVector<BlockArgument> differentiable;
  SmallVector<Type> resultTypes;
  for (BlockArgument arg : body.getArguments()) {
    if (!isFloatTensor(arg.getType()))
      continue;
    differentiable.push_back(arg);
    resultTypes.push_back(
        RankedTensorType::get(cast<RankedTensorType>(arg.getType()).getShape(),
                              Float32Type::get(&getContext())));
  }

  OpBuilder b(forward);
  b.setInsertionPointAfter(forward);
  auto gradient = func::FuncOp::create(
      b, forward.getLoc(), name, b.getFunctionType(argTypes, resultTypes));
  for (NamedAttribute attr : forward->getDiscardableAttrs())
    gradient->setAttr(attr.getName(), attr.getValue());
  gradient.setVisibility(forward.getVisibility());
  Block *entry = gradient.addEntryBlock();
  b.setInsertionPointToStart(entry);

  // Recompute the forward.
  IRMapping primal;
  for (auto [original, copy] :
       llvm::zip(body.getArguments(), entry->getArguments()))
    primal.map(original, copy);
  for (Operation &op : body.without_terminator())
    b.clone(op, primal);

  // Seed the results' adjoints with the cotangents, then go backwards.
  Adjoints adjoints(b);
  Operation *terminator = body.getTerminator();
  unsigned numInputs = type.getNumInputs();
  for (auto [index, result] : llvm::enumerate(terminator->getOperands()))
    if (active.contains(result))
      adjoints.accumulate(result, entry->getArgument(numInputs + index));
  for (Operation &op : llvm::reverse(body.without_terminator()))
    if (llvm::any_of(op.getResults(),
                     [&](Value r) { return active.contains(r); }))
      if (failed(differentiate(&op, b, primal, adjoints, active)))
        return failure();

  SmallVector<Value> gradients;
  for (auto [arg, resultType] : llvm::zip(differentiable, resultTypes)) {
    Value copy = primal.lookup(arg);
    Value adjoint = adjoints.lookup(arg);
    if (!adjoint)
      adjoint =
          zeroTensor(b, forward.getLoc(), mixedSizes(b, arg.getLoc(), copy));
    adjoint = convertElements(b, forward.getLoc(), adjoint, b.getF32Type());
    gradients.push_back(castShape(b, forward.getLoc(), adjoint, resultType));
  }
  func::ReturnOp::create(b, terminator->getLoc(), gradients);
  // The recomputed forward ops whose results the backward does not read.
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(*entry)))
    if (isOpTriviallyDead(&op))
      op.erase();
  symbols.insert(gradient);
  return gradient;
}

void LaDeriveBackwardPass::runOnOperation() {
  if (checkpoint < 1) {
    getOperation().emitError()
        << "la-derive-backward: 'checkpoint' must be >= 1, got "
        << static_cast<int64_t>(checkpoint);
    return signalPassFailure();
  }
  ModuleOp module = getOperation();
  SymbolTable symbols(module);
  SmallVector<func::FuncOp> forwards;
  for (auto function : module.getOps<func::FuncOp>()) {
    if (function.isExternal())
      continue;
    bool hasLaOp = false;
    function.walk([&](Operation *op) {
      hasLaOp |= isa<AttentionOp, RecurrenceOp, SlidingWindowHybridOp>(op);
    });
    if (hasLaOp)
      forwards.push_back(function);
  }
  for (func::FuncOp forward : forwards)
    if (failed(derive(forward, symbols)))
      return signalPassFailure();
  if (keepForward)
    return;
  for (func::FuncOp forward : forwards)
    if (SymbolTable::symbolKnownUseEmpty(forward, module))
      symbols.erase(forward);
}
