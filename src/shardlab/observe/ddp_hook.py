"""A DDP comm hook that sends torch DistributedDataParallel's bucket all-reduces through comm.py.

torch's DDP runs its collectives inside C++, invisible to shardlab's recorder. When tracing is on,
`torch-ddp` registers this hook instead of the default one: each bucket becomes a recorded
`all_reduce` tagged `bucketN`, preceded by a `bucket_ready` instant, with its completion stamped
when the collective's future resolves (not when DDP happens to wait for it). It computes exactly
what the default hooks compute (average; fp16/bf16 compression when `parallel.comm_dtype` says so).

DDP waits for the buckets inside C++, at the end of backward. The last bucket's hook marks the
point where gradient computation has ended, so from then on the caller counts as waiting
(`t_wait`) for every bucket of the step still in flight.
"""

import time

import torch  # no `from __future__ import annotations`: DDP checks the hook's real annotations
import torch.distributed as dist

from shardlab import comm
from shardlab.observe import timeline
from shardlab import precision



class _State:
    def __init__(self, group, comm_dtype: str):
        self.group, self.dtype = group, precision.wire_dtype(comm_dtype)
        self.in_flight = []  # this step's bucket records


def _hook(state: _State, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    buf = bucket.buffer()
    idx = bucket.index()
    timeline.instant("bucket_ready", bucket=idx)
    world = comm.world_size(state.group)
    wire = buf if state.dtype is None else buf.to(state.dtype)
    wire.div_(world)
    handle = comm.all_reduce(wire, group=state.group, async_op=True, tag=f"bucket{idx}")
    state.in_flight.append(handle.rec)
    if bucket.is_last():
        now = time.perf_counter()
        for rec in state.in_flight:
            rec.t_wait = now
        state.in_flight = []

    def done(fut):
        comm.RECORDER.done(handle.rec)
        value = fut.value()
        out = value[0] if value else wire  # (torch's fake process group completes with no tensor)
        if state.dtype is not None:
            buf.copy_(out)
            return buf
        return out

    return handle.work.get_future().then(done)


def register(ddp_module, group=None, comm_dtype: str = "fp32") -> None:
    """Replace DDP's default all-reduce (or compression) hook by the recording one."""
    ddp_module.register_comm_hook(_State(group, comm_dtype), _hook)
