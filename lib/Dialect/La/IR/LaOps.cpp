//===- LaOps.cpp - operations of the la dialect ---------------------------===//

#include "la/Dialect/La/LaOps.h"
#include "la/Dialect/La/LaVariants.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>

using namespace mlir;
using namespace mlir::la;

static constexpr float kDefaultEps = 1e-6f;

//===----------------------------------------------------------------------===//
// Variant keywords of la.attention
//===----------------------------------------------------------------------===//

static ParseResult parseVariant(OpAsmParser &parser, UpdateRuleAttr &update,
                                GateKindAttr &gate) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseKeyword(&keyword))
    return failure();
  if (const VariantInfo *variant = lookupVariant(keyword)) {
    MLIRContext *ctx = parser.getContext();
    update = UpdateRuleAttr::get(ctx, variant->update);
    gate = GateKindAttr::get(ctx, variant->gate);
    return success();
  }
  InFlightDiagnostic diag = parser.emitError(loc)
                            << "unknown linear-attention variant '" << keyword
                            << "'; expected one of";
  for (const VariantInfo &variant : getVariants())
    diag << " '" << variant.keyword << "'";
  return diag;
}

static void printVariant(OpAsmPrinter &printer, Operation *,
                         UpdateRuleAttr update, GateKindAttr gate) {
  printer << lookupVariant(update.getValue(), gate.getValue()).keyword;
}

//===----------------------------------------------------------------------===//
// la.attention's result types: o, then the optional final state (rank 4) and
// checkpoints (rank 5), told apart by their rank
//===----------------------------------------------------------------------===//

static ParseResult parseAttentionResults(OpAsmParser &parser, Type &o,
                                         Type &finalState, Type &checkpoints) {
  if (parser.parseType(o))
    return failure();
  while (succeeded(parser.parseOptionalComma())) {
    SMLoc loc = parser.getCurrentLocation();
    Type type;
    if (parser.parseType(type))
      return failure();
    auto ranked = dyn_cast<RankedTensorType>(type);
    Type &slot = ranked && ranked.getRank() == 5 ? checkpoints : finalState;
    if (slot)
      return parser.emitError(loc)
             << "expects at most one final state ([N,HV,K,V]) and one "
                "checkpoints result ([B,T/n,HV,K,V]) after o";
    if (&slot == &finalState && checkpoints)
      return parser.emitError(loc)
             << "expects the final state before the checkpoints";
    slot = type;
  }
  return success();
}

static void printAttentionResults(OpAsmPrinter &printer, Operation *, Type o,
                                  Type finalState, Type checkpoints) {
  printer << o;
  for (Type type : {finalState, checkpoints})
    if (type)
      printer << ", " << type;
}

//===----------------------------------------------------------------------===//
// Bare enum keywords (decay(channel), low_rank(delta))
//===----------------------------------------------------------------------===//

template <typename AttrT>
static ParseResult parseEnumKeyword(OpAsmParser &parser, AttrT &attr) {
  using EnumT = decltype(std::declval<AttrT>().getValue());
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseKeyword(&keyword))
    return failure();
  std::optional<EnumT> value = symbolizeEnum<EnumT>(keyword);
  if (!value)
    return parser.emitError(loc)
           << "unknown " << AttrT::getMnemonic() << " kind '" << keyword << "'";
  attr = AttrT::get(parser.getContext(), *value);
  return success();
}

template <typename AttrT>
static void printEnumKeyword(OpAsmPrinter &printer, Operation *, AttrT attr) {
  printer << stringifyEnum(attr.getValue());
}

//===----------------------------------------------------------------------===//
// Shared verification
//===----------------------------------------------------------------------===//

namespace {
/// The operands and results that both levels share, with their roles.
struct RecurrenceSignature {
  Value q, k, v, g, beta, initialState, cuSeqlens;
  // la.attention's and la.recurrence's state pool rows (null for the
  // gradient ops, which have none).
  Value stateIndices;
  Value o, finalState;
  // How diagnostics name o and final_state (la.recurrence_grad checks its
  // d_o and d_final_state in their places).
  StringRef oName = "o", finalStateName = "final_state";
  GateKind gate;
  std::optional<ArrayRef<float>> logDecay;
  float scale;
  std::optional<float> eps;
  bool normalizer;
  // Level 0 takes g, beta and erase per key head or per value head.
  bool perValueHeadGates = false;
  // How q may have other heads than k: never, or grouped query heads, each
  // group reading one state. Level 0 (ONNX's grouped query heads) groups
  // them over key heads that are also the value heads (HV = H); level 1
  // groups them over the value heads (the states: HQ = G * HV, query head
  // hq reads state hq / G).
  enum class QueryHeads { LikeKeys, GroupsOverKeys, GroupsOverValues };
  QueryHeads queryHeads = QueryHeads::LikeKeys;
};

/// Static dims of the problem, ShapedType::kDynamic where unknown.
struct ProblemDims {
  int64_t batch, time, heads, keyDim, valueHeads, valueDim;
};
} // namespace

static bool compatible(int64_t lhs, int64_t rhs) {
  return ShapedType::isDynamic(lhs) || ShapedType::isDynamic(rhs) || lhs == rhs;
}

static std::string formatShape(ArrayRef<int64_t> shape) {
  std::string text = "[";
  llvm::raw_string_ostream os(text);
  llvm::interleave(
      shape, os,
      [&](int64_t dim) {
        if (ShapedType::isDynamic(dim))
          os << "?";
        else
          os << dim;
      },
      ",");
  os << "]";
  return text;
}

/// Checks that `value` has the shape `expected` (dynamic dims match anything).
static LogicalResult verifyShape(Operation *op, Value value, StringRef name,
                                 ArrayRef<int64_t> expected, StringRef layout) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getRank() != static_cast<int64_t>(expected.size()))
    return op->emitOpError()
           << "expects '" << name << "' of rank " << expected.size() << " "
           << layout << ", got rank " << type.getRank();
  for (auto [actual, want] : llvm::zip(type.getShape(), expected))
    if (!compatible(actual, want))
      return op->emitOpError()
             << "expects '" << name << "' of shape " << formatShape(expected)
             << " " << layout << ", got " << formatShape(type.getShape());
  return success();
}

