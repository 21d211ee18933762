// RUN: la-opt %s -split-input-file -la-tile-for-gpu -verify-diagnostics

func.func @four_task_dims(%x: tensor<2x2x2x2xf32>) -> tensor<2x2x2x2xf32> {
  // expected-error @below {{has 4 dimensions; a grid has at most 3}}
  %r = scf.forall (%i, %j, %k, %l) in (2, 2, 2, 2) shared_outs(%out = %x)
      -> tensor<2x2x2x2xf32> {
    scf.forall.in_parallel {
    }
  }
  return %r : tensor<2x2x2x2xf32>
}

// -----

func.func @not_normalized(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @below {{must be normalized (lower bounds 0, steps 1) to map onto blocks}}
  %r = scf.forall (%i) = (0) to (8) step (2) shared_outs(%out = %x) -> tensor<8xf32> {
    scf.forall.in_parallel {
    }
  }
  return %r : tensor<8xf32>
}

// -----

func.func @no_parallel_dim(%x: tensor<2x8xf32>, %acc: tensor<2xf32>) -> tensor<2xf32> {
  %r = scf.forall (%i) in (2) shared_outs(%out = %acc) -> tensor<2xf32> {
    %row = tensor.extract_slice %x[%i, 0] [1, 8] [1, 1] : tensor<2x8xf32> to tensor<8xf32>
    %o = tensor.extract_slice %out[%i] [1] [1] : tensor<2xf32> to tensor<f32>
    // expected-error @below {{has no parallel dimension to split over the GPU's threads}}
    %sum = linalg.generic {
        indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>],
        iterator_types = ["reduction"]}
        ins(%row : tensor<8xf32>) outs(%o : tensor<f32>) {
    ^bb0(%in: f32, %a: f32):
      %s = arith.addf %in, %a : f32
      linalg.yield %s : f32
    } -> tensor<f32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %sum into %out[%i] [1] [1] : tensor<f32> into tensor<2xf32>
    }
  }
  return %r : tensor<2xf32>
}
