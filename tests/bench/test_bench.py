"""The bench framework: statistics, the Pareto frontier, the analytic payload, and two quick suites
end to end (results.json contract, plots, the seed 000 figures)."""
import json
import time

import pytest

from shardlab.bench import common, pareto
from shardlab.bench.cli import main as bench_main


def test_stats_and_paired_ratios():
    assert common.stats([3, 1, 2]) == {"median": 2, "min": 1, "max": 3, "n": 3}
    r = common.paired_ratios([1.0, 2.0, 4.0], [1.0, 3.0, 2.0])  # b/a per pair: 1, 1.5, 0.5
    assert (r["median"], r["min"], r["max"]) == (1.0, 0.5, 1.5)


def test_median_ci_is_seeded_brackets_the_median_and_carries_the_load():
    xs = [0.90 + 0.01 * ((7 * i) % 11) for i in range(40)]  # 0.90 .. 1.00, fixed
    a, b = common.median_ci(xs), common.median_ci(list(xs))
    assert a["ci90"] == b["ci90"] == list(common.bootstrap_median(xs))  # seeded: the same every time
    lo, hi = a["ci90"]
    assert min(xs) <= lo <= a["median"] <= hi <= max(xs) and lo < hi
    assert len(a["load_avg"]) == 3 and a["cores"] >= 1
    assert common.bootstrap_median([]) != common.bootstrap_median([])  # (nan, nan): nothing to resample
    from shardlab.bench.tensor_parallel import bootstrap_median  # the old import still works
    assert bootstrap_median is common.bootstrap_median
    assert "[90% CI " in common.fmt_ci(a) and common.fmt_ci(common.median_ci([])) == "-"


@pytest.mark.parametrize("ci, goal, direction, word", [
    ((0.93, 0.95), 0.92, ">=", "meets"), ((0.88, 0.90), 0.92, ">=", "misses"),
    ((0.90, 0.94), 0.92, ">=", "spans"), ((0.01, 0.02), 0.03, "<=", "meets"),
    ((0.02, 0.04), 0.03, "<=", "spans"), ((0.04, 0.05), 0.03, "<=", "misses")])
def test_goal_verdict_says_when_the_interval_spans_the_goal(ci, goal, direction, word):
    assert word in common.goal_verdict(ci, goal, direction)
    assert common.median_ci([ci[0], ci[1]] * 5, goal, direction)["goal"]["direction"] == direction


def test_seed000_analytic_payload():
    from shardlab.plan.comm import SEED000 as p, payload_kib_per_token
    kib = [payload_kib_per_token(p["params"], mb, p["seq"]) for mb in (1, 8)]
    assert f"{kib[0]:.1f}" == "838.8" and f"{kib[1]:.1f}" == "104.8"


def test_pareto_frontier(tmp_path):
    pts = [{"name": "a", "mem_bytes": 10, "tokens_per_s": 100}, {"name": "b", "mem_bytes": 5, "tokens_per_s": 90},
           {"name": "c", "mem_bytes": 12, "tokens_per_s": 80}, {"name": "d", "mem_bytes": 3, "tokens_per_s": 50}]
    assert [p["name"] for p in pareto.frontier(pts)] == ["d", "b", "a"]
    assert pareto.plot(tmp_path, pts).stat().st_size > 0


def test_figures_are_printed_with_four_significant_digits():
    f = common.fmt_figure
    assert [f(0.97345678), f(838.8), f(12345.678), f(0.000412345), f(1.0), f(3), f(None)] == \
        ["0.9735", "838.8", "12,346", "0.0004123", "1", "3", "None"]


def test_load_note_says_contention_only_above_the_core_count():
    assert "not oversubscribed" in common.load_note(1.3, 2) and "widen" not in common.load_note(1.3, 2)
    assert "more runnable processes than cores" in common.load_note(3.1, 2)


def test_unknown_suite_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        bench_main(["nope", "--out", "x"])
    assert e.value.code == 2


def _check(out, suite):
    doc = json.loads((out / "results.json").read_text())
    assert doc["suite"] == suite and doc["rows"] and isinstance(doc["figures"], dict)
    assert (out / "REPORT.md").read_text().startswith("#")
    assert list(out.glob("*.png"))
    assert doc["figures"]["ranks_consistent"] is True
    return doc


# The two quick suites below run through `shardlab bench`'s own main in this process (its launches of
# ranks are real torchrun processes either way), on a smaller model than --quick's: what they assert is
# counted, not timed, and holds for any model; the figures' sizes are the bench's business. That a real
# `shardlab bench` process runs a suite end to end is test_bench_generate.py (`bench generate --quick`).
TOY = ["model.preset=custom", "model.n_layer=1", "model.n_head=2", "model.d_model=32"]


