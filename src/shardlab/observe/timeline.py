"""Timeline spans per rank. Near-zero cost when tracing is off (one global check per span).

The trainer calls: `timeline.enable(run_dir, rank)` (when trace.enabled), `with timeline.span(name,
cat=...)` around forward/backward/optimizer/data, and `timeline.finish()` at the end, which writes
`RUN/trace/rank{R}.jsonl` (spans + comm.RECORDER collectives). Merging into trace.json is analysis's job.
"""
from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

from shardlab import comm

_STATE: dict | None = None  # None = tracing off


def enable(run_dir: Path, rank: int) -> None:
    global _STATE
    _STATE = {"dir": Path(run_dir) / "trace", "rank": rank, "spans": [],
              # perf_counter is per process; record its offset to the wall clock for cross-rank alignment
              "offset": time.time() - time.perf_counter()}
    comm.RECORDER.events = []


def enabled() -> bool:
    return _STATE is not None


@contextlib.contextmanager
def _span(name: str, cat: str, args: dict):
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _STATE["spans"].append({"name": name, "cat": cat, "t0": t0, "t1": time.perf_counter(), "args": args})


_NULL = contextlib.nullcontext()


def span(name: str, cat: str = "compute", **args):
    if _STATE is None:
        return _NULL
    return _span(name, cat, args)


def instant(name: str, cat: str = "mark", **args) -> None:
    if _STATE is not None:
        t = time.perf_counter()
        _STATE["spans"].append({"name": name, "cat": cat, "t0": t, "t1": t, "args": args})


def finish() -> Path | None:
    """Write this rank's events; returns the file, or None when tracing is off."""
    global _STATE
    if _STATE is None:
        return None
    st, _STATE = _STATE, None
    st["dir"].mkdir(parents=True, exist_ok=True)
    path = st["dir"] / f"rank{st['rank']}.jsonl"
    with open(path, "w") as f:
        f.write(json.dumps({"rank": st["rank"], "clock_offset": st["offset"]}) + "\n")
        for s in st["spans"]:
            f.write(json.dumps({"type": "span", **s}) + "\n")
        for r in comm.RECORDER.events or []:
            f.write(json.dumps({"type": "collective", **r.as_dict()}) + "\n")
    comm.RECORDER.events = None
    return path