/// Checks packed sequences' `cuSeqlens` for a [B,T,...] problem: B = 1, N+1
/// >= 2 offsets, and offsets known at compile time valid (the kernels trust
/// them: they are loop bounds and slice offsets).
static LogicalResult verifySequenceOffsets(Operation *op, Value cuSeqlens,
                                           int64_t batch, int64_t time) {
  if (!compatible(batch, 1))
    return op->emitOpError()
           << "expects B = 1 with 'cu_seqlens' (packed sequences), got B = "
           << batch;
  int64_t offsets = cast<RankedTensorType>(cuSeqlens.getType()).getDimSize(0);
  if (!ShapedType::isDynamic(offsets) && offsets < 2)
    return op->emitOpError()
           << "expects 'cu_seqlens' to hold N+1 >= 2 offsets, got " << offsets;
  DenseIntElementsAttr constant;
  if (!matchPattern(cuSeqlens, m_Constant(&constant)))
    return success();
  SmallVector<int64_t> values;
  for (const APInt &value : constant.getValues<APInt>())
    values.push_back(value.getSExtValue());
  for (auto [i, value] : llvm::enumerate(values)) {
    bool decreasing = i > 0 && value < values[i - 1];
    bool outside = value < 0 || (!ShapedType::isDynamic(time) && value > time);
    bool badEnd = (i == 0 && value != 0) ||
                  (i + 1 == values.size() && !ShapedType::isDynamic(time) &&
                   value != time);
    if (decreasing || outside || badEnd)
      return op->emitOpError()
             << "expects 'cu_seqlens' to go non-decreasing from 0 to T = "
             << time << ", but offset " << i << " is " << value;
  }
  return success();
}

/// The heads dim that a gate-like operand `x` ([B,T,heads,...]) must have:
/// HV where per-value-head operands are allowed and `x` has HV (static)
/// heads, H otherwise.
static int64_t gateHeads(const RecurrenceSignature &sig, const ProblemDims &d,
                         Value x) {
  auto type = cast<RankedTensorType>(x.getType());
  if (sig.perValueHeadGates && type.getRank() >= 3 &&
      !ShapedType::isDynamic(d.valueHeads) &&
      type.getDimSize(2) == d.valueHeads)
    return d.valueHeads;
  return d.heads;
}

static LogicalResult verifySignature(Operation *op,
                                     const RecurrenceSignature &sig) {
  auto qType = cast<RankedTensorType>(sig.q.getType());
  auto vType = cast<RankedTensorType>(sig.v.getType());
  if (qType.getRank() != 4)
    return op->emitOpError()
           << "expects 'q' of rank 4 [B,T,H,K], got rank " << qType.getRank();
  if (vType.getRank() != 4)
    return op->emitOpError()
           << "expects 'v' of rank 4 [B,T,HV,V], got rank " << vType.getRank();
  ArrayRef<int64_t> qShape = qType.getShape();
  ArrayRef<int64_t> vShape = vType.getShape();
  ProblemDims d{qShape[0], qShape[1], qShape[2],
                qShape[3], vShape[2], vShape[3]};
  // The heads of the output: the value heads, or with grouped query heads
  // the query heads.
  int64_t outputHeads = d.valueHeads;
  auto kType = cast<RankedTensorType>(sig.k.getType());
  int64_t queryHeads = qShape[2];
  using QueryHeads = RecurrenceSignature::QueryHeads;
  bool grouped = sig.queryHeads != QueryHeads::LikeKeys &&
                 kType.getRank() == 4 && !ShapedType::isDynamic(queryHeads) &&
                 !ShapedType::isDynamic(kType.getDimSize(2)) &&
                 queryHeads != kType.getDimSize(2);
  if (grouped)
    d.heads = kType.getDimSize(2);
  if (grouped && sig.queryHeads == QueryHeads::GroupsOverValues) {
    if (ShapedType::isDynamic(d.valueHeads))
      return op->emitOpError()
             << "expects static value heads (HV) with grouped query heads ("
             << queryHeads << " query heads over H = " << d.heads
             << " key heads)";
    if (d.valueHeads == 0 || queryHeads % d.valueHeads != 0)
      return op->emitOpError()
             << "expects the query heads (" << queryHeads
             << ") to be H = " << d.heads
             << " (one per key head) or a multiple of the value heads (HV = "
             << d.valueHeads << ": grouped query heads, each group reading "
             << "one state)";
    outputHeads = queryHeads;
  } else if (grouped) {
    if (d.heads == 0 || queryHeads % d.heads != 0)
      return op->emitOpError()
             << "expects the query heads (" << queryHeads
             << ") to be a multiple of the key heads (H = " << d.heads << ")";
    if (!compatible(d.valueHeads, d.heads))
      return op->emitOpError()
             << "expects grouped query heads (" << queryHeads
             << " query heads over H = " << d.heads
             << " key heads) to share value heads with the keys (HV = H), "
                "got HV = "
             << d.valueHeads;
    outputHeads = queryHeads;
  }
  if (failed(verifyShape(op, sig.k, "k", {d.batch, d.time, d.heads, d.keyDim},
                         outputHeads == d.valueHeads && d.heads == qShape[2]
                             ? "[B,T,H,K] like 'q'"
                             : "[B,T,H,K]")))
    return failure();
  if (!compatible(vShape[0], d.batch) || !compatible(vShape[1], d.time))
    return op->emitOpError()
           << "expects 'v' to share B and T with 'q' " << formatShape(qShape)
           << ", got " << formatShape(vShape);
  if (!ShapedType::isDynamic(d.heads) && !ShapedType::isDynamic(d.valueHeads) &&
      (d.heads == 0 || d.valueHeads % d.heads != 0))
    return op->emitOpError()
           << "expects the value heads (HV = " << d.valueHeads
           << ") to be a multiple of the key heads (H = " << d.heads << ")";
  if (cast<RankedTensorType>(sig.k.getType()).getElementType() !=
      qType.getElementType())
    return op->emitOpError("expects 'q' and 'k' of one element type");
  auto heads = [&](Value x) { return gateHeads(sig, d, x); };
  StringRef perHead = sig.perValueHeadGates ? "[B,T,H] or [B,T,HV]" : "[B,T,H]";
  StringRef perChannel =
      sig.perValueHeadGates ? "[B,T,H,K] or [B,T,HV,K]" : "[B,T,H,K]";

  // The gate.
  switch (sig.gate) {
  case GateKind::None:
  case GateKind::Fixed:
    if (sig.g)
      return op->emitOpError() << "gate '" << stringifyGateKind(sig.gate)
                               << "' takes no 'g' operand";
    break;
  case GateKind::Scalar:
  case GateKind::Channel:
    if (!sig.g)
      return op->emitOpError() << "gate '" << stringifyGateKind(sig.gate)
                               << "' requires a 'g' operand";
    if (sig.gate == GateKind::Scalar &&
        failed(verifyShape(op, sig.g, "g", {d.batch, d.time, heads(sig.g)},
                           (perHead + " for a scalar gate").str())))
      return failure();
    if (sig.gate == GateKind::Channel &&
        failed(verifyShape(op, sig.g, "g",
                           {d.batch, d.time, heads(sig.g), d.keyDim},
                           (perChannel + " for a channel-wise gate").str())))
      return failure();
    break;
  }
  if (sig.gate == GateKind::Fixed) {
    if (!sig.logDecay)
      return op->emitOpError(
          "gate 'fixed' requires the 'log_decay' attribute (one per head)");
    if (!ShapedType::isDynamic(d.heads) &&
        static_cast<int64_t>(sig.logDecay->size()) != d.heads)
      return op->emitOpError()
             << "expects 'log_decay' to have one value per key head (H = "
             << d.heads << "), got " << sig.logDecay->size();
    for (float decay : *sig.logDecay)
      if (!std::isfinite(decay) || decay > 0.0f)
        return op->emitOpError()
               << "expects every 'log_decay' to be finite and <= 0, got "
               << decay;
  } else if (sig.logDecay) {
    return op->emitOpError() << "'log_decay' is only valid with gate 'fixed', "
                             << "not '" << stringifyGateKind(sig.gate) << "'";
  }

  if (sig.beta &&
      failed(verifyShape(op, sig.beta, "beta",
                         {d.batch, d.time, heads(sig.beta)}, perHead)))
    return failure();

  // Sequences and states.
  int64_t numStates = d.batch;
  if (sig.cuSeqlens) {
    if (failed(verifySequenceOffsets(op, sig.cuSeqlens, d.batch, d.time)))
      return failure();
    int64_t offsets =
        cast<RankedTensorType>(sig.cuSeqlens.getType()).getDimSize(0);
    numStates = ShapedType::isDynamic(offsets) ? offsets : offsets - 1;
  }
  // With state indices the state is a pool of P rows, any P.
  int64_t stateRows = numStates;
  if (sig.stateIndices) {
    int64_t indices =
        cast<RankedTensorType>(sig.stateIndices.getType()).getDimSize(0);
    if (!compatible(indices, numStates))
      return op->emitOpError()
             << "expects 'state_indices' to hold one index per sequence ("
             << (sig.cuSeqlens ? "N = " : "B = ") << numStates << "), got "
             << indices;
    if (!sig.initialState)
      return op->emitOpError(
          "expects 'initial_state' (the pool that 'state_indices' index)");
    auto poolType = cast<RankedTensorType>(sig.initialState.getType());
    stateRows =
        poolType.getRank() == 4 ? poolType.getDimSize(0) : ShapedType::kDynamic;
    // Indices known at compile time must name distinct rows of the pool
    // (the kernels trust them: they are slice offsets).
    DenseIntElementsAttr constant;
    if (matchPattern(sig.stateIndices, m_Constant(&constant))) {
      llvm::SmallDenseSet<int64_t> seen;
      for (auto [i, value] : llvm::enumerate(constant.getValues<APInt>())) {
        int64_t row = value.getSExtValue();
        if (row < 0 || (!ShapedType::isDynamic(stateRows) && row >= stateRows))
          return op->emitOpError()
                 << "expects 'state_indices' in [0, "
                 << (ShapedType::isDynamic(stateRows)
                         ? std::string("?")
                         : std::to_string(stateRows))
                 << ") (the pool's rows), but index " << i << " is " << row;
        if (!seen.insert(row).second)
          return op->emitOpError()
                 << "expects distinct 'state_indices', but row " << row
                 << " appears twice";
      }
    }
  }
  SmallVector<int64_t> stateShape = {stateRows, d.valueHeads, d.keyDim,
                                     d.valueDim};
  StringRef stateLayout =
      sig.stateIndices
          ? "[P,HV,K,V] (a pool of P states)"
          : (sig.cuSeqlens ? "[N,HV,K,V] (N sequences)" : "[B,HV,K,V]");
  if (sig.initialState &&
      failed(verifyShape(op, sig.initialState, "initial_state", stateShape,
                         stateLayout)))
    return failure();
  if (sig.finalState &&
      failed(verifyShape(op, sig.finalState, sig.finalStateName, stateShape,
                         stateLayout)))
    return failure();

  if (failed(verifyShape(
          op, sig.o, sig.oName, {d.batch, d.time, outputHeads, d.valueDim},
          outputHeads == d.valueHeads ? "[B,T,HV,V]"
                                      : "[B,T,HQ,V] (HQ query heads)")))
    return failure();

  // Attributes.
  if (!std::isfinite(sig.scale) || sig.scale <= 0.0f)
    return op->emitOpError()
           << "expects 'scale' to be finite and > 0, got " << sig.scale;
  if (sig.eps) {
    if (!sig.normalizer)
      return op->emitOpError("'eps' is only valid with 'normalizer'");
    if (!std::isfinite(*sig.eps) || *sig.eps <= 0.0f)
      return op->emitOpError()
             << "expects 'eps' to be finite and > 0, got " << *sig.eps;
  }
  return success();
}

