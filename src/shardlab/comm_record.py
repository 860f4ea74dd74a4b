"""The record of every call through `comm` (shardlab/comm.py): what the per-step accounting (`summary.json`
`comm`), the timeline (trace) and the flight recorder (a ring buffer the hang watchdog dumps) read.

comm.py issues the calls; this module keeps their bookkeeping: one `Record` per call, per-group counters
(`GroupCount`), the ring buffer and its JSON dump for `shardlab doctor hang`. It knows nothing of process
groups: comm.py hands it the function that names them (`Recorder.group_info`) and the one giving this
process's rank, so a record's `group`/`group_ranks` follow comm's registry (`comm.name_group`).
"""
from __future__ import annotations

import collections
import os
import sys
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Record:
    seq: int
    op: str
    group: str
    group_size: int
    bytes: int
    wire_bytes: int
    dtype: str
    shape: tuple
    tag: str
    step: int
    phase: str
    t_launch: float
    t_done: float | None = None
    # scheduled: handed to the backend (async) but nobody waits on it yet; started: this rank is blocked
    # in it (a synchronous call, or wait() on an async one); completed. The hang analysis reads it.
    state: str = "started"
    async_op: bool = False
    t_wait: float | None = None  # async only: when the caller started blocking in wait()
    stack: list[str] = field(default_factory=list)
    group_ranks: tuple = ()  # the group's members, global ranks
    peer: int | None = None  # point-to-point: the other side (global rank); None for collectives
    order: int = 0  # this process's count over all groups: program order

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        d["shape"], d["group_ranks"] = list(self.shape), list(self.group_ranks)
        return d


@dataclass
class GroupCount:
    """Per group (or per point-to-point channel): how many were issued and the highest completed.
    The dump carries these so `doctor hang` knows how far each rank got even when the ring buffer
    no longer holds a group's last record."""
    group: str
    ranks: tuple
    src: int | None = None  # point-to-point channel src -> dst (global ranks)
    dst: int | None = None
    issued: int = 0
    completed: int = 0

    def as_dict(self) -> dict:
        return {**self.__dict__, "ranks": list(self.ranks)}


class Recorder:
    """Per-process record of collectives: per-step counters, ring buffer, optional full event list."""

    def __init__(self, capacity: int = 2048):
        self.ring: collections.deque[Record] = collections.deque(maxlen=capacity)
        self.events: list[Record] | None = None  # every record, when tracing is on
        self.order = 0  # records so far, all groups
        self.counts: dict[tuple, GroupCount] = {}  # (group, ranks, src, dst) -> counters
        self.step = -1
        self.phase = "startup"
        self.last_progress = time.monotonic()
        self.capture_stack = True
        self.verify = False  # debug: compare every collective's op/size across ranks before issuing it
        self._lock = threading.Lock()
        # process group -> (name, members' global ranks), and this process's global rank: comm.py sets
        # both to its own (it names the groups); until then, one process in "world"
        self.group_info = lambda group: ("world", (0,))
        self.rank = lambda: 0
        self.reset_step()

    def reset_step(self) -> None:
        self.step_bytes: dict[str, int] = collections.defaultdict(int)
        self.step_wire: dict[str, int] = collections.defaultdict(int)
        self.step_calls: dict[str, int] = collections.defaultdict(int)
        self.step_tags: dict[str, int] = collections.defaultdict(int)
        # group name -> {"bytes"|"wire_bytes"|"calls": {op: n}}: traffic per mesh dimension
        self.step_groups: dict[str, dict[str, dict[str, int]]] = {}

    def step_stats(self) -> dict:
        return {"bytes": dict(self.step_bytes), "wire_bytes": dict(self.step_wire),
                "calls": dict(self.step_calls), "bytes_by_tag": dict(self.step_tags),
                "by_group": {g: {k: dict(v) for k, v in d.items()} for g, d in self.step_groups.items()}}

    def add(self, op: str, tensor_bytes: int, wire: int, dtype, shape, group, tag: str,
            peer: int | None = None) -> Record:
        """One record. `peer` (point-to-point only, global rank) makes the sequence number count the
        channel sender -> receiver instead of the group's collectives."""
        stack = _short_stack() if self.capture_stack else []
        # A (name, members) pair instead of a process group: traffic through a store (parallel/ft/store.py)
        name, ranks = group if isinstance(group, tuple) else self.group_info(group)
        key = (name, ranks, None, None)
        if peer is not None:
            me = self.rank()
            key = (name, ranks, me, peer) if op == "send" else (name, ranks, peer, me)
        with self._lock:
            count = self.counts.get(key)
            if count is None:
                count = self.counts[key] = GroupCount(name, ranks, key[2], key[3])
            count.issued += 1
            self.order += 1
            rec = Record(seq=count.issued, op=op, group=name, group_size=len(ranks),
                         bytes=tensor_bytes, wire_bytes=wire, dtype=str(dtype).replace("torch.", ""),
                         shape=tuple(shape), tag=tag, step=self.step, phase=self.phase,
                         t_launch=time.perf_counter(), stack=stack, group_ranks=ranks, peer=peer,
                         order=self.order)
            rec._count = count
            self.ring.append(rec)
            if self.events is not None:
                self.events.append(rec)
            self.step_bytes[op] += tensor_bytes
            self.step_wire[op] += wire
            self.step_calls[op] += 1
            self.step_tags[tag] += tensor_bytes
            per = self.step_groups.get(name)
            if per is None:
                per = self.step_groups[name] = {"bytes": collections.defaultdict(int),
                                                "wire_bytes": collections.defaultdict(int),
                                                "calls": collections.defaultdict(int)}
            per["bytes"][op] += tensor_bytes
            per["wire_bytes"][op] += wire
            per["calls"][op] += 1
        return rec

    def blocked_in(self) -> Record | None:
        """The record this rank is stuck on: the oldest one it is blocked in (a synchronous call, or
        wait() on an async one), else the oldest not completed. Oldest, because a group completes its
        collectives in order: a later one cannot finish before it. The watchdog's message and
        `doctor hang` both name this record, so they give the same number."""
        pending = [r for r in list(self.ring) if r.state != "completed"]
        started = [r for r in pending if r.state == "started"]
        return min(started or pending, key=lambda r: r.order, default=None)

    def dump(self, path, **extra) -> dict:
        """Write the ring buffer (oldest first) as JSON for `shardlab doctor hang`. Safe from any thread.
        `now_perf` lets a reader turn t_launch/t_done into ages; extra keys (rank, reason...) go on top."""
        import json
        import socket
        with self._lock:
            records = [r.as_dict() for r in self.ring]
            groups = [c.as_dict() for c in self.counts.values()]
        blocked = self.blocked_in()
        data = {**extra, "pid": os.getpid(), "host": socket.gethostname(), "time": time.time(),
                "now_perf": time.perf_counter(), "step": self.step, "phase": self.phase,
                "last_progress_age_s": time.monotonic() - self.last_progress, "order": self.order,
                "blocked_in": None if blocked is None else blocked.as_dict(),
                "groups": groups, "records": records}
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, default=str)
        os.replace(tmp, path)  # a reader never sees half a dump
        return data

    def done(self, rec: Record) -> None:
        if rec.t_done is None:
            rec.t_done = time.perf_counter()
            rec.state = "completed"
            count = getattr(rec, "_count", None)
            if count is not None and rec.seq > count.completed:
                count.completed = rec.seq
            self.last_progress = time.monotonic()


