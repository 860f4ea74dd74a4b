"""The float8 statistics of the whole model under layouts that split it: every rank's layers (pipeline stages,
TP pieces) reach metrics.jsonl through one object all-gather at the logging cadence, and the doctor names
the first non-finite scale wherever it is (rank, pipeline stage)."""
import json

from shardlab import config
from shardlab.fp8.stats import first_across, merged
from shardlab.train.trainer import Trainer

BASE = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=4", "train.micro_batch=2", "train.steps=3",
        "train.warmup_steps=1", "train.log_every=1", "train.eval_every=0", "ckpt.final=false", "train.dtype=bf16",
        "train.fp8=tensorwise"]


def fig(amax, scale, under=0.0, sat=0.0):
    return {"amax": amax, "scale": scale, "underflow": under, "saturated": sat}


def test_merged_takes_the_whole_models_order_and_the_worst_figures():
    stage1 = {"blocks.1.attn.q": {"input": fig(2.0, 224.0)}, "blocks.1.mlp.fc": {"input": fig(1.0, 448.0)}}
    stage0 = {"blocks.0.attn.q": {"input": fig(1.0, 448.0, 0.2)}, "blocks.0.mlp.fc": {"input": fig(1.0, 448.0)}}
    piece = {"blocks.0.attn.q": {"input": fig(4.0, 112.0, 0.4)}, "blocks.0.mlp.fc": {"input": fig(float("nan"), 0.0)}}
    out = merged([stage1, stage0, piece])
    assert list(out) == ["blocks.0.attn.q", "blocks.0.mlp.fc", "blocks.1.attn.q", "blocks.1.mlp.fc"]
    assert out["blocks.0.attn.q"]["input"] == fig(4.0, 112.0, 0.30000000000000004)
    assert out["blocks.0.mlp.fc"]["input"]["scale"] == 0.0  # a non-finite scale is what is reported


def test_first_across_orders_forward_then_backward_over_ranks():
    k = lambda block, pos: ((block,), pos)  # noqa: E731
    casts = {0: [(k(0, 1), "blocks.0.mlp.fc", "grad")],
             1: [(k(1, 0), "blocks.1.mlp.proj", "input"), (k(1, 0), "blocks.1.mlp.proj", "grad")],
             3: [(k(1, 0), "blocks.1.mlp.proj", "input")]}
    assert first_across(casts, lambda n, r: f" (rank {r})") == "blocks.1.mlp.proj input (rank 1)"
    del casts[1], casts[3]
    assert first_across(casts) == "blocks.0.mlp.fc grad"
    assert first_across({0: [], 1: []}) is None


def run(run_dir, overrides):
    cfg = config.validate(config.load(None, BASE + overrides), 2)
    Trainer(cfg, run_dir).run()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    reports = sorted((run_dir / "anomalies").glob("*.json")) if (run_dir / "anomalies").exists() else []
    return rows, [json.loads(p.read_text())["summary"] for p in reports]


def test_every_stage_reported_and_the_first_nonfinite_named_with_its_stage(pool2, tmp_path):
    """pp = 2: rank 0 holds blocks.0, rank 1 blocks.1; the metrics list all 12 converted linears in the
    model's order, and a NaN planted on rank 1 in blocks.1.mlp.fc's output is named where it entered the
    float8 casts: blocks.1.mlp.proj's input, on rank 1, stage 1 (rank 0's casts only see it in the backward)."""
    rows, summaries = pool2.run(run, tmp_path / "pp", ["parallel.pp=2", "parallel.strategy=ddp",
                                                       "parallel.pp_schedule=1f1b", "doctor.on_anomaly=skip",
                                                       "debug.inject_nan=2:1:blocks.1.mlp.fc"])[0]
    fp8 = next(r["fp8"] for r in rows if r.get("step") == 1)
    assert len(fp8) == 12 and list(fp8)[0] == "blocks.0.attn.q" and list(fp8)[-1] == "blocks.1.mlp.proj"
    assert all(set(ops) == {"input", "weight", "grad"} for ops in fp8.values())
    assert any("The first float8 layer whose scale went non-finite: blocks.1.mlp.proj input (rank 1, pipeline "
               "stage 1)" in s for s in summaries), summaries


def test_tp_pieces_report_the_whole_weights_figures(pool2, tmp_path):
    """tp = 2 tensorwise: each rank casts its piece with the amax agreed over the TP group, so the merged
    weight amax of every layer at step 1 (the initial weights) is the data-parallel run's (whole weights), exactly."""
    tp = pool2.run(run, tmp_path / "tp", ["parallel.tp=2", "parallel.strategy=ddp"])[0][0]
    dp = pool2.run(run, tmp_path / "dp", ["parallel.strategy=ddp"])[0][0]
    a, b = (next(r["fp8"] for r in rows if r.get("step") == 1) for rows in (tp, dp))
    assert list(a) == list(b) and len(a) == 12
    assert all(a[n]["weight"]["amax"] == b[n]["weight"]["amax"] for n in a)
