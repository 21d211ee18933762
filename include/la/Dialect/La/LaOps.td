//===- LaOps.td - operations of the la dialect -------------*- tablegen -*-===//

#ifndef LA_DIALECT_LA_LAOPS_TD
#define LA_DIALECT_LA_LAOPS_TD

include "la/Dialect/La/LaDialect.td"
include "la/Dialect/La/LaEnums.td"
include "mlir/Interfaces/DestinationStyleOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/TilingInterface.td"

def La_FloatTensor : RankedTensorOf<[F32, F16, BF16]>;
def La_F32Tensor : RankedTensorOf<[F32]>;
def La_SeqLensTensor : TensorRankOf<[I32], [1]>;
// One state pool row per sequence (`state_indices`).
def La_StateIndicesTensor : TensorRankOf<[I32], [1]>;

//===----------------------------------------------------------------------===//
// Level 0: the attention graph
//===----------------------------------------------------------------------===//

def La_AttentionOp : La_Op<"attention", [
    Pure, AttrSizedOperandSegments, AttrSizedResultSegments]> {
  let summary = "a linear-attention layer of the whole family (level 0)";
  let description = [{
    One op for the linear-attention family, in the conventions of
    flash-linear-attention. The variant is the pair (`update`, `gate`), and the
    custom assembly names it:

    | keyword          | update   | gate    | recurrence                                      |
    |------------------|----------|---------|-------------------------------------------------|
    | `linear`         | additive | none    | `S_t = S_{t-1} + k_t v_t^T`                     |
    | `retention`      | additive | fixed   | `S_t = exp(d_h) S_{t-1} + k_t v_t^T`            |
    | `mamba2`         | additive | scalar  | `S_t = exp(g_t) S_{t-1} + k_t v_t^T`            |
    | `gla`            | additive | channel | `S_t = Diag(exp(g_t)) S_{t-1} + k_t v_t^T`      |
    | `deltanet`       | delta    | none    | `S_t = (I - b_t k_t k_t^T) S_{t-1} + b_t k_t v_t^T` |
    | `decayed_deltanet` | delta  | fixed   | as `gated_deltanet` with a fixed per-head gate  |
    | `gated_deltanet` | delta    | scalar  | `S_t = exp(g_t)(I - b_t k_t k_t^T) S_{t-1} + b_t k_t v_t^T` |
    | `kda`            | delta    | channel | `S_t = (I - b_t k_t k_t^T) Diag(exp(g_t)) S_{t-1} + b_t k_t v_t^T` |
    | `deltanet2`      | erase_write | none  | `S_t = (I - (e_t * k_t) k_t^T) S_{t-1} + k_t (w_t * v_t)^T` |
    | `decayed_deltanet2` | erase_write | fixed | as `scalar_gated_deltanet2` with a fixed per-head gate |
    | `scalar_gated_deltanet2` | erase_write | scalar | `S_t = exp(g_t)(I - (e_t * k_t) k_t^T) S_{t-1} + k_t (w_t * v_t)^T` |
    | `gated_deltanet2` | erase_write | channel | `S_t = (I - (e_t * k_t) k_t^T) Diag(exp(g_t)) S_{t-1} + k_t (w_t * v_t)^T` |
    | `dplr`           | dplr     | none    | `S_t = (I - b_t a_t^T) S_{t-1} + k_t v_t^T`     |
    | `decayed_dplr`   | dplr     | fixed   | as `scalar_gated_dplr` with a fixed per-head gate |
    | `scalar_gated_dplr` | dplr  | scalar  | `S_t = (exp(g_t) I - b_t a_t^T) S_{t-1} + k_t v_t^T` |
    | `rwkv7`          | dplr     | channel | `S_t = (Diag(exp(g_t)) - b_t a_t^T) S_{t-1} + k_t v_t^T` |

    Gated DeltaNet-2 replaces the scalar beta by a channel-wise erase gate
    `erase : [B,T,H,K]` on the key side and a write gate `write : [B,T,HV,V]`
    on the value side; with both equal to one scalar beta it is KDA.

    The dplr rule is the canonical diagonal-plus-low-rank transition with
    its low-rank vectors given: `a, b : [B,T,H,K]` (per key head), the state
    read with `a` before the decay, as la.recurrence's `low_rank(general)`.
    RWKV-7 (Peng et al., 2025, "RWKV-7 Goose") is the channel-gated one with
    `a = kappa` (the normalised removal key) and `b = kappa * iclr` (its
    in-context learning rate); flash-linear-attention's `chunk_dplr_delta_rule`
    writes the same transition `Diag(exp(gk)) + b a^T` with the opposite sign
    of `b`.

    The keywords are la's variant registry (`lib/Dialect/La/IR/LaVariants.cpp`,
    read by the C API's `laGetVariant`, `la.variants.VARIANTS` in Python and
    la-run); a test checks that this table lists exactly them.

    Operands: `q, k : [B,T,H,K]`, `v : [B,T,HV,V]` (HV a multiple of H; value
    head `hv` reads key head `hv / (HV/H)`), all of one element type (f32, f16
    or bf16). `g` is the log-gate (`[B,T,H]` for `scalar`, `[B,T,H,K]` for
    `channel`); a `fixed` gate is the attribute `log_decay` (one value <= 0 per
    key head). `beta : [B,T,H]` is required by the delta rule. `g`, `beta`
    and `erase` may instead be given per value head (HV in place of H, as
    flash-linear-attention's Gated DeltaNet and KDA take them): value head
    `hv` then uses its own; `la-lower-to-recurrence` repeats the key side (q,
    k and the per-key-head operands) to one head per value head.
    `gv : [B,T,HV,V]` (the additive rule only, without `normalizer`) is a
    log-gate on the value side of the state, flash-linear-attention's `gv`:
    `S_t = alpha_t S_{t-1} Diag(exp(gv_t)) + k_t v_t^T`, with `alpha_t` the
    key-side decay of `gate` (GLA's `gk` with `gv`).
    `initial_state : [N,HV,K,V]` is f32, with N = B, or the number of
    sequences when `cu_seqlens : [N+1]` (i32 offsets, B = 1) packs several
    variable-length sequences into one. With `state_indices : [N]` (i32),
    `initial_state : [P,HV,K,V]` is a pool of P states and sequence n starts
    from row `state_indices[n]`; the final state is the pool with those rows
    replaced by the sequences' final states (the other rows unchanged:
    continuous batching's state slots, vLLM's `ssm_state_indices`). The
    indices must be distinct and in [0, P): a kernel reads and writes the
    rows they name (the Python layer checks them before a call).

    Grouped query heads (ONNX's LinearAttention, the opposite direction):
    `q : [B,T,HQ,K]` may have a multiple HQ of k's H heads when `v` has
    `HV = H`: query head `h` reads the state of key and value head
    `h / (HQ/H)`, and `o` has HQ heads. `la-lower-to-recurrence` lowers
    them to an `la.recurrence` with grouped query heads, which computes
    each state once and reads it for its G query heads; with
    `expand-query-groups` (the GPU's chunk-parallel schedule) and for the
    gradient it
    repeats k, v, the gates, beta, erase, write and the state per query head
    instead (G times the state work) and takes the final state of each
    group's first head.

    Results: `o : [B,T,HV,V]` (`[B,T,HQ,V]` with grouped query heads) in
    the input element type, `o_t = S_t^T (scale * q_t)`, and optionally
    the f32 final state `[N,HV,K,V]`.

    Checkpoints (prefix caching, speculative decoding's per-token
    snapshots): with `checkpoint_every = n`, a last result
    `checkpoints : [B,T/n,HV,K,V]` (f32, `T/n` rounded down) holds the
    state after every `n` tokens of each sequence: `checkpoints[:, j]` is
    the state after tokens `0 .. (j+1)n - 1`, from which a request that
    shares those tokens continues. With `cu_seqlens`, `checkpoints :
    [1,C,HV,K,V]` holds each sequence's `len_i/n` checkpoints, counted from
    its own first token, after those of the sequences before it (C is
    their sum; a smaller C drops the last ones). Not with `state_indices`,
    `reverse`, `normalizer` (its sum is not part of the state) or grouped
    query heads. `la-lower-to-recurrence` lowers it to a loop over segments
    of `n` tokens (per sequence with `cu_seqlens`), each an `la.recurrence`
    that continues from the state the last one ended with (one kernel; the
    segments' tasks run in parallel like one call's).

    Attributes: `scale` (default `K^-0.5`), `qk_l2norm` (normalise q and k
    over K, `x / sqrt(sum(x^2) + 1e-6)`, before anything else), `normalizer`
    (additive rule only: `o_t = S_t^T q'_t / (z_t . q'_t + eps)` with
    `z_t = alpha_t * z_{t-1} + k_t`; `eps` defaults to 1e-6),
    `allow_neg_eigval` (delta rule only, flash-linear-attention's convention:
    beta is multiplied by 2, so beta in (0, 1) becomes (0, 2) and the
    transition `I - beta k k^T` may have a negative eigenvalue),
    `erase_read_key` (erase_write rule only: the erase gate multiplies the
    key the state is read with instead of the key it writes,
    `S_t = (I - k_t (e_t * k_t)^T) Diag(exp(g_t)) S_{t-1} + k_t (w_t * v_t)^T`,
    flash-linear-attention's `chunk_gdn2`; without it
    `(I - (e_t * k_t) k_t^T)`: the two agree when `e_t` is constant over K).
    `reverse`: each sequence runs from its last token to its first (token t
    follows token t + 1, from `initial_state`; flash-linear-attention's
    `reverse=True`), lowered to la.recurrence's `reverse`.

    Example:

    ```mlir
    %o, %s = la.attention gated_deltanet %q, %k, %v g(%g : tensor<1x64x2xf32>)
        beta(%beta : tensor<1x64x2xf32>) {qk_l2norm}
        : tensor<1x64x2x16xf32>, tensor<1x64x2x16xf32>, tensor<1x64x2x32xf32>
        -> tensor<1x64x2x32xf32>, tensor<1x2x16x32xf32>
    ```
  }];

  let arguments = (ins
    La_FloatTensor:$q,
    La_FloatTensor:$k,
    La_FloatTensor:$v,
    Optional<La_FloatTensor>:$g,
    Optional<La_FloatTensor>:$gv,
    Optional<La_FloatTensor>:$beta,
    Optional<La_FloatTensor>:$erase,
    Optional<La_FloatTensor>:$write,
    Optional<La_FloatTensor>:$a,
    Optional<La_FloatTensor>:$b,
    Optional<La_F32Tensor>:$initial_state,
    Optional<La_SeqLensTensor>:$cu_seqlens,
    Optional<La_StateIndicesTensor>:$state_indices,
    La_UpdateRuleAttr:$update,
    La_GateKindAttr:$gate,
    OptionalAttr<DenseF32ArrayAttr>:$log_decay,
    OptionalAttr<F32Attr>:$scale,
    UnitAttr:$normalizer,
    OptionalAttr<F32Attr>:$eps,
    UnitAttr:$qk_l2norm,
    UnitAttr:$allow_neg_eigval,
    UnitAttr:$erase_read_key,
    UnitAttr:$reverse,
    OptionalAttr<I64Attr>:$checkpoint_every
  );
  let results = (outs La_FloatTensor:$o, Optional<La_F32Tensor>:$final_state,
                      Optional<La_F32Tensor>:$checkpoints);

  let assemblyFormat = [{
    custom<Variant>($update, $gate) $q `,` $k `,` $v
    (`g` `(` $g^ `:` type($g) `)`)?
    (`gv` `(` $gv^ `:` type($gv) `)`)?
    (`beta` `(` $beta^ `:` type($beta) `)`)?
    (`erase` `(` $erase^ `:` type($erase) `)`)?
    (`write` `(` $write^ `:` type($write) `)`)?
    (`a` `(` $a^ `:` type($a) `)`)?
    (`b` `(` $b^ `:` type($b) `)`)?
    (`initial_state` `(` $initial_state^ `:` type($initial_state) `)`)?
    (`cu_seqlens` `(` $cu_seqlens^ `:` type($cu_seqlens) `)`)?
    (`state_indices` `(` $state_indices^ `:` type($state_indices) `)`)?
    attr-dict `:` type($q) `,` type($k) `,` type($v) `->`
    custom<AttentionResults>(type($o), type($final_state), type($checkpoints))
  }];

  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The scale applied to q: the `scale` attribute or `K^-0.5`. Requires a
    /// static K when the attribute is absent (checked by the verifier).
    float getEffectiveScale();
    /// The normaliser's epsilon: the `eps` attribute or 1e-6.
    float getEffectiveEps();
    /// Checks `checkpoint_every` and the `checkpoints` result.
    LogicalResult verifyCheckpoints();
  }];
}

