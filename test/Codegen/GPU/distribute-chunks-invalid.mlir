// RUN: la-opt %s -split-input-file -la-distribute-chunks -verify-diagnostics

// The tasks' grid is static: a run-time number of chunks is an error.
func.func @dynamic_chunks(%g: tensor<1x?x16x2xf32>) -> tensor<1x?x16x2xf32> {
  // expected-error @+1 {{'la.chunk_cumsum' op needs static shapes for the chunk-parallel GPU schedule}}
  %0 = la.chunk_cumsum %g : tensor<1x?x16x2xf32> -> tensor<1x?x16x2xf32>
  return %0 : tensor<1x?x16x2xf32>
}
