"""Context parallelism (parallel/cp/layer.py, parallel/cp/ring.py): the ring computes what one device's
attention computes, the composed step equals `single` at cp, cp x dp and cp x tp, the K/V traffic is the
analytic (cp - 1) blocks per pass, zigzag balances the causal work, the planner knows cp, bad input is
one line, and a cp run's checkpoint resumes on one process.

Tolerances: the ring merges per-chunk partial softmaxes by the log-sum-exp rule, so its sums run in another
order than one flash call's: fp32 <= 1e-5 and float64 <= 1e-12 (measured worst: 1.4e-6 and 2.6e-15).
The ring's fp32 bound is order-independent: γ_n·Σ|terms| with n = the sequence (≤ 64) keeps any CPU's
kernels within 64·6e-8 ≈ 4e-6 of the exact sum. Training parity as in test_tp_compose.py: float64 losses,
clipped norms, an eval loss and the parameters after 5 AdamW steps to compare.py's FP64_TOL; cp=2 once in
fp32 against compare.py's error model (Adam makes a fixed fp32 tolerance on parameters machine-specific).
"""
from __future__ import annotations

import functools
import json
import time

import pytest
import torch

from shardlab.testing.compare import assert_float64_equal, assert_fp32_within_error_model, in_float64
from cp_harness import composed, ring_vs_sdpa
from run_harness import train

STEPS = 5


SINGLE = ["parallel.strategy=single", "train.micro_batch=4"]
PARTS = ("losses", "norms", "eval", "params")


@functools.lru_cache(maxsize=None)
def _single(float64: bool = True):
    return in_float64(composed, SINGLE, steps=STEPS) if float64 else composed(SINGLE, steps=STEPS)


def _assert_equals_single(got: dict) -> None:
    ref = _single()
    for key in PARTS:
        assert_float64_equal(got[key], ref[key], key)
    # parameters are not split by cp: the state dict holds the bare model's names and shapes
    assert got["state"] == {k: tuple(v.shape) for k, v in ref["params"].items()} | {
        "lm_head.weight": tuple(ref["params"]["wte.weight"].shape)}


# --- the ring against one device's attention --------------------------------------------------------

@pytest.mark.parity
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("size", [2, 4])
def test_ring_attention_forward_and_backward_equal_single_device(pool4, dtype, tol, causal, size):
    ranks = pool4.run(ring_vs_sdpa, dtype, causal, size, timeout=120)[0]
    assert len(ranks) == size
    for r in ranks:
        for what, err in r["errs"].items():
            assert err <= tol, (what, err)


