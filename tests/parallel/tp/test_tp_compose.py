"""Tensor parallelism through the composition (`shardlab.parallel.build`): the step the trainer runs equals
one device's at tp = 2 and at tp x dp = 2 x 2, own and DTensor; the CLI runs it and refuses bad settings.

Parity runs in float64 (shardlab/testing/compare.py says why that is portable): losses, clipped gradient
norms and parameters after 3 AdamW steps equal the single-device run to 1e-9. One fp32 case checks the
training precision against the error model of compare.py (within 16x the single device's own round-off).
"""
from __future__ import annotations

import functools
import json

import pytest
import torch

from shardlab import config
from shardlab.testing.compare import assert_float64_equal, assert_fp32_within_error_model, in_float64
from tp_harness import composed
from run_harness import train

SINGLE = ["parallel.strategy=single", "train.micro_batch=4"]


@functools.lru_cache(maxsize=None)
def _single(float64: bool = True):
    # One process, no process group: the plain model with the whole global batch as one microbatch.
    return in_float64(composed, SINGLE) if float64 else composed(SINGLE)


def _assert_equals_single(got: dict) -> None:
    ref = _single()
    for key in ("losses", "norms", "params"):
        assert_float64_equal(got[key], ref[key], key)


@pytest.mark.parametrize("impl,sp", [("own", False), ("own", True), ("dtensor", False), ("dtensor", True)])
@pytest.mark.parity
def test_tp2_through_build_equals_single_device(pool2, impl, sp):
    out = pool2.run(in_float64, composed, ["parallel.tp=2", f"parallel.tp_impl={impl}", f"parallel.sp={str(sp).lower()}",
                               "train.micro_batch=4"], timeout=300)[0]
    _assert_equals_single(out)
    # Checkpoints reshard across tp degrees: the bare model's names, split tensors as DTensors with the
    # bare model's global shapes.
    ref_shapes = {k: tuple(v.shape) for k, v in _single()["params"].items()}
    assert {k: shape for k, (_, shape) in out["state"].items() if k in ref_shapes} == ref_shapes
    assert out["state"]["blocks.0.mlp.fc.weight"][0] and out["state"]["wte.weight"][0]


# Every data-parallel layer TP composes with (layers.TP_WITH_DP), once; SP on some of them.
TP_X_DP = [("own", "ddp", False), ("own", "zero1", False), ("own", "zero2", True), ("own", "zero3", True),
           ("dtensor", "torch-fsdp2", False), ("dtensor", "torch-fsdp2", True)]


@pytest.mark.parity
def test_tp2_fp32_within_the_error_model(pool2):
    """fp32, the precision training uses: own TP + SP at tp=2 is as close to the float64 answer as one
    device's fp32 run is (compare.py, 2.)."""
    out = pool2.run(composed, ["parallel.tp=2", "parallel.sp=true", "train.micro_batch=4"], timeout=300)[0]
    single, exact = _single(False), _single()
    for key in ("losses", "norms", "params"):
        assert_fp32_within_error_model(out[key], single[key], exact[key], key)


@pytest.mark.parity
@pytest.mark.parametrize("impl,dp,sp", TP_X_DP)
def test_tp2_x_dp2_equals_single_device(pool4, impl, dp, sp):
    """The (dp, tp) mesh at world 4: the gradient norm (clipped at 1.0; single's is ~2.9, so clipping
    scales every step) is the single-device one (split tensors summed over tp, copies once, dp shards summed
    over dp_shard), and the parameters after 3 steps are. With zero2/zero3 and SP, SP's sum over tp runs on
    zero's gradient shards (laid out alike on both tp ranks)."""
    out = pool4.run(in_float64, composed, ["parallel.tp=2", f"parallel.tp_impl={impl}", f"parallel.dp={dp}",
                               f"parallel.sp={str(sp).lower()}", "train.micro_batch=2"], timeout=400)[0]
    _assert_equals_single(out)


@pytest.mark.parametrize("sp", [False, True], ids=["nosp", "sp"])
def test_tp2_x_ddp_with_dropout_keeps_replicas_identical(pool4, sp):
    """Dropout on (p=0.1), own TP x ddp at 2 x 2: what holds is that copies stay bitwise identical, the
    replicated parameters on all 4 ranks and each TP piece on its 2 data-parallel replicas, after 3 steps
    (the masks of replicated regions agree across a TP group, data-parallel replicas apply the same update).
    Equality with one device does not hold (the split regions draw per TP rank): the losses differ."""
    outs = pool4.run(composed, ["parallel.tp=2", "parallel.dp=ddp", f"parallel.sp={str(sp).lower()}",
                                "train.micro_batch=2", "model.dropout=0.1"], every_rank=True, timeout=300)
    first = {}
    for out in outs:
        dp, tp = out["coord"]
        for name, value in out["local"].items():
            split = outs[0]["local"][name].shape != _single()["params"][name].shape
            ref = first.setdefault((name, tp if split else None), value)
            assert torch.equal(value, ref), f"{name} on dp {dp}, tp {tp} differs from its copy"
    assert {out["coord"] for out in outs} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert outs[0]["losses"] != pytest.approx(_single()["losses"], rel=1e-3)  # dropout is on


