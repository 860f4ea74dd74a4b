"""Process groups rebuilt for each quorum of a fault-tolerant job (parallel/ft/manager.py, docs/fault_tolerance.md).

Fault tolerance's own transport, beside store.py; recorded through comm_record as comm's collectives are.
A replica is its own torchrun job, so the replicas share no default process group: the cross-replica group of
quorum q is built directly over the lighthouse's TCPStore, under a prefix that names the job, the quorum and the
shard position (rank k of every replica: HSDP's dp_replicate group for shard k). A new quorum gets a new prefix, so a group
never meets a member of an older one (torchft's reconfigurable group).

**The backend** (`quorum_backend`): NCCL when the replica's tensors are on CUDA and NCCL is available, unless
`parallel.backend` (or, when that is `auto`, `$SHARDLAB_BACKEND`) says gloo or gloo-staged; gloo otherwise
(on CPU, and with CUDA tensors where gloo was asked for: gloo takes CUDA tensors for all_reduce and
broadcast, the only two ops a quorum group runs).

**gloo**: gloo's own timeout bounds every operation: a dead member closes its sockets (the peers fail at
once), a stopped one lets the timeout expire (`parallel.ft_timeout`).

**NCCL**: a dead peer must never hang the survivor, and NCCL does not fail by itself: its kernels wait for
the peer, and the host learns nothing unless it asks. So:

- each quorum's group is a new communicator (`ProcessGroupNCCL` over the same store prefix), bound to the
  replica's device at once, initialised non-blocking (NCCL's `blocking=0`: an init that waits for a member
  that never comes can be aborted; `TORCH_NCCL_NONBLOCKING_TIMEOUT` bounds it, set to `parallel.ft_timeout`
  unless the environment sets it). NCCL's unique id travels through the store: its wait is bounded by the
  group's timeout too;
- the timeout is enforced on the host: after launching a collective the caller polls its completion up to
  `parallel.ft_timeout`, then waits for it (which raises the collective's own error). A failure or a timeout
  aborts the communicator (`ncclCommAbort`: the kernels waiting for the dead peer return) and raises, so the
  caller abandons the group (every_step's retry at attempt a+1);
- torch's watchdog stays as the backstop (at twice the timeout), and for these groups only it runs in
  `TORCH_NCCL_ASYNC_ERROR_HANDLING=2` (CleanUpOnly: abort the failed communicator, leave the process alone).
  torch's default, 3 (SkipCleanUp), throws from the watchdog thread and takes the whole process down: the
  survivor would die with the peer. The variable is read when a ProcessGroupNCCL is constructed, so it is set
  around the quorum group's construction only; the replica's own groups keep the default (a failure inside a
  replica should take the replica down: torchrun restarts it).

Abandoning a group (a retry, a new quorum) aborts its NCCL communicator at once rather than leaving it to the
destructor. The records carry the pseudo-group name (the prefix: "<job>/q<q>/shard<k>") and the members'
replica ids, whatever the backend.
"""
from __future__ import annotations

import contextlib
import datetime
import math
import os
import time

import torch
import torch.distributed as dist

from shardlab.comm_record import RECORDER, SKIP_FILES

SKIP_FILES.add(__file__)  # a record's stack starts at its caller

ERROR_HANDLING_ENV = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
NONBLOCKING_TIMEOUT_ENV = "TORCH_NCCL_NONBLOCKING_TIMEOUT"
CLEAN_UP_ONLY = "2"  # torch's ErrorHandlingMode::CleanUpOnly: abort the communicators, keep the process
WATCHDOG_FACTOR = 2.0  # torch's watchdog bounds an NCCL collective at this many timeouts: the host acts first


def quorum_backend(device=None, backend: str | None = "auto") -> str:
    """The backend of the quorum groups of a replica whose tensors live on `device`: "nccl" with CUDA
    tensors when NCCL is available and `backend` (parallel.backend; when "auto", $SHARDLAB_BACKEND) does
    not say gloo / gloo-staged; else "gloo"."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type != "cuda" or not dist.is_nccl_available():
        return "gloo"
    want = backend if backend not in (None, "", "auto") else os.environ.get("SHARDLAB_BACKEND", "auto")
    return "nccl" if want in ("auto", "nccl") else "gloo"


@contextlib.contextmanager
def _env(name: str, value: str):
    """`name=value` in this process's environment inside the block, as it was after."""
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


@contextlib.contextmanager
def _store_timeout(store, timeout: datetime.timedelta):
    """The store's wait bounded by `timeout` inside the block (a PrefixStore passes it to the client it
    wraps, so it is put back after)."""
    saved = store.timeout
    store.set_timeout(timeout)
    try:
        yield
    finally:
        store.set_timeout(saved)


