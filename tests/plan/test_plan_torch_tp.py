"""The eighth round's terms (docs/planner.md, "The eighth round"): DTensor TP under torchtitan's recipes (the
op-level policy's rerun all-gathers, tensorwise float8 all-gathers) and rowwise float8 at torchao's measured
speedups; none applies to shardlab's own TP or off the H100 presets."""
import pytest

from shardlab.plan import fp8_rowwise
from shardlab.plan.comm import tp_pp_collectives
from shardlab.plan.hardware import load_cluster
from shardlab.plan.layout import Layout
from shardlab.plan.train_spec import TrainSpec
from shardlab.plan.presets import PRESETS
from shardlab.plan.published_gpu_heldout import HELD_OUT, plan_row, row_model

M = PRESETS["llama3-8b"]


def _gathers(**lay):
    train = TrainSpec(96, 12, 8192, flash_attention=True, fp8=lay.pop("fp8", "none"))
    cols = tp_pp_collectives(M, train, Layout(dp=8, tp=8, sp=True, strategy="zero3", **lay), 1)
    return next(c for c in cols if c.op == "all_gather"), [c for c in cols if "amax" in c.why]


def test_op_policy_reruns_the_forward_all_gathers_under_dtensor_tp_only():
    own, _ = _gathers(recompute="selective-op")
    dt, _ = _gathers(recompute="selective-op", tp_impl="dtensor")
    assert own.calls == 4 * 32 + 2 and dt.calls == own.calls + 2 * 32
    assert _gathers(recompute="full", tp_impl="dtensor")[0].calls == _gathers(recompute="full")[0].calls


def test_tensorwise_gathers_the_blocks_in_float8_and_agrees_amax():
    bf, none = _gathers(recompute="selective-op", tp_impl="dtensor")
    tw, amax = _gathers(recompute="selective-op", tp_impl="dtensor", fp8="tensorwise")
    rw, none_rw = _gathers(recompute="selective-op", tp_impl="dtensor", fp8="rowwise")
    act = 12 * 8192 * 4096 * 2
    assert tw.payload == pytest.approx(bf.payload / 2 + act)  # the embedding's and the head's stay 16-bit
    assert rw.payload == bf.payload and not none and not none_rw
    assert amax[0].calls == (4 + 2 + 5) * 32


def test_rowwise_table_corners_and_edges():
    assert fp8_rowwise.speedup(1024, 1024, 1024) == pytest.approx(0.42)
    assert fp8_rowwise.speedup(32768, 32768, 32768) == pytest.approx(1.52)
    assert fp8_rowwise.speedup(8192, 4096, 16384) == pytest.approx(1.17)
    assert fp8_rowwise.speedup(131072, 8192, 128) == pytest.approx(0.63)  # beyond the table: its edge


def test_rowwise_rows_run_at_the_table_on_h100_only():
    row = next(r for r in HELD_OUT if r["case"] == "tt 8B H100x64 TP8 rowwise")
    bf = next(r for r in HELD_OUT if r["case"] == "tt 8B H100x64 TP8 bf16")
    assert plan_row(row).tokens_per_s < plan_row(bf).tokens_per_s  # every linear at TP 8 left of N = 2048
    assert "torchao's measured rowwise" in plan_row(row).explain["forward"]
    assert not load_cluster("H200").fp8_rowwise_by_shape
    assert row_model(row).d_model == 4096


def test_tp_impl_is_a_plan_key(capsys):
    """`shardlab plan tp_impl=dtensor` (training's parallel.tp_impl) plans DTensor TP: under torchtitan's op-level
    recompute its rerun all-gathers show on --explain's all_gather line and the step differs from own TP; the
    layout line says which; the search keeps it for its tensor-parallel candidates; a config reads it too."""
    from shardlab import config
    from shardlab.plan.cli import main
    from shardlab.plan.from_config import from_config
    from shardlab.plan.search import args_of, search

    args = ["model=gpt2", "cluster=H100-SXM-500W", "gpus=8", "strategy=zero3", "tp=2", "sp=true",
            "recompute=selective-op", "global_batch=64", "micro_batch=8"]
    out = {}
    for impl in ("own", "dtensor"):
        assert main([*args, f"tp_impl={impl}", "--explain"]) == 0
        out[impl] = capsys.readouterr().out.splitlines()
    gather = {k: next(ln for ln in v if ln.strip().startswith("all_gather tp")) for k, v in out.items()}
    assert "rerun by selective-op recompute" in gather["dtensor"] and "rerun" not in gather["own"]
    step = {k: next(ln for ln in v if ln.startswith("step ")) for k, v in out.items()}
    assert step["own"] != step["dtensor"]
    layout = {k: next(ln for ln in v if ln.startswith("layout:")) for k, v in out.items()}
    assert "tp=2+sp dtensor" in layout["dtensor"] and "dtensor" not in layout["own"]
    # without the terms' recipes the count is the own one, and --explain says so
    assert main([a for a in args if not a.startswith("recompute=")] + ["tp_impl=dtensor", "--explain"]) == 0
    assert "as the own count here" in capsys.readouterr().out
    m, tr, c = PRESETS["gpt2"], TrainSpec(64, 8, flash_attention=True), load_cluster("H100-SXM-500W", 8)
    assert all(p.layout.tp_impl == "own" for p in search(m, tr, c, 8))
    dt = search(m, tr, c, 8, {"tp_impl": "dtensor"})
    assert all(p.layout.tp_impl == ("dtensor" if p.layout.tp > 1 else "own") for p in dt)
    assert "tp_impl=dtensor" in args_of(next(p for p in dt if p.layout.tp > 1))
    cfg = config.validate(config.load(None, ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2",
                                             "train.global_batch=8", "parallel.strategy=torch-fsdp2", "parallel.tp=2",
                                             "parallel.sp=true", "parallel.tp_impl=dtensor"]), 4)
    lay = from_config(cfg, 4)[2]
    assert (lay.tp, lay.sp, lay.tp_impl, lay.zero3_impl) == (2, True, "dtensor", "fsdp2")
