"""`shardlab bench layouts`: `parallel.layout=auto`'s choice against a paired sweep of every every-step layout
shardlab runs at the world (plan/auto.py's candidates: each dp layer, tp=2, pp=2 under 1f1b and zb, and
the 2-D mixes at world 4), on one model, micro batch and global batch.

Method. The planner chooses as `shardlab train parallel.layout=auto` would (this machine's profile, the
default memory budget). Then every candidate trains the same steps in one launch of `world` ranks, in
rounds whose order reverses each round (A B C, C B A, ...), so no layout always runs after the same one;
a run's tokens/s is its tokens per step over its median step time after the trainer's warm-up. Per
round, auto's choice is set against the fastest layout of that round (`auto_vs_best`: 1.0 = auto picked
the fastest; the median over rounds with its min-max), and every candidate's prediction sits beside its
measurement.
"""
from __future__ import annotations

import os
import statistics
from pathlib import Path

from shardlab.bench import common

SIZES = {"quick": dict(worlds=(2,), rounds=2, steps=10), "full": dict(worlds=(2, 4), rounds=3, steps=16)}
MICRO_BATCH = 4


def label(over: dict) -> str:
    out = over["parallel.strategy"]
    if over.get("parallel.tp", 1) > 1:
        out += f" tp{over['parallel.tp']}"
    if over.get("parallel.pp", 1) > 1:
        out += f" pp{over['parallel.pp']} {over['parallel.pp_schedule']}"
    return out


def _args(over: dict) -> list[str]:
    return [f"{k}={v}" for k, v in over.items()]


def _runnable(world: int):
    from shardlab import config

    def check(c):  # the resolved copy, or None when the trainer refuses it
        try:
            return config.validate(c, world)
        except config.ConfigError:
            return None
    return check


def _sweep(world: int, quick: bool, size: dict, work: Path) -> tuple[list[dict], dict]:
    import copy

    from shardlab import config
    from shardlab.plan import auto
    from shardlab.plan.from_config import from_config
    from shardlab.plan.step import evaluate

    base = [*common.BASE, *common.model_overrides(quick), f"train.micro_batch={MICRO_BATCH}",
            f"train.global_batch={MICRO_BATCH * world}", f"train.steps={size['steps']}"]
    cfg = config.load(None, base)
    cluster = auto.machine_cluster(world)
    budget, _ = auto.budget_bytes(0, world)
    choice = auto.choose(cfg, world, cluster, budget, _runnable(world))
    planned = auto.with_budget(cluster, budget, world)
    cands = []
    for over in auto.candidates(world):
        c = copy.deepcopy(cfg)
        auto.apply(c, over)
        c = _runnable(world)(c)
        if c is not None:
            model, train, lay = from_config(c, world)
            cands.append((over, evaluate(model, train, lay, planned).tokens_per_s))
    jobs = []
    for r in range(size["rounds"]):
        order = cands if r % 2 == 0 else cands[::-1]
        jobs += [{"name": f"{label(o)}|{r}", "overrides": base + _args(o),
                  "out": str(work / f"w{world}-r{r}-{label(o).replace(' ', '_')}")} for o, _ in order]
    runs = common.run_jobs(jobs, world, work, timeout=3600)
    measured: dict[str, list[float]] = {}  # label -> tokens/s per round
    by_round: dict[int, dict[str, float]] = {}
    for run in runs:
        name, r = run["name"].rsplit("|", 1)
        times = common.step_times(run)
        tps = run["summary"]["tokens_per_step"] / statistics.median(times) if times else None
        measured.setdefault(name, []).append(tps)
        by_round.setdefault(int(r), {})[name] = tps
    chosen = label(choice.overrides)
    rows = [{"world": world, "layout": label(o), "predicted_tokens_per_s": pred,
             "measured_tokens_per_s": common.stats(measured[label(o)]), "auto": label(o) == chosen}
            for o, pred in cands]
    ratios = [rnd[chosen] / max(v for v in rnd.values() if v) for rnd in by_round.values() if rnd.get(chosen)]
    ranked = sorted(rows, key=lambda row: -(row["measured_tokens_per_s"]["median"] or 0))
    figures = {f"w{world}_auto": chosen, f"w{world}_auto_vs_best": common.stats(ratios)["median"],
               f"w{world}_auto_vs_best_min": common.stats(ratios)["min"],
               f"w{world}_auto_rank": 1 + [row["layout"] for row in ranked].index(chosen),
               f"w{world}_fastest_measured": ranked[0]["layout"], f"w{world}_layouts": len(rows)}
    return rows, figures


def run(out: Path, quick: bool) -> dict:
    size = SIZES["quick" if quick else "full"]
    rows, figures = [], {}
    for world in size["worlds"]:
        common.progress(f"world {world}: the planner's choice, then every layout x {size['rounds']} rounds")
        r, f = _sweep(world, quick, size, out / "runs")
        rows += r
        figures.update(f)
    table = common.md_table(
        ["world", "layout", "predicted tokens/s", "measured tokens/s median (min–max)", "auto's choice"],
        [[r["world"], r["layout"], f"{r['predicted_tokens_per_s']:,.0f}",
          common.fmt_stats(r["measured_tokens_per_s"], digits=0), "**chosen**" if r["auto"] else ""] for r in rows])
    verdict = "; ".join(f"world {w}: auto chose {figures[f'w{w}_auto']} (measured rank {figures[f'w{w}_auto_rank']} "
                        f"of {figures[f'w{w}_layouts']}; {figures[f'w{w}_auto_vs_best'] or 0:.2f}x the fastest "
                        f"layout of each round, median; fastest measured: {figures[f'w{w}_fastest_measured']})"
                        for w in size["worlds"])
    common.write_report(out, "layout=auto against every layout", [__doc__.split("\n\n", 1)[1].strip(), verdict,
                                                                   table, f"cores: {os.cpu_count()}"])
    return common.write_results(out, "layouts", figures, rows)