def _bench(monkeypatch, capsys, *argv) -> tuple[str, str]:
    monkeypatch.setitem(common.MODEL, "quick", TOY)
    monkeypatch.setenv("SHARDLAB_BENCH_T0", str(time.time()))  # progress's clock, restored after
    assert bench_main(list(argv)) == 0
    return capsys.readouterr()


def test_bench_microbatch_quick(tmp_path, monkeypatch, capsys, bench_on_session_pools):
    _bench(monkeypatch, capsys, "microbatch", "--quick", "--out", str(tmp_path))
    doc = _check(tmp_path, "microbatch")
    assert doc["figures"]["seed000_payload_kib_mb1"] == 838.8
    assert doc["figures"]["seed000_payload_kib_mb8"] == 104.8
    assert "reproduced, not measured" in doc["figure_notes"]["seed000_payload_kib_mb1"]  # labelled as what it is
    rows = {x["micro_batch"]: x for x in doc["rows"]}
    # Measured payload per token = analytic: every gradient crosses once per microbatch.
    for mb, row in rows.items():
        assert row["payload_kib_per_token"] == pytest.approx(row["analytic_payload_kib_per_token"], rel=0.01)
    assert "838.8" in (tmp_path / "REPORT.md").read_text()


def test_bench_buckets_quick(tmp_path, monkeypatch, capsys):
    out, err = _bench(monkeypatch, capsys, "buckets", "--quick", "--out", str(tmp_path))
    doc = _check(tmp_path, "buckets")
    # Progress while it runs (stderr), figures for people at the end (stdout).
    assert "[bench 0:" in err and f"run {len(doc['rows'])}/" in err, err[-2000:]
    shown = dict(line.strip().split(" = ") for line in out.splitlines() if " = " in line)
    assert shown and all(len(v.replace(",", "").lstrip("-").replace(".", "")) <= 6 for v in shown.values()), shown
    calls = [x["collectives_per_step"] for x in doc["rows"]]
    assert calls == sorted(calls, reverse=True) and calls[0] > calls[-1]  # smaller buckets, more calls
    assert all(x["overlap_pct"]["median"] is not None for x in doc["rows"])


def test_failure_excerpt_keeps_the_cause_before_the_launcher_summary():
    log = "\n".join(["noise"] * 50 + ["terminate called after throwing an instance of 'gloo::EnforceNotMet'",
                                      "  what():  size mismatch", "Fatal Python error: Aborted"]
                    + ["noise"] * 40 + ["Signal 6 (SIGABRT) received by PID 1"])
    out = common.failure_excerpt(log)
    assert "what():  size mismatch" in out and "Fatal Python error" in out and out.endswith("PID 1")
    assert len(out.splitlines()) < 45


def test_default_output_folder_is_ignored_by_git():
    """`shardlab bench SUITE` without --out writes bench/<suite>-<time>: never shown as work to commit."""
    import shutil
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    r = subprocess.run(["git", "check-ignore", "-q", "bench/buckets-20250101-000000/REPORT.md"], cwd=root)
    assert r.returncode == 0
    r = subprocess.run(["git", "check-ignore", "-q", "src/shardlab/bench/common.py"], cwd=root)
    assert r.returncode == 1  # the package of the same name is not


def test_bench_memory_runs_every_row_and_writes_its_figures(tmp_path, monkeypatch, bench_on_session_pools):
    """The memory suite end to end on a toy model (its `--quick` size shrunk further, gpt2's subset of rows:
    recompute x {ddp, zero3}, each offload with recompute none): the figures the issue names, exact activation
    bytes, the plot."""
    import json

    from shardlab.bench import memory

    monkeypatch.setattr(memory, "QUICK", dict(memory.QUICK, name="toy", model=dict(n_layer=2, n_head=2, d_model=32,
                                              vocab_size=256), micro=2, seq=32, rounds=2, warm=0, mem_steps=1,
                                              subset=True))
    memory.run(tmp_path, quick=True)
    doc = json.loads((tmp_path / "results.json").read_text())
    assert {(r["dp"], r["recompute"], r["offload"]) for r in doc["rows"]} == set(memory.rows_of(memory.QUICK))
    assert len(doc["rows"]) == 3 + 3 + 2
    for name in ("recompute_full_act_ratio", "recompute_full_time_ratio", "recompute_selective_time_ratio",
                 "offload_disk_rss_ratio", "offload_params_disk_rss_ratio", "planner_act_mem_err"):
        assert doc["figures"][name] > 0, name
    assert doc["figures"]["act_formula_max_err"] == 0
    assert (tmp_path / "memory_tradeoff.png").stat().st_size > 0 and (tmp_path / "REPORT.md").exists()
