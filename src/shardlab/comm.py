"""The one door to collectives.

Every collective and point-to-point transfer of shardlab's own code goes through this module, so each
one is recorded: op, group (a readable name and its members' global ranks), a per-group sequence
number, payload bytes, wire bytes, dtype, launch and completion time, a short stack. The records feed
three readers: per-step accounting (`summary.json` `comm`), the timeline (trace), and the flight
recorder (a ring buffer the hang watchdog dumps). The bookkeeping lives in comm_record.py and the process
groups' names and members (`rank`, `group_info`, `name_group`, `new_group`, ...) in comm_groups.py, both
re-exported here. Fault tolerance's own transport, the TCPStore exchange and the groups rebuilt per quorum
across replicas that may die, lives with it (parallel/ft/store.py, parallel/ft/quorum.py) and records through
comm_record the same way.

Groups. A record's `group` is the name of its process group: "world" for the default group, the mesh
dimension for a DeviceMesh group ("dp_shard", "tp", ...: torch describes those as `mesh_<dim>`), or
what the caller registered with `name_group(pg, name)`. `group_ranks` lists the members (global ranks).
`seq` is the n-th collective on that group (1, 2, 3, ...), so the same collective has the same
(group, group_ranks, seq) on every member: that is how the hang analysis and the trace line ranks up.
Point-to-point records count per direction instead: `seq` of a send from rank a to rank b is the n-th
message on the channel a -> b of that group, and the matching recv on b has the same `seq`. `order`
is this process's own count over all groups (program order), for "what did this rank do last".

Ranks passed in (`src` of broadcast/scatter, `dst`/`src` of send/recv, the peer of a P2POp) are
**group-local**: the position in `group` (torch's `group_src`/`group_dst`), so src=0 is the group's
first member. With the default group, group-local and global ranks are the same. Records store
global ranks. `global_rank(group, r)` and `group_rank(group, g)` convert.

Byte conventions (per rank): `bytes` is the payload, the full tensor handed to the collective
(all_reduce: the buffer; reduce_scatter: the full unsharded input; all_gather: the full gathered
output; scatter: the N chunks together; send/recv: the message). `wire_bytes` is what a ring algorithm
sends per rank: all_reduce 2(N-1)/N x payload, reduce_scatter and all_gather (N-1)/N x payload,
broadcast payload; scatter (N-1)/N x payload on the source and 0 elsewhere; all_to_all (uneven splits: expert
parallelism's dispatch) the input less the chunk this rank keeps; send payload, recv 0
(a pair's sum is the traffic once).
"""
from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from shardlab import comm_record
from shardlab.comm_groups import (  # noqa: F401 - who this rank is, and the groups' names: `comm.rank` & co.
    global_rank, group_info, group_rank, is_initialized, name_group, new_group, rank, world_size)
from shardlab.comm_record import (  # noqa: F401 - re-exported: `comm.RECORDER`, `comm.set_phase` & co.
    RECORDER, GroupCount, Handle, Record, Recorder, set_phase)

ReduceOp = dist.ReduceOp
# torch 2.13 renamed the flat-tensor collectives (the old names warn); older torch has only the old ones.
# The torch functions themselves, unrecorded: what the planner's calibration times
dist_all_gather_flat = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
dist_reduce_scatter_flat = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

comm_record.SKIP_FILES.add(__file__)  # a record's stack starts at the caller of comm.X


# --- process group --------------------------------------------------------------------------------

# Staged mode (backend "gloo-staged"): gloo ranks whose tensors live on CUDA, several ranks sharing one
# GPU (one GPU cannot host two NCCL ranks; `make gpu-check` runs worlds 2 and 4 this way). gloo takes
# CUDA tensors only for broadcast and all_reduce, so every other op runs on host copies, the results
# copied back to the device when the op is waited for (`_Staged`). Slow by design: a correctness mode.
# Without CUDA it stages CPU tensors the same way (a rehearsal of that path, testable anywhere).
_STAGED = False
_STAGE_HOST = False  # staged mode on a machine without CUDA: stage every tensor
BACKENDS = ("auto", "gloo", "nccl", "gloo-staged")