def _nccl_group(store, position: int, size: int, timeout: datetime.timedelta, device: torch.device):
    """A ProcessGroupNCCL of `size` members over `store` (a prefix of its own), bound to `device`: see the
    module docstring for the error handling. Raises when the communicator cannot be set up."""
    os.environ.setdefault(NONBLOCKING_TIMEOUT_ENV, str(max(1, math.ceil(timeout.total_seconds()))))
    opts = dist.ProcessGroupNCCL.Options()
    opts._timeout = timeout * WATCHDOG_FACTOR
    config = getattr(opts, "config", None)
    if config is not None:  # NCCL >= 2.14: a non-blocking communicator, whose init can be aborted
        config.blocking = 0
    pg = None
    with _store_timeout(store, timeout):
        try:
            with _env(ERROR_HANDLING_ENV, CLEAN_UP_ONLY):
                pg = dist.ProcessGroupNCCL(store, position, size, opts)
            if hasattr(pg, "eager_connect_single_device"):  # the communicator now, not at the first collective
                pg.eager_connect_single_device(device)
        except BaseException:
            if pg is not None:
                pg.abort()
            raise
    return pg


class QuorumGroup:
    """One quorum's group for one shard position: `pg` (gloo or NCCL: `backend`), this member's position,
    the members, the timeout of its operations."""

    def __init__(self, store, prefix: str, position: int, members: list[int], timeout_s: float,
                 device=None, backend: str | None = "auto"):
        self.name, self.position, self.members = prefix, position, tuple(members)
        self.size = len(members)
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.backend = quorum_backend(self.device, backend)
        self.aborted = False
        # The constructor meets the other members through the store (blocks until all came, or the timeout)
        if self.backend == "nccl":
            self.pg = _nccl_group(dist.PrefixStore(prefix, store), position, self.size, self.timeout, self.device)
        else:
            self.pg = dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), position, self.size, self.timeout)

    def _record(self, op: str, t: torch.Tensor, wire: int, tag: str):
        nbytes = t.numel() * t.element_size()
        return RECORDER.add(op, nbytes, wire, t.dtype, t.shape, (self.name, self.members), tag)

    def run(self, launch) -> None:
        """`launch()` issues one collective and returns its work; return once it completed. gloo bounds it by
        its own timeout. NCCL: its completion is polled on the host up to the timeout; a failure, or no
        completion by then, aborts the communicator and raises (the caller abandons the group)."""
        if self.aborted:
            raise RuntimeError(f"quorum group {self.name} was aborted")
        if self.backend != "nccl":
            launch().wait()
            return
        try:
            work = launch()
            deadline = time.monotonic() + self.timeout.total_seconds()
            pause = 0.0
            while not work.is_completed():  # an error completes a work too: wait() below raises it
                if time.monotonic() > deadline:
                    raise TimeoutError(f"quorum group {self.name}: a collective did not complete within "
                                       f"{self.timeout.total_seconds():g} s (parallel.ft_timeout)")
                time.sleep(pause)
                pause = min(0.001, pause + 0.0001)  # a spin first, then a millisecond at most
            work.wait()  # the current stream waits for the result; raises the collective's error
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Abandon the group: an NCCL communicator is aborted now (its pending kernels return); a gloo group
        closes its sockets when dropped."""
        if self.aborted:
            return
        self.aborted = True
        if self.backend == "nccl" and self.pg is not None:
            try:
                self.pg.abort()
            except Exception:  # noqa: BLE001 - already aborted by torch's watchdog, or never connected
                pass


def quorum_group(store, prefix: str, position: int, members: list[int], timeout_s: float, device=None,
                 backend: str | None = "auto") -> QuorumGroup:
    """The group of quorum members `members` (replica ids, in group order) under `prefix`; this process is
    `members[position]`, its tensors on `device` (the backend follows: `quorum_backend`). Raises when a
    member does not come within `timeout_s`."""
    return QuorumGroup(store, prefix, position, members, timeout_s, device, backend)


def quorum_all_reduce(t: torch.Tensor, group: QuorumGroup, tag: str = "") -> None:
    """Sum `t` in place over the quorum's members (ring bytes as comm.all_reduce counts them)."""
    n = group.size
    rec = group._record("all_reduce", t, int(t.numel() * t.element_size() * 2 * (n - 1) / n), tag)
    if n > 1:
        group.run(lambda: group.pg.allreduce([t]))
    RECORDER.done(rec)


def quorum_broadcast(t: torch.Tensor, src: int, group: QuorumGroup, tag: str = "") -> None:
    """`t` from member position `src` to every member, in place."""
    rec = group._record("broadcast", t, t.numel() * t.element_size(), tag)
    if group.size > 1:
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = src, 0
        group.run(lambda: group.pg.broadcast([t], opts))
    RECORDER.done(rec)
