"""The bubble of a traced pipeline run, measured per stage, beside the formula, and drawn.

The engine records each forward / backward (and, zero-bubble, backward_input / backward_weight) as a
timeline span carrying its stage and microbatch. Per step, the pipeline phase runs from the first
forward on any rank to the last backward on any rank; a rank's bubble is the part of that window in
which it computed nothing (it waited for an activation or a gradient).
"""
from __future__ import annotations

import statistics
import tomllib
from pathlib import Path

from shardlab.observe.intervals import total, union

PIPELINE_SPANS = {"forward": "F", "backward": "B", "backward_input": "I", "backward_weight": "W"}


def _spans(rt, t0: float, t1: float) -> list[dict]:
    return [s for s in rt.spans if s["name"] in PIPELINE_SPANS and "stage" in s.get("args", {})
            and t0 <= s["t0"] < t1]


def measure(traces: dict) -> dict | None:
    """{"bubble_by_rank": {rank: median bubble}, "steps": n, "last_step": {rank: [(op, mb, t0, t1)]}},
    or None when the run has no pipeline spans."""
    from shardlab.observe.analysis import _warmup, steps_of

    steps = {r: {s: (a, b) for s, a, b in steps_of(rt)} for r, rt in traces.items()}
    common = sorted(set.intersection(*(set(v) for v in steps.values()))) if steps else []
    if not common or not any(_spans(rt, *steps[r][common[0]]) for r, rt in traces.items()):
        return None
    warm = _warmup(common)
    bubbles: dict[int, list[float]] = {r: [] for r in traces}
    last = {}
    for s in common:
        per_rank = {r: _spans(rt, *steps[r][s]) for r, rt in traces.items()}
        spans = [x for v in per_rank.values() for x in v]
        if not spans:
            continue
        w0, w1 = min(x["t0"] for x in spans), max(x["t1"] for x in spans)
        for r, v in per_rank.items():
            busy = total(union((x["t0"], x["t1"]) for x in v))
            if s not in warm:
                bubbles[r].append(1.0 - busy / (w1 - w0))
        last = {r: [(PIPELINE_SPANS[x["name"]], x["args"].get("micro", 0), x["t0"] - w0, x["t1"] - w0) for x in v]
                for r, v in per_rank.items()}
    return {"bubble_by_rank": {r: statistics.median(b) for r, b in bubbles.items() if b},
            "steps": len(common) - len(warm), "last_step": last}


def analytic(run_dir: Path) -> tuple[str, float] | None:
    """(schedule description, analytic bubble) from the run's config.toml."""
    from shardlab.parallel.pp import registry

    cfg = tomllib.loads((Path(run_dir) / "config.toml").read_text())
    p, t = cfg.get("parallel", {}), cfg.get("train", {})
    if p.get("pp", 1) <= 1:
        return None
    name = p.get("pp_schedule", registry.DEFAULT)
    v = p.get("pp_virtual", 1)
    m = t.get("grad_accum", 1)
    bubble = registry.analytic_bubble(name, p["pp"], m, v) if name in registry.SPECS else None
    if bubble is None:  # no closed form for this schedule
        return None
    return f"{name}, p={p['pp']}, m={m}" + (f", V={v}" if v > 1 else ""), bubble


def report(run_dir: Path, traces: dict) -> dict | None:
    """Measured vs analytic bubble, and the diagram of the last step written to RUN/trace/pipeline.png."""
    m = measure(traces)
    if m is None:
        return None
    a = analytic(run_dir)
    out = {"bubble_by_rank": m["bubble_by_rank"], "steps": m["steps"],
           "schedule": a[0] if a else None, "bubble_analytic": a[1] if a else None}
    from shardlab.parallel.pp.draw import png_diagram

    ranks = sorted(m["last_step"])
    out["diagram"] = str(png_diagram([m["last_step"][r] for r in ranks], Path(run_dir) / "trace" / "pipeline.png",
                                     f"measured: the last traced step ({out['schedule'] or 'pipeline'})"))
    return out
