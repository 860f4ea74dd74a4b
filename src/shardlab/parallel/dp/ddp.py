"""`ddp`: data parallelism written out — buckets, overlap, no_sync, unused parameters, compression (casts, PowerSGD).

Every rank holds the whole model and sees different data. After backward every rank must hold the
same, averaged gradient; the optimizer step then keeps the replicas identical. How (docs/ddp.md):

1. wrap: check that all ranks hold the same parameter names/shapes, broadcast parameters and
   buffers from rank 0, and lay the gradients out in flat buckets (`buckets.py`), `.grad` = views.
2. backward: a post-accumulate-grad hook per parameter marks it ready; when the last parameter of
   a bucket is ready (and every earlier bucket has been launched, so all ranks issue the
   collectives in the same order) the bucket's all-reduce starts asynchronously while autograd
   keeps computing the gradients of earlier layers: communication overlaps computation.
3. end of backward (an autograd callback queued by the first hook): unused parameters are marked
   ready (`find_unused`), or the step fails naming them, instead of waiting forever.
4. finish_backward: wait for every bucket, and after the first step rebuild the buckets in the
   order gradients actually became ready (as torch DDP does).
"""
from __future__ import annotations

import contextlib
import time

import torch
import torch.nn as nn

from shardlab import comm
from shardlab.observe import timeline
from shardlab.parallel.dp import buckets as B
from shardlab.parallel.dp.base import Strategy
from shardlab.parallel.dp.powersgd import PowerSGD
from shardlab.parallel.dp.sync_batchnorm import enable_cpu_sync_batchnorm

MiB = 1024 * 1024


class UnusedParameterError(RuntimeError):
    pass


