"""Pipeline parallelism from the command line: a pp=2 run's checkpoint continues under single, ddp and
zero3 with the same next losses (and zero3's back under pp=2), and bad pipeline settings are one line,
exit 2, before launch."""
import contextlib
import io
import json
from pathlib import Path

import pytest

from cli_harness import as_rank, run_in_process
from shardlab.testing import run_cli

BASE = ["--config", "configs/tiny.toml", "train.global_batch=8", "train.eval_every=0", "train.log_every=1"]
ROOT = Path(__file__).resolve().parents[3]


def _losses(run: Path) -> dict:
    return {r["step"]: r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if "loss" in r}


def _continue(run_dir: str, pp_run: str, overrides: list[str]) -> dict:
    """What `shardlab train --config configs/tiny.toml ... ckpt.resume=<pp_run's checkpoint>` builds (the
    saved run's config.toml as the base, the overrides on top), trained in this process: on every rank of
    a pool, or alone for world 1. Rank 0's losses by step."""
    from shardlab import comm, config
    from shardlab.launch import resume
    from shardlab.train.trainer import Trainer

    cfg = config.load(ROOT / BASE[1], BASE[2:] + overrides,
                      base=resume.base_config(resume.stored_config(Path(pp_run))))
    cfg = config.validate(cfg, comm.world_size())
    with contextlib.redirect_stdout(io.StringIO()):
        Trainer(cfg, Path(run_dir)).run()
    return _losses(Path(run_dir)) if comm.rank() == 0 else {}


def test_pp2_run_is_traced_and_its_checkpoint_continues_under_single_ddp_zero3_and_back(tmp_path, pool2):
    """The pp=2 run is what each rank of `shardlab train --nproc 2` runs (its CLI entry, torchrun's variables
    set) on the module's pool, and `shardlab trace` reads its directory; the continuations run the same trainer
    on the pool (the CLI's ckpt.resume with a layout change is `shardlab train`'s own entry in
    test_tp_compose.py and test_cp.py), each from the config the CLI would build."""
    pp = tmp_path / "pp"
    ranks = pool2.run(as_rank, ["train", "--nproc", "2", "--out", str(pp), *BASE, "parallel.pp=2", "train.steps=5",
                                "ckpt.every=3", "ckpt.final=false", "trace.enabled=true"], timeout=300)
    assert [code for code, _, _ in ranks] == [0, 0], [err[-3000:] for _, _, err in ranks]
    ref = _losses(pp)
    summary = json.loads((pp / "summary.json").read_text())
    assert summary["layout"]["pp"] == 2 and summary["layout"]["pp_schedule"] == "1f1b"
    per_rank, total = summary["params_per_rank"], summary["params_total"]
    # two stages: each holds part of the model (the last its head, tied to the first's embedding: held twice)
    assert len(per_rank) == 2 and all(0 < n < total for n in per_rank) and sum(per_rank) >= total
    # the traced run's bubble is measured per stage beside the formula, and drawn
    t = run_in_process(["trace", str(pp)])  # reads the run directory: no fresh interpreter needed
    assert t.returncode == 0 and "pipeline bubble" in t.stdout and "analytic 33.3% (1f1b, p=2, m=2)" in t.stdout, t.stdout
    assert (pp / "trace" / "pipeline.png").stat().st_size > 0
    for nproc, layout in ((1, "parallel.strategy=single"), (2, "parallel.strategy=ddp"), (2, "parallel.strategy=zero3")):
        out = tmp_path / layout.split("=")[1]
        # resuming starts from the pp run's config: pp=1 is the layout change asked for; zero3 saves step 4
        over = [layout, "parallel.pp=1", "train.steps=5", "ckpt.final=false", "ckpt.every=4",
                "trace.enabled=false", f"ckpt.resume={pp / 'checkpoints' / 'step_000003'}"]
        got = _continue(out, pp, over) if nproc == 1 else pool2.run(_continue, out, pp, over, timeout=300)[0]
        for step in (4, 5):  # fp32; the same sums split another way: round-off only
            assert got[step] == pytest.approx(ref[step], rel=1e-5), (layout, step)
        s = json.loads((out / "summary.json").read_text())
        name = layout.split("=")[1]
        assert s["layout"]["dp"] == name and s["layout"]["pp"] == 1 and s["params_total"] == total
        # zero3 holds its rows of every parameter (no padding counted): the ranks' shares add up to the model
        assert sum(s["params_per_rank"]) == total if name == "zero3" else s["params_per_rank"] == [total] * nproc
        assert len(s["peak_mem_bytes_per_rank"]) == nproc and "mfu" in s  # null: 2 steps are all warm-up
    # and back: zero3's step-4 checkpoint (parameters and optimizer state sharded over dp) into two stages
    back = tmp_path / "back"
    over = ["parallel.strategy=ddp", "parallel.pp=2", "train.steps=5", "ckpt.final=false", "trace.enabled=false",
            f"ckpt.resume={tmp_path / 'zero3' / 'checkpoints' / 'step_000004'}"]
    assert pool2.run(_continue, back, pp, over, timeout=300)[0][5] == pytest.approx(ref[5], rel=1e-5)


