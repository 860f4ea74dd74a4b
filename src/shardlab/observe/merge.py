"""Merge every rank's `trace/rank{R}.jsonl` into one Chrome/Perfetto `trace/trace.json`.

Open it at https://ui.perfetto.dev or chrome://tracing. Layout: one process per rank; on each, a
`main` track (step > forward / backward / optimizer / data, nested) and one `comm GROUP` track per
process group holding its collectives (launch -> completion, with op, bytes, dtype, group and seq in
the args): with tensor and data parallelism, `comm tp` and `comm dp` side by side. Async collectives
can overlap each other, and Chrome draws overlapping slices on one track badly, so a group's are
spread over as many lanes (`comm dp 2`, ...) as needed.
"""
from __future__ import annotations

import json
from pathlib import Path

MAIN_TID = 0
COMM_TID = 10  # comm tracks are 10, 11, ...: each group's lanes in turn


def read_rank_file(path: Path) -> tuple[dict, list[dict]]:
    lines = Path(path).read_text().splitlines()
    header = json.loads(lines[0])
    return header, [json.loads(line) for line in lines[1:] if line.strip()]


def load_ranks(run_dir: str | Path) -> dict[int, tuple[dict, list[dict]]]:
    files = sorted((Path(run_dir) / "trace").glob("rank*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no trace/rank*.jsonl in {run_dir}: run with trace.enabled=true")
    ranks = {}
    for f in files:
        header, events = read_rank_file(f)
        ranks[int(header["rank"])] = (header, events)
    return ranks


def _lanes(intervals: list[tuple[float, float]]) -> list[int]:
    """Greedy lane assignment: an interval goes to the first lane whose last interval has ended."""
    ends: list[float] = []
    out = []
    for t0, t1 in intervals:
        for i, end in enumerate(ends):
            if t0 >= end:
                ends[i] = t1
                out.append(i)
                break
        else:
            ends.append(t1)
            out.append(len(ends) - 1)
    return out


def chrome_events(ranks: dict[int, tuple[dict, list[dict]]]) -> list[dict]:
    # A common origin on the wall-clock axis keeps the numbers small (microseconds since the first event).
    origin = min((h["clock_offset_s"] + e["t0"]) for h, evs in ranks.values() for e in evs) if ranks else 0.0
    out: list[dict] = []
    for rank, (header, events) in sorted(ranks.items()):
        off = header["clock_offset_s"] - origin

        def us(t, off=off):
            return round((t + off) * 1e6, 3)

        out.append({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank}"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}})
        out.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": MAIN_TID, "args": {"name": "main"}})
        comms = sorted((e for e in events if e["cat"] == "comm" and "t_wait" in e), key=lambda e: e["t0"])
        others = [e for e in events if not (e["cat"] == "comm" and "t_wait" in e)]
        for e in others:
            if e["t1"] is None:
                out.append({"ph": "i", "s": "t", "name": e["name"], "cat": e["cat"], "pid": rank,
                            "tid": MAIN_TID, "ts": us(e["t0"]), "args": e["args"]})
            else:
                out.append({"ph": "X", "name": e["name"], "cat": e["cat"], "pid": rank, "tid": MAIN_TID,
                            "ts": us(e["t0"]), "dur": round((e["t1"] - e["t0"]) * 1e6, 3), "args": e["args"]})
        # One track per process group (TP's collectives apart from DP's, ...), in order of first use,
        # each spread over as many lanes as its overlapping async collectives need.
        groups: dict[str, list[dict]] = {}
        for e in comms:
            groups.setdefault(e["args"].get("group", "world"), []).append(e)
        tid = COMM_TID
        for group, evs in groups.items():
            spans = [(e["t0"], e["t1"] if e["t1"] is not None else e["t0"]) for e in evs]
            lanes = _lanes(spans)
            for lane in sorted(set(lanes)):
                out.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid + lane,
                            "args": {"name": f"comm {group}" if lane == 0 else f"comm {group} {lane + 1}"}})
                out.append({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid + lane,
                            "args": {"sort_index": tid + lane}})
            for e, lane, (t0, t1) in zip(evs, lanes, spans):
                a = e["args"]
                name = f"{a['op']} {a['tag']}".strip()
                out.append({"ph": "X", "name": name, "cat": "comm", "pid": rank, "tid": tid + lane,
                            "ts": us(t0), "dur": round((t1 - t0) * 1e6, 3),
                            "args": {**a, "async": e["async"], "completed": e["t1"] is not None}})
            tid += max(lanes) + 1
    return out


def merge(run_dir: str | Path) -> Path:
    """Write RUN/trace/trace.json from all rank files; returns its path."""
    ranks = load_ranks(run_dir)
    path = Path(run_dir) / "trace" / "trace.json"
    doc = {"traceEvents": chrome_events(ranks), "displayTimeUnit": "ms",
           "otherData": {"ranks": sorted(ranks), "clock": "wall clock (per-rank perf_counter + offset)"}}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)
    return path
