"""`shardlab train --dry-run`: per-rank reports of a simulated step, the JSON line, the exit codes, and the
state bytes beside the planner's. In this process (the CLI's entry point, no subprocess)."""
from __future__ import annotations

import json

import pytest

from shardlab import cli, comm

TINY = ["model.preset=tiny", "train.seq_len=16", "train.micro_batch=2", "train.grad_accum=2"]


@pytest.fixture(autouse=True)
def _no_process_group():
    if comm.is_initialized():
        pytest.skip("the simulated world needs a process without a process group")


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_dry_run_reports_every_pipeline_stage_and_matches_the_planner(capsys):
    code = cli.cmd_train(["--dry-run", "--world", "8", "--json", *TINY, "parallel.strategy=zero3",
                          "parallel.tp=2", "parallel.pp=2"])
    out = _json(capsys)
    assert code == 0 and out["ok"] and out["violations"] == []
    assert out["world"] == 8 and out["device"] == "cuda"
    assert [r["rank"] for r in out["ranks"]] == [0, 4]  # rank 0 and the first rank of stage 1
    assert [r["coords"]["pp"] for r in out["ranks"]] == [0, 1]
    first = out["ranks"][0]
    assert first["state_bytes"] == first["plan_state_bytes"]  # zero3's padded shards, as planned
    assert out["plan_state_err"] == 0.0
    assert first["peak_mem_bytes"] >= sum(first["state_bytes"].values())
    assert {"all_gather", "reduce_scatter", "send", "recv"} <= set(first["comm"]["bytes_per_step"])


@pytest.mark.parametrize("keys", [["parallel.strategy=ddp"], ["parallel.strategy=zero2", "train.dtype=bf16"],
                                  ["parallel.strategy=zero1", "parallel.dp_replicate=2"]])
def test_state_bytes_equal_the_planners(capsys, keys):
    code = cli.cmd_train(["--dry-run", "--world", "4", "--json", "--ranks", "3", *TINY, *keys])
    out = _json(capsys)
    assert code == 0, out["violations"]
    assert out["plan_state_err"] <= 0.02, out["ranks"][0]


def test_violation_exits_6(capsys, monkeypatch):
    import torch

    from shardlab.simulate import step

    real = step.simulate_rank

    def planted(cfg, world, rank, device="cuda", **kw):
        hook = lambda par: par.model.register_forward_hook(lambda m, a, o: o + torch.zeros(o.shape[-1]))  # noqa: E731
        return real(cfg, world, rank, device=device, hook=hook, **kw)
    monkeypatch.setattr(step, "simulate_rank", planted)
    code = cli.cmd_train(["--dry-run", "--world", "2", "--json", *TINY, "parallel.strategy=ddp"])
    out = _json(capsys)
    assert code == 6 and not out["ok"]
    assert any("no-device: torch.zeros at test_dry_run.py" in v for v in out["violations"]), out["violations"]


@pytest.mark.parametrize("argv, says", [
    (["--dry-run", "--world", "4", "--nproc", "2"], "--world is the whole job"),
    (["--world", "4"], "goes with --dry-run"),
    (["--dry-run"], "needs --world"),
    (["--dry-run", "--world", "4", "--ranks", "9"], "ranks must lie in 0..3"),
    (["--dry-run", "--world", "3", "parallel.strategy=zero3", "parallel.tp=2"], "3"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, says):
    assert cli.cmd_train([*argv, *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err


@pytest.mark.parametrize("tier", ["disk", "host"])
def test_optimizer_offload_passes_with_the_state_off_the_device(capsys, tier):
    """ZeRO-Offload on CUDA: the dry run passes it, and counts the optimizer state off the device (where
    the planner, which puts offloaded state at 0, agrees with the device columns)."""
    code = cli.cmd_train(["--dry-run", "--world", "2", "--json", "--device", "cuda", *TINY,
                          "parallel.strategy=zero1", "parallel.offload=optimizer", f"parallel.offload_to={tier}"])
    out = _json(capsys)
    assert code == 0 and out["ok"], out["violations"]
    rank = out["ranks"][0]
    assert rank["state_bytes"]["optimizer"] == 0 and rank["offloaded_bytes"] > 0
    assert rank["plan_state_bytes"]["optimizer"] == 0 and out["plan_state_err"] == 0.0