def La_SlidingWindowHybridOp : La_Op<"sliding_window_hybrid", [
    Pure, AttrSizedOperandSegments]> {
  let summary = "softmax attention in a sliding window, linear attention "
                "outside it, one normalisation (level 0)";
  let description = [{
    LoLCATs' hybrid (Zhang et al., ICLR 2025, "LoLCATs: On Low-Rank
    Linearizing of Large Language Models"): per sequence and head, with
    `w = window` and learned features `fq_t = feature_q[t]`,
    `fk_s = feature_k[s]` (e.g. Hedgehog's),

    ```
    o_t = (sum_{t-w < s <= t} exp(scale q_t . k_s - c_t) v_s
           + exp(-c_t) sum_{s <= t-w} (fq_t . fk_s) v_s)
          / (the same two sums without v_s)
    ```

    with `c_t = max(0, max_{t-w < s <= t} scale q_t . k_s)`, so that no
    exponential overflows (the far part is scaled, never shifted up).
    `q : [B,T,H,K]`, `feature_q : [B,T,H,F]`, `k : [B,S,H,K]`,
    `v : [B,S,H,V]`, `feature_k : [B,S,H,F]` with `S >= T`: the first
    `L = S - T` tokens of the keys are context (a window cache: tokens
    before the queries, read and not queried), and query `t` is token
    `L + t`. `o : [B,T,H,V]` has v's element type. `scale` defaults to
    `K^-0.5`.

    `initial_state : [B,H,F,V+1]` (f32) is the far part's state of the
    tokens before the context, `sum_s fk_s [v_s, 1]^T` (its last column the
    far normaliser), read as far by every query (exact when the context
    holds at least `w - 1` tokens, or the state is zero). The optional
    result `final_state` is that state after the tokens the next token's
    window no longer reaches (all but the last `w` keys): a sequence
    continues with it and its last `w` keys, values and key features as the
    next call's context.

    With `cu_seqlens` (B = 1, N+1 offsets) the tokens are N packed
    sequences: neither the window nor the far part reaches across a
    sequence's first token; packed sequences take no context, initial state
    or final state.

    The op implements upstream's `AggregatedOpInterface`; its decomposition
    (which `la-lower-to-recurrence` applies) is an `la.recurrence` of linear
    attention over the features whose keys and values are shifted `w` tokens
    later, a column of ones appended to the values (its last output column
    is the far part's normaliser), and the window's scores as `linalg`
    products over blocks of tokens (each block's keys are its own and those
    of the blocks before it that the window reaches). A non-finite value
    makes its column NaN from its token on, as la.recurrence's chunked form
    does; nothing leaks to earlier tokens.

    Example:

    ```mlir
    %o = la.sliding_window_hybrid %q, %k, %v
        features(%fq : tensor<1x64x2x8xf32>, %fk : tensor<1x64x2x8xf32>)
        {window = 16 : i64}
        : tensor<1x64x2x16xf32>, tensor<1x64x2x16xf32>, tensor<1x64x2x32xf32>
        -> tensor<1x64x2x32xf32>
    ```
  }];

  let arguments = (ins
    La_FloatTensor:$q,
    La_FloatTensor:$k,
    La_FloatTensor:$v,
    La_FloatTensor:$feature_q,
    La_FloatTensor:$feature_k,
    Optional<La_SeqLensTensor>:$cu_seqlens,
    Optional<La_F32Tensor>:$initial_state,
    I64Attr:$window,
    OptionalAttr<F32Attr>:$scale
  );
  let results = (outs La_FloatTensor:$o, Optional<La_F32Tensor>:$final_state);

  let assemblyFormat = [{
    $q `,` $k `,` $v
    `features` `(` $feature_q `:` type($feature_q) `,`
                   $feature_k `:` type($feature_k) `)`
    (`cu_seqlens` `(` $cu_seqlens^ `:` type($cu_seqlens) `)`)?
    (`initial_state` `(` $initial_state^ `:` type($initial_state) `)`)?
    attr-dict `:` type($q) `,` type($k) `,` type($v) `->` type($o)
    (`,` type($final_state)^)?
  }];

  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The largest window the verifier accepts.
    static constexpr int64_t kMaxWindow = 1 << 20;
    /// The scale applied to q . k: the `scale` attribute or `K^-0.5`
    /// (the verifier requires a static K without the attribute).
    float getEffectiveScale();
  }];
}

