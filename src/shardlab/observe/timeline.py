"""A low-overhead span recorder: what each rank was doing, and when.

    timeline.enable(run_dir, rank)                 # once, when `trace.enabled=true`
    with timeline.span("forward", cat="compute", micro=0): ...
    timeline.instant("bucket_ready", bucket=3)
    timeline.finish()                              # every rank: dump; rank 0 merges trace/trace.json

Categories: `step` (the whole optimizer step), `compute`, `optim`, `data`, `comm` (waits the
caller chooses to mark). Collectives themselves are not spanned here: comm.py records each one
(launch, completion, bytes, seq) and `dump` converts those records into comm events.

When tracing is off `span` returns one shared do-nothing context manager and `instant` returns at
once, so the instrumentation can stay in the hot loop.

Clocks: `time.perf_counter` is per process. Each rank stores `clock_offset_s` = wall clock minus
perf_counter, measured at `enable`; the merge adds it, so all ranks share the wall-clock axis
(exact on one host; across hosts as good as their clock synchronisation).
"""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from shardlab import comm

_enabled = False
_events: list[tuple] = []  # (name, cat, t0, t1 | None, args) in perf_counter seconds
_run_dir: Path | None = None
_rank = 0
_clock_offset = 0.0
_paused_comm: list | None = None


class _NullSpan:
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NULL = _NullSpan()


class _Span:
    __slots__ = ("name", "cat", "args", "t0")

    def __init__(self, name: str, cat: str, args: dict):
        self.name, self.cat, self.args = name, cat, args

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        _events.append((self.name, self.cat, self.t0, time.perf_counter(), self.args))
        return False


def enabled() -> bool:
    return _enabled


def span(name: str, cat: str = "compute", **args):
    """Context manager timing one interval on this rank's main thread."""
    if not _enabled:
        return _NULL
    return _Span(name, cat, args)


def instant(name: str, cat: str = "compute", **args) -> None:
    """A point in time (e.g. `bucket_ready`, bucket=N). Safe to call from autograd hooks."""
    if _enabled:
        _events.append((name, cat, time.perf_counter(), None, args))


def _measure_clock_offset() -> float:
    """wall - perf_counter; the pair read with the least gap between the two calls wins."""
    best = None
    for _ in range(7):
        a = time.perf_counter()
        wall = time.time()
        b = time.perf_counter()
        if best is None or b - a < best[0]:
            best = (b - a, wall - (a + b) / 2)
    return best[1]


def enable(run_dir: str | Path, rank: int) -> None:
    """Start recording spans here and every collective in comm.py (its full event list)."""
    global _enabled, _events, _run_dir, _rank, _clock_offset
    _enabled, _events, _run_dir, _rank = True, [], Path(run_dir), rank
    _clock_offset = _measure_clock_offset()
    comm.RECORDER.events = []


def set_recording(on: bool) -> None:
    """Pause or resume recording without losing what was recorded (the tracing-overhead bench
    alternates traced and untraced steps in one run)."""
    global _enabled, _paused_comm
    if on and not _enabled:
        _enabled, comm.RECORDER.events = True, _paused_comm
    elif not on and _enabled:
        _enabled, _paused_comm, comm.RECORDER.events = False, comm.RECORDER.events, None


def disable() -> None:
    """Stop recording and forget everything (tests, benchmarks that trace only some runs)."""
    global _enabled, _events
    _enabled, _events = False, []
    comm.RECORDER.events = None


def _comm_event(r) -> dict:
    return {"name": r.op, "cat": "comm", "t0": r.t_launch, "t1": r.t_done,
            "t_wait": r.t_wait, "async": r.async_op,
            "args": {"op": r.op, "seq": r.seq, "group": r.group, "group_size": r.group_size,
                     "group_ranks": list(r.group_ranks), "peer": r.peer,
                     "bytes": r.bytes, "wire_bytes": r.wire_bytes, "dtype": r.dtype, "tag": r.tag,
                     "step": r.step, "phase": r.phase}}


def dump(run_dir: str | Path | None = None, rank: int | None = None) -> Path | None:
    """Write this rank's events to RUN/trace/rank{R}.jsonl: one header line, then one event a line."""
    if not _enabled:
        return None
    run_dir = Path(run_dir or _run_dir)
    rank = _rank if rank is None else rank
    out = run_dir / "trace" / f"rank{rank}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    header = {"rank": rank, "world_size": comm.world_size(), "clock_offset_s": _clock_offset,
              "host": socket.gethostname(), "pid": os.getpid()}
    tmp = out.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(header) + "\n")
        for name, cat, t0, t1, args in _events:
            f.write(json.dumps({"name": name, "cat": cat, "t0": t0, "t1": t1, "args": args}, default=str) + "\n")
        for r in comm.RECORDER.events or []:
            f.write(json.dumps(_comm_event(r), default=str) + "\n")
    tmp.replace(out)
    return out


def finish() -> Path | None:
    """End of run, on every rank: dump, wait for the others, and rank 0 merges trace.json."""
    if not _enabled:
        return None
    path = dump()
    comm.RECORDER.events = None  # the barrier below is not part of the run
    if comm.world_size() > 1:
        comm.barrier()
    if _rank == 0:
        from shardlab.observe.merge import merge
        merge(_run_dir)
    disable()
    return path