/// Collects the shared signature of the four ops, which name their operands
/// alike; `o` and `finalState` are the output and final state, or for a
/// gradient op their cotangents.
template <typename OpT>
static RecurrenceSignature getSignature(OpT op, float scale, Value o,
                                        Value finalState) {
  RecurrenceSignature sig;
  sig.q = op.getQ();
  sig.k = op.getK();
  sig.v = op.getV();
  sig.g = op.getG();
  sig.beta = op.getBeta();
  sig.initialState = op.getInitialState();
  sig.cuSeqlens = op.getCuSeqlens();
  sig.o = o;
  sig.finalState = finalState;
  sig.gate = op.getGate();
  sig.logDecay = op.getLogDecay();
  sig.scale = scale;
  if (std::optional<APFloat> eps = op.getEps())
    sig.eps = eps->convertToFloat();
  sig.normalizer = op.getNormalizer();
  return sig;
}

template <typename OpT>
static RecurrenceSignature getSignature(OpT op, float scale) {
  return getSignature(op, scale, op.getO(), op.getFinalState());
}

/// The signature a gradient op shares with its forward: d_o and
/// d_final_state stand where o and final_state are (they have their shapes).
template <typename OpT>
static RecurrenceSignature getGradientSignature(OpT op, float scale) {
  RecurrenceSignature sig =
      getSignature(op, scale, op.getDO(), op.getDFinalState());
  sig.oName = "d_o";
  sig.finalStateName = "d_final_state";
  return sig;
}

//===----------------------------------------------------------------------===//
// AttentionOp
//===----------------------------------------------------------------------===//

/// `scale`, or K^-0.5 (the verifier requires a static K without `scale`).
static float effectiveScale(std::optional<APFloat> scale, RankedTensorType q) {
  if (scale)
    return scale->convertToFloat();
  int64_t keyDim = q.getDimSize(3);
  return 1.0f / std::sqrt(static_cast<float>(keyDim));
}

static float effectiveEps(std::optional<APFloat> eps) {
  return eps ? eps->convertToFloat() : kDefaultEps;
}

float AttentionOp::getEffectiveScale() {
  return effectiveScale(getScale(), getQ().getType());
}

float AttentionOp::getEffectiveEps() { return effectiveEps(getEps()); }

