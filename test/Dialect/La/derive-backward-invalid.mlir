// RUN: la-opt %s -split-input-file -la-derive-backward -verify-diagnostics

// An element-wise map whose body has an op without a derivative rule: the
// pass stops at that op, with its location.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>

func.func @feature_map(%q: !qk, %k: !qk, %v: !v) -> !v {
  %e = tensor.empty() : !qk
  %phi = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q : !qk) outs(%e : !qk) {
  ^bb0(%x: f32, %out: f32):
    // expected-error @+1 {{'math.sin' op in an element-wise map on the path from an argument to a result has no derivative in la-derive-backward}}
    %y = math.sin %x : f32
    linalg.yield %y : f32
  } -> !qk
  %o = la.attention linear %phi, %k, %v : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

// A reduction that is not an accumulation `out + f(inputs)` (a maximum over
// the channels) is neither an element-wise map nor a contraction.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!g = tensor<1x8x2xf32>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>

func.func @reduction(%q: !qk, %k: !qk, %v: !v) -> !v {
  %e = tensor.empty() : !g
  // expected-error @+1 {{'linalg.generic' op is on the path from an argument to a result and reads its output other than as 'out + f(inputs)'; la-derive-backward differentiates element-wise maps of their inputs and accumulations into their output}}
  %max = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%q : !qk) outs(%e : !g) {
  ^bb0(%x: f32, %out: f32):
    %y = arith.maxnumf %x, %out : f32
    linalg.yield %y : f32
  } -> !g
  %o = la.attention mamba2 %q, %k, %v g(%max : !g) : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

// Reduction loops whose body does not read its output (the last element
// wins) are not an accumulation either.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
!g = tensor<1x8x2xf32>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>

func.func @reduction_without_accumulation(%q: !qk, %k: !qk, %v: !v) -> !v {
  %e = tensor.empty() : !g
  // expected-error @+1 {{'linalg.generic' op is on the path from an argument to a result and has reduction loops but does not yield 'out + f(inputs)'}}
  %last = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%q : !qk) outs(%e : !g) {
  ^bb0(%x: f32, %out: f32):
    linalg.yield %x : f32
  } -> !g
  %o = la.attention mamba2 %q, %k, %v g(%last : !g) : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

// A map that reads its output other than by adding to it (a product with an
// argument) is not a function of its inputs alone.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>

func.func @reads_output(%q: !qk, %k: !qk, %v: !v) -> !v {
  // expected-error @+1 {{'linalg.generic' op is on the path from an argument to a result and reads its output other than as 'out + f(inputs)'}}
  %phi = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q : !qk) outs(%k : !qk) {
  ^bb0(%x: f32, %out: f32):
    %y = arith.mulf %x, %out : f32
    linalg.yield %y : f32
  } -> !qk
  %o = la.attention linear %phi, %k, %v : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

// Other ops on the path (a tensor.pad here) are not differentiated.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

func.func @pad(%q: !qk, %k: tensor<1x7x2x4xf32>, %v: !v) -> !v {
  %zero = arith.constant 0.0 : f32
  // expected-error @+1 {{'tensor.pad' op is on the path from an argument to a result, and la-derive-backward differentiates only la.attention, la.recurrence, la.sliding_window_hybrid, linalg.softmax, tensor.cast, tensor.insert_slice, tensor.extract_slice, element-wise linalg.generic maps and accumulations}}
  %kp = tensor.pad %k low[0, 0, 0, 0] high[0, 1, 0, 0] {
  ^bb0(%i: index, %j: index, %l: index, %m: index):
    tensor.yield %zero : f32
  } : tensor<1x7x2x4xf32> to !qk
  %o = la.attention linear %q, %kp, %v : !qk, !qk, !v -> !v
  return %o : !v
}

// -----

!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>

