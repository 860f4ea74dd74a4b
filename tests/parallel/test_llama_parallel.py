"""The llama family under every parallel layer: each equals `single` over 5 steps as the GPT-2 tests do:
in float64, losses, clipped gradient norms and parameters to compare.py's FP64_TOL (portable: compare.py).

llama-tiny has 4 query heads and 2 key/value heads, so tp=2 splits the key/value heads; the
`model.n_kv_heads=1` cases (multi-query) replicate them on both ranks. Recompute is bitwise.
"""
from __future__ import annotations

import functools

import pytest
import torch

from memory_harness import modes
from pipeline_harness import train as pp_train
from shardlab.testing.compare import assert_float64_equal, in_float64
from tp_harness import composed

STEPS = 5
LLAMA = ["model.preset=llama-tiny"]
# The pipeline harness's shapes: 4 blocks for 2 stages, sequence 16.
LLAMA4 = dict(arch="llama", n_layer=4, n_head=4, n_kv_heads=2, d_model=32, vocab_size=256, max_seq_len=16,
              ffn_multiple_of=32)


@functools.lru_cache(maxsize=None)
def _single(kv: int = 0):
    # One process, no process group: the plain model with the whole global batch as one microbatch.
    extra = [f"model.n_kv_heads={kv}"] if kv else []
    return in_float64(composed, ["parallel.strategy=single", "train.micro_batch=4", *LLAMA, *extra], steps=STEPS)


def _assert_equals_single(got: dict, kv: int = 0) -> None:
    ref = _single(kv)
    for key in ("losses", "norms", "params"):
        assert_float64_equal(got[key], ref[key], key)


@pytest.mark.parity
@pytest.mark.parametrize("dp", ["ddp", "zero3", "torch-fsdp2"])
def test_llama_data_parallel_equals_single(pool2, dp):
    out = pool2.run(in_float64, composed, [*LLAMA, f"parallel.dp={dp}", "train.micro_batch=2"], STEPS, timeout=300)[0]
    _assert_equals_single(out)


@pytest.mark.parametrize("impl,sp,kv", [("own", False, 0), ("own", True, 0), ("own", False, 1), ("own", True, 1),
                                        ("dtensor", False, 0), ("dtensor", True, 0)],
                         ids=["own-kv-split", "own-sp-kv-split", "own-kv-replicated", "own-sp-kv-replicated",
                              "dtensor", "dtensor-sp"])
@pytest.mark.parity
def test_llama_tensor_parallel_equals_single(pool2, impl, sp, kv):
    """q, k, v column-parallel (k, v replicated with one key/value head), SwiGLU gate/up column + down
    row, the untied head vocab-parallel; checkpoints keep the bare model's names and global shapes."""
    extra = [f"model.n_kv_heads={kv}"] if kv else []
    out = pool2.run(in_float64, composed, [*LLAMA, *extra, "parallel.tp=2", f"parallel.tp_impl={impl}",
                                           f"parallel.sp={str(sp).lower()}", "train.micro_batch=4"], STEPS, timeout=300)[0]
    _assert_equals_single(out, kv)
    ref_shapes = {k: tuple(v.shape) for k, v in _single(kv)["params"].items()}
    assert {k: shape for k, (_, shape) in out["state"].items()} == ref_shapes
    assert out["state"]["lm_head.weight"][0] and out["state"]["blocks.0.mlp.gate.weight"][0]
    # split key/value heads are DTensors; replicated ones plain tensors
    assert out["state"]["blocks.0.attn.k.weight"][0] == (kv == 0)


@functools.lru_cache(maxsize=None)
def _pp_single():
    return in_float64(pp_train, STEPS, model_kw=LLAMA4, dp="single")


@pytest.mark.parity
@pytest.mark.parametrize("schedule,v", [("1f1b", 1), ("interleaved", 2), ("torch-1f1b", 1)])
def test_llama_pipeline_equals_single(pool2, schedule, v):
    """pp=2: the first stage is the one holding `wte` (no position table), the last holds ln_f and the
    untied head; no embedding group (nothing tied between the ends)."""
    ref = _pp_single()
    results = pool2.run(in_float64, pp_train, STEPS, model_kw=LLAMA4, pp=2, pp_schedule=schedule, pp_virtual=v)
    merged = {}
    for r in results:
        assert_float64_equal(r["losses"], ref["losses"], f"{schedule} losses")
        merged.update(r["params"])
    assert_float64_equal(merged, ref["params"])


LLAMA_TINY = dict(arch="llama", n_layer=2, n_head=4, n_kv_heads=2, d_model=64, vocab_size=256, max_seq_len=32,
                  ffn_multiple_of=32, rope_theta=10000.0)


def _bitwise(out: list[dict]):
    for rank_out in out:
        for mode in ("full", "selective"):
            assert rank_out[mode]["losses"] == rank_out["none"]["losses"], mode
    for mode in ("full", "selective"):
        got, want = out[0][mode]["params"], out[0]["none"]["params"]
        assert got.keys() == want.keys()
        for k in want:
            assert torch.equal(got[k], want[k]), (mode, k)


def test_llama_recompute_world1_bitwise_equal_to_none():
    _bitwise([modes("single", model_kw=LLAMA_TINY)])


def test_llama_recompute_zero3_world2_bitwise_equal_to_none(pool2):
    _bitwise(pool2.run(modes, "zero3", model_kw=LLAMA_TINY))


@pytest.mark.parametrize("sp,kv", [(False, 2), (True, 2), (False, 1), (True, 1)],
                         ids=["kv-split", "sp-kv-split", "kv-replicated", "sp-kv-replicated"])
def test_llama_own_tp_bytes_equal_analytic(pool2, sp, kv):
    """Own TP's recorded payload per op for one llama step equals tp.comm_bytes_per_step (what the bench and
    the planner use): the same regions as GPT-2 (SwiGLU and GQA enter and leave with one b*s*h
    activation), SP's flat sum over the RMSNorm gains only, and with one key/value head for two ranks the
    replicated k and v weights' gradients in that sum."""
    from shardlab.parallel.tp.cost import comm_bytes_per_step
    from tp_harness import records

    kw = dict(LLAMA_TINY, n_kv_heads=kv, max_seq_len=16)
    b, s, h, L = 2, kw["max_seq_len"], kw["d_model"], kw["n_layer"]
    recs = pool2.run(records, sp, kw)[0]
    by_op = {}
    for r in recs:
        by_op[r["op"]] = by_op.get(r["op"], 0) + r["bytes"]
    replicated = 2 * L * (kv * h // kw["n_head"]) * h if kv < 2 else 0
    assert by_op == comm_bytes_per_step(L, h, s, b * s, sp, arch="llama", kv_replicated=replicated)
    flat = [r["bytes"] for r in recs if r["tag"] == "tp.sp_grads"]
    assert flat == ([4 * ((2 * L + 1) * h * sp + replicated)] if sp or replicated else [])


@pytest.mark.parity
def test_llama_tp2_x_zero3_sp_replicated_kv_equals_single(pool4):
    """World 4, (dp, tp) = 2 x 2, one key/value head: the replicated k and v gradients are summed over tp on
    zero3's gradient shards (laid out alike on both tp ranks), in the flat sum SP's RMSNorm gains use."""
    out = pool4.run(in_float64, composed, [*LLAMA, "model.n_kv_heads=1", "parallel.tp=2", "parallel.dp=zero3",
                                           "parallel.sp=true", "train.micro_batch=2"], STEPS, timeout=400)[0]
    _assert_equals_single(out, kv=1)
