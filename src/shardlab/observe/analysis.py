"""Overlap, exposed communication, buckets and skew, from the per-rank trace files.

Definitions (per step and rank; the step window is the `step` span):
- compute time: union of `compute` and `optim` spans, minus the intervals in which the calling
  thread was blocked in a collective (a synchronous collective, or `wait()` on an async one) —
  a thread that waits is not computing, even inside a span called "optimizer".
- comm time: union of the collectives' launch -> completion intervals.
- overlap % (the HTA definition): time computing while communicating / time communicating.
- exposed comm: communication time not hidden by compute (comm minus compute).
- by group: the same per process group (`tp`, `dp`, `pp`, ... as comm names them): each group's own
  comm time and its exposed part. Groups' collectives can overlap each other, so the groups' exposed
  times may add up to more than the total.
- skew: collectives are matched across ranks by (group, n-th call on that group). The rank that
  launched last is the one everybody waited for; each rank's time in the collective splits into
  waiting (last arrival - own launch) and transfer (completion - last arrival).
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from shardlab.observe.intervals import clip, intersect, subtract, total, union
from shardlab.observe.merge import load_ranks

COMPUTE_CATS = ("compute", "optim")
_BUCKET = re.compile(r"bucket(\d+)$")


@dataclass
class RankTrace:
    """One rank's events on the shared (wall-clock) axis, in seconds."""
    rank: int
    spans: list[dict] = field(default_factory=list)
    instants: list[dict] = field(default_factory=list)
    comms: list[dict] = field(default_factory=list)  # t0 launch, t1 done (None: never completed), t_wait


def from_events(rank: int, events: list[dict], offset: float = 0.0) -> RankTrace:
    rt = RankTrace(rank)
    for e in events:
        e = dict(e, t0=e["t0"] + offset, t1=None if e["t1"] is None else e["t1"] + offset)
        if "t_wait" in e:  # a collective recorded by comm.py
            e["t_wait"] = None if e["t_wait"] is None else e["t_wait"] + offset
            rt.comms.append(e)
        elif e["t1"] is None:
            rt.instants.append(e)
        else:
            rt.spans.append(e)
    rt.comms.sort(key=lambda e: e["t0"])
    return rt


def load(run_dir: str | Path) -> dict[int, RankTrace]:
    return {r: from_events(r, evs, h["clock_offset_s"]) for r, (h, evs) in load_ranks(run_dir).items()}


def steps_of(rt: RankTrace) -> list[tuple[int, float, float]]:
    """(step, start, end) from the `step` spans."""
    return sorted((s["args"].get("step", i), s["t0"], s["t1"])
                  for i, s in enumerate(x for x in rt.spans if x["cat"] == "step"))


def _blocked(c: dict, end: float) -> tuple[float, float]:
    t1 = c["t1"] if c["t1"] is not None else end
    return (c["t_wait"] if c["async"] and c["t_wait"] is not None else c["t0"]), t1


def _in_step(c: dict, step: int, t0: float, t1: float) -> bool:
    # Launched inside the step span. (Not `args.step`: metric and eval collectives after the span
    # carry the same step number but are not part of the step.)
    return t0 <= c["t0"] < t1


def step_breakdown(rt: RankTrace, step: int, t0: float, t1: float) -> dict:
    comms = [c for c in rt.comms if _in_step(c, step, t0, t1)]
    # Clip to the step window: the compute of this step, and all of this step's communication
    # (an async collective may finish after the step span, then it counts up to its end).
    end = max([t1] + [c["t1"] for c in comms if c["t1"] is not None])
    compute = union(clip([(s["t0"], s["t1"]) for s in rt.spans if s["cat"] in COMPUTE_CATS], t0, t1))
    compute = subtract(compute, union(_blocked(c, end) for c in comms))
    comm = union((c["t0"], c["t1"] if c["t1"] is not None else end) for c in comms)
    overlap = total(intersect(compute, comm))
    comm_s = total(comm)
    return {"step": step, "rank": rt.rank, "step_s": t1 - t0, "compute_s": total(compute), "comm_s": comm_s,
            "overlap_s": overlap, "overlap_pct": 100.0 * overlap / comm_s if comm_s > 0 else None,
            "exposed_comm_s": total(subtract(comm, compute)), "collectives": len(comms),
            "comm_bytes": sum(c["args"]["bytes"] for c in comms), "by_group": _by_group(comms, compute, end)}


