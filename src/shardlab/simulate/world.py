"""A world of N ranks in one process: torch's fake process group, as one chosen rank.

`fake_world(world, rank, device)` joins a `FakeProcessGroup` (torch.testing's: every collective returns
at once and moves nothing) as `rank` of `world`, so the layers build their real mesh, groups and
collectives for that rank. Inside it shardlab's door to collectives (`comm`) is watched:

- `comm.device()` answers the simulated accelerator (`meta`);
- object collectives (config checks, shape agreements) answer as if every rank said what this one did:
  there is no other rank to ask, and the layouts checked here are symmetric;
- with `device="cuda"` (NCCL) every collective's tensors must live on the device (NCCL moves device
  memory only: a host tensor on an NCCL group fails there), and the ops NCCL lacks are findings:
  a receive from any source, bitwise reductions; with `device="cpu"` (gloo), the average reduction. A
  fault-tolerant replica's cross-replica collectives (its own door, parallel/ft/quorum.py) are checked the same
  way: on CUDA their groups are NCCL (quorum_backend).
"""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from shardlab import comm

SIM = torch.device("meta")  # the stand-in for the accelerator
_NCCL_LACKS_OPS = {dist.ReduceOp.BAND: "BAND", dist.ReduceOp.BOR: "BOR", dist.ReduceOp.BXOR: "BXOR"}
_GLOO_LACKS_OPS = {dist.ReduceOp.AVG: "AVG"}  # gloo averages nothing itself (divide after a SUM)
_TENSOR_OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all_single", "broadcast", "scatter",
               "send", "recv", "isend", "irecv")
# fault tolerance's own transport (parallel/ft/quorum.py), watched the same way
_QUORUM_OPS = ("quorum_all_reduce", "quorum_broadcast")


@contextlib.contextmanager
def fake_world(world: int, rank: int, device: str, audit):
    """Be `rank` of a fake world of `world` ranks until exit; findings about collectives go to `audit`."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if comm.is_initialized():
        raise RuntimeError("a simulated world needs a process without a process group")
    _register_backend()
    dist.init_process_group(_BACKEND, store=FakeStore(), rank=rank, world_size=world)
    from shardlab.parallel.ft import quorum
    saved_quorum = {name: getattr(quorum, name) for name in _QUORUM_OPS}
    saved = {name: getattr(comm, name) for name in _TENSOR_OPS + ("device", "all_gather_object",
                                                                   "broadcast_object", "recv_any", "batch_isend_irecv")}
    import torch.nn.parallel.distributed as ddp_mod
    import torch.optim.optimizer as optim_mod
    fused_devices = optim_mod._get_fused_kernels_supported_devices
    verify = ddp_mod._verify_param_shape_across_processes
    fsdp_group = _fsdp_param_group()
    no_meta = getattr(fsdp_group, "_validate_no_meta_params", None) if fsdp_group else None
    try:
        if no_meta is not None:  # FSDP2 refuses to train meta parameters: here they stand for the device's
            fsdp_group._validate_no_meta_params = lambda self: None
        # torch's DDP compares parameter shapes across ranks by an all-gather: the fake group returns
        # nothing real, and every rank builds the same model here by construction
        ddp_mod._verify_param_shape_across_processes = lambda *a, **k: None
        # DeviceMesh, DTensor and FSDP2 ask the device type's module (torch.cuda for cuda) for the device
        torch.meta = _MetaDeviceModule
        # the fused AdamW runs on the accelerator: on its stand-in too (meta has the kernel's shape function)
        optim_mod._get_fused_kernels_supported_devices = lambda: [*fused_devices(), SIM.type]
        comm.device = lambda: SIM
        comm.all_gather_object = lambda obj, group=None: [obj] * comm.world_size(group)
        comm.broadcast_object = lambda obj, src=0, group=None: obj
        for name in _TENSOR_OPS:
            setattr(comm, name, _checked(name, saved[name], audit, device))
        for name in _QUORUM_OPS:
            setattr(quorum, name, _checked(name, saved_quorum[name], audit, device, door="quorum"))
        if device == "cuda":
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
        for name, fn in saved_quorum.items():
            setattr(quorum, name, fn)
        comm.RECORDER.capture_stack = True
        optim_mod._get_fused_kernels_supported_devices = fused_devices
        ddp_mod._verify_param_shape_across_processes = verify
        if no_meta is not None:
            fsdp_group._validate_no_meta_params = no_meta
        if getattr(torch, "meta", None) is _MetaDeviceModule:
            del torch.meta
        dist.destroy_process_group()


def _fsdp_param_group():
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
    except ImportError:  # another torch's layout: FSDP2 then runs as it does
        return None
    return FSDPParamGroup


_BACKEND = "shardlab_sim"


def _register_backend() -> None:
    """torch's fake process group, registered for the meta device too (point-to-point batches and the
    DeviceMesh look the backend up by the tensors' device type)."""
    import torch.testing._internal.distributed.fake_pg as fake_pg

    if not hasattr(dist.Backend, _BACKEND.upper()):
        dist.Backend.register_backend(_BACKEND, fake_pg._create_fake_pg, extended_api=True,
                                      devices=["cpu", "cuda", SIM.type])


class _MetaDeviceModule:
    """What `torch.<device type>` answers for the stand-in accelerator: one device, index 0."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def set_device(_device) -> None:
        pass

    # streams and events (FSDP2 overlaps its all-gathers on its own streams): on meta nothing runs
    # asynchronously, so every wait is already satisfied
    class Stream:
        def __init__(self, *args, **kwargs):
            pass

        def wait_stream(self, _other) -> None:
            pass

        def wait_event(self, _event) -> None:
            pass

        def record_event(self, event=None):
            return event or _MetaDeviceModule.Event()

        def synchronize(self) -> None:
            pass

        priority = 0

    class Event:
        def __init__(self, *args, **kwargs):
            pass

        def record(self, _stream=None) -> None:
            pass

        def wait(self, _stream=None) -> None:
            pass

        def synchronize(self) -> None:
            pass

        def query(self) -> bool:
            return True

    _current = None

    @classmethod
    def current_stream(cls, _device=None):
        if cls._current is None:
            cls._current = cls.Stream()
        return cls._current

    @staticmethod
    def stream(_stream):
        import contextlib
        return contextlib.nullcontext()


def _checked(name: str, fn, audit, device: str, door: str = "comm"):
    """`<door>.<name>` (comm's, or fault tolerance's quorum module) that reports what the simulated backend
    cannot do: NCCL (device cuda) host tensors and bitwise reductions, gloo (device cpu) the average reduction."""
    lacks = _NCCL_LACKS_OPS if device == "cuda" else _GLOO_LACKS_OPS
    backend = "NCCL" if device == "cuda" else "gloo"

    def call(*args, **kwargs):
        flat = [x for t in (*args, *kwargs.values()) for x in (t if isinstance(t, (list, tuple)) else [t])]
        host = [x for x in flat if isinstance(x, torch.Tensor) and x.device.type == "cpu"]
        if device == "cuda" and host:
            x = host[0]
            audit.add("collective", f"{door}.{name}",
                      f"a host tensor {tuple(x.shape)} {str(x.dtype).replace('torch.', '')} on an NCCL group")
        pos = {"all_reduce": 1, "reduce_scatter": 2}.get(name)
        op = kwargs.get("op", args[pos] if pos is not None and len(args) > pos else None)
        if any(op is k or op == k for k in lacks):
            audit.add("collective", f"{door}.{name}", f"ReduceOp.{next(v for k, v in lacks.items() if op == k)}: "
                                                    f"{backend} has no such reduction")
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
