"""A world of N ranks in one process: torch's fake process group, as one chosen rank.

`fake_world(world, rank, device)` joins a `FakeProcessGroup` (torch.testing's: every collective returns
at once and moves nothing) as `rank` of `world`, so the layers build their real mesh, groups and
collectives for that rank. Inside it shardlab's door to collectives (`comm`) is watched:

- `comm.device()` answers the simulated accelerator (`meta`);
- object collectives (config checks, shape agreements) answer as if every rank said what this one did:
  there is no other rank to ask, and the layouts checked here are symmetric;
- with `device="cuda"` (NCCL) every collective's tensors must live on the device (NCCL moves device
  memory only: a host tensor on an NCCL group fails there), and the ops NCCL lacks are findings:
  a receive from any source, bitwise reductions.
"""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from shardlab import comm

SIM = torch.device("meta")  # the stand-in for the accelerator
_NCCL_LACKS_OPS = {dist.ReduceOp.BAND: "BAND", dist.ReduceOp.BOR: "BOR", dist.ReduceOp.BXOR: "BXOR"}
_TENSOR_OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all_single", "broadcast", "scatter",
               "send", "recv", "isend", "irecv")


@contextlib.contextmanager
def fake_world(world: int, rank: int, device: str, audit):
    """Be `rank` of a fake world of `world` ranks until exit; findings about collectives go to `audit`."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if comm.is_initialized():
        raise RuntimeError("a simulated world needs a process without a process group")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    saved = {name: getattr(comm, name) for name in _TENSOR_OPS + ("device", "all_gather_object",
                                                                   "broadcast_object", "recv_any", "batch_isend_irecv")}
    import torch.optim.optimizer as optim_mod
    fused_devices = optim_mod._get_fused_kernels_supported_devices
    try:
        # the fused AdamW runs on the accelerator: on its stand-in too (meta has the kernel's shape function)
        optim_mod._get_fused_kernels_supported_devices = lambda: [*fused_devices(), SIM.type]
        comm.device = lambda: SIM
        comm.all_gather_object = lambda obj, group=None: [obj] * comm.world_size(group)
        comm.broadcast_object = lambda obj, src=0, group=None: obj
        if device == "cuda":
            for name in _TENSOR_OPS:
                setattr(comm, name, _nccl_checked(name, saved[name], audit))
            comm.batch_isend_irecv = _nccl_batch(saved["batch_isend_irecv"], audit)

            def recv_any(t, group=None, tag=""):
                audit.add("collective", "comm.recv_any", "NCCL has no receive from any source (gloo only)")
                return saved["recv_any"](t, group, tag)
            comm.recv_any = recv_any
        comm.RECORDER.capture_stack = False  # nobody reads the stacks here; the audit names lines itself
        yield
    finally:
        for name, fn in saved.items():
            setattr(comm, name, fn)
        comm.RECORDER.capture_stack = True
        optim_mod._get_fused_kernels_supported_devices = fused_devices
        dist.destroy_process_group()


def _nccl_checked(name: str, fn, audit):
    def call(*args, **kwargs):
        for t in list(args) + list(kwargs.values()):
            ts = t if isinstance(t, (list, tuple)) else [t]
            for x in ts:
                if isinstance(x, torch.Tensor) and x.device.type == "cpu":
                    audit.add("collective", f"comm.{name}",
                              f"a host tensor {tuple(x.shape)} {str(x.dtype).replace('torch.', '')} on an NCCL group")
                    break
        pos = {"all_reduce": 1, "reduce_scatter": 2}.get(name)
        op = kwargs.get("op", args[pos] if pos is not None and len(args) > pos else None)
        if op in _NCCL_LACKS_OPS:
            audit.add("collective", f"comm.{name}", f"ReduceOp.{_NCCL_LACKS_OPS[op]}: NCCL has no bitwise reduction")
        return fn(*args, **kwargs)
    call.__wrapped__ = fn
    return call


def _nccl_batch(fn, audit):
    def call(ops):
        for p in ops:
            if p.tensor.device.type == "cpu":
                audit.add("collective", "comm.batch_isend_irecv", "a host tensor on an NCCL group")
                break
        return fn(ops)
    return call
