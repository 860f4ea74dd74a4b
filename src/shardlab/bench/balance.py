"""Balancing a slow rank (`shardlab bench balance`): equal shares vs `data.shares=auto`.

World 2, own ddp, rank 1 slowed 2x (`debug.slow_rank=1 debug.slow_factor=2`: it sleeps as long as it
computes). With equal shares every step lasts as long as the slow rank's half of the batch; with shares
n_r ∝ 1/c_r the ranks finish together. For a rank F times slower the ideal share of the slow rank is
1/(1+F) and the step-time gain (F+1)/2 when compute is all there is: 1/3 and 1.5 at F = 2. Fixed costs
per step (the all-reduce, the optimizer) are the same under both and pull the gain below 1.5.

Paired per step, in one trainer: it runs with `data.shares=auto` until auto has measured and set its
shares (the warm-up step and one window), then alternates equal and the found shares step by step
(A B, B A, ...), the ranks lined up by a barrier before each timed step. The trajectory does not depend
on the shares, so both sides train the same model on the same samples; a machine whose load changes
from second to second hits both alike. Figures: `balance_gain` (median over pairs of step time equal ÷
auto, min-max beside), `balance_shares_err` (|found − ideal| share of the slow rank, whole samples as
used, median over rounds). The straggler report (`shardlab trace`'s analysis) over the equal steps and
over the auto steps of the same trace.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from shardlab.bench import common

SLOW_RANK, FACTOR = 1, 2.0
WINDOW = 3  # data.shares_window: auto measures steps 2..4 and sets the shares after step 4
# Global batch 2 x 8 x 3 = 48: the theory's gain holds for compute; a larger batch keeps the per-step
# fixed costs (all-reduce, optimizer), which on a loaded machine are large, a smaller part of the step.
MICRO = 8


def ideal_share(factor: float) -> float:
    """The slow rank's share that makes both ranks finish together: n_slow F c = n_fast c."""
    return 1.0 / (1.0 + factor)


def theory_gain(factor: float) -> float:
    """Step time equal ÷ balanced when compute is the whole step: (F/2) ÷ (F/(1+F))."""
    return (factor + 1.0) / 2.0


def _straggler(run_dir: str, steps: list[int]) -> dict | None:
    """The straggler verdict over the given (0-based) steps of a traced run; the barriers that line the
    ranks up between steps are left out."""
    from shardlab.observe import analysis

    traces = analysis.load(run_dir)
    keep = set(steps)
    rows = [r for r in analysis.per_step(traces) if r["step"] in keep]
    matched = [m for m in analysis.match_collectives(traces) if m["step"] in keep and m["op"] != "barrier"]
    step_s = {s: statistics.fmean(r["step_s"] for r in rows if r["step"] == s) for s in sorted(keep)
              if any(r["step"] == s for r in rows)}
    return analysis.straggler(matched, sorted(traces), step_s)


def _verdict(s: dict | None) -> str:
    if not s:
        return "-"
    head = f"rank {s['rank']} {'IS' if s['significant'] else 'is not'} a straggler"
    late = f"late by {s['median_late_by_ms']:.1f} ms (median)"
    pct = f", {s['late_pct_of_step']:.0f}% of the step" if s.get("late_pct_of_step") is not None else ""
    waits = ", ".join(f"rank {r}: {v:.0f}" for r, v in sorted(s["wait_ms_by_rank"].items()))
    why = f" ({s['reason']})" if s.get("reason") else ""
    return f"{head}{why}: {late}{pct}; ms waiting in collectives {waits}"


