"""Balancing a slow rank (`shardlab bench balance`): equal shares vs `data.shares=auto`.

World 2, own ddp, rank 1 slowed 2x (`debug.slow_rank=1 debug.slow_factor=2`: it sleeps as long as it
computes). With equal shares every step lasts as long as the slow rank's half of the batch; with shares
n_r ∝ 1/c_r the ranks finish together. For a rank F times slower the ideal share of the slow rank is
1/(1+F) and the step-time gain (F+1)/2 when compute is all there is: 1/3 and 1.5 at F = 2. Fixed costs
per step (the all-reduce, the optimizer) are the same under both and pull the gain below 1.5.

Paired: equal and auto run back to back, alternating round by round; per round the ratio of median
step times (equal ÷ auto, steps after auto has set its shares, the same steps for both), then the
median over rounds with min-max. Figures: `balance_gain` (that median), `balance_shares_err` (median
over the auto runs of |found − ideal| share of the slow rank, whole samples as used). The straggler
report (`shardlab trace`'s analysis) over the same steps, before (equal) and after (auto).
"""
from __future__ import annotations

import statistics
from pathlib import Path

from shardlab.bench import common

SLOW_RANK, FACTOR = 1, 2.0
WINDOW = 3  # data.shares_window: auto measures steps 2..4 and sets the shares after step 4


def ideal_share(factor: float) -> float:
    """The slow rank's share that makes both ranks finish together: n_slow F c = n_fast c."""
    return 1.0 / (1.0 + factor)


def theory_gain(factor: float) -> float:
    """Step time equal ÷ balanced when compute is the whole step: (F/2) ÷ (F/(1+F))."""
    return (factor + 1.0) / 2.0


def _set_at(run: dict) -> int:
    changes = run["summary"]["shares"]["changes"]
    return min((c["step"] for c in changes if c["step"] is not None), default=0)


def _times_from(run: dict, first: int) -> list[float]:
    return [r["step_time_s"] for r in run["metrics"] if "step_time_s" in r and r["step"] > first]


def _straggler(run_dir: str, first: int) -> dict | None:
    """The straggler verdict over steps after `first` (completed steps; trace steps are 0-based)."""
    from shardlab.observe import analysis

    traces = analysis.load(run_dir)
    rows = [r for r in analysis.per_step(traces) if r["step"] >= first]
    matched = [m for m in analysis.match_collectives(traces) if m["step"] >= first]
    steps = sorted({r["step"] for r in rows})
    step_s = {s: statistics.fmean(r["step_s"] for r in rows if r["step"] == s) for s in steps}
    return analysis.straggler(matched, sorted(traces), step_s)


def _verdict(s: dict | None) -> str:
    if not s:
        return "-"
    head = f"rank {s['rank']} {'IS' if s['significant'] else 'is not'} a straggler"
    late = f"late by {s['median_late_by_ms']:.1f} ms (median)"
    pct = f", {s['late_pct_of_step']:.0f}% of the step" if s.get("late_pct_of_step") is not None else ""
    waits = ", ".join(f"rank {r}: {v:.0f}" for r, v in sorted(s["wait_ms_by_rank"].items()))
    return f"{head}: {late}{pct}; ms waiting in collectives {waits}"


