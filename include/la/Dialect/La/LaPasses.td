//===- LaPasses.td - passes of the la dialect --------------*- tablegen -*-===//

#ifndef LA_DIALECT_LA_LAPASSES_TD
#define LA_DIALECT_LA_LAPASSES_TD

include "mlir/Pass/PassBase.td"

def LaLowerToRecurrencePass : Pass<"la-lower-to-recurrence"> {
  let summary = "Lower every la.attention variant to the canonical recurrence";
  let description = [{
    Rewrites each level-0 `la.attention` into one level-1 `la.recurrence`
    (and each `la.attention_grad` into the `la.recurrence_grad` of the same
    canonical recurrence, with the adjoints of the level-0 maps around it):
    the named variant becomes a diagonal gate kind plus a low-rank structure,
    the default scale `K^-0.5` and epsilon become explicit, and in-kernel L2
    normalisation of q and k becomes `linalg.generic` ops on tensors (computed
    in f32; for f16/bf16 inputs the normalised q and k stay in f32 so no
    precision is lost before the recurrence).

    Grouped query heads (q with more heads than k) stay grouped:
    `la.recurrence` reads each state for its group of query heads, so the
    state work is done once per key/value head. With `expand-query-groups`
    k, v, the gates and the state are repeated per query head instead (G
    times the state work; the GPU pipeline's chunk-parallel schedule does
    this: it does not distribute a state read by several output heads).
    Gradients (`la.attention_grad`) always repeat them.

    With `checkpoint_every`, la.attention becomes a loop over segments of
    that many tokens, each an `la.recurrence` from the state the segment
    before ended with, whose final state is written into the checkpoints.

    `la.sliding_window_hybrid` is replaced by its decomposition (its
    AggregatedOpInterface): an `la.recurrence` of linear attention on the
    features for the tokens outside the window, and linalg ops on tensors
    for the window's softmax over blocks of tokens.

    `linalg.softmax` (a producer such as Hedgehog's feature map, a softmax
    over features) is replaced by its upstream decomposition
    (AggregatedOpInterface): a max reduction, `exp(x - max)`, a sum
    reduction and the division, `linalg.generic` ops that the rest of the
    pipeline tiles like any other producer (`linalg.softmax` itself has no
    lowering to loops).
  }];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let options = [
    Option<"l2normEps", "l2norm-eps", "double", "1e-6",
           "epsilon added to the sum of squares in the L2 normalisation">,
    Option<"expandQueryGroups", "expand-query-groups", "bool", "false",
           "repeat the states per query head instead of reading each state "
           "for its group of query heads">
  ];
}