def La_AttentionGradOp : La_Op<"attention_grad", [
    Pure, AttrSizedOperandSegments]> {
  let summary = "the vector-Jacobian product of la.attention (level 0)";
  let description = [{
    The gradients of `sum(o * d_o) + sum(final_state * d_final_state)` with
    respect to every tensor input of the `la.attention` with the same
    operands and attributes (`d_final_state` absent means zero). It is what
    `la-derive-backward` builds from a forward function, one op for the whole
    family: `la-lower-to-recurrence` lowers it to the level-1
    `la.recurrence_grad` of the variant's canonical recurrence plus the
    adjoints of the level-0 maps around it, derived once for all variants:

    * `qk_l2norm`: with `y = x r`, `r = (sum_K x^2 + eps)^-1/2`,
      `dx = r (dy - y sum_K(y dy))`;
    * `allow_neg_eigval`: `dbeta = 2 dbeta'`;
    * the erase_write rule's general form (`a = alpha * k`, `b = erase * k`,
      values `write * v`): `dk += alpha * da + erase * db`,
      `derase = k * db`, `dwrite = v * dvalues`, `dv = write * dvalues`, and
      `alpha * k * da` added to the log-gate's gradient (summed over K for a
      scalar gate); with `erase_read_key` (`a = alpha * erase * k`, `b = k`):
      `dk += alpha * erase * da + db`, `derase = alpha * k * da`, and
      `alpha * erase * k * da` to the log-gate's gradient.
    * the dplr rule: `a` and `b` are the level-1 op's, whose `da` and `db`
      are theirs (repeated per value head and summed back with per-value-head
      gates).

    Operands: those of `la.attention`, then `d_o` (`[B,T,HV,V]`, the element
    type of `v`) and optionally `d_final_state` (`[N,HV,K,V]`, f32).
    Results, all f32 and each of its input's shape: `dq`, `dk`, `dv`, then,
    for those given and in this order, the gradients of `g`, `gv`, `beta`, `erase`,
    `write`, `a`, `b` and `initial_state`. A `fixed` gate (`log_decay`) is an attribute
    and `cu_seqlens` are integers: neither gets a gradient. With
    `normalizer`, the level-1 op carries it (see `la.recurrence_grad`).

    `checkpoint` is the level-1 op's: the state is kept every `checkpoint`
    tokens and recomputed in between, so memory is `O(T/checkpoint * K * V)`.

    Example:

    ```mlir
    %dq, %dk, %dv, %dg, %dbeta = la.attention_grad gated_deltanet %q, %k, %v
        g(%g : tensor<1x64x2xf32>) beta(%beta : tensor<1x64x2xf32>)
        d_o(%do : tensor<1x64x2x32xf32>) {qk_l2norm}
        : tensor<1x64x2x16xf32>, tensor<1x64x2x16xf32>, tensor<1x64x2x32xf32>
        -> tensor<1x64x2x16xf32>, tensor<1x64x2x16xf32>, tensor<1x64x2x32xf32>,
           tensor<1x64x2xf32>, tensor<1x64x2xf32>
    ```
  }];

  let arguments = (ins
    La_FloatTensor:$q,
    La_FloatTensor:$k,
    La_FloatTensor:$v,
    Optional<La_FloatTensor>:$g,
    Optional<La_FloatTensor>:$gv,
    Optional<La_FloatTensor>:$beta,
    Optional<La_FloatTensor>:$erase,
    Optional<La_FloatTensor>:$write,
    Optional<La_FloatTensor>:$a,
    Optional<La_FloatTensor>:$b,
    Optional<La_F32Tensor>:$initial_state,
    Optional<La_SeqLensTensor>:$cu_seqlens,
    La_FloatTensor:$d_o,
    Optional<La_F32Tensor>:$d_final_state,
    La_UpdateRuleAttr:$update,
    La_GateKindAttr:$gate,
    OptionalAttr<DenseF32ArrayAttr>:$log_decay,
    OptionalAttr<F32Attr>:$scale,
    UnitAttr:$normalizer,
    OptionalAttr<F32Attr>:$eps,
    UnitAttr:$qk_l2norm,
    UnitAttr:$allow_neg_eigval,
    UnitAttr:$erase_read_key,
    UnitAttr:$reverse,
    DefaultValuedAttr<I64Attr, "64">:$checkpoint
  );
  let results = (outs
    La_F32Tensor:$dq,
    La_F32Tensor:$dk,
    La_F32Tensor:$dv,
    Variadic<La_F32Tensor>:$input_grads
  );

  let assemblyFormat = [{
    custom<Variant>($update, $gate) $q `,` $k `,` $v
    (`g` `(` $g^ `:` type($g) `)`)?
    (`gv` `(` $gv^ `:` type($gv) `)`)?
    (`beta` `(` $beta^ `:` type($beta) `)`)?
    (`erase` `(` $erase^ `:` type($erase) `)`)?
    (`write` `(` $write^ `:` type($write) `)`)?
    (`a` `(` $a^ `:` type($a) `)`)?
    (`b` `(` $b^ `:` type($b) `)`)?
    (`initial_state` `(` $initial_state^ `:` type($initial_state) `)`)?
    (`cu_seqlens` `(` $cu_seqlens^ `:` type($cu_seqlens) `)`)?
    `d_o` `(` $d_o `:` type($d_o) `)`
    (`d_final_state` `(` $d_final_state^ `:` type($d_final_state) `)`)?
    attr-dict `:` type($q) `,` type($k) `,` type($v) `->` type(results)
  }];

  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// As la.attention's.
    float getEffectiveScale();
    float getEffectiveEps();
    /// The gradients of the optional inputs; null where the input is absent.
    Value getDg() { return getInputGrad(0); }
    Value getDgv() { return getInputGrad(1); }
    Value getDbeta() { return getInputGrad(2); }
    Value getDerase() { return getInputGrad(3); }
    Value getDwrite() { return getInputGrad(4); }
    Value getDa() { return getInputGrad(5); }
    Value getDb() { return getInputGrad(6); }
    Value getDInitialState() { return getInputGrad(7); }

  private:
    /// Result `input_grads[i]` counts the optional inputs before `which`
    /// (0: g, 1: gv, 2: beta, 3: erase, 4: write, 5: a, 6: b,
    /// 7: initial_state) that are given.
    Value getInputGrad(unsigned which);
  }];
}