class DDP(Strategy):

    # parallel.find_unused: which parameters no rank used is read once, to leave their .grad None
    HOST_SYNCS = {**Strategy.HOST_SYNCS, "shardlab.parallel.dp.ddp": 1}
    name = "ddp"

    # --- set-up -------------------------------------------------------------------------------------
    def wrap(self, model: nn.Module) -> nn.Module:
        self.model = self.module = model
        self.world = comm.world_size(self.group)
        self.rank = comm.rank(self.group)
        self.named = _unique_trainable(model)  # frozen parameters never get a gradient: not bucketed
        self.names = {p: n for n, p in self.named}
        self.index = {p: i for i, (_, p) in enumerate(self.named)}
        check_replicas(model, self.group)
        if self.device.type == "cpu":
            enable_cpu_sync_batchnorm(model)  # torch's SyncBatchNorm kernels are GPU-only
        broadcast_coalesced([t.data for t in _unique(model.parameters())] + list(model.buffers()), self.group,
                            tag="wrap_broadcast")
        if any(True for _ in model.buffers()):
            # Like torch DDP's broadcast_buffers: rank 0's buffers (e.g. BatchNorm running stats) win.
            model.register_forward_pre_hook(self._sync_buffers)

        self.limits = [int(self.pcfg.first_bucket_mb * MiB), int(self.pcfg.bucket_mb * MiB)]
        self.last_limit = int(self.pcfg.last_bucket_mb * MiB)
        # Reverse registration order approximates the order in which gradients become ready.
        self.buckets = B.build(list(reversed(self.named)), self.limits, self.pcfg.comm_dtype, self.last_limit)
        self._index_buckets()
        self.rebuilt = not self.pcfg.rebuild_buckets
        self.powersgd = None
        if self.pcfg.compress == "powersgd":
            # The buckets still hold the gradients (views), but are not all-reduced: after backward
            # PowerSGD sends low-rank factors instead (parallel/dp/powersgd.py).
            self.powersgd = PowerSGD([p for _, p in self.named], self.pcfg.powersgd_rank, self.group)
        self.require_sync = True
        self.used = [0] * len(self.named)  # for find_unused: which parameters this rank used
        self._new_step()
        self.last_events: list[dict] = []
        for p in self.index:
            p.register_post_accumulate_grad_hook(self._on_grad_accumulated)
        return self.module

    def _index_buckets(self) -> None:
        self.slot = {p: (b, v) for b in self.buckets for p, v in zip(b.params, b.views)}

    def _new_step(self) -> None:
        for b in self.buckets:
            b.reset()
        self.next_launch = 0  # buckets are launched strictly in index order
        self.in_flight: list = []  # launched buckets whose completion has not been seen yet
        self.ready = [False] * len(self.named)
        self.ready_order: list[int] = []
        self.backward_ended = False
        self.callback_queued = False
        self.unused_handle = None

    def _sync_buffers(self, module, args) -> None:
        if module.training and torch.is_grad_enabled():
            broadcast_coalesced(list(module.buffers()), self.group, tag="buffers")

    # --- backward -------------------------------------------------------------------------------------
    def _on_grad_accumulated(self, p: nn.Parameter) -> None:
        bucket, view = self.slot[p]
        if p.grad is not view and p.grad.data_ptr() != view.data_ptr():
            # `.grad` was replaced or set to None (e.g. optimizer.zero_grad(set_to_none=True)):
            # autograd then allocated a fresh tensor. Move it back into the bucket.
            view.copy_(p.grad)
            p.grad = view
        i = self.index[p]
        self.used[i] = 1
        if not self.require_sync:  # no_sync: accumulate locally, communicate on the last microbatch
            return
        self._poll_in_flight()
        if not self.callback_queued:
            torch.autograd.Variable._execution_engine.queue_callback(self._on_backward_end)
            self.callback_queued = True
        if self.ready[i]:
            raise RuntimeError(
                f"ddp: parameter {self.names[p]!r} received a gradient twice in one synchronised step "
                f"(rank {self.rank}). Call finish_backward() after each synchronised backward and use "
                f"set_requires_gradient_sync(False) / no_sync() for the microbatches before the last.")
        self.ready[i] = True
        self.ready_order.append(i)
        if bucket.mark_ready():
            timeline.instant("bucket_ready", bucket=bucket.index)
            self._launch_ready_buckets()

    def _launch_ready_buckets(self) -> None:
        if self.powersgd is not None:
            return  # compression needs every matrix whole: it runs in finish_backward
        while self.next_launch < len(self.buckets) and self.buckets[self.next_launch].pending == 0:
            self.buckets[self.next_launch].launch(self.world, self.group)
            self.in_flight.append(self.buckets[self.next_launch])
            self.next_launch += 1

    def _poll_in_flight(self) -> None:
        """Stamp the completion of the all-reduces that ended since the last gradient arrived."""
        if self.in_flight:
            self.in_flight = [b for b in self.in_flight if not b.poll()]

    def _on_backward_end(self) -> None:
        """Runs once autograd has finished the whole graph: every gradient this rank will get is here."""
        self.backward_ended = True
        missing = [i for i in range(len(self.named)) if not self.ready[i]]
        if not missing:
            return
        names = [self.named[i][0] for i in missing]
        if not self.pcfg.find_unused:
            # Every rank checks itself and raises. No collective here: if ranks disagree about which
            # parameters were used, a rank that launched more buckets would wait on one that did not.
            shown = ", ".join(names[:12]) + (f", ... ({len(names) - 12} more)" if len(names) > 12 else "")
            raise UnusedParameterError(
                f"ddp: rank {self.rank} got no gradient for {len(names)} parameter(s) in step "
                f"{comm.RECORDER.step}: {shown}. They took no part in computing the loss. Set "
                f"parallel.find_unused=true if that is expected (conditional branches), or freeze them "
                f"(requires_grad=False).")
        # find_unused: an unused parameter contributes its current slot (zero, or what earlier
        # microbatches accumulated) and is marked ready, so its bucket can be launched.
        now = time.perf_counter()
        for i in missing:
            p = self.named[i][1]
            self.ready[i] = True
            self.ready_order.append(i)
            if self.slot[p][0].mark_ready(now):
                timeline.instant("bucket_ready", bucket=self.slot[p][0].index)
        self._launch_ready_buckets()
        # Which parameters were used on *some* rank: the globally unused ones keep `.grad = None`,
        # as with torch DDP, so the optimizer leaves them alone.
        # on the device: an NCCL group carries device memory only
        self.used_global = torch.tensor(self.used, dtype=torch.int32, device=self.device)
        self.unused_handle = comm.all_reduce(self.used_global, group=self.group, async_op=True, tag="unused_map")

    def finish_backward(self) -> None:
        if not self.require_sync:
            return
        if not self.backward_ended:
            if not any(self.ready):
                raise RuntimeError(f"ddp: finish_backward() on rank {self.rank} but no gradient arrived "
                                   f"since the last step; was backward() called on the loss?")
            self._on_backward_end()
        if self.powersgd is not None:
            self.powersgd.reduce(self.world)
            self.last_events = []
            self._after_sync()
            return
        self._poll_in_flight()
        now = time.perf_counter()
        for b in self.buckets:  # from here the step only waits (the trace's exposed communication)
            if b.handle is not None and b.handle.rec.t_wait is None:
                b.handle.rec.t_wait = now
        events = []
        for b in self.buckets:
            b.finish()
            events.append(b.events)
        self.last_events = events
        self._after_sync()

    def _after_sync(self) -> None:
        if not self.rebuilt:
            self._rebuild_buckets()
        if self.unused_handle is not None:
            self.unused_handle.wait()
            # one read of the map on the host (no data-dependent shapes on the device)
            for i, used in enumerate(self.used_global.tolist()):
                if not used:
                    self.named[i][1].grad = None
        self.used = [0] * len(self.named)
        self._new_step()

    def _rebuild_buckets(self) -> None:
        """Lay the buckets out in the order gradients became ready in the first step, so each bucket
        is complete as early as possible. Rank 0's order is used everywhere: all ranks must agree."""
        self.rebuilt = True
        order = comm.broadcast_object(self.ready_order, src=0, group=self.group)
        if order == [self.index[p] for b in self.buckets for p in b.params]:
            return  # already the layout we have
        self.buckets = B.build([self.named[i] for i in order], self.limits, self.pcfg.comm_dtype, self.last_limit)
        self._index_buckets()

    # --- the step protocol ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def no_sync(self):
        previous, self.require_sync = self.require_sync, False
        try:
            yield
        finally:
            self.require_sync = previous

    def set_requires_gradient_sync(self, requires: bool) -> None:
        self.require_sync = requires  # read by the gradient hooks, i.e. at backward time

    def grad_tensors(self):
        # The bucket buffers hold exactly the gradients, in few large tensors (fast norms, unscaling).
        return (b.buffer for b in self.buckets)

    def zero_grad(self, optimizer) -> None:
        """Zero in place: `.grad` must stay a view into its bucket (set_to_none would break that)."""
        for b in self.buckets:
            b.buffer.zero_()

    def bucket_events(self) -> list[dict]:
        """Per bucket of the last synchronised step: ready/launch/done times (perf_counter seconds, the
        clock of comm records), payload bytes, wire dtype, number of parameters; see docs/ddp.md."""
        return list(self.last_events)

    def bucket_layout(self) -> list[dict]:
        return [{"bucket": b.index, "params": list(b.names), "numel": b.buffer.numel(), "bytes": b.nbytes,
                 "dtype": str(b.wire_tensor.dtype).replace("torch.", "")} for b in self.buckets]


