"""Gradient buckets for the own DDP engine (`parallel/dp/ddp.py`).

A bucket is one flat buffer holding the gradients of several parameters back to back. Each
parameter's `.grad` is a *view* into that buffer, so autograd accumulates straight into it and the
buffer can be all-reduced as is: no gradient is ever copied to be communicated.

Parameters are assigned to buckets the way torch's `compute_bucket_assignment_by_size` does: walk
the parameters in a given order (reverse registration order at first, the observed ready order
after the first iteration), fill a bucket until it holds at least its size limit, then start the
next. The first bucket has its own (usually smaller) limit so the first all-reduce starts early, and
the end of the order forms a geometric tail (last bucket small, each one before it at most twice
the one after it) so the all-reduce that backward cannot hide is short (`assign`, docs/ddp.md).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from shardlab import comm, precision



@dataclass
class Bucket:
    index: int
    params: list[nn.Parameter]
    names: list[str]
    buffer: torch.Tensor  # the flat gradients, in the parameters' dtype
    views: list[torch.Tensor]  # views[i] is params[i].grad
    comm_buffer: torch.Tensor | None = None  # fp16/bf16 copy sent on the wire when compressing
    pending: int = 0  # parameters whose gradient has not arrived yet in this step
    handle: comm.Handle | None = None
    t_ready: float | None = None  # when the last gradient of the bucket arrived
    events: dict = field(default_factory=dict)

    @property
    def wire_tensor(self) -> torch.Tensor:
        return self.buffer if self.comm_buffer is None else self.comm_buffer

    @property
    def nbytes(self) -> int:
        """Payload handed to the all-reduce: what `comm.RECORDER` counts for this bucket."""
        t = self.wire_tensor
        return t.numel() * t.element_size()

    def reset(self) -> None:
        self.pending, self.handle, self.t_ready = len(self.params), None, None

    def launch(self, world: int, group) -> None:
        """Average by pre-division (as torch DDP does, and so fp16 sums cannot overflow), then start
        the all-reduce asynchronously; backward keeps running while it is in flight."""
        self.buffer.div_(world)
        if self.comm_buffer is not None:
            self.comm_buffer.copy_(self.buffer)
        self.handle = comm.all_reduce(self.wire_tensor, group=group, async_op=True, tag=f"bucket{self.index}")

    def poll(self) -> bool:
        """Stamp the completion if the all-reduce has ended; True once it has. Called from the
        backward hooks, so the stamp is at most one gradient late: the completion time is when the
        collective really ended, not when the step got round to wait(). (Polling, not a done-callback:
        a callback would run Python on the backend's own thread, which needs the GIL there and can
        crash the process when it races with interpreter exit.)"""
        if self.handle is None:
            return False
        if self.handle.rec.t_done is None and self.handle.is_completed():
            comm.RECORDER.done(self.handle.rec)
        return self.handle.rec.t_done is not None

    def finish(self) -> None:
        """Wait for the all-reduce and, when compressing, cast the averaged gradient back."""
        self.handle.wait()
        if self.comm_buffer is not None:
            self.buffer.copy_(self.comm_buffer)
        rec = self.handle.rec
        self.events = {"bucket": self.index, "params": len(self.params), "numel": self.buffer.numel(),
                       "bytes": self.nbytes, "dtype": str(self.wire_tensor.dtype).replace("torch.", ""),
                       "t_ready": self.t_ready, "t_launch": rec.t_launch, "t_done": rec.t_done,
                       "t_wait": rec.t_wait, "seq": rec.seq}
        self.handle = None

    def mark_ready(self, now: float | None = None) -> bool:
        """One more gradient arrived; True when it was the bucket's last."""
        self.pending -= 1
        if self.pending == 0:
            self.t_ready = now if now is not None else time.perf_counter()
            return True
        return False


def assign(sizes: list[int], keys: list, limits: list[int], last: int = 0) -> list[list[int]]:
    """Group positions 0..n-1 (in the order given) into buckets of at least `limits[k]` bytes, the
    k-th bucket of each key (dtype, device) using limits[k] and every later one limits[-1]. A bucket
    is closed as soon as it reaches its limit; the partly filled ones are closed at the end.

    `last` > 0, a geometric tail: the positions at the end of each key's order (after its first
    bucket, which stays first) go into buckets of at most `last`, 2 x `last`, 4 x `last`, ... bytes
    counted from the end (each at least one position), while the limit stays under limits[-1]. In
    ready order these gradients arrive as backward ends (the embeddings last: a tied head's gradient
    is complete only after the input embedding's backward). The last bucket's all-reduce is what
    nothing can hide, so it is small; each bucket before it is at most as large as all the buckets
    after it, so while it is on the wire backward still has as many bytes of gradients to compute as
    it sends: it is hidden whenever the wire keeps up with backward at all."""
    body = list(range(len(sizes)))
    tail: list[list[int]] = []
    if last > 0:
        for key in dict.fromkeys(keys):
            rest = [i for i in body if keys[i] == key]
            front = 0  # the first bucket is not the tail's: it starts the communication
            while front < len(rest) and sum(sizes[i] for i in rest[:front]) < limits[0]:
                front += 1
            rest = rest[front:]
            limit, mine = last, []
            while rest and limit < limits[-1]:
                take, total = [], 0
                while rest and (not take or total + sizes[rest[-1]] <= limit):
                    total += sizes[rest[-1]]
                    take.append(rest.pop())
                mine.insert(0, sorted(take))
                limit *= 2
            tail += mine
        taken = {i for t in tail for i in t}
        body = [i for i in body if i not in taken]
    open_: dict = {}  # key -> (positions, bytes, limit index)
    out: list[list[int]] = []
    for pos in body:
        size, key = sizes[pos], keys[pos]
        members, total, k = open_.get(key, ([], 0, 0))
        members.append(pos)
        total += size
        if total >= limits[min(k, len(limits) - 1)]:
            out.append(members)
            open_[key] = ([], 0, k + 1)
        else:
            open_[key] = (members, total, k)
    out.extend(members for members, _, _ in open_.values() if members)
    return out + tail


def build(named: list[tuple[str, nn.Parameter]], limits: list[int], comm_dtype: str, last: int = 0) -> list[Bucket]:
    """Flat buffers for the parameters `named` (in bucket order) and `.grad` views into them.
    Gradients already present are copied in, so a rebuild in the middle of a step loses nothing."""
    keys = [(p.dtype, p.device) for _, p in named]
    sizes = [p.numel() * p.element_size() for _, p in named]
    wire = precision.wire_dtype(comm_dtype)
    buckets = []
    for index, positions in enumerate(assign(sizes, keys, limits, last)):
        params = [named[i][1] for i in positions]
        numel = sum(p.numel() for p in params)
        buffer = torch.zeros(numel, dtype=params[0].dtype, device=params[0].device)
        views, offset = [], 0
        for p in params:
            view = buffer[offset:offset + p.numel()].view_as(p)
            if p.grad is not None:
                view.copy_(p.grad)
            p.grad = view
            views.append(view)
            offset += p.numel()
        comm_buffer = None
        if wire is not None and wire != buffer.dtype:
            comm_buffer = torch.empty(numel, dtype=wire, device=buffer.device)
        bucket = Bucket(index, params, [named[i][0] for i in positions], buffer, views, comm_buffer)
        bucket.reset()
        buckets.append(bucket)
    return buckets
