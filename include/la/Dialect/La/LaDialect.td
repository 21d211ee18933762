//===- LaDialect.td - the linear-attention dialect ---------*- tablegen -*-===//

#ifndef LA_DIALECT_LA_LADIALECT_TD
#define LA_DIALECT_LA_LADIALECT_TD

include "mlir/IR/OpBase.td"

def La_Dialect : Dialect {
  let name = "la";
  let cppNamespace = "::mlir::la";
  let summary = "Linear attention: attention graphs, the canonical recurrence "
                "and its chunked form";
  let description = [{
    The `la` dialect describes the linear-attention family at three levels:

    * Level 0, `la.attention`: one op for the whole family as users write it
      (linear attention, retention, Mamba-2 style scalar decay, GLA, DeltaNet,
      Gated DeltaNet, KDA), named by its update rule and gate kind.
    * Level 1, `la.recurrence`: the canonical diagonal-plus-low-rank
      recurrence `S_t = (Diag(alpha_t) - b_t a_t^T) S_{t-1} + w_t v_t^T` that
      every level-0 variant lowers to, so that one chunking algorithm serves
      the family.
    * Level 2: chunked ops produced by the chunking pass.

    Conventions: `q, k : [B,T,H,K]`, `v : [B,T,HV,V]` with HV a multiple of H,
    state `[K,V]` per (sequence, value head) kept in f32, gates in natural-log
    space, `o_t = S_t^T (scale * q_t)` (token t included).
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let useDefaultAttributePrinterParser = 1;

  // The facts one pass leaves for another on upstream ops, declared here so
  // that the verifier checks them (verifyOperationAttribute) and passes use
  // the generated helpers rather than string keys.
  let discardableAttrs = (ins
    // `[row, column]` loop dims of a linalg op where nothing with column >
    // row matters (a causally masked or lower-triangular product): written
    // by convert-la-to-linalg, read by la-tile.
    "::mlir::DenseI64ArrayAttr":$lower_triangular,
    // `[row, column]` loop dims of a linalg op where nothing with column <
    // row matters (the earlier block of a sliding window): written by
    // la.sliding_window_hybrid's decomposition, read by la-tile.
    "::mlir::DenseI64ArrayAttr":$upper_triangular,
    // `[block, column, size]`: a linalg op of a blocked causal product whose
    // entries with column >= block * size are never read: written by
    // convert-la-to-linalg, read by la-tile.
    "::mlir::DenseI64ArrayAttr":$block_causal,
    // On la-fuse-recurrence's scf.for over the chunks of a task, which
    // la-prefetch-chunks prefetches ahead of.
    "::mlir::UnitAttr":$fused_chunk_loop,
    // On la-map-to-gpu's scf.for loops of threads (`for i = tid to n step
    // threads`) and of warps, which la-emulate-gpu runs as whole loops.
    "::mlir::UnitAttr":$distributed,
    // On the op computing a thread's lane in its warp for la-map-to-gpu's
    // tensor-core tiles (la-emulate-gpu runs a warp's 32 lanes together).
    "::mlir::UnitAttr":$lane
  );
  let hasOperationAttrVerify = 1;
}

class La_Op<string mnemonic, list<Trait> traits = []>
    : Op<La_Dialect, mnemonic, traits>;

#endif // LA_DIALECT_LA_LADIALECT_TD