//===----------------------------------------------------------------------===//
// Level 1: the canonical recurrence
//===----------------------------------------------------------------------===//

def La_RecurrenceOp : La_Op<"recurrence", [
    Pure, AttrSizedOperandSegments, DestinationStyleOpInterface,
    DeclareOpInterfaceMethods<TilingInterface, [
      "getIterationDomain", "getLoopIteratorTypes", "getTiledImplementation",
      "getResultTilePosition", "getIterationDomainTileFromResultTile",
      "generateResultTileValue"]>]> {
  let summary = "the canonical diagonal-plus-low-rank recurrence (level 1)";
  let description = [{
    Per sequence and value head, with `S_0` the initial state:

    ```
    S_t = (Diag(alpha_t) - b_t a_t^T) S_{t-1} + w_t v_t^T
    o_t = S_t^T (scale * q_t)
    ```

    The diagonal `alpha_t = exp(g_t)` is given by `gate`: `none` (alpha = 1),
    `fixed` (the per-head attribute `log_decay`), `scalar` (`g : [B,T,H]`) or
    `channel` (`g : [B,T,H,K]`). An optional value-side gate
    `gv : [B,T,HV,V]` (log space, like `g`) decays the state's columns too,
    `S_t = Diag(alpha_t) S_{t-1} Diag(exp(gv_t)) + k_t v_t^T` (fla's `gv`;
    the adjoint of a channel-gated recurrence has its gate on this side);
    it is valid only without a low-rank part and without the normaliser.
    With `reverse` the recurrence runs backward in time: token t follows
    token t + 1, `S_t = A_t S_{t+1} + w_t v_t^T` from `S_T = S_0` the init
    (per sequence with `cu_seqlens`), and the final state is the one after
    the first token (the adjoint recurrences of the backward are of this
    kind). The low-rank part is given by `low_rank`:

    * `none`: no low-rank part, `w_t = k_t`;
    * `delta`: the delta-rule structure, stored compactly so that the chunking
      pass can use the specialised WY form: `b_t = beta_t k_t`,
      `a_t = alpha_t * k_t`, `w_t = beta_t k_t`, with `beta : [B,T,H]`;
    * `general`: explicit `a, b : [B,T,H,K]`, `w_t = k_t`.

    The op is in destination-passing style, like a linalg op with an
    accumulator: `outs(%o_init, %state)` are its inits. `o_init : [B,T,HV,V]`
    gives the output's shape and type (its values are not read); `o` may be
    any of f32, f16 and bf16 (level 0 gives it the input type; values may be
    f32 after lowering). `state : [N,HV,K,V]` (f32) is the initial state
    `S_0`, tied to the `final_state` result (a zero fill when there is none);
    N = B, or the number of sequences with `cu_seqlens`. With
    `state_indices : [N]` (i32, distinct, in [0, P)) the state is a pool
    `[P,HV,K,V]`: sequence n starts from row `state_indices[n]`, its final
    state is written there, and the other rows pass through. A tile of one
    batch slices the pool at that row (so la-fuse-recurrence's tasks read
    and write the pool's rows in place); a tile of several batches keeps
    the indices.

    `transposed_query : [B,T,HV,V]` adds a read of the state from its value
    side, `ot_t = S_t (scale * transposed_query_t)`, as a third result
    `[B,T,HV,K]` with a third init: the backward's adjoint state `G` is read
    both ways (`dv = G^T k`, `dk = G v`), and the second read then needs no
    recurrence of its own (`la-expand-recurrence-grad`). It is valid only
    without the normaliser and grouped query heads; a tile of it spans all
    of V (the read sums over V).

    Grouped query heads: `q : [B,T,HQ,K]` with HQ = G * HV query heads (not
    H) reads each state G times: query head `hq` reads the state of value
    head `hq / G` (key head `hq / (G * HV / H)`), and `o : [B,T,HQ,V]` has
    one output per query head. The state's work is done once per value
    head, not once per query head (ONNX's grouped query heads over shared
    key/value heads; fla's grouped value heads are HV > H with q per key
    head).

    `q` and `k` share an element type. `scale` is explicit at this level.
    `normalizer` (only without a low-rank part) divides by
    `z_t . (scale q_t) + eps` where `z_t = alpha_t * z_{t-1} + k_t`. Every
    level-0 variant lowers to this op (`la-lower-to-recurrence`).

    The iteration domain is (B, T, HV, V), or (N, T, HV, V) with
    `cu_seqlens` (with grouped query heads, a tile
    of value heads reads and writes the G query heads of each): B (N), HV
    and V are parallel, T is a
    reduction whose accumulator is the state, in the order the tokens are
    processed (with `reverse`, iteration t is token T - 1 - t). The op implements
    `TilingInterface`: a tile over T is the recurrence over those tokens
    whose initial state is the state carried from the tiles before it, so
    `scf::tileUsingSCF` (or `transform.structured.tile_using_for`) tiles it
    like a linalg reduction. A tile of value heads must cover whole key-head
    groups or lie in one; with `cu_seqlens`, T is not tiled and a tile of
    one sequence n is the recurrence of its tokens `[cu[n], cu[n+1])` (B = 1,
    a run-time T, state row n: `scf.forall` over sequences and heads gives
    packed sequences tasks of their own); a
    `fixed` gate is sliced only at constant head offsets.

    Example:

    ```mlir
    %o, %s = la.recurrence decay(scalar) low_rank(delta) %q, %k, %v
        g(%g : tensor<1x64x2xf32>) beta(%beta : tensor<1x64x2xf32>)
        outs(%o0, %s0 : tensor<1x64x2x32xf32>, tensor<1x2x16x32xf32>)
        {scale = 2.500000e-01 : f32}
        : tensor<1x64x2x16xf32>, tensor<1x64x2x16xf32>, tensor<1x64x2x32xf32>
        -> tensor<1x64x2x32xf32>, tensor<1x2x16x32xf32>
    ```
  }];

  let arguments = (ins
    La_FloatTensor:$q,
    La_FloatTensor:$k,
    La_FloatTensor:$v,
    Optional<La_FloatTensor>:$g,
    Optional<La_FloatTensor>:$gv,
    Optional<La_FloatTensor>:$beta,
    Optional<La_FloatTensor>:$a,
    Optional<La_FloatTensor>:$b,
    Optional<La_SeqLensTensor>:$cu_seqlens,
    Optional<La_StateIndicesTensor>:$state_indices,
    Optional<La_FloatTensor>:$transposed_query,
    Variadic<La_FloatTensor>:$outputs,
    La_GateKindAttr:$gate,
    OptionalAttr<DenseF32ArrayAttr>:$log_decay,
    La_LowRankAttr:$low_rank,
    F32Attr:$scale,
    UnitAttr:$normalizer,
    OptionalAttr<F32Attr>:$eps,
    UnitAttr:$reverse
  );
  let results = (outs La_FloatTensor:$o, La_F32Tensor:$final_state,
                      Optional<La_FloatTensor>:$transposed_o);

  let assemblyFormat = [{
    `decay` `(` custom<EnumKeyword>($gate) `)`
    `low_rank` `(` custom<EnumKeyword>($low_rank) `)`
    $q `,` $k `,` $v
    (`g` `(` $g^ `:` type($g) `)`)?
    (`gv` `(` $gv^ `:` type($gv) `)`)?
    (`beta` `(` $beta^ `:` type($beta) `)`)?
    (`a` `(` $a^ `:` type($a) `)`)?
    (`b` `(` $b^ `:` type($b) `)`)?
    (`cu_seqlens` `(` $cu_seqlens^ `:` type($cu_seqlens) `)`)?
    (`state_indices` `(` $state_indices^ `:` type($state_indices) `)`)?
    (`transposed_query` `(` $transposed_query^ `:` type($transposed_query) `)`)?
    `outs` `(` $outputs `:` type($outputs) `)`
    attr-dict `:` type($q) `,` type($k) `,` type($v) `->` type(results)
  }];

  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The normaliser's epsilon: the `eps` attribute or 1e-6.
    float getEffectiveEps();
    /// The init of `o` (its shape and element type; its values are unused).
    Value getOInit() { return getOutputs()[0]; }
    /// The initial state, tied to the final state.
    Value getInitialState() { return getOutputs()[1]; }
    /// `transposed_query`'s operand and result shapes and restrictions.
    LogicalResult verifyTransposedRead();
    /// The init of `transposed_o`, or null without a transposed query.
    Value getTransposedOInit() {
      return getOutputs().size() > 2 ? getOutputs()[2] : Value();
    }
    /// The initial state, or null when it is known to be zero (a zero
    /// fill or constant), so that lowerings can leave it out.
    Value getNonZeroInitialState();
    /// With grouped query heads (q has HQ = G * HV heads, not H), the
    /// query heads per state G; else 0.
    int64_t getQueryGroupSize();
    bool hasQueryGroups() { return getQueryGroupSize() != 0; }
    /// The iteration domain's first loop: B, or the number N of packed
    /// sequences (the size of `cu_seqlens` minus one).
    OpFoldResult getNumSequences(OpBuilder &b);

    MutableOperandRange getDpsInitsMutable() { return getOutputsMutable(); }
  }];
}