# --- helpers ----------------------------------------------------------------------------------------

def _unique(params):
    seen = set()
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            yield p


def _unique_trainable(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """Trainable parameters once each (a tied weight is one parameter under its first name)."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def check_replicas(model: nn.Module, group=None) -> None:
    """Same parameter and buffer names, shapes and dtypes on every rank, or one clear error (raised on
    every rank, since all of them see the gathered descriptions)."""
    mine = [(kind, n, tuple(t.shape), str(t.dtype).replace("torch.", ""))
            for kind, items in (("parameter", model.named_parameters()), ("buffer", model.named_buffers()))
            for n, t in items]
    everyone = comm.all_gather_object(mine, group=group)
    ref = everyone[0]
    for r, theirs in enumerate(everyone[1:], start=1):
        if theirs == ref:
            continue
        if len(theirs) != len(ref):
            detail = f"rank 0 has {len(ref)} parameters+buffers, rank {r} has {len(theirs)}"
        else:
            a, b = next((a, b) for a, b in zip(ref, theirs) if a != b)
            detail = f"rank 0 has {a[0]} {a[1]!r} {list(a[2])} {a[3]}, rank {r} has {b[0]} {b[1]!r} {list(b[2])} {b[3]}"
        diff = sorted(set(ref) ^ set(theirs))[:3]
        raise RuntimeError(f"ddp: the model differs across ranks ({detail}; first differences: {diff}). "
                           f"Every rank must build the same model before wrapping.")


def broadcast_coalesced(tensors: list[torch.Tensor], group=None, tag: str = "broadcast") -> None:
    """Broadcast tensors from the group's first rank with one collective per dtype (flatten, broadcast, copy back)."""
    by_dtype: dict = {}
    for t in tensors:
        by_dtype.setdefault((t.dtype, t.device), []).append(t)
    for ts in by_dtype.values():
        flat = torch.cat([t.detach().reshape(-1) for t in ts])
        comm.broadcast(flat, src=0, group=group, tag=tag)  # src is group-local in comm: the group's first rank
        offset = 0
        with torch.no_grad():
            for t in ts:
                t.copy_(flat[offset:offset + t.numel()].view_as(t))
                offset += t.numel()