/// The checks of la.attention's operands and attributes, shared with its
/// gradient (whose d_o and d_final_state stand where o and final_state are).
template <typename OpT>
static LogicalResult verifyAttentionOperands(OpT op, Value o,
                                             RecurrenceSignature sig) {
  RankedTensorType qType = op.getQ().getType();
  Type vElement = op.getV().getType().getElementType();
  if (qType.getElementType() != vElement)
    return op.emitOpError()
           << "expects 'q', 'k' and 'v' of one element type, got "
           << qType.getElementType() << " and " << vElement;
  Type oElement = cast<RankedTensorType>(o.getType()).getElementType();
  if (oElement != vElement)
    return op.emitOpError()
           << "expects '" << sig.oName << "' to have the element type of 'v' ("
           << vElement << "), got " << oElement;
  if (!op.getScale() && qType.getRank() == 4 && qType.isDynamicDim(3))
    return op.emitOpError(
        "needs a static K to default 'scale' to K^-0.5; set 'scale'");
  bool delta = op.getUpdate() == UpdateRule::Delta;
  bool eraseWrite = op.getUpdate() == UpdateRule::EraseWrite;
  if (delta && !op.getBeta())
    return op.emitOpError("the delta rule requires a 'beta' operand");
  if (!delta && op.getBeta())
    return op.emitOpError("'beta' is only valid with the delta rule");
  if (eraseWrite && (!op.getErase() || !op.getWrite()))
    return op.emitOpError(
        "the erase_write rule requires 'erase' and 'write' operands");
  if (!eraseWrite && (op.getErase() || op.getWrite()))
    return op.emitOpError(
        "'erase' and 'write' are only valid with the erase_write rule");
  bool dplr = op.getUpdate() == UpdateRule::Dplr;
  if (dplr && (!op.getA() || !op.getB()))
    return op.emitOpError("the dplr rule requires 'a' and 'b' operands");
  if (!dplr && (op.getA() || op.getB()))
    return op.emitOpError("'a' and 'b' are only valid with the dplr rule");
  if (op.getUpdate() != UpdateRule::Additive && op.getNormalizer())
    return op.emitOpError("'normalizer' is only valid with the additive rule");
  if (op.getGv() &&
      (op.getUpdate() != UpdateRule::Additive || op.getNormalizer()))
    return op.emitOpError("'gv' (the value-side gate) is only valid with the "
                          "additive rule and without 'normalizer'");
  if (Value gv = op.getGv();
      gv && failed(verifyShape(op, gv, "gv", op.getV().getType().getShape(),
                               "[B,T,HV,V] like 'v'")))
    return failure();
  if (op.getErase() && qType.getRank() == 4 &&
      op.getK().getType().getRank() == 4 &&
      op.getV().getType().getRank() == 4) {
    // Per key head: the heads of k (fewer than q's with grouped query
    // heads).
    ArrayRef<int64_t> kShape = op.getK().getType().getShape();
    ProblemDims d{kShape[0],
                  kShape[1],
                  kShape[2],
                  kShape[3],
                  op.getV().getType().getDimSize(2),
                  0};
    if (failed(verifyShape(
            op, op.getErase(), "erase",
            {d.batch, d.time, gateHeads(sig, d, op.getErase()), d.keyDim},
            "[B,T,H,K] or [B,T,HV,K]")))
      return failure();
  }
  if (dplr && op.getK().getType().getRank() == 4) {
    // Per key head, like k.
    ArrayRef<int64_t> kShape = op.getK().getType().getShape();
    for (auto [x, name] :
         {std::pair(op.getA(), "a"), std::pair(op.getB(), "b")})
      if (failed(verifyShape(op, x, name, kShape, "[B,T,H,K] like 'k'")))
        return failure();
  }
  if (op.getWrite() && failed(verifyShape(op, op.getWrite(), "write",
                                          op.getV().getType().getShape(),
                                          "[B,T,HV,V] like 'v'")))
    return failure();
  if (!delta && op.getAllowNegEigval())
    return op.emitOpError(
        "'allow_neg_eigval' is only valid with the delta rule");
  if (!eraseWrite && op.getEraseReadKey())
    return op.emitOpError(
        "'erase_read_key' is only valid with the erase_write rule");
  return verifySignature(op, sig);
}

LogicalResult AttentionOp::verify() {
  float scale = getQ().getType().getRank() == 4 ? getEffectiveScale() : 1.0f;
  RecurrenceSignature sig = getSignature(*this, scale);
  sig.stateIndices = getStateIndices();
  sig.perValueHeadGates = true;
  sig.queryHeads = RecurrenceSignature::QueryHeads::GroupsOverKeys;
  if (failed(verifyAttentionOperands(*this, getO(), sig)))
    return failure();
  return verifyCheckpoints();
}

LogicalResult AttentionOp::verifyCheckpoints() {
  std::optional<int64_t> every = getCheckpointEvery();
  Value checkpoints = getCheckpoints();
  if (every.has_value() != static_cast<bool>(checkpoints))
    return emitOpError("expects a 'checkpoints' result exactly when "
                       "'checkpoint_every' is given");
  if (!every)
    return success();
  if (*every < 1)
    return emitOpError() << "expects 'checkpoint_every' >= 1, got " << *every;
  if (getStateIndices())
    return emitOpError("'checkpoint_every' does not take 'state_indices'");
  if (getReverse())
    return emitOpError("'checkpoint_every' does not take 'reverse'");
  if (getNormalizer())
    return emitOpError("'checkpoint_every' does not take 'normalizer' (its "
                       "sum is not part of the checkpointed state)");
  if (getQ().getType().getDimSize(2) != getK().getType().getDimSize(2))
    return emitOpError("'checkpoint_every' does not take grouped query heads");
  ArrayRef<int64_t> q = getQ().getType().getShape();
  ArrayRef<int64_t> v = getV().getType().getShape();
  if (!getCuSeqlens()) {
    int64_t count =
        ShapedType::isDynamic(q[1]) ? ShapedType::kDynamic : q[1] / *every;
    return verifyShape(*this, checkpoints, "checkpoints",
                       {q[0], count, v[2], q[3], v[3]},
                       "[B,T/n,HV,K,V] (the state after every n tokens)");
  }
  // Packed sequences: sequence i's len_i / n checkpoints after those of the
  // sequences before it (checked when the offsets are constants).
  int64_t count = ShapedType::kDynamic;
  DenseIntElementsAttr offsets;
  if (matchPattern(getCuSeqlens(), m_Constant(&offsets))) {
    count = 0;
    SmallVector<int64_t> values;
    for (const APInt &value : offsets.getValues<APInt>())
      values.push_back(value.getSExtValue());
    for (size_t i = 1; i < values.size(); ++i)
      count += (values[i] - values[i - 1]) / *every;
  }
  return verifyShape(*this, checkpoints, "checkpoints",
                     {1, count, v[2], q[3], v[3]},
                     "[1,C,HV,K,V] (C = sum of len_i/n over the packed "
                     "sequences)");
}

//===----------------------------------------------------------------------===//
// AttentionGradOp
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// SlidingWindowHybridOp
//===----------------------------------------------------------------------===//

float SlidingWindowHybridOp::getEffectiveScale() {
  return effectiveScale(getScale(), getQ().getType());
}