RECORDER = Recorder()  # the process's one recorder (`comm.RECORDER`)


def set_phase(phase: str) -> None:
    """What the rank is doing now (forward, backward, data loading, ...): the flight recorder reports it."""
    RECORDER.phase = phase
    RECORDER.last_progress = time.monotonic()


class Handle:
    """An async collective in flight. `wait()` blocks until it is done and records the completion."""

    def __init__(self, work, rec: Record):
        self.work, self.rec = work, rec
        self.on_wait = None  # comm's posting log, when one is kept (comm.log_p2p)

    def wait(self) -> None:
        if self.on_wait is not None:
            self.on_wait()
        if self.rec.t_wait is None:
            self.rec.t_wait = time.perf_counter()  # the caller blocks from here (the trace needs it)
        if self.rec.t_done is None:
            # (also when a caller stamped t_wait itself, as ddp does for all buckets at once)
            self.rec.state = "started"
        if self.work is not None:
            self.work.wait()
        RECORDER.done(self.rec)

    def is_completed(self) -> bool:
        return self.work is None or self.work.is_completed()


# The files a record's stack skips: this one, and the comm modules that call `add` (they add themselves),
# so the stack starts at the code that called comm.
SKIP_FILES: set[str] = {__file__}
_CODE_WHERE: dict = {}  # code object -> (file name, function name), computed once per function


def _short_stack(depth: int = 3) -> list[str]:
    """The innermost frames outside comm and this module, e.g. "ddp.py:120 _launch_bucket": enough for the
    flight recorder to say where a collective came from. Walks frames directly: traceback's
    extract_stack reads source lines and would cost more than a small collective (a pipeline step
    records every message, so this runs dozens of times per step)."""
    frame, out = sys._getframe(1), []
    while frame is not None and len(out) < depth:
        code = frame.f_code
        if code.co_filename not in SKIP_FILES:
            where = _CODE_WHERE.get(code)
            if where is None:
                where = _CODE_WHERE[code] = (os.path.basename(code.co_filename), code.co_name)
            out.append(f"{where[0]}:{frame.f_lineno} {where[1]}")
        frame = frame.f_back
    return out[::-1]  # outermost first, like a traceback