def init(backend: str = "auto") -> None:
    """Join the process group described by torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR...).
    "auto": $SHARDLAB_BACKEND if set, else nccl with CUDA, else gloo."""
    global _STAGED, _STAGE_HOST
    if is_initialized():
        return
    if backend == "auto":
        backend = os.environ.get("SHARDLAB_BACKEND", "auto")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "gloo-staged":
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
        backend, _STAGED, _STAGE_HOST = "gloo", True, not torch.cuda.is_available()
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
        except Exception as e:  # noqa: BLE001 - a peer already gone: leaving is all that is left to do
            print(f"[comm] rank {rank()}: the exit barrier failed ({type(e).__name__}: {e}); a peer has "
                  "probably exited already; leaving without it", file=sys.stderr, flush=True)
        time.sleep(0.05)
    dist.destroy_process_group()


def _size(group) -> int:
    return world_size(group)


# Records name their group by the registry (comm_groups.py); the recorder itself knows no process groups.
RECORDER.group_info, RECORDER.rank = group_info, rank


def staged() -> bool:
    """Whether comm stages CUDA tensors through host memory for gloo (backend gloo-staged)."""
    return _STAGED


def device() -> torch.device:
    """The device a rank's tensors live on: CUDA under nccl and gloo-staged; without a process group
    (one rank, `single`) what `init` would pick: CUDA when available unless $SHARDLAB_BACKEND says gloo."""
    if not is_initialized():
        want = os.environ.get("SHARDLAB_BACKEND", "auto")
        if torch.cuda.is_available() and want in ("auto", "nccl", "gloo-staged"):
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    if (_STAGED and not _STAGE_HOST) or (torch.cuda.is_available() and dist.get_backend() == "nccl"):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# --- collectives ------------------------------------------------------------------------------------

class _Staged:
    """A gloo op run on host copies of CUDA tensors: `wait()` waits for it, then copies the results
    (`back`: (device tensor, host tensor) pairs) to the device. The host copies stay referenced here
    until then, so an in-flight send's buffer outlives the caller's."""

    def __init__(self, work, back, keep=()):
        self.work, self.back, self.keep = work, list(back), keep

    def wait(self):
        if self.work is not None:
            self.work.wait()
        for dev, host in self.back:
            dev.copy_(host)
        self.back, self.keep = [], ()
        return True

    def is_completed(self) -> bool:
        return self.work is None or self.work.is_completed()


def _stages(t: torch.Tensor) -> bool:
    return _STAGED and (t.is_cuda or _STAGE_HOST)


def _call(f, ins, outs, async_op: bool):
    """f(*ins, *outs, async_op): directly, or in staged mode with CUDA tensors, on host copies."""
    if not any(_stages(t) for t in (*ins, *outs)):
        return f(*ins, *outs, async_op=async_op)
    h_in = [t.detach().to("cpu", copy=True) for t in ins]
    h_out = [torch.empty(t.shape, dtype=t.dtype) for t in outs]
    work = _Staged(f(*h_in, *h_out, async_op=True), zip(outs, h_out), keep=h_in)
    if async_op:
        return work
    work.wait()
    return None


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _launch(op: str, fn, payload: torch.Tensor, wire_factor: float, group, async_op: bool, tag: str,
            peer: int | None = None, wire: int | None = None):
    n = _size(group)
    nbytes = _nbytes(payload)
    wire = int(nbytes * wire_factor) if wire is None else wire
    rec = RECORDER.add(op, nbytes, wire, payload.dtype, payload.shape, group, tag, peer=peer)
    if n == 1:  # a group of one: nothing to exchange, but keep the record so accounting stays uniform
        work = None
    else:
        # (point-to-point has no group-wide moment to compare at; an uneven all-to-all's sizes differ by design)
        if RECORDER.verify and peer is None and op != "all_to_all":
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
    """Ranks were about to issue different collectives at the same sequence number of a group (debug
    verification)."""


_OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "scatter", "all_to_all")


def _verify(rec: Record, payload: torch.Tensor, group) -> None:
    """Debug mode (doctor.verify_collectives): before issuing a collective, all-gather a fixed-size
    fingerprint (op, element count, element size) and fail on every rank at once if they differ. A real
    mismatch would otherwise hang (NCCL) or abort one process inside gloo. Costs one small extra
    all-gather per collective, so it is off by default; it is not recorded."""
    dev = device() if payload.is_meta else payload.device  # (scatter's payload is only a shape)
    dev = torch.device("cpu") if _STAGED else dev
    sig = torch.tensor([_OPS.index(rec.op), payload.numel(), payload.element_size()], dtype=torch.int64, device=dev)
    out = torch.empty(_size(group) * 3, dtype=torch.int64, device=dev)
    dist_all_gather_flat(out, sig, group=group)
    rows = out.view(-1, 3).tolist()
    if any(r != rows[0] for r in rows):
        desc = "; ".join(f"rank {rec.group_ranks[i]}: {_OPS[o]} of {n} x {e} B" for i, (o, n, e) in enumerate(rows))
        raise CollectiveMismatchError(f"collective mismatch at sequence #{rec.seq} of {rec.group} "
                                      f"{list(rec.group_ranks)} (step {rec.step}): "
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
                   lambda async_op: _call(lambda i, o, async_op: dist_reduce_scatter_flat(
                       o, i, op=op, group=group, async_op=async_op), [inp], [out], async_op),
                   inp, (n - 1) / n, group, async_op, tag)


def all_gather(out: torch.Tensor, inp: torch.Tensor, group=None, async_op: bool = False, tag: str = ""):
    """`inp` is this rank's shard; `out` is the full flat buffer of N shards."""
    n = _size(group)
    if n == 1:
        out.copy_(inp)
    return _launch("all_gather",
                   lambda async_op: _call(lambda i, o, async_op: dist_all_gather_flat(
                       o, i, group=group, async_op=async_op), [inp], [out], async_op),
                   out, (n - 1) / n, group, async_op, tag)