def test_kv_bytes_are_cp_minus_one_blocks_per_pass_and_zigzag_balances(pool4):
    """Per rank, per pass: forward and backward each send cp - 1 K/V blocks, the backward cp dK/dV
    accumulators (the last one home). Counted attention FLOPs equal the analytic count: equal on every
    rank with zigzag chunks, ~(2cp - 1)x apart with a contiguous split."""
    from shardlab.parallel.cp import layer as cp

    seq, batch, heads, head_dim, size = 32, 2, 3, 8, 4
    block = 2 * batch * heads * (seq // size) * head_dim * 8  # K and V of one rank, float64
    ranks = pool4.run(ring_vs_sdpa, torch.float64, True, size, timeout=120)[0]
    for r in ranks:
        assert r["sent"] == {"cp.kv:t": (size - 1) * block, "cp.kv_bwd:t": (size - 1) * block,
                             "cp.dkv:t": size * block}
    flops = [r["flops"] for r in ranks]
    assert flops == [cp.attention_flops(seq, i, size, "zigzag", True, batch, heads, head_dim) for i in range(size)]
    assert len(set(flops)) == 1
    contiguous = pool4.run(ring_vs_sdpa, torch.float64, True, size, "contiguous", timeout=120)[0]
    flops = [r["flops"] for r in contiguous]
    assert flops == [cp.attention_flops(seq, i, size, "contiguous", True, batch, heads, head_dim)
                     for i in range(size)]
    assert max(flops) / min(flops) > 2 * size - 2
    assert all(max(r["errs"].values()) <= 1e-12 for r in contiguous)  # the layout changes the work, not the result


# --- the composed step --------------------------------------------------------------------------------

@pytest.mark.parametrize("dp,recompute", [("ddp", "none"), ("zero2", "none"), ("torch-ddp", "none"),
                                          ("ddp", "full")])
@pytest.mark.parity
def test_cp2_training_equals_single(pool2, dp, recompute):
    out = pool2.run(in_float64, composed, ["parallel.cp=2", f"parallel.dp={dp}", f"train.recompute={recompute}",
                                           "train.micro_batch=4"], STEPS, timeout=300)[0]
    _assert_equals_single(out)
    # the K/V bytes of one step, per layer and pass: one block (cp - 1 = 1) of b x s/cp x (K, V) x d x 8 B
    # (float64); full recompute runs the forward ring again in backward
    block = 4 * 16 * 2 * 64 * 8
    for sent in out["sent"]:
        for i in ("0", "1"):
            assert sent[f"cp.kv:blocks.{i}"] == block * (2 if recompute == "full" else 1)
            assert sent[f"cp.kv_bwd:blocks.{i}"] == block
            assert sent[f"cp.dkv:blocks.{i}"] == 2 * block
    assert len(set(out["flops"])) == 1  # zigzag: every rank computes the same attention FLOPs


@pytest.mark.parametrize("overrides", [
    ["parallel.cp=2", "parallel.dp=ddp", "train.micro_batch=2"],  # cp x dp (dp_replicate = 2)
    ["parallel.cp=2", "parallel.dp=zero3", "train.micro_batch=2"],  # zero3 shards over dp_cp
    ["parallel.cp=4", "parallel.dp=zero2", "train.micro_batch=4"],
    ["parallel.cp=2", "parallel.tp=2", "train.micro_batch=4"],  # cp x tp
    ["parallel.cp=2", "parallel.tp=2", "parallel.sp=true", "train.micro_batch=4"],
], ids=["cp2xddp2", "cp2xzero3", "cp4xzero2", "cp2xtp2", "cp2xtp2sp"])
@pytest.mark.parity
def test_cp_world4_equals_single(pool4, overrides):
    _assert_equals_single(pool4.run(in_float64, composed, overrides, STEPS, timeout=400)[0])


@pytest.mark.parity
def test_cp2_fp32_within_the_error_model(pool2):
    """fp32, the training precision: cp=2 as close to the float64 single run as the fp32 single run is."""
    out = pool2.run(composed, ["parallel.cp=2", "train.micro_batch=4"], STEPS, timeout=300)[0]
    for key in PARTS:
        assert_fp32_within_error_model(out[key], _single(False)[key], _single()[key], key)


# --- the planner --------------------------------------------------------------------------------------

def test_planner_kv_traffic_equals_the_recorded_and_activations_divide_by_cp(pool2):
    from shardlab.plan.comm import tp_pp_collectives
    from shardlab.plan.layout import Layout
    from shardlab.plan.train_spec import TrainSpec
    from shardlab.plan.memory import activation_lines
    from shardlab.plan.presets import model_from_args

    model = model_from_args("tiny", seq=32)
    train = TrainSpec(global_batch=4, micro_batch=4, precision="fp32")
    (ring,) = [c for c in tp_pp_collectives(model, train, Layout(dp=1, cp=2), 1) if c.group == "cp"]
    out = pool2.run(composed, ["parallel.cp=2", "train.micro_batch=4"], 1, timeout=300)[0]
    assert all(ring.payload == sum(sent.values()) for sent in out["sent"])
    assert ring.calls == 2 * (1 + 1 + 2)  # 2 layers x (1 K/V forward, 1 backward, 2 dK/dV)
    assert Layout(dp=2, cp=2).world == 4
    halved = activation_lines(model, TrainSpec(global_batch=4, micro_batch=4, seq=16, precision="fp32"),
                              Layout(), 1)[0].bytes
    assert activation_lines(model, train, Layout(cp=2), 1)[0].bytes == halved


# --- the CLI --------------------------------------------------------------------------------------------

COMMON = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=4", "train.micro_batch=4",
          "train.warmup_steps=1", "train.log_every=1", "train.eval_seqs=8", "doctor.hang_timeout_s=0"]


def test_cli_cp2_equals_single_and_its_checkpoint_resumes_on_one_process(tmp_path, pool2):
    """`shardlab train --nproc 2 parallel.cp=2`: training and validation losses equal the single-device
    run's; its checkpoint (replicated parameters, the bare model's names) resumes on one process, and the
    next step's loss equals an uninterrupted single-device run's."""
    runs = {"cp": ["--nproc", "2", "parallel.cp=2", "train.steps=2", "train.eval_every=2", "ckpt.final=true"],
            "whole": ["parallel.strategy=single", "train.steps=3", "train.eval_every=2"]}
    runs["resumed"] = ["parallel.strategy=single", "train.steps=3", "train.eval_every=2", "--nproc", "1",
                       "parallel.cp=1", f"ckpt.resume={tmp_path / 'cp' / 'checkpoints' / 'step_000002'}"]
    rows = {}
    for name, args in runs.items():  # in order: the resume reads the cp run's checkpoint
        # the cp run's ranks on the pool, the single-device ones in this process (run_harness.py)
        train([*args, *COMMON, "--out", str(tmp_path / name)], timeout=400, pool=pool2)
        rows[name] = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((tmp_path / "cp" / "summary.json").read_text())
    assert summary["layout"]["cp"] == 2 and summary["params_per_rank"] == [summary["params_total"]] * 2
    losses = {n: [r[k] for r in rows[n] for k in ("loss", "val_loss") if k in r and r["step"] <= 2]
              for n in ("cp", "whole")}
    assert len(losses["cp"]) >= 4  # two training losses, the starting and the step-2 evaluation
    torch.testing.assert_close(losses["cp"], losses["whole"], rtol=1e-5, atol=0)
    assert rows["resumed"][-1]["step"] == 3
    assert rows["resumed"][-1]["loss"] == pytest.approx(rows["whole"][-1]["loss"], rel=1e-5)


