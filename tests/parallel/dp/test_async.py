"""The asynchronous parameter server (parallel.sync=async, parallel/sync/async_ps.py): one worker with τ = 0 is
`single`, the bytes per applied gradient are the analytic ones, staleness appears with more workers and
never exceeds τ, the server's checkpoint resumes exactly, bad settings are one line. The tiny model, a few
steps, the shared pools."""
from __future__ import annotations

import json

import pytest
import torch

from shardlab import cli, comm, config
from shardlab.errors import ConfigError

TINY_RUN = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=4", "train.micro_batch=2",
            "train.warmup_steps=1", "train.log_every=1", "train.eval_every=0", "doctor.hang_timeout_s=0",
            "ckpt.final=false", "train.threads=1"]
HEADER = 24  # [ticket, version, loss] in float64


def _rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _train(run_dir, overrides, world):
    from shardlab.train import make_trainer

    cfg = config.load(None, TINY_RUN + overrides)
    cfg = config.validate(cfg, world)
    trainer = make_trainer(cfg, run_dir)
    summary = trainer.run()
    params = {k: v.detach().clone() for k, v in trainer.par.full_parameters().items()}
    sent = {op: b for op, b in comm.RECORDER.step_stats()["bytes"].items() if b}  # (the end's gather: 0 B)
    return summary, params, sent


def _async_run(run_dir, overrides):
    """On every rank of the pool; the server's (rank 0's) records, every rank's bytes."""
    summary, params, sent = _train(run_dir, ["parallel.strategy=ddp", "parallel.sync=async"] + overrides,
                                   comm.world_size())
    rows = _rows(run_dir) if comm.rank() == 0 else None
    return summary, params, sent, rows


# --- one worker, τ = 0: `single` ----------------------------------------------------------------------------

STEPS = 5


ONE_WORKER = [f"train.steps={STEPS}", "parallel.max_staleness=0", "train.grad_clip=0.5"]


@pytest.fixture(scope="module")
def one_worker_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("async1")


@pytest.fixture(scope="module")
def one_worker(pool2, one_worker_dir):
    """train.grad_clip=0.5 so clipping acts (the tiny model's norm is ~3-5): the server clips as single does.
    A checkpoint at step 3 (the server's) for the resume test."""
    return pool2.run(_async_run, one_worker_dir, ONE_WORKER + ["ckpt.every=3"], timeout=180)


def test_one_worker_with_tau0_equals_single_exactly(one_worker, tmp_path):
    """The worker computes step t's gradient as single does (same batch, microbatches, loss weight) at the
    parameters of version t, and the server steps with it as single does: bitwise, not just rtol 1e-5."""
    (summary, params, _, rows), _ = one_worker
    ref_summary, ref_params, _ = _train(tmp_path / "single", [f"train.steps={STEPS}", "train.grad_clip=0.5",
                                                                       "parallel.strategy=single"], 1)
    ref_rows = [r for r in _rows(tmp_path / "single") if "loss" in r]
    got = [r for r in rows if "loss" in r]
    assert [r["step"] for r in got] == list(range(1, STEPS + 1))
    assert [r["loss"] for r in got] == [r["loss"] for r in ref_rows]
    assert [r["grad_norm"] for r in got] == [r["grad_norm"] for r in ref_rows]
    assert max(r["grad_norm"] for r in got) > 0.5  # clipping acted
    for k in ref_params:
        assert torch.equal(params[k], ref_params[k]), k
    assert summary["async"]["staleness_max"] == 0 and summary["steps"] == STEPS


def test_bytes_per_applied_gradient_are_the_analytic_ones(one_worker):
    """Per applied gradient the server receives the gradient and sends the parameters, 4Ψ bytes each (fp32),
    each behind a 24-byte header; over the run one hello and one stop header per worker."""
    (summary, _, server, _), (_, _, worker, _) = one_worker
    numel = summary["async"]["params_numel"]
    per_step = 4 * numel + HEADER
    assert server == {"recv": STEPS * per_step + HEADER, "send": STEPS * per_step + HEADER}
    assert worker == {"send": STEPS * per_step + HEADER, "recv": STEPS * per_step + HEADER}
    assert summary["comm"]["bytes_by_tag"]["async push"] == STEPS * 4 * numel
    assert summary["comm"]["bytes_by_tag"]["async pull"] == STEPS * 4 * numel


