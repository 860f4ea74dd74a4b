"""The one door to collectives.

Every collective of shardlab's own code goes through this module, so each one is recorded:
sequence id, op, group, payload bytes, wire bytes, dtype, launch and completion time, a short stack.
The records feed three readers: per-step accounting (`summary.json` `comm`), the timeline (trace),
and the flight recorder (a ring buffer the hang watchdog dumps).

Byte conventions (per rank): `bytes` is the payload, the full tensor handed to the collective
(all_reduce: the buffer; reduce_scatter: the full unsharded input; all_gather: the full gathered
output). `wire_bytes` is what a ring algorithm sends per rank: all_reduce 2(N-1)/N x payload,
reduce_scatter and all_gather (N-1)/N x payload, broadcast payload.
"""
from __future__ import annotations

import collections
import faulthandler
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

ReduceOp = dist.ReduceOp
# torch 2.13 renamed the flat-tensor collectives (the old names warn); older torch has only the old ones.
# The torch functions themselves, unrecorded: what the planner's calibration times
dist_all_gather_flat = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
dist_reduce_scatter_flat = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


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

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["shape"] = list(self.shape)
        return d


class Recorder:
    """Per-process record of collectives: per-step counters, ring buffer, optional full event list."""

    def __init__(self, capacity: int = 2048):
        self.ring: collections.deque[Record] = collections.deque(maxlen=capacity)
        self.events: list[Record] | None = None  # every record, when tracing is on
        self.seq = 0
        self.step = -1
        self.phase = "startup"
        self.last_progress = time.monotonic()
        self.capture_stack = True
        self.verify = False  # debug: compare every collective's op/size across ranks before issuing it
        self._lock = threading.Lock()
        self.reset_step()

    def reset_step(self) -> None:
        self.step_bytes: dict[str, int] = collections.defaultdict(int)
        self.step_wire: dict[str, int] = collections.defaultdict(int)
        self.step_calls: dict[str, int] = collections.defaultdict(int)
        self.step_tags: dict[str, int] = collections.defaultdict(int)

    def step_stats(self) -> dict:
        return {"bytes": dict(self.step_bytes), "wire_bytes": dict(self.step_wire),
                "calls": dict(self.step_calls), "bytes_by_tag": dict(self.step_tags)}

    def add(self, op: str, tensor_bytes: int, wire: int, dtype, shape, group, tag: str) -> Record:
        stack = _short_stack() if self.capture_stack else []
        with self._lock:
            self.seq += 1
            rec = Record(seq=self.seq, op=op, group=_group_name(group), group_size=_size(group),
                         bytes=tensor_bytes, wire_bytes=wire, dtype=str(dtype).replace("torch.", ""),
                         shape=tuple(shape), tag=tag, step=self.step, phase=self.phase,
                         t_launch=time.perf_counter(), stack=stack)
            self.ring.append(rec)
            if self.events is not None:
                self.events.append(rec)
            self.step_bytes[op] += tensor_bytes
            self.step_wire[op] += wire
            self.step_calls[op] += 1
            self.step_tags[tag] += tensor_bytes
        return rec

    def dump(self, path, **extra) -> dict:
        """Write the ring buffer (oldest first) as JSON for `shardlab doctor hang`. Safe from any thread.
        `now_perf` lets a reader turn t_launch/t_done into ages; extra keys (rank, reason...) go on top."""
        import json
        import socket
        with self._lock:
            records = [r.as_dict() for r in self.ring]
        data = {**extra, "pid": os.getpid(), "host": socket.gethostname(), "time": time.time(),
                "now_perf": time.perf_counter(), "step": self.step, "phase": self.phase,
                "last_progress_age_s": time.monotonic() - self.last_progress, "seq": self.seq,
                "records": records}
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, default=str)
        os.replace(tmp, path)  # a reader never sees half a dump
        return data

    def done(self, rec: Record) -> None:
        if rec.t_done is None:
            rec.t_done = time.perf_counter()
            rec.state = "completed"
            self.last_progress = time.monotonic()


RECORDER = Recorder()


def _short_stack(depth: int = 3) -> list[str]:
    """The innermost frames outside this module, e.g. "ddp.py:120 _launch_bucket": enough for the
    flight recorder to say where a collective came from. Walks frames directly: traceback's
    extract_stack reads source lines and would cost more than a small collective."""
    frame, out = sys._getframe(1), []
    while frame is not None and len(out) < depth:
        code = frame.f_code
        if code.co_filename != __file__:
            out.append(f"{os.path.basename(code.co_filename)}:{frame.f_lineno} {code.co_name}")
        frame = frame.f_back
    return out[::-1]  # outermost first, like a traceback