def exposed_pieces(rt: RankTrace, t0: float, t1: float) -> list[tuple[dict, list]]:
    """The step's exposed communication as (collective, its exposed intervals): each collective's
    interval minus compute (the sets of `step_breakdown`), a stretch where several are in flight
    belonging to the earliest launched. The pieces add up to `exposed_comm_s`."""
    comms = sorted((c for c in rt.comms if t0 <= c["t0"] < t1), key=lambda c: c["t0"])
    end = max([t1] + [c["t1"] for c in comms if c["t1"] is not None])
    compute = union(clip([(s["t0"], s["t1"]) for s in rt.spans if s["cat"] in COMPUTE_CATS], t0, t1))
    compute = subtract(compute, union(_blocked(c, end) for c in comms))
    out, covered = [], []
    for c in comms:
        mine = subtract(subtract([(c["t0"], c["t1"] if c["t1"] is not None else end)], compute), covered)
        out.append((c, mine))
        covered = union(covered + mine)
    return out


def exposed_by_tag(rt: RankTrace, t0: float, t1: float) -> dict[str, float]:
    """The step's exposed communication split by collective tag (`bucket3`, `doctor check`, ...)."""
    out: dict[str, float] = {}
    for c, mine in exposed_pieces(rt, t0, t1):
        tag = c["args"].get("tag") or c["name"]
        out[tag] = out.get(tag, 0.0) + total(mine)
    return out


def _by_group(comms: list[dict], compute, end: float) -> dict[str, dict]:
    """Per process group (in order of first use): its comm time, the part of it not hidden by compute,
    its calls and payload bytes."""
    out: dict[str, dict] = {}
    for g in dict.fromkeys(c["args"].get("group", "world") for c in comms):
        mine = [c for c in comms if c["args"].get("group", "world") == g]
        gcomm = union((c["t0"], c["t1"] if c["t1"] is not None else end) for c in mine)
        out[g] = {"comm_s": total(gcomm), "exposed_comm_s": total(subtract(gcomm, compute)),
                  "collectives": len(mine), "comm_bytes": sum(c["args"]["bytes"] for c in mine)}
    return out


def per_step(traces: dict[int, RankTrace]) -> list[dict]:
    return [step_breakdown(rt, s, t0, t1) for r, rt in sorted(traces.items()) for s, t0, t1 in steps_of(rt)]


def bucket_table(rt: RankTrace, step: int, t0: float, t1: float) -> list[dict]:
    """Per gradient bucket: ready (its `bucket_ready` instant) -> launch -> done, ms from step start."""
    ready = {}
    for i in rt.instants:
        if i["name"] == "bucket_ready" and t0 <= i["t0"] <= t1:
            ready.setdefault(int(i["args"].get("bucket", -1)), i["t0"])
    rows = []
    for c in rt.comms:
        m = _BUCKET.search(c["args"]["tag"] or "")
        if not m or not _in_step(c, step, t0, t1):
            continue
        b = int(m.group(1))
        r = ready.get(b)
        done = c["t1"]
        rows.append({"step": step, "rank": rt.rank, "bucket": b, "bytes": c["args"]["bytes"], "op": c["args"]["op"],
                     "ready_ms": None if r is None else 1e3 * (r - t0), "launch_ms": 1e3 * (c["t0"] - t0),
                     "done_ms": None if done is None else 1e3 * (done - t0),
                     "ready_to_launch_ms": None if r is None else 1e3 * (c["t0"] - r),
                     "comm_ms": None if done is None else 1e3 * (done - c["t0"])})
    return rows


