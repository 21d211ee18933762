// RUN: la-opt %s -la-emulate-gpu -verify-diagnostics -o /dev/null

// An mma.sync whose lane value is not marked (la-map-to-gpu marks it
// la.lane): the emulator cannot run the warp's lanes.
func.func @no_lane(%a: vector<4x1xf32>, %b: vector<2x1xf32>, %c: vector<2x2xf32>,
                   %out: memref<2x2xf32>) {
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  // expected-error @below {{has mma.sync but no lane (la.lane) value}}
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%nx = %c32, %ny = %c1, %nz = %c1) {
    %d = nvgpu.mma.sync(%a, %b, %c) {mmaShape = [16, 8, 8], tf32Enabled}
        : (vector<4x1xf32>, vector<2x1xf32>, vector<2x2xf32>) -> vector<2x2xf32>
    vector.transfer_write %d, %out[%c1, %c1] : vector<2x2xf32>, memref<2x2xf32>
    gpu.terminator
  }
  return
}