// expected-error @+1 {{cannot get the gradient function 'taken_grad': the name is taken (choose another 'suffix')}}
func.func @taken(%q: !qk, %k: !qk, %v: !v) -> !v {
  %o = la.attention linear %q, %k, %v : !qk, !qk, !v -> !v
  return %o : !v
}

func.func @taken_grad() {
  return
}

// -----

// la.recurrence_grad has no grouped query heads yet (la.attention's gradient
// repeats them).
func.func @grouped_query_heads(%q: tensor<1x8x4x4xf32>, %k: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %s0: tensor<1x2x4x6xf32>) -> tensor<1x8x4x6xf32> {
  %oi = tensor.empty() : tensor<1x8x4x6xf32>
  // expected-error @+1 {{with grouped query heads cannot be differentiated yet}}
  %o, %s = la.recurrence decay(none) low_rank(none) %q, %k, %v outs(%oi, %s0 : tensor<1x8x4x6xf32>, tensor<1x2x4x6xf32>) {scale = 0.5 : f32} : tensor<1x8x4x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x4x6xf32>, tensor<1x2x4x6xf32>
  return %o : tensor<1x8x4x6xf32>
}

// -----

// A read from the state's value side is what la-expand-recurrence-grad
// emits; its own gradient is not derived yet.
func.func @transposed_query(%q: tensor<1x8x2x4xf32>, %v: tensor<1x8x2x6xf32>, %s0: tensor<1x2x4x6xf32>) -> tensor<1x8x2x4xf32> {
  %oi = tensor.empty() : tensor<1x8x2x6xf32>
  %ti = tensor.empty() : tensor<1x8x2x4xf32>
  // expected-error @+1 {{with 'transposed_query' cannot be differentiated yet (its value-side read is the backward's own form)}}
  %o, %s, %t = la.recurrence decay(none) low_rank(none) %q, %q, %v transposed_query(%v : tensor<1x8x2x6xf32>) outs(%oi, %s0, %ti : tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>, tensor<1x8x2x4xf32>) {scale = 0.5 : f32} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x6xf32> -> tensor<1x8x2x6xf32>, tensor<1x2x4x6xf32>, tensor<1x8x2x4xf32>
  return %t : tensor<1x8x2x4xf32>
}

// -----

// A state pool is serving's: training passes each sequence's state.
func.func @state_pool(%q: tensor<2x8x2x4xf32>, %v: tensor<2x8x2x6xf32>, %pool: tensor<5x2x4x6xf32>, %idx: tensor<2xi32>) -> tensor<2x8x2x6xf32> {
  // expected-error @+1 {{'la.attention' op with 'state_indices' cannot be differentiated (pass the sequences' initial states instead of a pool)}}
  %o, %s = la.attention linear %q, %q, %v initial_state(%pool : tensor<5x2x4x6xf32>) state_indices(%idx : tensor<2xi32>) : tensor<2x8x2x4xf32>, tensor<2x8x2x4xf32>, tensor<2x8x2x6xf32> -> tensor<2x8x2x6xf32>, tensor<5x2x4x6xf32>
  return %o : tensor<2x8x2x6xf32>
}

// -----

// Checkpoints are serving's (prefix caching); their cotangents would enter
// the adjoint at each segment's end, which la-derive-backward does not do.
func.func @checkpoints(%q: tensor<2x8x2x4xf32>, %v: tensor<2x8x2x6xf32>) -> (tensor<2x8x2x6xf32>, tensor<2x2x2x4x6xf32>) {
  // expected-error @+1 {{'la.attention' op with 'checkpoint_every' cannot be differentiated yet (split the sequence at the checkpoints instead)}}
  %o, %c = la.attention linear %q, %q, %v {checkpoint_every = 4} : tensor<2x8x2x4xf32>, tensor<2x8x2x4xf32>, tensor<2x8x2x6xf32> -> tensor<2x8x2x6xf32>, tensor<2x2x2x4x6xf32>
  return %o, %c : tensor<2x8x2x6xf32>, tensor<2x2x2x4x6xf32>
}
