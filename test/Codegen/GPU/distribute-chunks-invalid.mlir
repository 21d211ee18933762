// RUN: la-opt %s -split-input-file -la-distribute-chunks -verify-diagnostics

// The tasks' grid is static: a run-time number of chunks is an error.
func.func @dynamic_chunks(%g: tensor<1x?x16x2xf32>) -> tensor<1x?x16x2xf32> {
  // expected-error @+1 {{'la.chunk_cumsum' op needs static shapes for the chunk-parallel GPU schedule}}
  %0 = la.chunk_cumsum %g : tensor<1x?x16x2xf32> -> tensor<1x?x16x2xf32>
  return %0 : tensor<1x?x16x2xf32>
}

// -----

// Grouped query heads: a state read by two output heads is not distributed.
func.func @grouped_query_heads(%q: tensor<1x2x16x2x8xf32>, %s: tensor<1x2x1x8x16xf32>, %intra: tensor<1x2x16x2x16xf32>) -> tensor<1x2x16x2x16xf32> {
  // expected-error @+1 {{'la.chunk_inter' op reads each state for several output heads (grouped query heads), which the chunk-parallel GPU schedule does not distribute yet; use the fused schedule}}
  %0 = la.chunk_inter %q, %s, %intra {scale = 0.5 : f32} : tensor<1x2x16x2x8xf32>, tensor<1x2x1x8x16xf32>, tensor<1x2x16x2x16xf32> -> tensor<1x2x16x2x16xf32>
  return %0 : tensor<1x2x16x2x16xf32>
}