def La_RecurrenceGradOp : La_Op<"recurrence_grad", [
    Pure, AttrSizedOperandSegments]> {
  let summary = "the vector-Jacobian product of la.recurrence (level 1)";
  let description = [{
    The gradients of `sum(o * d_o) + sum(final_state * d_final_state)` with
    respect to every tensor input of the `la.recurrence` with the same
    operands and attributes (`d_final_state` absent means zero). It is what
    `la-derive-backward` builds from a forward, and one op for the whole
    family: the adjoint is derived from the canonical form, not written per
    variant. With `P = Diag(alpha_t) S_{t-1} - b_t (a_t^T S_{t-1})` and
    `S_t = P + w_t v_t^T`, backward in time from `dS = d_final_state`:

    ```
    dS += (scale q_t) d_o_t^T     dq_t = scale S_t d_o_t
    dw_t = dS v_t                 dv_t = dS^T w_t
    du_t = -dS^T b_t              db_t = -dS (a_t^T S_{t-1})
    da_t = S_{t-1} du_t           dalpha_t = rowsum(dS * S_{t-1})
    dS = Diag(alpha_t) dS + a_t du_t^T
    ```

    so the state's adjoint runs the transposed transition
    `Diag(alpha_t) - a_t b_t^T`: a diagonal-plus-low-rank recurrence again,
    backward in time. The low-rank encodings' own maps then apply: with
    `delta`, `b = w = beta k` and `a = alpha * k` give `dk`, `dbeta` and a
    second term of the gate's gradient; log-gates get `alpha * dalpha`
    (summed over K for a scalar gate). Grouped value heads sum their key-side
    gradients into their key head. A value-side gate `gv` (no low-rank part)
    scales the columns, `P = Diag(alpha_t) S_{t-1} Diag(gamma_t)`: then
    `dalpha` and the state's adjoint carry `gamma_t` too, and
    `dgv_t = colsum(dS * P)` (`sum_K`).

    Operands: those of `la.recurrence` with the initial state as
    `initial_state` (f32, a zero tensor when there is none), and `d_o`
    (`[B,T,HV,V]`) and optionally `d_final_state` (`[N,HV,K,V]`, f32).
    Results (all f32): `dq`, `dk`, `dv`, `d_initial_state`, then, for those
    given and in this order, the gradients of `g`, `gv`, `beta`, `a` and `b` (each
    of its input's shape). A `fixed` gate is an attribute and gets no
    gradient.

    Memory is that of fla's backward: the state is kept only where each
    block of `checkpoint` tokens starts (`[ceil(T/checkpoint),B,HV,K,V]`);
    the states inside a block are recomputed from it when the backward
    reaches the block, so nothing of size `T*K*V` is formed.

    `normalizer` (and `eps`), as on `la.recurrence`: the gradient of
    `o_t = num_t / (den_t + eps)`. `la-simplify-recurrence` rewrites it, as
    it does the forward's, into the recurrence on `[v, 1]` (whose last
    output column is `den_t = z_t . (scale q_t)`): the forward is recomputed
    for `num` and `den`, the cotangent of `[num, den]` is
    `[d_o / (den + eps), -sum_V(d_o * o) / (den + eps)]`, and the gradient
    of the recurrence on `[v, 1]` gives the rest (z starts at zero, so
    `d_initial_state` is that of the state's first V columns).

    Example:

    ```mlir
    %dq, %dk, %dv, %ds0, %dg, %dbeta = la.recurrence_grad decay(scalar)
        low_rank(delta) %q, %k, %v g(%g : tensor<1x64x2xf32>)
        beta(%beta : tensor<1x64x2xf32>)
        initial_state(%s0 : tensor<1x2x16x32xf32>)
        d_o(%do : tensor<1x64x2x32xf32>) {scale = 2.500000e-01 : f32}
        : tensor<1x64x2x16xf32>, tensor<1x64x2x16xf32>, tensor<1x64x2x32xf32>
        -> tensor<1x64x2x16xf32>, tensor<1x64x2x16xf32>, tensor<1x64x2x32xf32>,
           tensor<1x2x16x32xf32>, tensor<1x64x2xf32>, tensor<1x64x2xf32>
    ```
  }];

  let arguments = (ins
    La_FloatTensor:$q,
    La_FloatTensor:$k,
    La_FloatTensor:$v,
    Optional<La_FloatTensor>:$g,
    Optional<La_FloatTensor>:$gv,
    Optional<La_FloatTensor>:$beta,
    Optional<La_FloatTensor>:$a,
    Optional<La_FloatTensor>:$b,
    Optional<La_SeqLensTensor>:$cu_seqlens,
    La_F32Tensor:$initial_state,
    La_FloatTensor:$d_o,
    Optional<La_F32Tensor>:$d_final_state,
    La_GateKindAttr:$gate,
    OptionalAttr<DenseF32ArrayAttr>:$log_decay,
    La_LowRankAttr:$low_rank,
    F32Attr:$scale,
    UnitAttr:$normalizer,
    OptionalAttr<F32Attr>:$eps,
    DefaultValuedAttr<I64Attr, "64">:$checkpoint
  );
  let results = (outs
    La_F32Tensor:$dq,
    La_F32Tensor:$dk,
    La_F32Tensor:$dv,
    La_F32Tensor:$d_initial_state,
    Variadic<La_F32Tensor>:$input_grads
  );

  let assemblyFormat = [{
    `decay` `(` custom<EnumKeyword>($gate) `)`
    `low_rank` `(` custom<EnumKeyword>($low_rank) `)`
    $q `,` $k `,` $v
    (`g` `(` $g^ `:` type($g) `)`)?
    (`gv` `(` $gv^ `:` type($gv) `)`)?
    (`beta` `(` $beta^ `:` type($beta) `)`)?
    (`a` `(` $a^ `:` type($a) `)`)?
    (`b` `(` $b^ `:` type($b) `)`)?
    (`cu_seqlens` `(` $cu_seqlens^ `:` type($cu_seqlens) `)`)?
    `initial_state` `(` $initial_state `:` type($initial_state) `)`
    `d_o` `(` $d_o `:` type($d_o) `)`
    (`d_final_state` `(` $d_final_state^ `:` type($d_final_state) `)`)?
    attr-dict `:` type($q) `,` type($k) `,` type($v) `->` type(results)
  }];

  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The normaliser's epsilon: the `eps` attribute or 1e-6.
    float getEffectiveEps();
    /// The gradients of the optional inputs; null where the input is absent.
    Value getDg() { return getInputGrad(0); }
    Value getDgv() { return getInputGrad(1); }
    Value getDbeta() { return getInputGrad(2); }
    Value getDa() { return getInputGrad(3); }
    Value getDb() { return getInputGrad(4); }

  private:
    /// Result `input_grads[i]` counts the optional inputs before `which`
    /// (0: g, 1: gv, 2: beta, 3: a, 4: b) that are given.
    Value getInputGrad(unsigned which);
  }];
}