def set_phase(phase: str) -> None:
    """What the rank is doing now (forward, backward, data loading, ...): the flight recorder reports it."""
    RECORDER.phase = phase
    RECORDER.last_progress = time.monotonic()


class Handle:
    """An async collective in flight. `wait()` blocks until it is done and records the completion."""

    def __init__(self, work, rec: Record):
        self.work, self.rec = work, rec

    def wait(self) -> None:
        if self.rec.t_wait is None:
            self.rec.t_wait = time.perf_counter()  # the caller blocks from here (the trace needs it)
            self.rec.state = "started"
        if self.work is not None:
            self.work.wait()
        RECORDER.done(self.rec)

    def is_completed(self) -> bool:
        return self.work is None or self.work.is_completed()


# --- process group --------------------------------------------------------------------------------

def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def init(backend: str = "auto") -> None:
    """Join the process group described by torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR...)."""
    if is_initialized():
        return
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    # A rank killed by a fatal signal (SIGSEGV, SIGABRT from a C++ abort) prints every thread's Python
    # stack to stderr before dying, so the launcher's log says where it was, not only the signal number.
    if not faulthandler.is_enabled():
        faulthandler.enable(all_threads=True)
    dist.init_process_group(backend=backend)


def shutdown(clean: bool = True) -> None:
    """Leave the process group. After a clean run, first a barrier and a moment with the GIL released.

    gloo's worker threads drop the last operations (and the tensors they hold) after completing them,
    and dropping a tensor that has a Python object needs the GIL. The group's destructor joins those
    threads while holding the GIL, so destroying the group while one of them still waits for the GIL
    deadlocks the rank at exit (seen with torch DDP's reducer as the group's last owner: the rank never
    exits and torchrun waits for it). Waiting in the barrier and then sleeping lets them finish. After
    a failure the peers may be gone, so no barrier: just leave."""
    if not is_initialized():
        return
    if clean and world_size() > 1:
        try:
            dist.barrier()
        except Exception:  # noqa: BLE001 - a peer already gone: leaving is all that is left to do
            pass
        time.sleep(0.05)
    dist.destroy_process_group()


def rank(group=None) -> int:
    return dist.get_rank(group) if is_initialized() else 0


def world_size(group=None) -> int:
    return dist.get_world_size(group) if is_initialized() else 1


def _size(group) -> int:
    return world_size(group)


def _group_name(group) -> str:
    if group is None or not is_initialized() or group is dist.group.WORLD:
        return "world"
    return getattr(group, "group_desc", None) or getattr(group, "group_name", "group")


def new_group(ranks: list[int]):
    return dist.new_group(ranks)


def device() -> torch.device:
    if torch.cuda.is_available() and is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# --- collectives ------------------------------------------------------------------------------------

def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _launch(op: str, fn, payload: torch.Tensor, wire_factor: float, group, async_op: bool, tag: str):
    n = _size(group)
    nbytes = _nbytes(payload)
    rec = RECORDER.add(op, nbytes, int(nbytes * wire_factor), payload.dtype, payload.shape, group, tag)
    if n == 1:  # a group of one: nothing to exchange, but keep the record so accounting stays uniform
        work = None
    else:
        if RECORDER.verify:
            _verify(rec, payload, group)
        work = fn(async_op=async_op)
        if async_op:
            rec.state = "scheduled"  # in flight; "started" again once the caller blocks in wait()
    rec.async_op = async_op
    handle = Handle(work, rec)
    if not async_op:
        RECORDER.done(rec)
        return None
    return handle


class CollectiveMismatchError(RuntimeError):
    """Ranks were about to issue different collectives at the same sequence id (debug verification)."""


_OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")