LogicalResult SlidingWindowHybridOp::verify() {
  RankedTensorType qType = getQ().getType();
  if (qType.getRank() != 4)
    return emitOpError() << "expects 'q' of rank 4 [B,T,H,K], got rank "
                         << qType.getRank();
  ArrayRef<int64_t> q = qType.getShape();
  int64_t valueDim = ShapedType::kDynamic, featureDim = ShapedType::kDynamic;
  if (getV().getType().getRank() == 4)
    valueDim = getV().getType().getDimSize(3);
  if (getFeatureQ().getType().getRank() == 4)
    featureDim = getFeatureQ().getType().getDimSize(3);
  // The keys' tokens S = L + T: L context tokens before the queries.
  int64_t keyTokens = ShapedType::kDynamic;
  if (getK().getType().getRank() == 4)
    keyTokens = getK().getType().getDimSize(1);
  if (failed(verifyShape(*this, getK(), "k", {q[0], keyTokens, q[2], q[3]},
                         "[B,S,H,K] (S >= T tokens)")) ||
      failed(verifyShape(*this, getV(), "v", {q[0], keyTokens, q[2], valueDim},
                         "[B,S,H,V] like 'k'")) ||
      failed(verifyShape(*this, getFeatureQ(), "feature_q",
                         {q[0], q[1], q[2], featureDim}, "[B,T,H,F]")) ||
      failed(verifyShape(*this, getFeatureK(), "feature_k",
                         {q[0], keyTokens, q[2], featureDim},
                         "[B,S,H,F] like 'k' and 'feature_q'")) ||
      failed(verifyShape(*this, getO(), "o", {q[0], q[1], q[2], valueDim},
                         "[B,T,H,V] like 'q' and 'v'")))
    return failure();
  if (!ShapedType::isDynamic(keyTokens) && !ShapedType::isDynamic(q[1]) &&
      keyTokens < q[1])
    return emitOpError() << "expects at least as many key tokens as queries "
                            "(S >= T), got S = "
                         << keyTokens << " and T = " << q[1];
  if (getK().getType().getElementType() != qType.getElementType())
    return emitOpError() << "expects 'q' and 'k' of one element type, got "
                         << qType.getElementType() << " and "
                         << getK().getType().getElementType();
  Type featureElement = getFeatureQ().getType().getElementType();
  if (getFeatureK().getType().getElementType() != featureElement)
    return emitOpError()
           << "expects 'feature_q' and 'feature_k' of one element type, got "
           << featureElement << " and "
           << getFeatureK().getType().getElementType();
  Type vElement = getV().getType().getElementType();
  if (getO().getType().getElementType() != vElement)
    return emitOpError() << "expects 'o' to have the element type of 'v' ("
                         << vElement << "), got "
                         << getO().getType().getElementType();
  int64_t window = getWindow();
  if (window < 1 || window > kMaxWindow)
    return emitOpError() << "expects 'window' in [1, " << kMaxWindow
                         << "] tokens, got " << window;
  if (std::optional<APFloat> scale = getScale())
    if (!scale->isFinite())
      return emitOpError("expects a finite 'scale'");
  if (!getScale() && qType.isDynamicDim(3))
    return emitOpError(
        "needs a static K to default 'scale' to K^-0.5; set 'scale'");
  Value offsets = getCuSeqlens();
  if (offsets && (getInitialState() || getFinalState()))
    return emitOpError("with 'cu_seqlens' takes no 'initial_state' and has no "
                       "'final_state' (packed sequences start from zero)");
  // The far state: [B,H,F,V+1], its last column the far normaliser.
  int64_t stateColumns =
      ShapedType::isDynamic(valueDim) ? ShapedType::kDynamic : valueDim + 1;
  SmallVector<int64_t> stateShape = {q[0], q[2], featureDim, stateColumns};
  StringRef stateForm = "[B,H,F,V+1] (the far part's state and normaliser)";
  if (Value state = getInitialState())
    if (failed(
            verifyShape(*this, state, "initial_state", stateShape, stateForm)))
      return failure();
  if (Value state = getFinalState())
    if (failed(verifyShape(*this, state, "final_state", stateShape, stateForm)))
      return failure();
  if (!offsets)
    return success();
  // Packed sequences have no context: S = T, the same static or dynamic
  // size (a dynamic pair is the caller's to keep equal).
  if (keyTokens != q[1])
    return emitOpError("with 'cu_seqlens' expects the keys' tokens to be the "
                       "queries' (S = T, no context), got ")
           << "'k' of shape " << formatShape(getK().getType().getShape())
           << " and 'q' of shape " << formatShape(q);
  return verifySequenceOffsets(*this, offsets, q[0], q[1]);
}

float AttentionGradOp::getEffectiveScale() {
  return effectiveScale(getScale(), getQ().getType());
}

float AttentionGradOp::getEffectiveEps() { return effectiveEps(getEps()); }

/// Result `input_grads[i]` of an op whose optional differentiable inputs are
/// `inputs`: the one of `inputs[which]`, counting the given ones before it.
static Value optionalInputGrad(ArrayRef<Value> inputs, unsigned which,
                               ValueRange inputGrads) {
  if (!inputs[which])
    return nullptr;
  unsigned index = llvm::count_if(inputs.take_front(which),
                                  [](Value v) { return v != nullptr; });
  return index < inputGrads.size() ? inputGrads[index] : nullptr;
}

/// Checks that `gradient` exists exactly when `input` does and has its shape.
static LogicalResult verifyGradient(Operation *op, Value input, Value gradient,
                                    StringRef name) {
  if (static_cast<bool>(input) != static_cast<bool>(gradient))
    return op->emitOpError() << "expects a result '" << name
                             << "' exactly when its input is given";
  if (!input)
    return success();
  auto inputShape = cast<RankedTensorType>(input.getType()).getShape();
  return verifyShape(op, gradient, name, inputShape, "like its input");
}

Value AttentionGradOp::getInputGrad(unsigned which) {
  Value inputs[] = {getG(),     getGv(), getBeta(), getErase(),
                    getWrite(), getA(),  getB(),    getInitialState()};
  return optionalInputGrad(inputs, which, getInputGrads());
}

