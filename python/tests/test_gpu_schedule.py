"""The GPU's tiled schedule, run on the CPU, against the fp64 reference.

la-tile-for-gpu maps the fused program's (batch, value head, value tile)
tasks onto thread blocks and every structured op inside a task onto threads;
``la-lower-to-cpu{gpu-schedule}`` runs exactly that program on the CPU with
the block and thread loops as ordinary loops. These tests check the GPU
tiling (and la-fuse-recurrence's value tiles) without a GPU.
"""

import pytest

from la import runner
from la import testing as lt

LA_RUN = runner.find_la_run()
pytestmark = pytest.mark.skipif(LA_RUN is None, reason="la-run is not built")

#: f32 tolerance, as in test_cpu_exec
TOL = 1e-5

VARIANTS = ["gla", "gated_deltanet", "kda", "retention", "mamba2", "deltanet"]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("value_tile", [None, 8])
@pytest.mark.parametrize("tensor_cores", [False, True])
def test_gpu_schedule_matches_reference(variant, value_tile, tensor_cores):
    # T = 80 is not a multiple of the chunk (16): the last chunk is padded.
    # With tensor cores the contractions run in 16 x 8 warp tiles (here as
    # loops, in f32: the tiling is checked, not tf32's rounding).
    inputs = lt.make_inputs(variant, 2, 80, 2, 16, 32, seed=3, with_initial_state=True)
    o_ref, s_ref = lt.reference_for(variant, inputs)
    o, s, _ = runner.run_attention(
        variant, inputs, chunk_size=16, gpu_schedule=True, value_tile=value_tile,
        tensor_cores=tensor_cores,
    )
    assert lt.rel_rms(o_ref, o) < TOL
    assert lt.rel_rms(s_ref, s) < TOL


@pytest.mark.parametrize("variant", ["gla", "gated_deltanet"])
@pytest.mark.parametrize("value_tile", [4, 16, 5])
def test_value_tiles_on_the_cpu_schedule(variant, value_tile):
    # 5 does not divide V = 32: the whole V is one tile.
    inputs = lt.make_inputs(variant, 1, 64, 2, 16, 32, HV=4, seed=5)
    o_ref, s_ref = lt.reference_for(variant, inputs)
    o, s, _ = runner.run_attention(
        variant, inputs, chunk_size=16, fuse="fused", value_tile=value_tile
    )
    assert lt.rel_rms(o_ref, o) < TOL
    assert lt.rel_rms(s_ref, s) < TOL


# The kernels themselves (la-lower-to-gpu: gpu.launch, shared memory packed
# by lifetime, staged inputs, loops of threads, device buffers), run on the
# CPU by la-emulate-gpu (la-run --target=gpu-emulator): everything of the
# GPU path after tiling except the tensor cores and the hardware.
EMULATED = ["gla", "gated_deltanet", "kda", "retention", "mamba2", "deltanet", "linear"]


@pytest.mark.parametrize("variant", EMULATED)
@pytest.mark.parametrize("value_tile", [None, 8])
def test_emulated_gpu_kernels_match_reference(variant, value_tile):
    inputs = lt.make_inputs(variant, 2, 64, 2, 16, 32, seed=7, with_initial_state=True)
    o_ref, s_ref = lt.reference_for(variant, inputs)
    o, s, _ = runner.run_attention(
        variant, inputs, chunk_size=16, value_tile=value_tile, target="gpu-emulator"
    )
    assert lt.rel_rms(o_ref, o) < TOL
    assert lt.rel_rms(s_ref, s) < TOL


@pytest.mark.parametrize("variant", EMULATED)
@pytest.mark.parametrize("T", [40, 5])
def test_emulated_gpu_kernels_any_length(variant, T):
    # T not a multiple of the chunk (16), and T < C: each block packs its
    # last, partial chunk into 16 rows of shared memory, zero rows after the
    # chunk's tokens, and writes back only the chunk's rows of the output.
    inputs = lt.make_inputs(variant, 2, T, 2, 16, 32, seed=7, with_initial_state=True)
    o_ref, s_ref = lt.reference_for(variant, inputs)
    o, s, _ = runner.run_attention(variant, inputs, chunk_size=16, target="gpu-emulator")
    assert lt.rel_rms(o_ref, o) < TOL
    assert lt.rel_rms(s_ref, s) < TOL


