"""`shardlab compare`: the table at equal tokens, the plots, the config diff, the refusal of runs that do not
compare (a warning, exit 2 with --strict) and of paths that are not runs — on fabricated run directories
(the files a run writes, docs/training.md), so no training is needed."""
import json

import pytest

from shardlab.cli import compare as cli
from shardlab.observe import compare


def _run(path, strategy="ddp", global_batch=8, seed=1337, steps=4, loss0=5.0, mem=(100, 120)):
    path.mkdir(parents=True)
    rows = [{"step": 0, "val_loss": loss0 + 0.1}]
    rows += [{"step": s, "loss": loss0 - 0.1 * s, "tokens_per_s": 1000.0 + s, "step_time_s": 0.05}
             for s in range(1, steps + 1)]
    rows.append({"step": steps, "val_loss": loss0 - 0.1 * steps + 0.05})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    layout = {"dp": strategy, "pp": 1, "dp_replicate": 2 if strategy == "ddp" else 1,
              "dp_shard": 1 if strategy == "ddp" else 2, "cp": 1, "tp": 1, "ep": 1, "pp_schedule": None,
              "sync": "every_step"}
    (path / "summary.json").write_text(json.dumps({
        "strategy": strategy, "layout": layout, "world_size": 2, "tokens_per_step": global_batch * 32,
        "tokens_per_s": 1234.5, "mfu": 0.0123, "peak_mem_bytes": max(mem) * 2**20,
        "peak_mem_bytes_per_rank": [m * 2**20 for m in mem], "exposed_comm_s": None,
        "comm": {"bytes_per_step": {"all_reduce": 2**20}}}))
    (path / "config.toml").write_text(
        f'[data]\nsource = "stdlib"\ntokenizer = "bytes"\n\n[train]\nsteps = {steps}\nglobal_batch = {global_batch}\n'
        f'seq_len = 32\nseed = {seed}\n\n[parallel]\nstrategy = "{strategy}"\n')
    return path


def test_comparable_runs_table_plots_and_config_diff(tmp_path, capsys):
    a, b = _run(tmp_path / "ddp"), _run(tmp_path / "zero3", strategy="zero3", steps=3, loss0=5.2)
    assert cli.main([str(a), str(b)]) == 0
    out, err = capsys.readouterr()
    assert "not comparable" not in err
    lines = out.splitlines()
    assert lines[0].startswith("at 768 tokens")  # the shorter run's end: 3 steps x 8 x 32
    row = {ln.split()[0]: ln for ln in lines[2:4]}
    assert "ddp | dp 2" in row["ddp"] and "4.7" in row["ddp"] and "1.23%" in row["ddp"] and "100/120" in row["ddp"]
    assert "zero3 | dp 2" in row["zero3"] and "4.9" in row["zero3"] and "1.00 MiB" in row["zero3"]
    assert "  parallel.strategy: ddp='ddp' | zero3='zero3'" in out and "  train.steps: ddp=4 | zero3=3" in out
    for png in ("loss_vs_tokens.png", "loss_vs_time.png", "throughput.png", "memory.png"):
        assert (a / "compare" / png).stat().st_size > 1000, png  # default --out: the first run's compare/


@pytest.mark.parametrize("other,needles", [
    ({"global_batch": 16}, ["global batch differs", "ddp 256", "b 512"]),
    ({"seed": 7}, ["seeds differ (train.seed: ddp 1337, b 7)"]),
])
def test_runs_that_do_not_compare_warn_and_strict_exits_2(tmp_path, capsys, other, needles):
    a, b = _run(tmp_path / "ddp"), _run(tmp_path / "b", **other)
    out = tmp_path / "cmp"
    assert cli.main([str(a), str(b), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: these runs are not comparable" in err and len(err.strip().splitlines()) == 1
    for n in needles:
        assert n in err, err
    assert (out / "loss_vs_tokens.png").is_file()
    assert cli.main([str(a), str(b), "--out", str(out), "--strict"]) == 2


def test_a_path_that_is_not_a_run_is_one_line_exit_2(tmp_path, capsys):
    a = _run(tmp_path / "ddp")
    (tmp_path / "empty").mkdir()
    for bad, needle in ((tmp_path / "nope", "no such run directory"), (tmp_path / "empty", "no metrics.jsonl")):
        assert cli.main([str(a), str(bad)]) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1
    assert not (a / "compare").exists()  # nothing written


def _vals(path, points):
    """Replace a fabricated run's validation records with `points` {step: val_loss}."""
    rows = [json.loads(ln) for ln in (path / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "val_loss" not in r] + [{"step": s, "val_loss": v} for s, v in points.items()]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_validation_loss_is_compared_at_a_point_every_run_evaluated(tmp_path, capsys):
    """The issue's case: one run evaluated at step 0 and at its end, the others only at step 0. Each row
    shows its value at step 0 (the last point all share), never one run's end beside another's start."""
    a, b, c = (_run(tmp_path / n, steps=4) for n in ("a", "b", "c"))
    _vals(a, {0: 5.171, 4: 2.846})
    _vals(b, {0: 5.172})
    _vals(c, {0: 5.173})
    rows = compare.table([compare.load(p) for p in (a, b, c)])
    assert [(r["val_loss"], r["val_tokens"]) for r in rows] == [(5.171, 0), (5.172, 0), (5.173, 0)]
    assert cli.main([str(a), str(b), str(c)]) == 0
    out = capsys.readouterr().out
    assert "val loss at 0 tokens (the last point every run evaluated at)" in out.splitlines()[0]
    assert "2.846" not in out and "@" not in out


def test_validation_loss_without_a_shared_point_is_marked_with_its_tokens(tmp_path, capsys):
    a, b = _run(tmp_path / "a", steps=4), _run(tmp_path / "b", steps=4)
    _vals(a, {2: 4.5, 4: 4.2})
    _vals(b, {3: 4.4})
    assert cli.main([str(a), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "no point every run evaluated at" in lines[0]
    row = {ln.split()[0]: ln for ln in lines[2:4]}
    assert "4.2 @1,024" in row["a"] and "4.4 @768" in row["b"]  # tokens = step x 8 sequences x 32