def LaDeriveBackwardPass : Pass<"la-derive-backward", "::mlir::ModuleOp"> {
  let summary = "Derive the gradient function of every function of la ops";
  let description = [{
    Reverse-mode differentiation of the functions that compute `la.attention`
    or `la.recurrence`. For every `func.func @f` with a body containing one
    of them, the pass adds `@f_grad` (`suffix`) with the arguments of `@f`
    followed by one cotangent per result of `@f` (of the result's type), and
    one result per float tensor argument of `@f`: the gradient of
    `sum_i <result_i, cotangent_i>` with respect to it, f32, of the
    argument's shape (zero where the argument does not reach a result).
    Integer arguments such as `cu_seqlens` get none. The gradient function
    takes the forward's discardable attributes (e.g.
    `llvm.emit_c_interface`).

    The body of `@f` is recomputed (the backward of a recurrence needs its
    inputs, not its states), then its ops are visited in reverse: each
    `la.attention` becomes an `la.attention_grad` and each `la.recurrence`
    an `la.recurrence_grad` with the adjoints of its results as `d_o` and
    `d_final_state` (a zero `d_o` when only the final state is used);
    `tensor.cast` passes its adjoint through, and adjoints of a value used
    several times are summed (in f32). So a chain of la ops, a state carried
    from one to the next, or one tensor used as both q and k is
    differentiated exactly. Ops that do not depend on a float tensor
    argument (constants, `tensor.empty`, fills) are recomputed and get no
    adjoint.

    Element-wise maps on the path (a `linalg.generic` of parallel loops with
    one output, indexed by a permutation, that its body does not read, and
    inputs indexed by projected permutations: feature maps, fla's in-kernel
    gate `-exp(A_log) * softplus(a + dt_bias)`, a sigmoid beta) are
    differentiated by reverse mode over their scalar body: the gradient of
    each input is one `linalg.generic` over the map's loops that recomputes
    the body, runs it backwards from the cotangent and accumulates the
    input's adjoint, with reduction loops where the input is broadcast
    (A_log per head: summed over batch and time). The body's ops must be
    arith `addf`, `subf`, `mulf`, `divf`, `negf`, `maximumf`, `maxnumf`,
    `minimumf`, `minnumf`, `select`, `extf`, `truncf`, `cmpf`, constants, or
    math `exp`, `log`, `log1p`, `tanh`, `sqrt`, `rsqrt`, `absf` (a max, min
    or select routes the cotangent to the operand taken). Any other op on
    the path from an argument to a result, or another op in such a body, is
    an error with its location.

    `checkpoint` sets the gradient ops' `checkpoint` (tokens between stored
    states). With `keep-forward=false` the forward functions are erased once
    differentiated (those nothing else refers to), leaving a module that
    computes gradients only.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::func::FuncDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let options = [
    Option<"checkpoint", "checkpoint", "int64_t", "64",
           "tokens between the states the backward stores (>= 1)">,
    Option<"suffix", "suffix", "std::string", "\"_grad\"",
           "appended to a function's name to name its gradient function">,
    Option<"keepForward", "keep-forward", "bool", "true",
           "keep the forward functions (false: erase those nothing uses)">
  ];
}

def LaExpandRecurrenceGradPass : Pass<"la-expand-recurrence-grad"> {
  let summary = "Rewrite la.recurrence_grad into adjoint la.recurrence ops";
  let description = [{
    The adjoint of a recurrence whose decay is diagonal (no gate, `fixed`,
    `scalar` or `channel`) and that has no low-rank part is again such a
    recurrence, run backward in time: with `G_t = dL/dS_t =
    Diag(alpha_{t+1}) G_{t+1} +
    s q_t do_t^T`, `dv_t = G_t^T k_t` is the output of `G` queried by k,
    `dk_t = G_t v_t` that of `G^T` queried by v, and `dq_t = s S_t do_t`
    that of `S^T` (forward time) queried by do (with `transposed-reads`,
    the default, `dk` is `G`'s read from its value side,
    `la.recurrence`'s `transposed_query`, instead of a recurrence `G^T`
    of its own: one state update per chunk fewer); the decay's gradient is
    `dg_t = sum_{u >= t} (q_u . dq_u - k_u . dk_u) + <S_T, dS_T>` and
    `dS_0 = alpha_0 G_0` (per channel for a channel-wise gate, which
    decays the value side of `S^T` and `G^T`: their `gv`). This pass
    rewrites such an `la.recurrence_grad` into those `la.recurrence` ops
    (two by default, three without `transposed-reads`), `G` (and `G^T`)
    with `reverse`, on the inputs (copied only where
    scaled, converted to f32 or widened to the value heads), with
    `cu_seqlens` when the gradient has it (the shifted gates stop at each
    sequence's end, the gate's gradient is summed per sequence), so that
    `la-fuse-recurrence`
    and `la-chunk` chunk the backward as they chunk the forward: matrix
    products per chunk instead of rank-one updates per token, and no
    checkpoints (the chunked forms keep no per-token state). The normaliser
    is first rewritten by la-simplify-recurrence's patterns (which this pass
    includes).

    The delta rule (`b = w = beta k`, `a = alpha * k`) becomes four
    recurrences (six without `transposed-reads`): its reads `p_t = a_t^T S_{t-1}` (the forward recurrence on
    the inputs one token later, queried by a) and `dv_t = G_t^T b_t` (the
    adjoint, a general low-rank recurrence with `reverse` and the transposed
    transition `Diag(alpha) - a b^T` one token earlier) make both the state
    (`S_t = D_t S_{t-1} + b_t (v_t - p_t)^T`) and its adjoint
    (`G_{t-1} = D_t G_t - a_t dv_t^T + s q_{t-1} do_{t-1}^T`) diagonal
    recurrences, whose products `S do`, `S dv` and `G (v - p)` (the last
    the adjoint's value-side read, or without `transposed-reads` two
    recurrences, one per term) give dq, dk, dbeta and the gate's
    gradient; `dS_0 = D_0 G_0 - a_0 dv_0^T`.

    The general low-rank form (`S_t = D_t S_{t-1} - b_t a_t^T S_{t-1} + k_t
    v_t^T`, Gated DeltaNet-2's and the dplr rule's, whose `b` and `k`
    differ) becomes five: the reads `p_t = a_t^T S_{t-1}` and `r_t = G_t^T
    b_t` as above (both general), and then, with S and G diagonal but
    written twice per token (`k v^T - b p^T`, `s q do^T - a r^T`), three
    diagonal recurrences over sub-steps (their inputs interleaved along T,
    so one op writes both terms and reads its state twice): S^T over three
    steps per token (dq and `da = -S_{t-1} r_t`), G^T over three (dk and
    `db = -G_t p_t`), G over two (dv); the gate's gradient counts the reads
    `a_u` at `S_{u-1}` from the token after.

    Left to the token loops of `convert-la-to-linalg`: dynamic H or HV (a
    dynamic B or T is kept: the time shifts and the gate's reverse sum read
    T from q; a run-time T must be at least 1, as la's Python package checks
    before it calls a kernel).
  }];
  let options = [
    Option<"transposedReads", "transposed-reads", "bool", /*default=*/"true",
           "Read the adjoint G from both sides (dv = G^T k, and dk = G v or "
           "the delta rule's G (v - p) as la.recurrence's transposed_query) "
           "instead of running G^T as recurrences of its own">
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

def LaSimplifyRecurrencePass : Pass<"la-simplify-recurrence"> {
  let summary = "Reduce la.recurrence to the forms the lowerings handle";
  let description = [{
    Two rewrites of the level-1 op (and of `la.recurrence_grad`) onto
    itself, run by `la-chunk` and `convert-la-to-linalg` too:

    * a `fixed` per-head decay becomes a `scalar` gate tensor `[B,T,H]`
      broadcast from `log_decay`;
    * the `normalizer` becomes an extra value column of ones: the recurrence
      runs on `[v, 1]` in f32, its last output column is `z_t . q'_t`, and the
      output is the other columns divided by it plus `eps`. The initial state
      gets a zero column (the normaliser's sum starts at zero in every call)
      and the final state drops it. A `la.recurrence_grad` with the
      normaliser becomes the forward on `[v, 1]` (for the numerator and the
      denominator), the cotangent of both, and the gradient of the
      recurrence on `[v, 1]`, whose value and state gradients drop the
      extra column.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

def LaDistinctResultsPass : Pass<"la-distinct-results",
                                 "::mlir::func::FuncOp"> {
  let summary = "Give every tensor result of a function a value of its own";
  let description = [{
    A function that returns one tensor value in several results (`return
    %s, %s`) gets, for each repeat, a copy (`linalg.copy` into a
    `tensor.empty`), so that after bufferization every result is a buffer
    of its own. The pipelines run it before one-shot bufferization: with a
    repeated allocation among a function's results, upstream
    `buffer-results-to-out-params{hoist-static-allocs}` replaces the
    allocation by the first out-parameter and then reads the erased
    allocation for the second (a crash). Functions without repeats are left
    unchanged.
  }];
  let dependentDialects = [
    "::mlir::linalg::LinalgDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

def LaInPlaceArgumentsPass : Pass<"la-in-place-arguments",
                                  "::mlir::ModuleOp"> {
  let summary = "Drop the results written into `la.in_place` arguments";
  let description = [{
    Runs after one-shot bufferization. A function argument marked
    `la.in_place` hands its buffer over to one of the function's results:
    la's kernels mark the initial state so that the final state is written
    over it (la-fuse-recurrence's tasks read and write their tiles of that
    buffer). Where bufferization wrote the result into the argument's
    buffer, the function returns the argument itself; the pass drops that
    result, so the caller reads it from the buffer it passed. Where it did
    not (the result went to a copy), the pass fails with an error at the
    argument: a kernel that silently left the caller's buffer stale would be
    a wrong answer. Upstream `drop-equivalent-buffer-results` drops every
    result equivalent to an argument without a word; this pass drops only
    the marked ones and reports those it cannot.
  }];
}

def LaChunkPass : Pass<"la-chunk"> {
  let summary = "Rewrite the canonical recurrence into its chunkwise-parallel form";
  let description = [{
    Rewrites each `la.recurrence` into the level-2 chunked ops: time is padded to a
    multiple of `chunk-size` (zero keys, values, beta and log-gates leave the
    state unchanged) and split into chunks, `la.chunk_cumsum` forms the
    in-chunk cumulative gates, `la.chunk_state_scan` the chunk-to-chunk state
    recurrence, `la.chunk_intra` the masked intra-chunk product and
    `la.chunk_inter` the output. For the delta rule, `la.chunk_wy` (the UT
    transform) gives W and U first and the scan forms the corrected values
    `V' = U - W S_n` that replace V. With `cu_seqlens`, an `scf.for` runs the
    chunked program once per packed sequence on its own slice and state, so
    no state crosses a boundary. A general low-rank part (`b_t a_t^T`) goes
    through the same WY transform with `a` and `b` (`la.chunk_wy a(..) b(..)`
    with the exclusive cumulative gates); its corrected values pair with `b`
    and `(k, v)` is carried as an extra, uncorrected pair.
  }];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let options = [
    Option<"chunkSize", "chunk-size", "int64_t", "64",
           "tokens per chunk (> 0)">
  ];
}

def LaFuseRecurrencePass : Pass<"la-fuse-recurrence"> {
  let summary = "Fuse the chunk-to-chunk state passing with each chunk's output";
  let description = [{
    Rewrites `la.recurrence` into the chunked level-2 ops of `la-chunk`, but
    run per (batch, value head) and per chunk, with upstream tiling: the
    recurrence is tiled by `scf::tileConsumerAndFuseProducersUsingSCF`
    through its `TilingInterface` into an `scf.forall` over `[B, HV]` (the
    threads' tasks, mapped to `#la.task` so that no canonicalization folds
    a one-task forall), and the task's recurrence again into an `scf.for`
    over tokens in steps of the chunk size that carries the f32 state
    `[1,1,K,V]` as the recurrence's accumulator. Each chunk's recurrence is
    then decomposed (`AggregatedOpInterface`) into `la.chunk_cumsum`,
    `la.chunk_wy` (delta rule), `la.chunk_state_scan` (one chunk, from the
    carried state), `la.chunk_intra` and `la.chunk_inter` on that chunk's
    `[1,1,C,1,...]` slices, so the output is formed while the state is in
    cache and no per-chunk state is written to memory. Grouped value heads
    read their key head inside the task, so the ops see `H = HV = 1`. A
    T that is not a multiple of the chunk size (or a dynamic T) leaves a
    last, partial chunk. By default every chunk's inputs are then packed
    into `[1,C,1,...]` buffers whose rows after the chunk's tokens (none but
    in the last chunk) are zero tokens, which leave the state unchanged, and
    the output is sliced back: one static chunk program serves every chunk
    (on the GPU the buffers are in shared memory, where la-tile-for-gpu
    would otherwise stage the chunk). With `peel-tail` the last chunk is
    peeled off the chunk loop (`scf::peelForLoopAndSimplifyBounds`) and
    decomposed on its own (padded by the decomposition): on the CPU the
    same speed, twice the code. The chunk loop is marked
    `la.fused_chunk_loop` for `la-prefetch-chunks`. Each task reads its tile
    of the initial state from the input and writes its final state into a
    fresh tensor.

    Cost rule (`mode=auto`): fused when `B * HV >= threads` (`threads=0`:
    the machine's hardware threads; a dynamic B is taken to be enough),
    because then
    the (batch, head) tasks alone keep every thread busy. Otherwise the
    recurrence is left for `la-chunk`, whose materialised states let the
    intra-chunk and output ops also run in parallel over chunks.
    `mode=fused` or `mode=materialized` forces either. A recurrence with
    `cu_seqlens` is split (`split-sequences`, with `chunk`) into an
    `scf.for` over its sequences whose body is the recurrence of one
    sequence (B = 1, a dynamic T: its slices of the inputs and of the
    initial state), when the cost rule would fuse that one; the output's
    tokens outside every sequence are zero. With `sequence-tasks` the
    sequences are tasks instead, whatever the mode (the GPU pipeline's form,
    under both of its schedules, since a loop outside the tasks has no
    kernel): the recurrence is tiled through its
    `TilingInterface` one sequence at a time, so the forall runs over
    `[N, HV]` (or `[N, HV, V / value-tile]`), each task the recurrence of
    its sequence's tokens (a run-time T whose partial last chunk is padded
    like any other), and the output, zero-filled before the tasks, keeps
    zeros between the sequences. Otherwise it is left for `la-chunk`.

    Producers (`fuse-producers`, on by default): an operand computed by a
    structured op on tensors (a `linalg.generic` feature map, a gate
    activation, the L2 normalisation `la-lower-to-recurrence` emits, ...)
    whose result nothing else uses is fused by upstream producer fusion
    into the task loop and then into the chunk loop, so that it is computed
    on the `[1,C,1,...]` tile each chunk reads, and so on up a chain of such
    producers; the operand is never materialised. This needs T to be a
    static multiple of the chunk size (no padding).

    Consumers (also under `fuse-producers`): when every user of the output
    is a structured op on tensors (projected-permutation maps, static
    shapes) whose result is [B,T,HV,V] or [B,T,HV] (a reduction over V, as
    in RMSNorm), and so on down to one [B,T,HV,V] result that leaves the set
    (the output's RMSNorm and its gating, say), those ops are fused by
    upstream consumer fusion (`scf::tileAndFuseConsumerOfSlices`, one loop
    level at a time) into the chunk loop, on the chunk's [1,C,1,V] tile;
    a `linalg.fill` init is filled per task. This needs T to be a static
    multiple of the chunk size and all of V in one task (no value tiles);
    the ops' inits and constants that are defined after the recurrence are
    moved before it. The tiles of results that nothing reads (the
    recurrence's own output then, a final state the function drops) are not
    written.

    Value tiles (`value-tile=N`): every column of the value (and of the
    state) evolves on its own, so the value dimension can be split into
    `V / N` tiles that are tasks of their own: the forall runs over
    `[B, HV, V / N]`, each task carrying a `[1,1,K,N]` state, and the cost
    rule counts `B * HV * V / N` tasks (the forall is normalized to task
    indices). The key-side work (decays, the
    `Q K^T` scores, the WY factors) is then recomputed per value tile. A
    tile that does not divide a static V is ignored (the whole V is one
    tile).

    Tasks only (`chunk=false`, what `la-lower-to-cpu{sequential=1}` runs on
    more than one thread): the recurrence is tiled into the same tasks under
    the same cost rule, and each task's recurrence is left whole, so that
    `convert-la-to-linalg` lowers it into a token loop per task and the
    tasks run in parallel (decoding on several threads).

    Packed inputs (`pack-inputs`): each chunk's slice of an input that is
    read from `[B, T, H, D]` memory is first copied (`linalg.copy`) into a
    compact `[1, C, 1, D]` tensor. In the input the slice's C rows are a
    whole `H * D` row apart, 4 KiB for H = 8 and D = 128 in f32: they all
    fall into the same few sets of an 8-way L1 cache and evict each other
    while the ops read them again and again; the compact copy does not
    (`la-lower-to-cpu` turns this on).
  }];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let options = [
    Option<"chunkSize", "chunk-size", "int64_t", "64",
           "tokens per chunk (> 0)">,
    Option<"mode", "mode", "::mlir::la::FusionMode",
           "::mlir::la::FusionMode::Auto",
           "auto (the cost rule), fused or materialized",
           [{::llvm::cl::values(
             clEnumValN(::mlir::la::FusionMode::Auto, "auto",
                        "fused when there are at least as many tasks as "
                        "threads"),
             clEnumValN(::mlir::la::FusionMode::Fused, "fused",
                        "always the fused program"),
             clEnumValN(::mlir::la::FusionMode::Materialized, "materialized",
                        "never: left to la-chunk"))}]>,
    Option<"threads", "threads", "int64_t", "1",
           "threads the cost rule plans for (0: the hardware threads of the "
           "compiling machine, which makes the IR depend on it: only on "
           "request)">,
    Option<"fuseProducers", "fuse-producers", "bool", "true",
           "compute the operands' producers per chunk inside the loop">,
    Option<"valueTile", "value-tile", "int64_t", "0",
           "value columns per task (0: all of V; must divide V)">,
    Option<"packInputs", "pack-inputs", "bool", "true",
           "copy each chunk of the (unfused) inputs into a compact tensor">,
    Option<"peelTail", "peel-tail", "bool", "false",
           "peel a last, partial chunk off the chunk loop instead of padding "
           "it inside the loop (a second chunk program)">,
    Option<"chunk", "chunk", "bool", "true",
           "chunk each task's recurrence (false: only the tasks, each "
           "recurrence left whole for the token loop)">,
    Option<"splitSequences", "split-sequences", "bool", "true",
           "with chunk: split a recurrence over packed sequences "
           "(cu_seqlens) into an scf.for over the sequences, each one a "
           "recurrence (of dynamic T) that fuses like any other">,
    Option<"sequenceTasks", "sequence-tasks", "bool", "false",
           "make packed sequences tasks: the forall runs over (sequence, "
           "value head[, value tile]), each task the recurrence of one "
           "sequence, whatever the mode (the GPU's blocks; before "
           "split-sequences)">
  ];
}

#endif // LA_DIALECT_LA_LAPASSES_TD