@pytest.mark.parametrize("variant", EMULATED)
def test_emulated_gpu_kernels_with_state_in_shared_memory(variant):
    # la-lower-to-nvvm's state-in-shared-memory: the running state in a
    # buffer of the block, the final state (initial state given, value tiles
    # of 8, a partial last chunk) written once after the chunk loop.
    inputs = lt.make_inputs(variant, 2, 40, 2, 16, 32, seed=7, with_initial_state=True)
    o_ref, s_ref = lt.reference_for(variant, inputs)
    o, s, _ = runner.run_attention(variant, inputs, chunk_size=16, value_tile=8,
                                   target="gpu-emulator", state_in_shared_memory=True)
    assert lt.rel_rms(o_ref, o) < TOL
    assert lt.rel_rms(s_ref, s) < TOL


def test_emulated_gpu_kernels_general_low_rank():
    # RWKV-7 (the dplr rule: la.recurrence's general low-rank form, the
    # kernels Gated DeltaNet-2 shares), value tiles of 8, a partial last
    # chunk (T = 40).
    inputs = lt.make_inputs("rwkv7", 2, 40, 2, 16, 32, seed=7, with_initial_state=True)
    o_ref, s_ref = lt.reference_for("rwkv7", inputs)
    o, s, _ = runner.run_attention("rwkv7", inputs, chunk_size=16, value_tile=8,
                                   target="gpu-emulator")
    assert lt.rel_rms(o_ref, o) < TOL
    assert lt.rel_rms(s_ref, s) < TOL


def test_emulated_gpu_kernels_grouped_heads_and_defaults():
    # la-lower-to-nvvm's defaults (chunks of 32, value tiles of 32), grouped
    # value heads, K != V.
    inputs = lt.make_inputs("gated_deltanet", 1, 128, 2, 32, 64, HV=4, seed=8,
                            with_initial_state=True)
    o_ref, s_ref = lt.reference_for("gated_deltanet", inputs)
    o, s, _ = runner.run_attention("gated_deltanet", inputs, target="gpu-emulator")
    assert lt.rel_rms(o_ref, o) < TOL
    assert lt.rel_rms(s_ref, s) < TOL


@pytest.mark.parametrize("variant", ["gla", "gated_deltanet", "kda", "retention", "deltanet"])
@pytest.mark.parametrize("precision", ["tf32", "f16", "bf16"])
def test_emulated_tensor_core_kernels_match_reference(variant, precision):
    # The mma.sync tiles run with the warp's 32 lanes together (la-emulate-gpu
    # gathers their fragments by the PTX layouts): this checks la-map-to-gpu's
    # fragment loads and stores. tf32's rounding is not modelled (f32 within
    # 1e-5); f16 and bf16 operands are rounded by the loads (5e-3 and 1e-2).
    inputs = lt.make_inputs(variant, 1, 64, 2, 16, 32, seed=9, with_initial_state=True)
    o_ref, s_ref = lt.reference_for(variant, inputs)
    o, s, _ = runner.run_attention(
        variant, inputs, chunk_size=16, value_tile=16, target="gpu-emulator",
        tensor_cores=True, mma_precision=precision,
    )
    tol = {"tf32": TOL, "f16": 5e-3, "bf16": 1e-2}[precision]
    assert lt.rel_rms(o_ref, o) < tol
    assert lt.rel_rms(s_ref, s) < tol


def test_emulated_tensor_cores_at_the_defaults_over_many_chunks():
    # la-lower-to-nvvm's defaults (chunks of 32, value tiles of 32) with
    # K = V = 64 and 32 chunks: many tensor-core tiles run, one after the other
    # (the emulator's scratch once piled up on the stack here).
    inputs = lt.make_inputs("gated_deltanet", 1, 1024, 2, 64, 64, seed=10,
                            with_initial_state=True)
    o_ref, s_ref = lt.reference_for("gated_deltanet", inputs)
    o, s, _ = runner.run_attention("gated_deltanet", inputs, target="gpu-emulator",
                                   tensor_cores=True)
    assert lt.rel_rms(o_ref, o) < TOL
    assert lt.rel_rms(s_ref, s) < TOL