def match_collectives(traces: dict[int, RankTrace]) -> list[dict]:
    """Skew per collective, matched across ranks by (group, members, comm's per-group sequence number).
    Point-to-point messages are left out: a receiver waiting for its sender is the pipeline's schedule,
    not a late rank. (Traces written before records carried their members: the n-th call per group name.)"""
    by_key: dict[tuple, dict[int, dict]] = {}
    for r, rt in traces.items():
        count: dict[str, int] = {}
        for c in rt.comms:
            a = c["args"]
            if a["group_size"] < 2 or a.get("peer") is not None:
                continue
            g = a["group"]
            if "group_ranks" in a:
                key = (g, tuple(a["group_ranks"]), a["seq"])
            else:
                key = (g, (), count.setdefault(g, 0) + 1)
                count[g] += 1
            by_key.setdefault(key, {})[r] = c
    out = []
    for (g, members, n), per_rank in sorted(by_key.items(), key=lambda kv: min(c["t0"] for c in kv[1].values())):
        size = next(iter(per_rank.values()))["args"]["group_size"]
        if len(per_rank) < size:
            continue  # not every member traced this one (e.g. a subgroup this trace does not cover)
        launches = sorted((c["t0"], r) for r, c in per_rank.items())
        last_t, last_rank = launches[-1]
        first = per_rank[launches[0][1]]["args"]
        out.append({
            "group": g, "group_ranks": list(members), "n": n, "op": first["op"], "tag": first["tag"], "step": first["step"],
            "bytes": first["bytes"], "last_rank": last_rank,
            "skew_ms": 1e3 * (last_t - launches[0][0]),
            "late_by_ms": 1e3 * (last_t - launches[-2][0]),  # what the last rank cost everyone else
            "wait_ms": {r: 1e3 * (last_t - c["t0"]) for r, c in per_rank.items()},
            "transfer_ms": {r: None if c["t1"] is None else 1e3 * max(0.0, c["t1"] - last_t)
                            for r, c in per_rank.items()},
        })
    return out


def _spread(xs: list[float]) -> float:
    """Robust standard deviation: 1.4826 x the median absolute deviation (0 with fewer than 2 values)."""
    if len(xs) < 2:
        return 0.0
    mid = statistics.median(xs)
    return 1.4826 * statistics.median(abs(x - mid) for x in xs)


def lateness_ms(m: dict, rank: int) -> float | None:
    """How much later `rank` launched collective `m` than the last of the other members: positive = all
    the others were there and waited this long for it (= `late_by_ms` when it was last), negative = it
    was not last. None when the rank is not in the collective's group."""
    w = m["wait_ms"]
    if rank not in w or len(w) < 2:
        return None
    return min(v for r, v in w.items() if r != rank) - w[rank]


# A rank is named the straggler only when it is late consistently (last at >= LAST_SHARE of the
# collectives), by more than K standard errors of its per-step lateness (not chance, given the run's
# own step-to-step spread), and by more than STEP_FRACTION of a step (it matters): a healthy run on a
# shared machine always has some rank last by a millisecond or two.
LAST_SHARE, K, STEP_FRACTION, MIN_LATE_MS = 0.6, 3.0, 0.05, 1.0


