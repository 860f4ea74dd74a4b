"""Offload for the own zero layers: the optimizer (`parallel.offload=optimizer`, ZeRO-Offload) or the
parameter shards and the optimizer (`parallel.offload=params`, zero3: ZeRO-3 offload), to a *tier*:

- `disk` (`DiskTier`): memory-mapped files, ZeRO-Infinity's NVMe tier. Pages are dropped from the process
  after every use, so resident memory really falls: the tier that makes the trade measurable on a CPU.
- `host` (`HostTier`): pinned CPU memory on CUDA (fast, asynchronous copies to the device). On a CPU-only
  machine the host *is* the device: host offload is a no-op copy and saves nothing.

Optimizer offload to disk:

ZeRO-Infinity's NVMe tier on a CPU-only machine: this rank's optimizer state (Adam's m and v of its
shards) lives in memory-mapped files, not in the process's memory. The step runs one parameter shard at a
time: its state is paged in from the file, updated in place (the file is the home), then its pages are
dropped from the process (`madvise(MADV_DONTNEED)`; the kernel writes them back), so resident memory holds
at most one shard's state, at any moment. The arithmetic is the optimizer's own (one `step()` per shard,
the same per-tensor update as the unsplit step with `foreach=False`): results are bitwise those of a run
without offload.

The files are unlinked as soon as they are mapped (nothing is left behind, whatever way the process ends);
state dicts see ordinary tensors, so checkpoints of offloaded runs load anywhere, and a loaded state is
moved back into files at the next step.
"""
from __future__ import annotations

import ctypes
import os
import tempfile

import torch

_MADV_DONTNEED = 4
_libc = ctypes.CDLL(None, use_errno=True)


def _drop_pages(t: torch.Tensor) -> None:
    """Release a file-backed tensor's pages from this process (they stay in the file / page cache)."""
    page = os.sysconf("SC_PAGE_SIZE")
    start = t.data_ptr() // page * page
    length = t.data_ptr() + t.numel() * t.element_size() - start
    _libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(length), _MADV_DONTNEED)


class DiskTier:
    """Tensors in memory-mapped files (one file each, unlinked once mapped: none outlives the process)."""
    name = "disk"

    def __init__(self, directory: str = ""):
        self.dir = directory or None  # None: the system's temporary directory (TMPDIR)

    def empty(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        fd, path = tempfile.mkstemp(prefix="shardlab-offload-", suffix=".bin", dir=self.dir)
        os.close(fd)
        t = torch.from_file(path, shared=True, size=numel, dtype=dtype)
        os.unlink(path)  # the mapping keeps the data; nothing is left in the directory
        return t

    def release(self, t: torch.Tensor) -> None:
        """After a use: the pages leave the process (the file keeps the data)."""
        _drop_pages(t)


class HostTier:
    """Pinned CPU memory when CUDA is there (page-locked: the copy to the device can be asynchronous);
    without an accelerator plain CPU memory, which is where the parameters already were."""
    name = "host"

    def empty(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(numel, dtype=dtype, pin_memory=torch.cuda.is_available())

    def release(self, t: torch.Tensor) -> None:
        pass


def tier(name: str):
    return DiskTier() if name == "disk" else HostTier()


class _Only:
    """`with _Only(optimizer, params):` the optimizer's groups hold only `params` (each in its own group, with
    its group's hyperparameters) until exit: `optimizer.step()` then updates those alone. AdamW's update is
    per tensor (docs/memory.md), so stepping the parameters in parts is bitwise stepping them together."""

    def __init__(self, optimizer: torch.optim.Optimizer, params):
        self.optimizer, self.keep = optimizer, {id(p) for p in params}

    def __enter__(self):
        self.saved = [g["params"] for g in self.optimizer.param_groups]
        for g, params in zip(self.optimizer.param_groups, self.saved):
            g["params"] = [p for p in params if id(p) in self.keep]
        return self.optimizer

    def __exit__(self, *exc):
        for g, params in zip(self.optimizer.param_groups, self.saved):
            g["params"] = params
        return False


class DiskOffload:
    def __init__(self, directory: str = ""):
        self.tier = DiskTier(directory)
        self.homes: dict[tuple[int, str], torch.Tensor] = {}  # (id(param), key) -> file-backed tensor

    def _file_tensor(self, like: torch.Tensor) -> torch.Tensor:
        return self.tier.empty(like.numel(), like.dtype).view(like.shape)

    def _rehome(self, p: torch.Tensor, state: dict) -> None:
        """Move the parameter's state tensors into their files (new state, or a state just loaded)."""
        for key, v in state.items():
            if not torch.is_tensor(v) or v.dim() == 0:  # Adam's step counter: a scalar, kept in memory
                continue
            home = self.homes.get((id(p), key))
            if home is None or home.shape != v.shape or home.dtype != v.dtype:
                home = self.homes[(id(p), key)] = self._file_tensor(v)
            if v is not home:
                home.copy_(v)
                state[key] = home

    def step(self, optimizer: torch.optim.Optimizer, params=None) -> None:
        """`optimizer.step()`, one parameter shard at a time, each shard's state paged in and out
        (`params`: only these of the optimizer's parameters)."""
        keep = None if params is None else {id(p) for p in params}
        todo = [p for g in optimizer.param_groups for p in g["params"]
                if p.grad is not None and (keep is None or id(p) in keep)]
        for p in todo:
            with _Only(optimizer, [p]):
                optimizer.step()
            state = optimizer.state[p]
            self._rehome(p, state)
            for key, v in state.items():
                if (id(p), key) in self.homes:
                    _drop_pages(v)

    def offloaded_bytes(self) -> int:
        """Bytes of optimizer state kept in files (off the process)."""
        return sum(t.numel() * t.element_size() for t in self.homes.values())