def _verify(rec: Record, payload: torch.Tensor, group) -> None:
    """Debug mode (doctor.verify_collectives): before issuing a collective, all-gather a fixed-size
    fingerprint (op, element count, element size) and fail on every rank at once if they differ. A real
    mismatch would otherwise hang (NCCL) or abort one process inside gloo. Costs one small extra
    all-gather per collective, so it is off by default; it is not recorded."""
    sig = torch.tensor([_OPS.index(rec.op), payload.numel(), payload.element_size()], dtype=torch.int64,
                       device=payload.device)
    out = torch.empty(_size(group) * 3, dtype=torch.int64, device=payload.device)
    dist_all_gather_flat(out, sig, group=group)
    rows = out.view(-1, 3).tolist()
    if any(r != rows[0] for r in rows):
        desc = "; ".join(f"rank {i}: {_OPS[o]} of {n} x {e} B" for i, (o, n, e) in enumerate(rows))
        raise CollectiveMismatchError(f"collective mismatch at sequence #{rec.seq} (step {rec.step}): "
                                      f"{desc}. The ranks' programs diverged before this point.")


def all_reduce(t: torch.Tensor, op=ReduceOp.SUM, group=None, async_op: bool = False, tag: str = ""):
    n = _size(group)
    return _launch("all_reduce", lambda async_op: dist.all_reduce(t, op=op, group=group, async_op=async_op),
                   t, 2 * (n - 1) / n, group, async_op, tag)


def reduce_scatter(out: torch.Tensor, inp: torch.Tensor, op=ReduceOp.SUM, group=None, async_op: bool = False,
                   tag: str = ""):
    """`inp` is the full flat buffer (N equal chunks); `out` receives this rank's reduced chunk."""
    n = _size(group)
    if n == 1:
        out.copy_(inp)
    return _launch("reduce_scatter",
                   lambda async_op: dist_reduce_scatter_flat(out, inp, op=op, group=group, async_op=async_op),
                   inp, (n - 1) / n, group, async_op, tag)


def all_gather(out: torch.Tensor, inp: torch.Tensor, group=None, async_op: bool = False, tag: str = ""):
    """`inp` is this rank's shard; `out` is the full flat buffer of N shards."""
    n = _size(group)
    if n == 1:
        out.copy_(inp)
    return _launch("all_gather",
                   lambda async_op: dist_all_gather_flat(out, inp, group=group, async_op=async_op),
                   out, (n - 1) / n, group, async_op, tag)


def broadcast(t: torch.Tensor, src: int = 0, group=None, async_op: bool = False, tag: str = ""):
    return _launch("broadcast", lambda async_op: dist.broadcast(t, src=src, group=group, async_op=async_op),
                   t, 1.0, group, async_op, tag)


def all_gather_object(obj, group=None) -> list:
    """Small control-plane exchange (config checks, shape checks, dumps). Recorded with 0 payload bytes."""
    if _size(group) == 1:
        return [obj]
    out = [None] * _size(group)
    rec = RECORDER.add("all_gather_object", 0, 0, "object", (), group, "control")
    dist.all_gather_object(out, obj, group=group)
    RECORDER.done(rec)
    return out


def broadcast_object(obj, src: int = 0, group=None):
    if _size(group) == 1:
        return obj
    box = [obj]
    rec = RECORDER.add("broadcast_object", 0, 0, "object", (), group, "control")
    dist.broadcast_object_list(box, src=src, group=group)
    RECORDER.done(rec)
    return box[0]


def barrier(group=None) -> None:
    if _size(group) == 1:
        return
    rec = RECORDER.add("barrier", 0, 0, "none", (), group, "control")
    dist.barrier(group=group)
    RECORDER.done(rec)


# --- TEMP comm p2p stand-in (the comm branch replaces this with recorded, per-group p2p) ---------------
def _p2p(op: str, fn, t: torch.Tensor, peer: int, group, async_op: bool, tag: str):
    rec = RECORDER.add(op, _nbytes(t), _nbytes(t), t.dtype, t.shape, group, tag or f"peer {peer}")
    work = fn()
    rec.async_op = async_op
    handle = Handle(work, rec)
    if not async_op:
        handle.wait()
        return None
    rec.state = "scheduled"
    return handle


def isend(t: torch.Tensor, dst: int, group=None, tag: str = ""):
    return _p2p("send", lambda: dist.isend(t, group=group, group_dst=dst), t, dst, group, True, tag)


def irecv(t: torch.Tensor, src: int, group=None, tag: str = ""):
    return _p2p("recv", lambda: dist.irecv(t, group=group, group_src=src), t, src, group, True, tag)


def send(t: torch.Tensor, dst: int, group=None, tag: str = "") -> None:
    isend(t, dst, group, tag).wait()


def recv(t: torch.Tensor, src: int, group=None, tag: str = "") -> None:
    irecv(t, src, group, tag).wait()