def test_async_checkpoint_resumes_exactly_in_async_and_in_single(one_worker, one_worker_dir, pool2, tmp_path):
    """The server saves the master parameters, the optimizer, the step and the sampler: resumed at step 3,
    async (one worker, τ = 0) and single both end bitwise where the uninterrupted run did (single too: the
    checkpoint is an ordinary one-process one, and this async run is single step for step)."""
    (_, straight, _, rows), _ = one_worker
    ckpt = one_worker_dir / "checkpoints" / "step_000003"
    (_, resumed, _, resumed_rows), _ = pool2.run(_async_run, tmp_path / "async", ONE_WORKER + [f"ckpt.resume={ckpt}"],
                                                 timeout=180)
    _, single, _ = _train(tmp_path / "single", [f"train.steps={STEPS}", "train.grad_clip=0.5",
                                                "parallel.strategy=single", f"ckpt.resume={ckpt}"], 1)
    assert [r["step"] for r in resumed_rows if "loss" in r] == [4, 5]  # only the steps after the checkpoint
    assert [r["loss"] for r in resumed_rows if "loss" in r] == [r["loss"] for r in rows if r.get("step", 0) > 3]
    for k in straight:
        assert torch.equal(resumed[k], straight[k]), k
        assert torch.equal(single[k], straight[k]), k


# --- more workers: staleness appears, bounded by τ ---------------------------------------------------------

STEPS4 = 8


def _world4_run(run_dir):
    # three workers, τ = 2; worker 1 a straggler: without the bound the other two would run far ahead of its
    # parameters; with it they wait for its gradient (the bound holds whatever the timing)
    return _async_run(run_dir, [f"train.steps={STEPS4}", "parallel.max_staleness=2", "debug.slow_rank=1",
                                "debug.slow_ms=40"])


@pytest.fixture(scope="module")
def world4(pool4, tmp_path_factory):
    return pool4.run(_world4_run, tmp_path_factory.mktemp("async4"), timeout=240)[0]  # the server's view


def test_staleness_at_world4_is_recorded_per_step_and_bounded_by_tau(world4):
    summary, _, _, rows = world4
    tau = 2
    staleness = [r["staleness"] for r in rows if "loss" in r]
    assert len(staleness) == STEPS4 and summary["steps"] == STEPS4  # every applied gradient, each a step
    assert max(staleness) <= tau
    # the first τ + 1 tickets go out at version 0 to different workers: staleness τ appears at once
    assert max(staleness) == tau
    assert summary["async"]["staleness_max"] == max(staleness)
    assert summary["async"]["staleness_mean"] == pytest.approx(sum(staleness) / STEPS4)
    assert sum(summary["async"]["gradients_by_worker"]) == STEPS4


# --- bad input ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, world, needle", [
    (["parallel.strategy=zero2"], 2, "hold the whole model"),
    (["parallel.tp=2"], 2, "hold the whole model"),
    (["parallel.pp=2"], 2, "hold the whole model"),
    (["parallel.cp=2"], 2, "hold the whole model"),
    (["parallel.max_staleness=-1"], 2, "max_staleness=-1"),
    ([], 1, "at least one worker"),
    (["train.dtype=fp16"], 2, "fp16"),
    (["parallel.backend=nccl"], 2, "NCCL cannot"),
])
def test_bad_async_settings_are_one_line_errors(overrides, world, needle):
    cfg = config.load(None, ["parallel.strategy=ddp", "parallel.sync=async"] + overrides)
    with pytest.raises(ConfigError, match=needle) as e:
        cfg = config.validate(cfg, world)
    assert "\n" not in str(e.value)


def test_bad_async_input_on_the_cli_is_exit_2_nothing_written(tmp_path, capsys):
    out = tmp_path / "run"
    code = cli.cmd_train(["--out", str(out), "--nproc", "2", "parallel.strategy=zero2", "parallel.sync=async"])
    err = capsys.readouterr().err
    assert code == 2 and "hold the whole model" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