def test_cli_tp2_equals_single_and_its_checkpoint_resumes_on_one_device(tmp_path, pool2):
    """`shardlab train --nproc 2 parallel.tp=2`: training and validation losses equal the single-device
    run's; its checkpoint (the bare model's names, split tensors as DTensors over tp) resumes on one
    process, and the next step's loss and validation loss equal an uninterrupted single-device run's.
    (One tp run and one single run serve both checks: the single run's first two steps are the
    reference for the tp run, its third for the resumed one.)"""
    common = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=4", "train.micro_batch=2",
              "train.warmup_steps=1", "train.log_every=1", "train.eval_every=2", "train.eval_seqs=8",
              "doctor.hang_timeout_s=0"]
    runs = {"tp": ["--nproc", "2", "parallel.tp=2", "train.steps=2", "ckpt.final=true"],
            "whole": ["parallel.strategy=single", "train.steps=3"]}
    # resuming starts from the tp run's config and world size: the layout change is asked for explicitly
    runs["resumed"] = runs["whole"] + ["--nproc", "1", "parallel.tp=1",
                                       f"ckpt.resume={tmp_path / 'tp' / 'checkpoints' / 'step_000002'}"]
    rows = {}
    for name, args in runs.items():  # in order: the resume reads the tp run's checkpoint
        # the tp run's ranks on the pool, the single-device ones in this process (run_harness.py)
        train([*args, *common, "--out", str(tmp_path / name)], timeout=400, pool=pool2)
        rows[name] = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    summary = {n: json.loads((tmp_path / n / "summary.json").read_text()) for n in ("tp", "whole")}
    assert summary["tp"]["layout"]["tp"] == 2 and summary["whole"]["layout"]["dp"] == "single"
    total = summary["whole"]["params_total"]
    assert summary["tp"]["params_total"] == total == summary["whole"]["params_per_rank"][0]
    # each tp rank holds its halves of the split matrices and a whole copy of the rest
    assert all(total / 2 <= n < total for n in summary["tp"]["params_per_rank"])
    losses = {n: [r[k] for r in rows[n] for k in ("loss", "val_loss") if k in r and r["step"] <= 2]
              for n in ("tp", "whole")}
    assert len(losses["tp"]) >= 3  # two training losses and at least one evaluation
    torch.testing.assert_close(losses["tp"], losses["whole"], rtol=1e-5, atol=0)
    last = {n: rows[n][-1] for n in ("whole", "resumed")}
    assert last["resumed"]["step"] == 3
    for key in ("loss", "val_loss"):
        assert last["resumed"][key] == pytest.approx(last["whole"][key], rel=1e-5)


@pytest.mark.parametrize("args,needle", [
    (["parallel.tp=3"], "does not divide model.n_head=4"),
    (["parallel.tp=2", "parallel.sp=true", "train.seq_len=33"], "train.seq_len=33 is not divisible"),
    (["parallel.sp=true"], "needs parallel.tp > 1"),
    (["parallel.tp=2", "parallel.tp_impl=megatron"], "parallel.tp_impl='megatron': must be one of"),
    (["parallel.tp=2", "parallel.tp_impl=dtensor", "parallel.dp=zero3", "--nproc", "4"], "does not compose"),
])
def test_bad_tp_settings_are_one_line_exit_2(tmp_path, capsys, args, needle):
    from shardlab import cli

    nproc = [] if "--nproc" in args else ["--nproc", "3" if "parallel.tp=3" in args else "2"]
    code = cli.cmd_train(["model.preset=tiny", *nproc, *args, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], err
    assert not (tmp_path / "run").exists()


def test_tp_keys_validate_in_config():
    cfg = config.load(None, ["model.preset=tiny", "parallel.tp=2", "parallel.sp=true", "train.seq_len=32"])
    cfg = config.validate(cfg, 4)
    assert cfg.parallel.tp_impl == "own" and cfg.parallel.sp is True and cfg.train.global_batch % 2 == 0