@pytest.mark.parametrize("args,needle", [
    (["parallel.cp=2", "train.seq_len=30"], "train.seq_len=30 is not divisible by 2 x parallel.cp = 4"),
    (["parallel.cp=2", "parallel.cp_impl=torch"], "runs only with CUDA attention kernels"),
    (["parallel.cp=2", "parallel.cp_impl=ring"], "parallel.cp_impl='ring': must be one of own, torch, ulysses, hybrid"),
    (["parallel.cp=2", "parallel.dp=torch-zero1"], "does not compose with parallel.dp=torch-zero1"),
    (["parallel.cp=2", "model.dropout=0.1"], "set model.dropout=0"),
    (["parallel.cp=2", "parallel.tp=2", "parallel.tp_impl=dtensor", "--nproc", "4"], "use parallel.tp_impl=own"),
])
def test_bad_cp_settings_are_one_line_exit_2(tmp_path, capsys, args, needle):
    from shardlab import cli

    nproc = [] if "--nproc" in args else ["--nproc", "2"]
    preset = [] if any(a.startswith("model.preset=") for a in args) else ["model.preset=tiny"]
    code = cli.cmd_train([*preset, *nproc, *args, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], err
    assert not (tmp_path / "run").exists()


def test_bench_context_quick(tmp_path, monkeypatch, capsys, bench_on_session_pools):
    """`shardlab bench context --quick`: rows for cp1 and cp2 at every length, the plot, and the figures that
    are counts rather than times: exact activation bytes halve (goal <= 0.55), the ring's recorded bytes equal
    the planner's, zigzag FLOPs are equal per rank and a contiguous split's are not. (Times are reported,
    never asserted.) Through bench's main in this process, its ranks the session's pools (real gloo ranks
    either way), with a smaller sweep than --quick's: two lengths, two rounds, a short replay; none of the
    counts depends on them. (A real `shardlab bench` process: test_bench_generate.py.)"""
    from shardlab.bench import context
    from shardlab.bench.cli import main as bench_main

    monkeypatch.setitem(context.SIZES, "quick", dict(seqs=[64, 128], rounds=2, warm=1, attn_seq=256, attn_reps=3,
                                                     cross_seqs=[64, 128], cross_rounds=2))
    monkeypatch.setattr(context, "CLUSTER", "A100-80G")  # a preset: no calibration of this machine in a test
    monkeypatch.setenv("SHARDLAB_BENCH_T0", str(time.time()))  # progress's clock, restored after
    assert bench_main(["context", "--quick", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["suite"] == "context" and (tmp_path / "context.png").exists()
    assert (tmp_path / "REPORT.md").read_text().startswith("# Context parallelism")
    f = doc["figures"]
    assert f["cp_act_mem_ratio"] <= 0.55
    assert f["cp_comm_exact"] == 1.0 and f["ranks_consistent"] is True
    assert f["cp_flops_balance"] == 1.0 and f["cp_flops_balance_contiguous"] > 2.5
    assert {"cp_balance", "cp_balance_contiguous", "cp_step_ratio", "cp_ulysses_step_ratio"} <= f.keys()
    assert f["cp_a2a_exact"] == 1.0  # the ring's sends and Ulysses' all-to-alls equal parallel/cp/cost.py
    fams = [x for x in doc["rows"] if "family" in x]  # ring, Ulysses (and the hybrid at cp 4) per length
    assert {(x["cp"], x["family"]) for x in fams} == {(2, "own"), (2, "ulysses"), (4, "own"), (4, "ulysses"),
                                                      (4, "hybrid:2")} and len(fams) == 2 * 5
    assert all(b == x["formula_bytes"] > 0 for x in fams for b in x["bytes"])  # every rank's, exact
    assert all(x["act_bytes"] > 0 and x["predicted_s"] > 0 and x["step_s"]["n"] == 2 for x in fams)
    for key in ("cp2_ulysses_crossover_measured", "cp2_ulysses_crossover_predicted", "cp4_hybrid_crossover_measured",
                "cp4_ulysses_crossover_predicted", "cp4_ulysses_step_ratio"):
        assert key in f
    rows = [x for x in doc["rows"] if "config" in x]
    assert {x["config"] for x in rows} == {"cp1", "cp2"} and len(rows) == 2 * len({x["seq_len"] for x in rows})


def test_ring_posting_order_completes_under_nccl(pool4):
    """Ring attention's real posts and waits (forward and backward, four ranks) replayed under NCCL's
    rules: each shift is one batch_isend_irecv, every rank posts the same sequence of shifts."""
    from p2p_harness import logged

    from shardlab.parallel.p2p_order import check_all, from_logs

    logs = dict(pool4.run(logged, "cp_harness", "ring_vs_sdpa", torch.float64, True, 4, timeout=120))
    # per rank: forward 3 K/V shifts, backward 3 K/V and 4 dK/dV shifts, each a send and a receive
    assert check_all(from_logs(logs)) == 4 * (3 + 3 + 4)