//===----------------------------------------------------------------------===//
// Level 2: the chunked form
//===----------------------------------------------------------------------===//
//
// Tensors are in chunked layout: the time axis T is padded to NC * C and split
// into [NC, C], e.g. q : [B,NC,C,H,K], v : [B,NC,C,HV,V]. Cumulative gates G
// are f32, [B,NC,C,H] for a scalar gate and [B,NC,C,H,K] for a channel-wise
// gate; no gate operand means no decay.

class La_ChunkOp<string mnemonic, list<Trait> traits = []>
    : La_Op<mnemonic, !listconcat(traits, [Pure])>;

def La_ChunkCumsumOp : La_ChunkOp<"chunk_cumsum"> {
  let summary = "cumulative sum of log-gates inside each chunk";
  let description = [{
    `G[b,n,i,...] = sum_{j <= i} g[b,n,j,...]`, restarting at every chunk,
    accumulated in f32. `g` is `[B,NC,C,H]` or `[B,NC,C,H,K]`; the result has
    its shape and element type f32. Gates are <= 0, so G decreases along the
    chunk and every `G_i - G_j` with `j <= i` is <= 0. With `exclusive`, the
    sum runs over `j < i` (the gate before token i; 0 for the first token),
    which the general low-rank form needs.
  }];
  let arguments = (ins La_FloatTensor:$g, UnitAttr:$exclusive);
  let results = (outs La_F32Tensor:$result);
  let assemblyFormat = "$g attr-dict `:` type($g) `->` type($result)";
  let hasVerifier = 1;
}