@pytest.mark.parametrize("args,needle", [
    (["parallel.pp=2", "parallel.pp_schedule=1f1b", "train.grad_accum=1"], "needs at least 2 microbatches"),
    (["parallel.pp=2", "parallel.pp_virtual=2", "parallel.pp_schedule=interleaved", "train.grad_accum=3"],
     "multiple of pp=2"),
    (["parallel.pp=2", "parallel.pp_virtual=2", "parallel.pp_schedule=interleaved", "train.grad_accum=2",
      "model.n_layer=3"], "layers"),
    (["parallel.pp=2", "parallel.pp_schedule=pipedream"], "must be one of"),
    (["parallel.pp=2", "parallel.pp_split=9", "train.grad_accum=2"], "pp_split"),
    (["parallel.pp=2", "parallel.pp_schedule=torch-zbv", "train.grad_accum=2"], "set parallel.pp_virtual=2"),
    (["--nproc", "4", "parallel.pp=2", "parallel.tp=2", "parallel.tp_impl=dtensor", "train.grad_accum=2"],
     "use parallel.tp_impl=own"),
    (["--nproc", "4", "parallel.pp=2", "parallel.strategy=zero3", "parallel.pp_schedule=interleaved",
      "parallel.pp_virtual=2", "train.grad_accum=4", "model.n_layer=4"], "use ddp, zero1 or zero2"),
    (["--nproc", "4", "parallel.pp=2", "parallel.strategy=torch-fsdp2", "parallel.pp_schedule=zb",
      "train.grad_accum=2"], "zero2 or zero3, or another schedule"),
    (["parallel.pp=2", "parallel.pp_schedule=torch-zbv", "parallel.pp_virtual=2", "train.grad_accum=2",
      "model.n_layer=4", "train.recompute=selective"], "use train.recompute=full, or the own schedule zbv"),
    (["--nproc", "4", "parallel.pp=2", "parallel.strategy=zero3", "parallel.pp_schedule=torch-zbv",
      "parallel.pp_virtual=2", "train.grad_accum=4", "model.n_layer=4"], "use ddp, zero1 or zero2"),
    (["--nproc", "4", "parallel.pp=2", "parallel.strategy=torch-fsdp2", "parallel.pp_schedule=dualpipev",
      "parallel.pp_virtual=2", "train.grad_accum=4", "model.n_layer=4"], "use ddp, zero1 or zero2"),
])
def test_bad_pipeline_settings_are_one_line(tmp_path, capsys, monkeypatch, args, needle):
    # in-process (the `main` a subprocess runs calls this same cmd_train): every one of these is refused
    # before anything launches, so a fresh interpreter per case proves nothing more; that a real
    # `shardlab train` process turns a refusal into one line and exit 2 is test_config's subprocess test.
    from shardlab import cli

    monkeypatch.chdir(ROOT)
    out = tmp_path / "run"
    nproc = [] if "--nproc" in args else ["--nproc", "2"]
    code = cli.cmd_train([*nproc, "--out", str(out), "--config", "configs/tiny.toml", "train.global_batch=0", *args])
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], err
    assert not out.exists()


def test_a_stage_that_never_sends_is_named(tmp_path):
    """Stage 0's rank hangs before step 2: stage 1 waits in its receive; the watchdog stops the run and the
    hang analysis names the rank, the transfer (stage 0 -> 1, microbatch 0) and the op it never posted."""
    out = tmp_path / "run"
    r = run_cli(["train", "--nproc", "2", "--out", str(out), "--config", "configs/tiny.toml", "parallel.pp=2",
                 "train.global_batch=0", "train.grad_accum=2", "train.steps=6", "train.eval_every=0", "ckpt.final=false",
                 "debug.hang_rank=0@2", "doctor.hang_timeout_s=3"], timeout=180, cwd=ROOT)
    assert r.returncode == 3, r.stderr[-2000:]  # the watchdog's exit code
    h = run_in_process(["doctor", "hang", str(out)])
    assert h.returncode == 0, h.stderr
    assert "rank 0 never posted the send matching recv" in h.stdout and "act 0->1 mb0" in h.stdout, h.stdout