# The chunk-parallel schedule (la-lower-to-nvvm schedule=chunk-parallel,
# la-distribute-chunks): la-chunk's ops as tasks of their own, every chunk in
# parallel and the state scan over (batch, key head, value tile). K == V
# here: a CSE-merged tensor.empty once gave the staged WY factors and U the
# corrected values' output slice (wrong results for the delta rule on the
# H100 and here). Grouped value heads, a partial last chunk, value tiles.
@pytest.mark.parametrize("variant", EMULATED + ["rwkv7"])
@pytest.mark.parametrize("target", ["gpu-schedule", "gpu-emulator"])
@pytest.mark.parametrize("shape", [(40, 2, 32, 32, 8), (64, 4, 16, 32, None)])
def test_chunk_parallel_schedule_matches_reference(variant, target, shape):
    T, HV, K, V, value_tile = shape
    inputs = lt.make_inputs(variant, 2, T, 2, K, V, HV=HV, seed=11, with_initial_state=True)
    o_ref, s_ref = lt.reference_for(variant, inputs)
    where = {"gpu_schedule": True} if target == "gpu-schedule" else {"target": target}
    o, s, _ = runner.run_attention(variant, inputs, chunk_size=16, value_tile=value_tile,
                                   chunk_parallel=True, **where)
    assert lt.rel_rms(o_ref, o) < TOL
    assert lt.rel_rms(s_ref, s) < TOL


# Packed sequences (cu_seqlens): one block per (sequence, value head, value
# tile), reading its sequence's offsets and running the chunks of its
# run-time length (la-fuse-recurrence's sequence-tasks; under both
# schedules, whose chunk-parallel form has no per-sequence program). An
# empty sequence first and in the middle, one shorter than a chunk, one of
# exactly two chunks, one with a partial last chunk; grouped value heads,
# K != V, initial states.
PACKED = [0, 0, 5, 21, 21, 53, 85]


@pytest.mark.parametrize("variant", EMULATED + ["rwkv7"])
@pytest.mark.parametrize("target", ["gpu-schedule", "gpu-emulator"])
@pytest.mark.parametrize("schedule", ["fused", "chunk-parallel"])
def test_packed_sequences_on_the_gpu(variant, target, schedule):
    inputs = lt.make_inputs(variant, 1, PACKED[-1], 2, 16, 24, HV=4, seed=12,
                            with_initial_state=True, cu_seqlens=PACKED)
    o_ref, s_ref = lt.reference_for(variant, inputs)
    where = {"gpu_schedule": True} if target == "gpu-schedule" else {"target": target}
    o, s, _ = runner.run_attention(variant, inputs, chunk_size=16, value_tile=8,
                                   chunk_parallel=schedule == "chunk-parallel", **where)
    assert lt.rel_rms(o_ref, o) < TOL
    assert lt.rel_rms(s_ref, s) < TOL


@pytest.mark.parametrize("options", [{"tensor_cores": True, "mma_precision": "bf16"},
                                     {"dtype": "bf16"}, {"state_in_shared_memory": True}],
                         ids=["mma-bf16", "bf16-inputs", "state-in-shared-memory"])
def test_packed_sequences_on_the_gpu_options(options):
    # The tensor cores' fragments, bf16 inputs and the running state in
    # shared memory, each with packed sequences (la-lower-to-nvvm's default
    # chunks and value tiles: 16).
    inputs = lt.make_inputs("gated_deltanet", 1, PACKED[-1], 2, 16, 32, seed=13,
                            with_initial_state=True, cu_seqlens=PACKED)
    dtype = options.get("dtype", "f32")
    o_ref, s_ref = lt.reference_for("gated_deltanet", runner.prepare_inputs(inputs, dtype))
    o, s, _ = runner.run_attention("gated_deltanet", inputs, target="gpu-emulator", **options)
    tol = TOL if options.get("state_in_shared_memory") else 1e-2
    assert lt.rel_rms(o_ref, o) < tol
    assert lt.rel_rms(s_ref, s) < tol