def run(out: Path, quick: bool) -> dict:
    # short runs, many rounds: the two runs of a pair are close in time, so a machine whose load changes
    # from minute to minute (a shared one) hits both alike
    steps = 12 if quick else 14
    rounds = 2 if quick else 6
    base = common.BASE + common.model_overrides(quick) + [
        f"train.steps={steps}", "parallel.strategy=ddp", "train.micro_batch=4", "train.grad_accum=3",
        f"debug.slow_rank={SLOW_RANK}", f"debug.slow_factor={FACTOR:g}", "trace.enabled=true",
        f"data.shares_window={WINDOW}"]
    jobs = []
    for r in range(rounds):
        for mode in ("equal", "auto"):
            jobs.append({"name": mode, "out": out / "runs" / f"{mode}-r{r}",
                         "overrides": base + [f"data.shares={mode}"]})
    runs = common.run_jobs(jobs, 2, out / "runs")
    pairs = [(runs[2 * r], runs[2 * r + 1]) for r in range(rounds)]

    ideal = ideal_share(FACTOR)
    rows, ratios, errs = [], [], []
    for r, (eq, auto) in enumerate(pairs):
        first = _set_at(auto) + 1  # the step after the shares were set: its batch is cut the new way
        t_eq, t_auto = statistics.median(_times_from(eq, first)), statistics.median(_times_from(auto, first))
        found = auto["summary"]["shares"]["fractions"][SLOW_RANK]
        ratios.append(t_eq / t_auto)
        errs.append(abs(found - ideal))
        for run_, t in ((eq, t_eq), (auto, t_auto)):
            sh = run_["summary"]["shares"]
            rows.append({"round": r, "shares": sh["mode"], "step_time_s": t, "steps_from": first,
                         "samples": sh["samples"], "slow_rank_share": sh["fractions"][SLOW_RANK],
                         "s_per_sample": sh["s_per_sample"],
                         "straggler": _straggler(run_["dir"], first),
                         "ranks_consistent": run_["summary"]["ranks_consistent"]})
    gain = common.stats(ratios)
    err = common.stats(errs)
    figures = {"balance_gain": gain["median"], "balance_gain_min": gain["min"], "balance_gain_max": gain["max"],
               "balance_gain_theory": theory_gain(FACTOR), "balance_shares_err": err["median"],
               "balance_shares_err_max": err["max"], "balance_ideal_share": ideal,
               "balance_found_share": statistics.median(r["slow_rank_share"] for r in rows if r["shares"] == "auto"),
               "ranks_consistent": common.consistent(runs)}
    doc = common.write_results(out, "balance", figures, rows)
    _plot(out, pairs[0])
    _report(out, figures, rows, steps, rounds, quick)
    return doc


def _plot(out: Path, pair) -> None:
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for run_, style in zip(pair, ("-o", "-s")):
        pts = [(r["step"], 1e3 * r["step_time_s"]) for r in run_["metrics"] if "step_time_s" in r]
        ax.plot(*zip(*pts), style, ms=3, label=f"data.shares={run_['name']}")
    at = _set_at(pair[1])
    if at:
        ax.axvline(at + 0.5, color="grey", ls=":", label="auto sets the shares")
    ax.set_xlabel("step")
    ax.set_ylabel("step time (ms)")
    ax.set_title(f"rank {SLOW_RANK} slowed {FACTOR:g}x: equal vs measured shares")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "balance.png", dpi=120)
    plt.close(fig)


def _report(out: Path, figures: dict, rows: list[dict], steps: int, rounds: int, quick: bool) -> None:
    fmt = common.fmt_figure
    table = common.md_table(
        ["round", "data.shares", "samples per rank", f"rank {SLOW_RANK} share", "median step (ms)", "straggler report"],
        [[r["round"], r["shares"], r["samples"], f"{r['slow_rank_share']:.3f}", f"{1e3 * r['step_time_s']:.0f}",
          _verdict(r["straggler"])] for r in rows])
    sections = [
        f"World 2, own ddp, {'quick model' if quick else 'small model'}, global batch 24 (micro 4 x accum 3), "
        f"{steps} steps per run, {rounds} rounds alternating equal / auto; rank {SLOW_RANK} slowed "
        f"{FACTOR:g}x (`debug.slow_factor`). Step times and straggler reports over the steps after auto set its "
        "shares (the same steps for both).",
        "## Figures\n\n" + "\n".join(f"- `{k}` = {fmt(v)}" for k, v in figures.items()),
        f"balance_gain = step time equal ÷ auto, median of {rounds} paired rounds "
        f"({fmt(figures['balance_gain_min'])}–{fmt(figures['balance_gain_max'])}); theory "
        f"{fmt(figures['balance_gain_theory'])} when compute is the whole step. balance_shares_err = "
        f"|found − ideal| share of rank {SLOW_RANK} (ideal {figures['balance_ideal_share']:.3f}), median over rounds.",
        "## Runs\n\n" + table,
        "![step times](balance.png)",
    ]
    common.write_report(out, "Balancing a slow rank: equal vs measured shares", sections)