def paired_fn(overrides: list[str], run_root: str, rounds: int, pairs: int) -> list[dict]:
    """On every rank of a pool: per round, one trainer; auto sets its shares, then equal and the found
    shares alternate step by step. Rank 0's result is the one used."""
    import contextlib
    import io
    import time

    from shardlab import comm, config as config_mod
    from shardlab.bench.measure import shardlab_step
    from shardlab.observe import timeline
    from shardlab.train.trainer import Trainer

    out = []
    for r in range(rounds):
        cfg = config_mod.load(None, overrides)
        cfg = config_mod.validate(cfg, comm.world_size())
        run_dir = Path(run_root) / f"paired-r{r}"
        with contextlib.redirect_stdout(io.StringIO()):
            tr = Trainer(cfg, run_dir)
        b, sampler = tr.balance, tr.state.sampler
        while not b.measured:  # warm-up step + one window at equal shares
            with contextlib.redirect_stdout(io.StringIO()):
                shardlab_step(tr)
            if tr.state.step > 4 * WINDOW + 10:
                raise RuntimeError("bench balance: auto never set its shares")
        found, measured = list(b.counts), list(b.s_per_sample)
        equal = [sampler.global_batch // 2] * 2
        times, steps = {"equal": [], "auto": []}, {"equal": [], "auto": []}
        for i in range(pairs):
            for mode in (("equal", "auto") if i % 2 == 0 else ("auto", "equal")):
                sampler.set_shares(equal if mode == "equal" else found)
                comm.barrier()
                steps[mode].append(tr.state.step)
                t0 = time.perf_counter()
                with contextlib.redirect_stdout(io.StringIO()):
                    shardlab_step(tr)
                times[mode].append(time.perf_counter() - t0)
        tr.ckpt.close(tr.state)
        consistent = tr.doctor.close()["ranks_consistent"]
        timeline.finish()
        timeline.disable()
        out.append({"round": r, "dir": str(run_dir), "found": found, "s_per_sample": measured,
                    "times": times, "steps": steps, "ranks_consistent": consistent})
    return out


def run(out: Path, quick: bool) -> dict:
    rounds, pairs = (1, 6) if quick else (2, 12)
    overrides = common.BASE + common.model_overrides(quick) + [
        "train.steps=1000", "parallel.strategy=ddp", f"train.micro_batch={MICRO}", "train.grad_accum=3",
        f"debug.slow_rank={SLOW_RANK}", f"debug.slow_factor={FACTOR:g}", "trace.enabled=true",
        "data.shares=auto", f"data.shares_window={WINDOW}"]
    common.progress(f"{rounds} round(s) of {pairs} paired steps (equal / auto shares), rank {SLOW_RANK} slowed "
                    f"{FACTOR:g}x")
    results = common.run_on_ranks(paired_fn, overrides, str(out / "runs"), rounds, pairs, world=2)

    ideal = ideal_share(FACTOR)
    rows, ratios, errs = [], [], []
    for res in results:
        ratios += [e / a for e, a in zip(res["times"]["equal"], res["times"]["auto"])]
        errs.append(abs(res["found"][SLOW_RANK] / sum(res["found"]) - ideal))
        for mode in ("equal", "auto"):
            samples = res["found"] if mode == "auto" else [sum(res["found"]) // 2] * 2
            rows.append({"round": res["round"], "shares": mode, "samples": samples,
                         "slow_rank_share": samples[SLOW_RANK] / sum(samples),
                         "step_time_s": statistics.median(res["times"][mode]), "step_times_s": res["times"][mode],
                         "steps": res["steps"][mode], "s_per_sample": res["s_per_sample"],
                         "straggler": _straggler(res["dir"], res["steps"][mode]),
                         "ranks_consistent": res["ranks_consistent"]})
    gain = common.median_ci(ratios, 1.35, ">=")
    err = common.stats(errs)
    figures = {"balance_gain": gain["median"], "balance_gain_min": gain["min"], "balance_gain_max": gain["max"],
               "balance_gain_ci90": gain["ci90"], "balance_gain_load_avg": gain["load_avg"],
               "balance_gain_theory": theory_gain(FACTOR), "balance_shares_err": err["median"],
               "balance_shares_err_max": err["max"], "balance_ideal_share": ideal,
               "balance_found_share": statistics.median(r["slow_rank_share"] for r in rows if r["shares"] == "auto"),
               "ranks_consistent": all(r["ranks_consistent"] is not False for r in rows)}
    doc = common.write_results(out, "balance", figures, rows)
    _plot(out, rows[0], rows[1])
    _report(out, figures, rows, pairs, rounds, quick)
    return doc


def _plot(out: Path, equal: dict, auto: dict) -> None:
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for row, style in ((equal, "-o"), (auto, "-s")):
        ax.plot(row["steps"], [1e3 * t for t in row["step_times_s"]], style, ms=3,
                label=f"shares {row['samples']}")
    ax.set_xlabel("step (alternating equal / found shares)")
    ax.set_ylabel("step time (ms)")
    ax.set_title(f"rank {SLOW_RANK} slowed {FACTOR:g}x: equal vs measured shares, paired per step")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "balance.png", dpi=120)
    plt.close(fig)


def _report(out: Path, figures: dict, rows: list[dict], pairs: int, rounds: int, quick: bool) -> None:
    fmt = common.fmt_figure
    table = common.md_table(
        ["round", "data.shares", "samples per rank", f"rank {SLOW_RANK} share", "median step (ms)", "straggler report"],
        [[r["round"], r["shares"], r["samples"], f"{r['slow_rank_share']:.3f}", f"{1e3 * r['step_time_s']:.0f}",
          _verdict(r["straggler"])] for r in rows])
    sections = [
        f"World 2, own ddp, {'quick model' if quick else 'small model'}, global batch {6 * MICRO} (micro {MICRO} x accum 3); rank "
        f"{SLOW_RANK} slowed {FACTOR:g}x (`debug.slow_factor`). Per round one trainer with `data.shares=auto`: "
        f"once auto has set its shares, {pairs} pairs of steps alternate equal and the found shares (A B, B A, ...).",
        "## Figures\n\n" + "\n".join(f"- `{k}` = {fmt(v)}" for k, v in figures.items()),
        f"balance_gain = step time equal ÷ auto, median over {rounds * pairs} paired steps "
        f"({fmt(figures['balance_gain_min'])}–{fmt(figures['balance_gain_max'])}); theory "
        f"{fmt(figures['balance_gain_theory'])} when compute is the whole step; "
        f"{common.goal_verdict(figures['balance_gain_ci90'], 1.35)}. balance_shares_err = "
        f"|found − ideal| share of rank {SLOW_RANK} (ideal {figures['balance_ideal_share']:.3f}), median over rounds.",
        "## Straggler report, equal steps and auto steps of the same trace\n\n" + table,
        "![step times](balance.png)",
    ]
    common.write_report(out, "Balancing a slow rank: equal vs measured shares", sections)