def La_ChunkIntraOp : La_ChunkOp<"chunk_intra", [AttrSizedOperandSegments]> {
  let summary = "the masked intra-chunk product ((Q K^T) * D * M) V";
  let description = [{
    Per chunk and value head (key head `h = hv / (HV/H)`):
    `O[i] = sum_{j <= i} scale * (q_i . (k_j * exp(G_i - G_j))) v_j`
    with the decay taken per channel for a channel-wise gate. Every exponent
    kept by the mask is <= 0; masked entries are selected away before they
    are used, so an overflow there never becomes NaN. The result is the f32
    intra-chunk output `[B,NC,C,HV,V]`. An optional second key/value pair
    `extra(k2, v2)` adds the same product of `k2` and `v2` (the general
    low-rank form writes two rank-one terms per token). With
    `value_gates` C `[B,NC,C,HV,V]` (cumulative, like `gates`), `v_j` is
    decayed per value channel as well, by `exp(C_i - C_j)`; not with an
    extra pair.
  }];
  let arguments = (ins La_FloatTensor:$q, La_FloatTensor:$k,
                       La_FloatTensor:$v, Optional<La_F32Tensor>:$gates,
                       Optional<La_F32Tensor>:$value_gates,
                       Optional<La_FloatTensor>:$extra_keys,
                       Optional<La_FloatTensor>:$extra_values,
                       F32Attr:$scale);
  let results = (outs La_F32Tensor:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v (`gates` `(` $gates^ `:` type($gates) `)`)?
    (`value_gates` `(` $value_gates^ `:` type($value_gates) `)`)?
    (`extra` `(` $extra_keys^ `,` $extra_values `:` type($extra_keys) `,`
      type($extra_values) `)`)? attr-dict
    `:` type($q) `,` type($k) `,` type($v) `->` type($result)
  }];
  let hasVerifier = 1;
}