def all_to_all_single(out: torch.Tensor, inp: torch.Tensor, out_splits: list[int] | None = None,
                      in_splits: list[int] | None = None, group=None, async_op: bool = False, tag: str = ""):
    """Rows `in_splits[i]` of `inp` (dim 0, in group-rank order) go to the group's rank i; `out` receives
    `out_splits[j]` rows from rank j. Splits may be uneven (None: equal). `bytes` is the payload this rank
    sends (all of `inp`, its own chunk included); `wire_bytes` what leaves it: `inp` less its own chunk."""
    n = _size(group)
    me = rank(group) if n > 1 else 0
    row = inp[0].numel() * inp.element_size() if inp.dim() and inp.shape[0] else 0
    own = (in_splits[me] if in_splits is not None else (inp.shape[0] // n if inp.dim() else 0)) * row
    if n == 1:
        out.copy_(inp)
    return _launch("all_to_all", lambda async_op: _call(lambda i, o, async_op: dist.all_to_all_single(
        o, i, output_split_sizes=out_splits, input_split_sizes=in_splits, group=group, async_op=async_op),
        [inp], [out], async_op),
        inp, 0.0, group, async_op, tag, wire=_nbytes(inp) - own)


def broadcast(t: torch.Tensor, src: int = 0, group=None, async_op: bool = False, tag: str = ""):
    """From the group's rank `src` (group-local: 0 is the group's first member) to every member."""
    return _launch("broadcast",
                   lambda async_op: dist.broadcast(t, group_src=src, group=group, async_op=async_op),
                   t, 1.0, group, async_op, tag)


def scatter(out: torch.Tensor, chunks: list[torch.Tensor] | None, src: int = 0, group=None, async_op: bool = False,
            tag: str = ""):
    """The group's rank `src` (group-local) sends `chunks[i]` to the group's rank i; every rank receives
    its chunk in `out`. `chunks` is only read on the source (others may pass None)."""
    n = _size(group)
    me = rank(group)
    if n == 1:
        out.copy_(chunks[0])
    payload = torch.empty((n, *out.shape), dtype=out.dtype, device="meta")  # the N chunks, for the record
    sources = list(chunks) if me == src else []
    return _launch("scatter",
                   lambda async_op: _call(lambda *ts, async_op: dist.scatter(
                       ts[-1], list(ts[:-1]) if me == src else None, group_src=src, group=group, async_op=async_op),
                       sources, [out], async_op),
                   payload, (n - 1) / n if me == src else 0.0, group, async_op, tag)


# --- point to point -----------------------------------------------------------------------------------
# Peers are group-local ranks, like `src` above. Each message is recorded on both sides: "send" with the
# receiver as `peer`, "recv" with the sender; both carry the same `seq` (n-th message sender -> receiver).

def send(t: torch.Tensor, dst: int, group=None, tag: str = "") -> None:
    """Send `t` to the group's rank `dst`; returns once the backend has taken it."""
    _p2p("send", t, dst, group, False, tag)


def recv(t: torch.Tensor, src: int, group=None, tag: str = "") -> None:
    """Receive into `t` from the group's rank `src` (a named source: records need the peer)."""
    _p2p("recv", t, src, group, False, tag)


def recv_any(t: torch.Tensor, group=None, tag: str = "") -> int:
    """Receive into `t` from whichever rank of the group sends first; returns that rank (group-local).
    Gloo matches a receive with no source against any sender (NCCL cannot); the asynchronous parameter
    server serves whichever worker is ready. Recorded once the sender is known (the record needs it)."""
    t_launch = time.perf_counter()
    host = torch.empty(t.shape, dtype=t.dtype) if _stages(t) else t
    src = dist.recv(host, group=group)  # no source: any; torch returns the sender's global rank
    if host is not t:
        t.copy_(host)
    rec = RECORDER.add("recv", _nbytes(t), 0, t.dtype, t.shape, group, tag, peer=src)
    rec.t_launch = t_launch
    RECORDER.done(rec)
    return group_rank(group, src)


# The posting log: while `log_p2p()` is active, every point-to-point post and every wait on one, in
# this process's program order: ("post", fused, ((op, peer global rank, tag), ...)) and ("wait", index of
# the post). parallel/p2p_order.py `from_logs` replays the ranks' logs under NCCL's rules, so a test can
# check the order real code posts in (ring attention, pipeline lanes), not a re-derivation of it.
_P2P_LOG: list | None = None


@contextlib.contextmanager
def log_p2p():
    global _P2P_LOG
    _P2P_LOG = log = []
    try:
        yield log
    finally:
        _P2P_LOG = None


def _log_post(fused: bool, msgs: tuple, handles: list) -> int | None:
    if _P2P_LOG is None:
        return None
    _P2P_LOG.append(("post", fused, msgs))
    index = len(_P2P_LOG) - 1
    for h in handles:
        if h is not None:
            h.on_wait = lambda i=index, log=_P2P_LOG: log.append(("wait", i))
    return index


def isend(t: torch.Tensor, dst: int, group=None, tag: str = "") -> Handle:
    return _p2p("send", t, dst, group, True, tag)


def irecv(t: torch.Tensor, src: int, group=None, tag: str = "") -> Handle:
    return _p2p("recv", t, src, group, True, tag)


def _p2p(op: str, t: torch.Tensor, peer: int, group, async_op: bool, tag: str):
    def post(*ts, async_op):
        return dist.isend(ts[0], group=group, group_dst=peer) if op == "send" else \
            dist.irecv(ts[0], group=group, group_src=peer)

    def issue(async_op):
        work = _call(post, [t] if op == "send" else [], [] if op == "send" else [t], True)
        if not async_op:
            work.wait()  # what dist.send/recv do
        return work
    gpeer = global_rank(group, peer)
    handle = _launch(op, issue, t, 1.0 if op == "send" else 0.0, group, async_op, tag, peer=gpeer)
    index = _log_post(False, ((op, gpeer, tag),), [handle])
    if index is not None and not async_op:
        _P2P_LOG.append(("wait", index))
    return handle


@dataclass
class P2POp:
    """One transfer of a `batch_isend_irecv`: `op` is `comm.isend` or `comm.irecv`, `peer` group-local."""
    op: object
    tensor: torch.Tensor
    peer: int
    group: object = None
    tag: str = ""


class _AllWorks:
    """Several backend works waited on as one (a coalesced batch returns fewer works than ops)."""

    def __init__(self, works):
        self.works = works

    def wait(self):
        for w in self.works:
            w.wait()
        return True

    def is_completed(self) -> bool:
        return all(w.is_completed() for w in self.works)


def batch_isend_irecv(ops: list[P2POp]) -> list[Handle]:
    """Issue sends and receives together (torch's batch_isend_irecv: on NCCL one coalesced launch, so a
    ring exchange cannot deadlock on the order of sends and receives). One recorded Handle per op."""
    if not ops:
        return []
    for p in ops:
        if p.op not in (isend, irecv):
            raise ValueError(f"P2POp.op must be comm.isend or comm.irecv, not {p.op!r}")
    recs = [RECORDER.add("send" if p.op is isend else "recv", _nbytes(p.tensor),
                         _nbytes(p.tensor) if p.op is isend else 0, p.tensor.dtype, p.tensor.shape, p.group, p.tag,
                         peer=global_rank(p.group, p.peer)) for p in ops]
    stage = any(_stages(p.tensor) for p in ops)
    tensors = [p.tensor if not stage else p.tensor.detach().to("cpu", copy=True) if p.op is isend
               else torch.empty(p.tensor.shape, dtype=p.tensor.dtype) for p in ops]
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend if p.op is isend else dist.irecv, t,
                                               group=p.group, group_peer=p.peer) for p, t in zip(ops, tensors)])
    if len(works) != len(ops):  # coalesced: the batch completes as a whole
        works = [_AllWorks(works)] * len(ops)
    if stage:  # gloo: one work per op; a receive's data goes to the device when it is waited for
        works = [_Staged(w, [(p.tensor, t)] if p.op is irecv else [], keep=(t,))
                 for p, w, t in zip(ops, works, tensors)]
    handles = []
    for rec, work in zip(recs, works):
        rec.state, rec.async_op = "scheduled", True
        handles.append(Handle(work, rec))
    _log_post(True, tuple(("send" if p.op is isend else "recv", global_rank(p.group, p.peer), p.tag) for p in ops),
              handles)
    return handles


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
    """`obj` of the group's rank `src` (group-local), on every member."""
    if _size(group) == 1:
        return obj
    box = [obj]
    rec = RECORDER.add("broadcast_object", 0, 0, "object", (), group, "control")
    dist.broadcast_object_list(box, group_src=src, group=group)
    RECORDER.done(rec)
    return box[0]


def barrier(group=None) -> None:
    if _size(group) == 1:
        return
    rec = RECORDER.add("barrier", 0, 0, "none", (), group, "control")
    dist.barrier(group=group)
    RECORDER.done(rec)



class Vote:
    """A non-blocking MAX over one small integer per rank (the stop-on-signal vote, shardlab.launch.interrupt).

    Started at one step boundary and read at the next, it costs the step nothing: by then the tiny
    all-reduce has long completed in the background. It is control plane, not the step's traffic, so it
    is not recorded (per-step accounting and call counts stay those of the training itself)."""

    def __init__(self, value: int, group=None):
        self.t = torch.tensor([int(value)], dtype=torch.int32)
        self.work = None
        if _size(group) > 1:
            self.work = dist.all_reduce(self.t, op=ReduceOp.MAX, group=group, async_op=True)

    def result(self) -> int:
        if self.work is not None:
            self.work.wait()
            self.work = None
        return int(self.t.item())
