"""The llama family under context parallelism: the ring takes grouped key/value heads and the
rotary positions follow the zigzag chunks, so llama-tiny at cp=2 equals `single` over 5 steps.

Tolerances as in test_cp.py: the ring against one device's attention fp32 <= 1e-5 and float64 <= 1e-12
(it merges per-chunk partial softmaxes in another order than one flash call); training in float64: losses,
clipped norms, eval loss and parameters to compare.py's FP64_TOL (portable across CPU kernels).
"""
from __future__ import annotations

import functools

import pytest
import torch

from cp_harness import composed, ring_vs_sdpa
from shardlab.testing.compare import assert_float64_equal, in_float64

STEPS = 5
LLAMA = ["model.preset=llama-tiny"]  # 4 query heads, 2 key/value heads, head_dim 16


@functools.lru_cache(maxsize=None)
def _single():
    return in_float64(composed, [*LLAMA, "parallel.strategy=single", "train.micro_batch=4"], steps=STEPS)


@pytest.mark.parity
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("kv_heads", [1, 2])
def test_ring_with_grouped_kv_heads_equals_single_device_gqa(pool2, dtype, tol, kv_heads):
    ranks = pool2.run(ring_vs_sdpa, dtype, True, 2, "zigzag", 32, 2, 4, 8, kv_heads, timeout=120)[0]
    for r in ranks:
        for what, err in r["errs"].items():
            assert err <= tol, (what, err)
        # the ring runs on the grouped heads: blocks of kv_heads heads travel, not 4
        block = 2 * 2 * kv_heads * 16 * 8 * dtype.itemsize  # (K, V) x batch x kv heads x s/cp x head_dim
        assert r["sent"] == {"cp.kv:t": block, "cp.kv_bwd:t": block, "cp.dkv:t": 2 * block}


@pytest.mark.parity
def test_llama_cp2_training_equals_single(pool2):
    out = pool2.run(in_float64, composed, [*LLAMA, "parallel.cp=2", "parallel.dp=ddp", "train.micro_batch=4"],
                    STEPS, timeout=300)[0]
    ref = _single()
    for key in ("losses", "norms", "eval", "params"):
        assert_float64_equal(out[key], ref[key], key)
    assert out["state"] == {k: tuple(v.shape) for k, v in ref["params"].items()}  # untied head: its own entry
    # K/V traffic at the grouped width: batch 4 x s/cp 16 x (K, V) x n_kv_heads 2 x head_dim 16 x 8 B
    # (float64) per layer and pass, half of what 4 repeated heads would send
    block = 4 * 16 * 2 * (2 * 16) * 8
    for sent in out["sent"]:
        for i in ("0", "1"):
            assert sent[f"cp.kv:blocks.{i}"] == block and sent[f"cp.kv_bwd:blocks.{i}"] == block
            assert sent[f"cp.dkv:blocks.{i}"] == 2 * block
    assert len(set(out["flops"])) == 1  # zigzag balances the causal work here too


def test_llama_cp_positions_are_the_zigzag_chunks_global_positions():
    """Without the positions hook a chunk would rotate by 0..L-1; with it, by its global positions."""
    from shardlab.model.llama import Llama, LlamaConfig
    from shardlab.parallel.cp import layer as cp

    model = Llama(LlamaConfig(n_layer=1, n_head=4, n_kv_heads=2, d_model=32, ffn_multiple_of=32))
    ctx = cp.ContextParallel.__new__(cp.ContextParallel)
    ctx.group, ctx.layout, ctx.rings, ctx.rank, ctx.size = None, "zigzag", {}, 1, 2
    cp._install(model, ctx)
    model(torch.zeros(1, 8, dtype=torch.long))
    assert model.blocks["0"].attn.rope_positions.tolist() == [4, 5, 6, 7, 8, 9, 10, 11]


@pytest.mark.parity
@pytest.mark.parametrize("sp", [False, True])
def test_llama_cp2_x_tp2_equals_single(pool4, sp):
    # each tp rank holds one of the two key/value heads; its ring carries that one head's blocks
    out = pool4.run(in_float64, composed, [*LLAMA, "parallel.cp=2", "parallel.tp=2", f"parallel.sp={str(sp).lower()}",
                               "train.micro_batch=4"], STEPS, timeout=400)[0]
    ref = _single()
    for key in ("losses", "norms", "params"):
        assert_float64_equal(out[key], ref[key], key)
