"""torchtitan's own kernels as row inputs (docs/planner.md, "The tenth round"): torch's checkpoint early stop
(TrainSpec.recompute_early_stop) and torchtitan's llama module (TrainSpec.llama_impl); both off by default."""
from dataclasses import replace

import pytest

from shardlab.plan.compute import micro_batch_time
from shardlab.plan.recompute import early_stop_recomputed, recomputed_ops
from shardlab.plan.hardware import load_cluster
from shardlab.plan.layout import Layout
from shardlab.plan.train_spec import TrainSpec
from shardlab.plan.presets import PRESETS
from shardlab.plan.ops import head_ops, layer_ops, titan_rope_bytes
from shardlab.plan.report import render
from shardlab.plan.step import evaluate

H100 = load_cluster("H100-SXM-500W", 8)
L8B = PRESETS["llama3-8b"]
TRAIN = TrainSpec(16, 2, 8192, flash_attention=True, eager_norm=True)


def _plan(train=TRAIN, **lay):
    return evaluate(L8B, train, Layout(**{"dp": 8, "strategy": "zero3", "comm_dtype": "fp32", **lay}), H100)


def test_early_stop_leaves_out_the_last_gemm_and_the_residual_after_it():
    block = layer_ops(L8B, 2, 8192, 1, 2, True)
    kept = early_stop_recomputed(block)
    assert [o.name for o in block[len(kept):]] == ["down", "residual"]
    # selective-op saves down anyway: only the trailing residual leaves its recompute
    names = [o.name for o in recomputed_ops(block, "selective-op", True)]
    assert "residual" in names and names.count("residual") == 1
    assert [o.name for o in recomputed_ops(block, "selective-op")].count("residual") == 2


def test_early_stop_only_where_asked():
    full = _plan(recompute="full")
    stop = _plan(train=replace(TRAIN, recompute_early_stop=True), recompute="full")
    assert stop.step_time < full.step_time
    block = layer_ops(L8B, 2, 8192, 1, 2, True, True)
    mt = micro_batch_time(L8B, replace(TRAIN, recompute_early_stop=True), Layout(dp=8, recompute="full"), H100)
    assert "early stop" in mt.compiled and "down, residual" in mt.compiled
    assert len(early_stop_recomputed(block)) == len(block) - 2
    # no recompute, or Megatron's selective: nothing to stop early
    for rc in ("none", "selective-attn"):
        assert _plan(train=replace(TRAIN, recompute_early_stop=True), recompute=rc).step_time == \
            pytest.approx(_plan(recompute=rc).step_time)


def test_early_stop_skips_the_last_tp_reduce_scatter():
    h100 = load_cluster("H100-SXM-500W", 64)
    lay = Layout(dp=8, tp=8, sp=True, strategy="zero3", recompute="full", tp_impl="dtensor", comm_dtype="fp32")
    train = TrainSpec(16, 2, 8192, flash_attention=True)
    rs = [next(cl.c for cl in evaluate(L8B, t, lay, h100).comm if cl.c.group == "tp" and cl.c.op == "reduce_scatter")
          for t in (train, replace(train, recompute_early_stop=True))]
    assert rs[0].calls - rs[1].calls == L8B.n_layer


def test_titan_llama_kernels():
    e, T, h, g = 2, 2 * 8192, L8B.d_model, L8B.kv_width
    own = {o.name: o for o in layer_ops(L8B, 2, 8192, 1, e, True)}
    tt = {o.name: o for o in layer_ops(L8B, 2, 8192, 1, e, True, impl="torchtitan")}
    assert "merge_heads" in own and "merge_heads" not in tt  # SDPA's output needs no copy back
    assert tt["rope"].bytes == titan_rope_bytes(e) * T * (h + g) == 20 * T * (h + g)
    assert tt["repeat_kv"].bytes == 2 * T * (g + h) * e  # k and v widened to every query head
    mha = replace(L8B, n_kv_heads=L8B.n_head)
    assert "repeat_kv" not in {o.name for o in layer_ops(mha, 2, 8192, 1, e, True, impl="torchtitan")}
    up = [o for o in head_ops(L8B, 2, 8192, 1, e, upcast=True) if o.name == "logits_float"]
    assert up and up[0].bytes == 6 * T * L8B.vocab
    p = _plan(train=replace(TRAIN, llama_impl="torchtitan"), recompute="selective-op")
    assert "torchtitan's llama kernels" in render(p, explain=True)


def test_defaults_leave_plans_unchanged():
    for rc in ("none", "full", "selective-op"):
        a = _plan(recompute=rc)
        b = _plan(train=replace(TRAIN, recompute_early_stop=False, llama_impl="own"), recompute=rc)
        assert a.step_time == b.step_time