LogicalResult AttentionGradOp::verify() {
  if (getCheckpoint() < 1)
    return emitOpError() << "expects 'checkpoint' >= 1, got "
                         << getCheckpoint();
  float scale = getQ().getType().getRank() == 4 ? getEffectiveScale() : 1.0f;
  RecurrenceSignature sig = getGradientSignature(*this, scale);
  sig.perValueHeadGates = true;
  sig.queryHeads = RecurrenceSignature::QueryHeads::GroupsOverKeys;
  if (failed(verifyAttentionOperands(*this, getDO(), sig)))
    return failure();

  Value optional[] = {getG(),     getGv(), getBeta(), getErase(),
                      getWrite(), getA(),  getB(),    getInitialState()};
  size_t given = llvm::count_if(optional, [](Value v) { return v != nullptr; });
  if (getInputGrads().size() != given)
    return emitOpError() << "expects " << 3 + given
                         << " results (dq, dk, dv and one per given g, gv, "
                            "beta, erase, write, a, b, initial_state), got "
                         << getNumResults();
  Operation *op = getOperation();
  if (failed(verifyGradient(op, getQ(), getDq(), "dq")) ||
      failed(verifyGradient(op, getK(), getDk(), "dk")) ||
      failed(verifyGradient(op, getV(), getDv(), "dv")) ||
      failed(verifyGradient(op, getG(), getDg(), "dg")) ||
      failed(verifyGradient(op, getGv(), getDgv(), "dgv")) ||
      failed(verifyGradient(op, getBeta(), getDbeta(), "dbeta")) ||
      failed(verifyGradient(op, getErase(), getDerase(), "derase")) ||
      failed(verifyGradient(op, getWrite(), getDwrite(), "dwrite")) ||
      failed(verifyGradient(op, getA(), getDa(), "da")) ||
      failed(verifyGradient(op, getB(), getDb(), "db")) ||
      failed(verifyGradient(op, getInitialState(), getDInitialState(),
                            "d_initial_state")))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// RecurrenceOp
//===----------------------------------------------------------------------===//

float RecurrenceOp::getEffectiveEps() { return effectiveEps(getEps()); }

/// Whether `value` is known to be all zeros: a constant, or a linalg.fill
/// with a constant zero.
static bool isZeroTensor(Value value) {
  if (matchPattern(value, m_AnyZeroFloat()))
    return true;
  if (auto fill = value.getDefiningOp<linalg::FillOp>())
    return matchPattern(fill.getInputs()[0], m_AnyZeroFloat());
  return false;
}

Value RecurrenceOp::getNonZeroInitialState() {
  Value state = getInitialState();
  return isZeroTensor(state) ? Value() : state;
}

/// The operands each low-rank encoding takes (la.recurrence and its
/// gradient).
static LogicalResult verifyLowRankOperands(Operation *op, LowRank lowRank,
                                           Value beta, Value a, Value b) {
  switch (lowRank) {
  case LowRank::None:
    if (beta || a || b)
      return op->emitOpError(
          "low_rank 'none' takes no 'beta', 'a' or 'b' operand");
    break;
  case LowRank::Delta:
    if (!beta)
      return op->emitOpError("low_rank 'delta' requires a 'beta' operand");
    if (a || b)
      return op->emitOpError(
          "low_rank 'delta' derives 'a' and 'b' from 'k'; remove them");
    break;
  case LowRank::General:
    if (!a || !b)
      return op->emitOpError(
          "low_rank 'general' requires 'a' and 'b' operands");
    if (beta)
      return op->emitOpError("low_rank 'general' takes no 'beta' operand");
    break;
  }
  return success();
}

LogicalResult RecurrenceOp::verify() {
  unsigned inits = getTransposedQuery() ? 3 : 2;
  if (getOutputs().size() != inits)
    return emitOpError() << "expects " << (inits == 3 ? "three" : "two")
                         << " inits, "
                         << (inits == 3
                                 ? "outs(o_init, state, transposed_o_init)"
                                 : "outs(o_init, state)")
                         << ", got " << getOutputs().size();
  if (getNumResults() != inits)
    return emitOpError() << "expects one result per init (" << inits
                         << "), got " << getNumResults();
  for (auto [index, init, result] :
       llvm::enumerate(getOutputs(), getOperation()->getResults()))
    if (init.getType() != result.getType())
      return emitOpError() << "expects result " << index << " of the init's "
                           << "type " << init.getType() << ", got "
                           << result.getType();
  if (!cast<RankedTensorType>(getInitialState().getType())
           .getElementType()
           .isF32())
    return emitOpError("expects the state init of element type f32");
  if (failed(verifyLowRankOperands(*this, getLowRank(), getBeta(), getA(),
                                   getB())))
    return failure();
  if (getNormalizer() && getLowRank() != LowRank::None)
    return emitOpError("'normalizer' is only valid without a low-rank part");
  if (getGv() && (getLowRank() != LowRank::None || getNormalizer()))
    return emitOpError("'gv' (the value-side gate) is only valid without a "
                       "low-rank part and without the normaliser");

  RecurrenceSignature sig = getSignature(*this, getScale().convertToFloat());
  sig.stateIndices = getStateIndices();
  sig.queryHeads = RecurrenceSignature::QueryHeads::GroupsOverValues;
  if (failed(verifySignature(*this, sig)))
    return failure();
  if (Value gv = getGv();
      gv && failed(verifyShape(*this, gv, "gv", getV().getType().getShape(),
                               "[B,T,HV,V] like 'v'")))
    return failure();
  ArrayRef<int64_t> kShape = getK().getType().getShape();
  for (auto [value, name] : {std::pair{getA(), "a"}, std::pair{getB(), "b"}})
    if (value &&
        failed(verifyShape(*this, value, name, kShape, "[B,T,H,K] like 'k'")))
      return failure();
  return verifyTransposedRead();
}

LogicalResult RecurrenceOp::verifyTransposedRead() {
  Value query = getTransposedQuery();
  if (!query)
    return success();
  if (getNormalizer() || hasQueryGroups())
    return emitOpError("'transposed_query' is only valid without the "
                       "normaliser and grouped query heads");
  ArrayRef<int64_t> vShape = getV().getType().getShape();
  if (failed(verifyShape(*this, query, "transposed_query", vShape,
                         "[B,T,HV,V] like 'v'")))
    return failure();
  SmallVector<int64_t> outputShape(vShape);
  outputShape[3] = getK().getType().getDimSize(3);
  return verifyShape(*this, getTransposedO(), "transposed_o", outputShape,
                     "[B,T,HV,K]");
}

int64_t RecurrenceOp::getQueryGroupSize() {
  int64_t queryHeads = getQ().getType().getDimSize(2);
  int64_t keyHeads = getK().getType().getDimSize(2);
  int64_t valueHeads = getV().getType().getDimSize(2);
  if (ShapedType::isDynamic(queryHeads) || ShapedType::isDynamic(keyHeads) ||
      ShapedType::isDynamic(valueHeads) || queryHeads == keyHeads ||
      valueHeads == 0)
    return 0;
  return queryHeads / valueHeads;
}

//===----------------------------------------------------------------------===//
// RecurrenceGradOp
//===----------------------------------------------------------------------===//

Value RecurrenceGradOp::getInputGrad(unsigned which) {
  Value inputs[] = {getG(), getGv(), getBeta(), getA(), getB()};
  return optionalInputGrad(inputs, which, getInputGrads());
}

float RecurrenceGradOp::getEffectiveEps() { return effectiveEps(getEps()); }

LogicalResult RecurrenceGradOp::verify() {
  if (failed(verifyLowRankOperands(*this, getLowRank(), getBeta(), getA(),
                                   getB())))
    return failure();
  if (getNormalizer() && getLowRank() != LowRank::None)
    return emitOpError("'normalizer' is only valid without a low-rank part");
  if (getCheckpoint() < 1)
    return emitOpError() << "expects 'checkpoint' >= 1, got "
                         << getCheckpoint();
  if (getGv() && (getLowRank() != LowRank::None || getNormalizer()))
    return emitOpError("'gv' (the value-side gate) is only valid without a "
                       "low-rank part and without the normaliser");

  RecurrenceSignature sig =
      getGradientSignature(*this, getScale().convertToFloat());
  if (failed(verifySignature(*this, sig)))
    return failure();
  if (Value gv = getGv();
      gv && failed(verifyShape(*this, gv, "gv", getV().getType().getShape(),
                               "[B,T,HV,V] like 'v'")))
    return failure();
  ArrayRef<int64_t> qShape = getQ().getType().getShape();
  for (auto [value, name] : {std::pair{getA(), "a"}, std::pair{getB(), "b"}})
    if (value &&
        failed(verifyShape(*this, value, name, qShape, "[B,T,H,K] like 'q'")))
      return failure();

  // One gradient per differentiable input, of its shape.
  Value optional[] = {getG(), getGv(), getBeta(), getA(), getB()};
  size_t optionalInputs =
      llvm::count_if(optional, [](Value v) { return v != nullptr; });
  if (getInputGrads().size() != optionalInputs)
    return emitOpError() << "expects " << 4 + optionalInputs
                         << " results (dq, dk, dv, d_initial_state and one "
                            "per given g, gv, beta, a, b), got "
                         << getNumResults();
  Operation *op = getOperation();
  auto checkGradient = [&](Value input, Value gradient, StringRef name) {
    return verifyGradient(op, input, gradient, name);
  };
  if (failed(checkGradient(getQ(), getDq(), "dq")) ||
      failed(checkGradient(getK(), getDk(), "dk")) ||
      failed(checkGradient(getV(), getDv(), "dv")) ||
      failed(checkGradient(getG(), getDg(), "dg")) ||
      failed(checkGradient(getGv(), getDgv(), "dgv")) ||
      failed(checkGradient(getBeta(), getDbeta(), "dbeta")) ||
      failed(checkGradient(getA(), getDa(), "da")) ||
      failed(checkGradient(getB(), getDb(), "db")) ||
      failed(checkGradient(getInitialState(), getDInitialState(),
                           "d_initial_state")))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Level 2: chunked ops
//===----------------------------------------------------------------------===//

namespace {
/// Dims of the chunked layout, ShapedType::kDynamic where unknown.
struct ChunkDims {
  int64_t batch, chunks, chunkSize, heads, keyDim, valueHeads, valueDim;
};
} // namespace

/// Checks the key-side operand `[B,NC,C,H,K]` and the value-side operand
/// `[B,NC,C,HV,V]` and returns their dims.
static FailureOr<ChunkDims> verifyChunkedKeyValue(Operation *op, Value key,
                                                  StringRef keyName,
                                                  Value value,
                                                  StringRef valueName) {
  auto keyType = cast<RankedTensorType>(key.getType());
  auto valueType = cast<RankedTensorType>(value.getType());
  if (keyType.getRank() != 5)
    return op->emitOpError()
           << "expects '" << keyName << "' of rank 5 [B,NC,C,H,K], got rank "
           << keyType.getRank();
  if (valueType.getRank() != 5)
    return op->emitOpError()
           << "expects '" << valueName << "' of rank 5 [B,NC,C,HV,V], got rank "
           << valueType.getRank();
  ArrayRef<int64_t> ks = keyType.getShape();
  ArrayRef<int64_t> vs = valueType.getShape();
  ChunkDims d{ks[0], ks[1], ks[2], ks[3], ks[4], vs[3], vs[4]};
  if (failed(verifyShape(
          op, value, valueName,
          {d.batch, d.chunks, d.chunkSize, d.valueHeads, d.valueDim},
          "[B,NC,C,HV,V]")))
    return failure();
  if (!ShapedType::isDynamic(d.heads) && !ShapedType::isDynamic(d.valueHeads) &&
      (d.heads == 0 || d.valueHeads % d.heads != 0))
    return op->emitOpError()
           << "expects the value heads (HV = " << d.valueHeads
           << ") to be a multiple of the key heads (H = " << d.heads << ")";
  return d;
}

/// Cumulative gates are [B,NC,C,H] (scalar) or [B,NC,C,H,K] (channel-wise).
static LogicalResult verifyChunkedGates(Operation *op, Value gates,
                                        const ChunkDims &d) {
  if (!gates)
    return success();
  auto type = cast<RankedTensorType>(gates.getType());
  if (type.getRank() == 4)
    return verifyShape(op, gates, "gates",
                       {d.batch, d.chunks, d.chunkSize, d.heads},
                       "[B,NC,C,H] for a scalar gate");
  return verifyShape(op, gates, "gates",
                     {d.batch, d.chunks, d.chunkSize, d.heads, d.keyDim},
                     "[B,NC,C,H,K] for a channel-wise gate");
}

/// Cumulative value-side gates are [B,NC,C,HV,V].
static LogicalResult verifyChunkedValueGates(Operation *op, Value valueGates,
                                             const ChunkDims &d) {
  if (!valueGates)
    return success();
  return verifyShape(op, valueGates, "value_gates",
                     {d.batch, d.chunks, d.chunkSize, d.valueHeads, d.valueDim},
                     "[B,NC,C,HV,V]");
}

static LogicalResult verifyScale(Operation *op, APFloat scale) {
  float value = scale.convertToFloat();
  if (!std::isfinite(value) || value <= 0.0f)
    return op->emitOpError()
           << "expects 'scale' to be finite and > 0, got " << value;
  return success();
}

/// An optional second key/value pair: both or neither, shaped like k and v.
static LogicalResult verifyExtraPair(Operation *op, Value extraKeys,
                                     Value extraValues, Value keys,
                                     Value values) {
  if (static_cast<bool>(extraKeys) != static_cast<bool>(extraValues))
    return op->emitOpError("expects 'extra' keys and values together");
  if (!extraKeys)
    return success();
  if (failed(verifyShape(op, extraKeys, "extra_keys",
                         cast<RankedTensorType>(keys.getType()).getShape(),
                         "[B,NC,C,H,K] like 'k'")))
    return failure();
  return verifyShape(op, extraValues, "extra_values",
                     cast<RankedTensorType>(values.getType()).getShape(),
                     "[B,NC,C,HV,V] like 'v'");
}

LogicalResult ChunkCumsumOp::verify() {
  int64_t rank = getG().getType().getRank();
  if (rank != 4 && rank != 5)
    return emitOpError() << "expects 'g' of rank 4 [B,NC,C,H] or 5 "
                         << "[B,NC,C,H,K], got rank " << rank;
  return verifyShape(*this, getResult(), "result", getG().getType().getShape(),
                     "like 'g'");
}

LogicalResult ChunkIntraOp::verify() {
  FailureOr<ChunkDims> d =
      verifyChunkedKeyValue(*this, getK(), "k", getV(), "v");
  if (failed(d))
    return failure();
  if (failed(verifyShape(*this, getQ(), "q", getK().getType().getShape(),
                         "[B,NC,C,H,K] like 'k'")) ||
      failed(verifyChunkedGates(*this, getGates(), *d)) ||
      failed(verifyChunkedValueGates(*this, getValueGates(), *d)) ||
      failed(verifyScale(*this, getScale())) ||
      failed(verifyExtraPair(*this, getExtraKeys(), getExtraValues(), getK(),
                             getV())))
    return failure();
  if (getValueGates() && getExtraKeys())
    return emitOpError("'value_gates' is not valid with an 'extra' pair");
  return verifyShape(
      *this, getResult(), "result",
      {d->batch, d->chunks, d->chunkSize, d->valueHeads, d->valueDim},
      "[B,NC,C,HV,V]");
}

LogicalResult ChunkWYOp::verify() {
  FailureOr<ChunkDims> d =
      verifyChunkedKeyValue(*this, getK(), "k", getV(), "v");
  if (failed(d))
    return failure();
  bool general = getA() || getB();
  if (general == static_cast<bool>(getBeta()))
    return emitOpError("expects either 'beta' (the delta rule) or 'a' and "
                       "'b' (the general low-rank form)");
  if (general && (!getA() || !getB()))
    return emitOpError("expects 'a' and 'b' together");
  if (getBeta() &&
      failed(verifyShape(*this, getBeta(), "beta",
                         {d->batch, d->chunks, d->chunkSize, d->heads},
                         "[B,NC,C,H]")))
    return failure();
  for (auto [value, name] : {std::pair{getA(), "a"}, std::pair{getB(), "b"}})
    if (value &&
        failed(verifyShape(*this, value, name, getK().getType().getShape(),
                           "[B,NC,C,H,K] like 'k'")))
      return failure();
  if (failed(verifyChunkedGates(*this, getGates(), *d)))
    return failure();
  if (getPrevGates() && (!general || !getGates()))
    return emitOpError(
        "'prev_gates' is only valid with 'gates' and the general form");
  if (general && getGates() && !getPrevGates())
    return emitOpError("the general form with 'gates' requires 'prev_gates' "
                       "(the exclusive cumulative gates)");
  if (getPrevGates() &&
      failed(verifyShape(*this, getPrevGates(), "prev_gates",
                         getGates().getType().getShape(), "like 'gates'")))
    return failure();
  int64_t blockSize = getBlockSize();
  if (blockSize <= 0 ||
      (!ShapedType::isDynamic(d->chunkSize) && d->chunkSize % blockSize != 0))
    return emitOpError() << "expects 'block_size' (" << blockSize
                         << ") to be > 0 and to divide the chunk size ("
                         << d->chunkSize << ")";
  if (failed(verifyShape(*this, getW(), "w", getK().getType().getShape(),
                         "[B,NC,C,H,K] like 'k'")))
    return failure();
  return verifyShape(*this, getU(), "u", getV().getType().getShape(),
                     "[B,NC,C,HV,V] like 'v'");
}

LogicalResult ChunkStateScanOp::verify() {
  FailureOr<ChunkDims> d =
      verifyChunkedKeyValue(*this, getK(), "k", getV(), "v");
  if (failed(d))
    return failure();
  if (failed(verifyChunkedGates(*this, getGates(), *d)) ||
      failed(verifyChunkedValueGates(*this, getValueGates(), *d)))
    return failure();
  if (getValueGates() && (getCorrection() || getExtraKeys()))
    return emitOpError(
        "'value_gates' is not valid with a 'correction' or an 'extra' pair");
  SmallVector<int64_t> finalShape = {d->batch, d->valueHeads, d->keyDim,
                                     d->valueDim};
  if (getInitialState() &&
      failed(verifyShape(*this, getInitialState(), "initial_state", finalShape,
                         "[B,HV,K,V]")))
    return failure();
  if (failed(verifyShape(*this, getFinalState(), "final_state", finalShape,
                         "[B,HV,K,V]")))
    return failure();
  if (failed(verifyExtraPair(*this, getExtraKeys(), getExtraValues(), getK(),
                             getV())))
    return failure();
  if (static_cast<bool>(getCorrection()) != static_cast<bool>(getCorrected()))
    return emitOpError("expects a 'corrected' result exactly when a "
                       "'correction' operand is given");
  if (getCorrection() &&
      (failed(verifyShape(*this, getCorrection(), "correction",
                          getK().getType().getShape(),
                          "[B,NC,C,H,K] like 'k'")) ||
       failed(verifyShape(*this, getCorrected(), "corrected",
                          getV().getType().getShape(),
                          "[B,NC,C,HV,V] like 'v'"))))
    return failure();
  return verifyShape(
      *this, getStates(), "states",
      {d->batch, d->chunks, d->valueHeads, d->keyDim, d->valueDim},
      "[B,NC,HV,K,V]");
}

LogicalResult ChunkInterOp::verify() {
  FailureOr<ChunkDims> d =
      verifyChunkedKeyValue(*this, getQ(), "q", getIntra(), "intra");
  if (failed(d))
    return failure();
  // The states' heads: one per output head, or (grouped query heads) one
  // per group of output heads.
  auto statesType = cast<RankedTensorType>(getStates().getType());
  int64_t stateHeads = d->valueHeads;
  if (statesType.getRank() == 5 && !statesType.isDynamicDim(2) &&
      !ShapedType::isDynamic(d->valueHeads) &&
      statesType.getDimSize(2) != d->valueHeads) {
    stateHeads = statesType.getDimSize(2);
    if (stateHeads == 0 || d->valueHeads % stateHeads != 0)
      return emitOpError() << "expects the states' heads (" << stateHeads
                           << ") to divide the output's heads ("
                           << d->valueHeads << ")";
  }
  bool transposed = getTransposedStates();
  if (failed(verifyChunkedGates(*this, getGates(), *d)) ||
      failed(verifyChunkedValueGates(*this, getValueGates(), *d)) ||
      failed(verifyScale(*this, getScale())) ||
      failed(verifyShape(
          *this, getStates(), "states",
          {d->batch, d->chunks, stateHeads,
           transposed ? d->valueDim : d->keyDim,
           transposed ? d->keyDim : d->valueDim},
          transposed ? "[B,NC,HS,O,K] (transposed; HS dividing the output's "
                       "heads)"
                     : "[B,NC,HS,K,V] (HS dividing the output's heads)")))
    return failure();
  return verifyShape(*this, getResult(), "result",
                     getIntra().getType().getShape(), "like 'intra'");
}

#define GET_OP_CLASSES
#include "la/Dialect/La/LaOps.cpp.inc"