def La_ChunkWYOp : La_ChunkOp<"chunk_wy", [AttrSizedOperandSegments]> {
  let summary = "the UT transform of a low-rank transition inside each chunk";
  let description = [{
    The product of a chunk's C transitions written in WY form, so that the
    state scan can form the chunk's corrected values `V' = U - W S_n`.

    The delta rule (`beta : [B,NC,C,H]`): with
    `A = strictly_lower(diag(beta) (K K^T * D))`, `D_ij = exp(G_i - G_j)`
    per channel (or per head for a scalar gate),

    ```
    T = (I + A)^{-1}
    W = T (beta * exp(G) * K)      [B,NC,C,H,K]
    U = T (beta * V)               [B,NC,C,HV,V]
    ```

    The general low-rank form (`a, b : [B,NC,C,H,K]`, transition
    `Diag(alpha_t) - b_t a_t^T`): with `u_t = a_t^T S_{t-1}`, `P` the
    exclusive cumulative gates (`prev_gates`, see `la.chunk_cumsum
    exclusive`), `A = strictly_lower((a * exp(P)) (b * exp(-G))^T)` and
    `M = strictly_lower((a * exp(P)) (k * exp(-G))^T)` (formed with every
    exponent <= 0),

    ```
    T = (I + A)^{-1}
    W = T (a * exp(P))             [B,NC,C,H,K]
    U = -T (M V)                   [B,NC,C,HV,V]
    ```

    so that `U - W S_n = -(u_t)_t`: the values that pair with the keys `b`.

    `T` is computed in f32 by forward substitution on `block_size` x
    `block_size` diagonal blocks followed by a block forward substitution
    that merges them with matrix products (`block_size` must divide C).
  }];
  let arguments = (ins La_FloatTensor:$k, La_FloatTensor:$v,
                       Optional<La_FloatTensor>:$beta,
                       Optional<La_FloatTensor>:$a,
                       Optional<La_FloatTensor>:$b,
                       Optional<La_F32Tensor>:$gates,
                       Optional<La_F32Tensor>:$prev_gates,
                       DefaultValuedAttr<I64Attr, "16">:$block_size);
  let results = (outs La_F32Tensor:$w, La_F32Tensor:$u);
  let assemblyFormat = [{
    $k `,` $v (`beta` `(` $beta^ `:` type($beta) `)`)?
    (`a` `(` $a^ `:` type($a) `)`)? (`b` `(` $b^ `:` type($b) `)`)?
    (`gates` `(` $gates^ `:` type($gates) `)`)?
    (`prev_gates` `(` $prev_gates^ `:` type($prev_gates) `)`)? attr-dict
    `:` type($k) `,` type($v) `->` type($w) `,` type($u)
  }];
  let hasVerifier = 1;
}

def La_ChunkStateScanOp : La_ChunkOp<"chunk_state_scan",
                                     [AttrSizedOperandSegments]> {
  let summary = "the chunk-to-chunk state recurrence";
  let description = [{
    A sequential pass over chunks, materialising the state that enters each
    chunk:

    ```
    S_0 = initial_state (or 0)
    S_{n+1} = exp(G_C) S_n + (K_n * exp(G_C - G))^T V_n
    ```

    where `G_C` is the chunk's last cumulative gate. Results: the states
    entering every chunk `[B,NC,HV,K,V]` and the final state `[B,HV,K,V]`,
    both f32.

    With a `correction` W (from `la.chunk_wy`), `v` holds U and each chunk
    uses the corrected values `V'_n = U_n - W_n S_n`, which depend on the
    state entering the chunk; they are returned as a third result
    `[B,NC,C,HV,V]` (f32) for `la.chunk_intra`. An optional uncorrected pair
    `extra(k2, v2)` adds `(K2_n * exp(G_C - G))^T V2_n` to every update (the
    general low-rank form). With `value_gates` C (cumulative,
    `[B,NC,C,HV,V]`) the update is
    `S_{n+1} = exp(G_C) S_n exp(C_C) + (K_n * exp(G_C - G))^T (V_n * exp(C_C - C))`
    (not with a correction or an extra pair).
  }];
  let arguments = (ins La_FloatTensor:$k, La_FloatTensor:$v,
                       Optional<La_F32Tensor>:$gates,
                       Optional<La_F32Tensor>:$value_gates,
                       Optional<La_F32Tensor>:$initial_state,
                       Optional<La_F32Tensor>:$correction,
                       Optional<La_FloatTensor>:$extra_keys,
                       Optional<La_FloatTensor>:$extra_values);
  let results = (outs La_F32Tensor:$states, La_F32Tensor:$final_state,
                      Optional<La_F32Tensor>:$corrected);
  let assemblyFormat = [{
    $k `,` $v (`gates` `(` $gates^ `:` type($gates) `)`)?
    (`value_gates` `(` $value_gates^ `:` type($value_gates) `)`)?
    (`initial_state` `(` $initial_state^ `:` type($initial_state) `)`)?
    (`correction` `(` $correction^ `:` type($correction) `)`)?
    (`extra` `(` $extra_keys^ `,` $extra_values `:` type($extra_keys) `,`
      type($extra_values) `)`)?
    attr-dict `:` type($k) `,` type($v) `->` type(results)
  }];
  let hasVerifier = 1;
}

def La_ChunkInterOp : La_ChunkOp<"chunk_inter", [AttrSizedOperandSegments]> {
  let summary = "the inter-chunk output (Q * exp(G)) S_n plus the intra part";
  let description = [{
    `O[i] = scale * (q_i * exp(G_i))^T S_n + intra[i]` per chunk n and value
    head, where `S_n` is the state entering the chunk and `intra` the result
    of `la.chunk_intra`. The result `[B,NC,C,HV,V]` has the output element
    type; the sum is formed in f32. `states : [B,NC,HS,K,V]` may have fewer
    heads than the output (HS dividing HV): output head `hv` reads state
    `hv / (HV/HS)` (grouped query heads, each group reading one state),
    as it reads query head `hv / (HV/H)`. With `value_gates` C the state's part is
    decayed per value channel as well: `exp(C_i) * (scale (q_i * exp(G_i))^T S_n)`.
    With `transposed_states` the states are read from their value side,
    `O[i] = scale * S_n (q_i * exp(G_i)) + intra[i]` with
    `states : [B,NC,HS,O,K]` (O the output's last dim, K q's): la.recurrence's
    `transposed_query`, whose q has the state's value channels; `gates` and
    `value_gates` keep their meaning (q's channels, the output's channels).
  }];
  let arguments = (ins La_FloatTensor:$q, La_F32Tensor:$states,
                       La_F32Tensor:$intra, Optional<La_F32Tensor>:$gates,
                       Optional<La_F32Tensor>:$value_gates,
                       F32Attr:$scale, UnitAttr:$transposed_states);
  let results = (outs La_FloatTensor:$result);
  let assemblyFormat = [{
    $q `,` $states `,` $intra (`gates` `(` $gates^ `:` type($gates) `)`)?
    (`value_gates` `(` $value_gates^ `:` type($value_gates) `)`)?
    attr-dict `:` type($q) `,` type($states) `,` type($intra) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

#endif // LA_DIALECT_LA_LAOPS_TD
