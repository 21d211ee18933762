// RUN: la-opt %s -split-input-file -la-derive-backward -verify-diagnostics

// An element-wise feature map between an argument and the layer is not
// differentiated yet: the pass stops there, with its location.
!qk = tensor<1x8x2x4xf32>
!v = tensor<1x8x2x6xf32>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>

func.func @feature_map(%q: !qk, %k: !qk, %v: !v) -> !v {
  %e = tensor.empty() : !qk
  // expected-error @+1 {{'linalg.generic' op is on the path from an argument to a result, and la-derive-backward differentiates only la.attention, la.recurrence and tensor.cast}}
  %phi = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%q : !qk) outs(%e : !qk) {
  ^bb0(%x: f32, %out: f32):
    %y = math.exp %x : f32
    linalg.yield %y : f32
  } -> !qk
  %o = la.attention linear %phi, %k, %v : !qk, !qk, !v -> !v
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
