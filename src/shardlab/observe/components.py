"""Where a traced step went: the step span split into parts that add up to it exactly.

Per rank and step (the window is the `step` span; intervals as in `analysis.step_breakdown`):
  forward, backward, optimizer   the union of those spans, minus the intervals in which the thread was
                                 blocked in a collective (that time is communication, below)
  exposed comm, by "op group"    each collective's launch -> completion not hidden by compute, a stretch
                                 with several in flight belonging to the earliest (`analysis.exposed_pieces`);
                                 a pipeline's point-to-point waits (group `pp`) are its bubble, apart
  data                           the `data` span (sampling, the batch's copy) outside compute and comm
  python overhead                the rest of the step: in no span and in no collective (the trainer's own
                                 Python, the doctor's bookkeeping, the step's glue)
so step = forward + backward + optimizer + exposed comm + bubble + data + python overhead.
Each part is the mean over ranks of a step, then the median over the steps after warm-up
(`analysis._warmup`), so the parts' medians need not add up to the step's median exactly.
"""
from __future__ import annotations

import statistics

from shardlab.observe.analysis import RankTrace, _blocked, _warmup, exposed_pieces, steps_of
from shardlab.observe.intervals import clip, subtract, total, union

PHASES = ("forward", "backward", "optimizer")
_PHASE_OF = {"forward": "forward", "backward": "backward", "backward_input": "backward",
             "backward_weight": "backward", "optimizer": "optimizer"}


def step_components(rt: RankTrace, t0: float, t1: float) -> dict:
    """{"step_s", "forward", "backward", "optimizer", "data", "python_overhead", "bubble",
    "exposed_comm": {"op group": s}} of one step on one rank, in seconds."""
    comms = [c for c in rt.comms if t0 <= c["t0"] < t1]
    end = max([t1] + [c["t1"] for c in comms if c["t1"] is not None])
    blocked = union(_blocked(c, end) for c in comms)
    out: dict = {"step_s": t1 - t0}
    busy = []
    for phase in PHASES:
        iv = union(clip([(s["t0"], s["t1"]) for s in rt.spans if _PHASE_OF.get(s["name"]) == phase
                         and s["cat"] in ("compute", "optim")], t0, t1))
        iv = subtract(iv, blocked)
        out[phase] = total(iv)
        busy += iv
    compute = union(busy)
    exposed: dict[str, float] = {}
    bubble = 0.0
    for c, mine in exposed_pieces(rt, t0, t1):
        a = c["args"]
        s = total(clip(mine, t0, t1))  # the part inside the step window: the rest is after the step
        if a.get("group") == "pp" or a.get("peer") is not None:
            bubble += s
            continue
        key = f"{a.get('op') or c['name']} {a.get('group', 'world')}"
        exposed[key] = exposed.get(key, 0.0) + s
    comm = union(clip([(c["t0"], c["t1"] if c["t1"] is not None else end) for c in comms], t0, t1))
    data = subtract(union(clip([(s["t0"], s["t1"]) for s in rt.spans if s["cat"] == "data"], t0, t1)),
                    union(compute + comm))
    out["data"] = total(data)
    out["bubble"] = bubble
    out["exposed_comm"] = exposed
    out["python_overhead"] = max(0.0, (t1 - t0) - total(union(compute + comm + data)))
    return out


def _mean(rows: list[dict], key: str) -> float:
    return statistics.fmean(r[key] for r in rows)


def measured_components(traces: dict[int, RankTrace]) -> dict | None:
    """The run's step split into components (seconds): mean over ranks per step, median over the
    steps after warm-up. None without any `step` span."""
    per_step: dict[int, list[dict]] = {}
    for rt in traces.values():
        for s, t0, t1 in steps_of(rt):
            per_step.setdefault(s, []).append(step_components(rt, t0, t1))
    if not per_step:
        return None
    skip = _warmup(list(per_step))
    kept = {s: rows for s, rows in per_step.items() if s not in skip} or per_step
    out = {k: statistics.median(_mean(rows, k) for rows in kept.values())
           for k in ("step_s", *PHASES, "data", "python_overhead", "bubble")}
    ops = sorted({k for rows in kept.values() for r in rows for k in r["exposed_comm"]})
    out["exposed_comm"] = {k: statistics.median(statistics.fmean(r["exposed_comm"].get(k, 0.0) for r in rows)
                                                for rows in kept.values()) for k in ops}
    out["steps"] = len(kept)
    out["warmup_steps_excluded"] = len(per_step) - len(kept)
    return out