def straggler(matched: list[dict], ranks: list[int], step_s: dict[int, float] | None = None) -> dict | None:
    """The rank with the most total lateness, and whether that is a straggler or the run's noise.

    Per step, the candidate's lateness is the median over that step's collectives (`lateness_ms`);
    across steps we take the median (`median_late_by_ms`), its robust spread (`late_spread_ms`) and the
    standard error of that median (`late_stderr_ms` = 1.2533 x spread / sqrt(steps)). `step_s` (seconds
    per step, mean over ranks) gives the step it is compared with. `significant` needs all of: last at
    >= 60% of the collectives; lateness >= 1 ms, >= 3 standard errors, and >= 5% of the median step.
    Otherwise `reason` says which test it failed."""
    if not matched:
        return None
    late = {r: 0.0 for r in ranks}
    last_count = {r: 0 for r in ranks}
    for m in matched:
        late[m["last_rank"]] += m["late_by_ms"]
        last_count[m["last_rank"]] += 1
    rank = max(ranks, key=lambda r: late[r])
    share = last_count[rank] / len(matched)
    by_step: dict[int, list[float]] = {}
    for m in matched:
        x = lateness_ms(m, rank)
        if x is not None:
            by_step.setdefault(m["step"], []).append(x)
    per_step = [statistics.median(xs) for _, xs in sorted(by_step.items())]
    median_late = statistics.median(per_step) if per_step else 0.0
    times = [t for s, t in sorted((step_s or {}).items()) if s in by_step] or list((step_s or {}).values())
    step_ms = 1e3 * statistics.median(times) if times else None
    # The noise is the spread of this rank's own lateness, not of the step time: machine load slows
    # every rank alike (a wide step-time spread) without making one of them consistently late.
    spread_ms = _spread(per_step)
    stderr_ms = 1.2533 * spread_ms / math.sqrt(len(per_step)) if per_step else 0.0
    if share < LAST_SHARE:
        reason = f"last at only {share:.0%} of the collectives: the arrival order varies"
    elif median_late < MIN_LATE_MS:
        reason = f"late by {median_late:.2f} ms (median), under {MIN_LATE_MS:g} ms"
    elif median_late < K * stderr_ms:
        reason = (f"late by {median_late:.1f} ms (median) ± {stderr_ms:.1f} ms (standard error over "
                  f"{len(per_step)} steps, step-to-step spread {spread_ms:.1f} ms): not distinguishable from chance")
    elif step_ms is not None and median_late < STEP_FRACTION * step_ms:
        reason = (f"late by {median_late:.1f} ms (median), {median_late / step_ms:.1%} of the "
                  f"{step_ms:.0f} ms step (under {STEP_FRACTION:.0%})")
    else:
        reason = None
    waits = {r: sum(m["wait_ms"].get(r, 0.0) for m in matched) for r in ranks}
    transfers = {r: sum(m["transfer_ms"].get(r) or 0.0 for m in matched) for r in ranks}
    return {"rank": rank, "last_share": share, "median_late_by_ms": median_late,
            "late_spread_ms": spread_ms, "late_stderr_ms": stderr_ms, "step_ms": step_ms,
            "late_pct_of_step": None if not step_ms else 100.0 * median_late / step_ms,
            "total_late_by_ms": late[rank], "significant": reason is None, "reason": reason,
            "wait_ms_by_rank": waits, "transfer_ms_by_rank": transfers, "collectives": len(matched)}


def _warmup(steps: list[int]) -> set[int]:
    """Steps excluded from medians: the first tenth (at least one) when there are three or more."""
    steps = sorted(set(steps))
    return set(steps[:max(1, len(steps) // 10)]) if len(steps) >= 3 else set()


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize_traces(traces: dict[int, RankTrace]) -> dict:
    rows = per_step(traces)
    skip = _warmup([r["step"] for r in rows])
    kept = [r for r in rows if r["step"] not in skip] or rows
    steps = sorted({r["step"] for r in kept})

    def step_mean(key):  # mean over ranks per step, then the median over steps
        vals = []
        for s in steps:
            xs = [r[key] for r in kept if r["step"] == s and r[key] is not None]
            if xs:
                vals.append(sum(xs) / len(xs))
        return _median(vals)

    by_group = {}
    for g in dict.fromkeys(g for r in kept for g in r["by_group"]):
        per = []
        for s in steps:  # mean over ranks (a rank outside the group counts 0), median over steps
            xs = [r["by_group"].get(g) or {} for r in kept if r["step"] == s]
            per.append({k: sum(x.get(k, 0) for x in xs) / len(xs)
                        for k in ("comm_s", "exposed_comm_s", "collectives", "comm_bytes")})
        by_group[g] = {k: _median([p[k] for p in per]) for k in per[0]} if per else {}
    matched = [m for m in match_collectives(traces) if m["step"] not in skip]
    step_s = {s: statistics.fmean(r["step_s"] for r in kept if r["step"] == s) for s in steps}
    return {"overlap_pct": step_mean("overlap_pct"), "exposed_comm_s": step_mean("exposed_comm_s"),
            "comm_s": step_mean("comm_s"), "compute_s": step_mean("compute_s"), "step_s": step_mean("step_s"),
            "comm_by_group": by_group,
            "trace_steps": len(steps), "warmup_steps_excluded": len(skip),
            "skew_ms_median": _median([m["skew_ms"] for m in matched]),
            "straggler": straggler(matched, sorted(traces), step_s)}


def summarize(run_dir: str | Path) -> dict:
    """The summary.json trace figures (overlap_pct, exposed_comm_s, ...); nulls when there is no trace."""
    try:
        traces = load(run_dir)
    except FileNotFoundError:
        return {"overlap_pct": None, "exposed_comm_s": None}
    return summarize_traces(traces)
