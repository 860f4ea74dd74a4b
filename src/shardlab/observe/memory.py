"""Measured peak memory of a stretch of code, honestly labelled.

    with PeakMemory(device) as peak:
        ...build, train a few steps...
    peak.bytes, peak.kind

CUDA: `torch.cuda.max_memory_allocated` above what was allocated at the start ("cuda_max_allocated").
CPU: the process's peak resident set (VmHWM) above its resident set at the start
("cpu_peak_rss_above_start"). The kernel's high-water mark is reset at the start through
/proc/self/clear_refs, so several measurements in one process do not see each other's peaks. RSS
counts pages, not tensors: memory the allocator keeps after a free still counts, so free first
(`release()`), and start processes with MALLOC_MMAP_THRESHOLD_ set (see `ALLOCATOR_ENV`) so large
tensors are returned to the system as soon as they are freed.
"""
from __future__ import annotations

import ctypes
import gc
from pathlib import Path

import torch

# Environment for processes that measure CPU peaks: every allocation above 64 KiB gets its own
# mapping and goes back to the kernel when freed (glibc otherwise raises this threshold dynamically).
ALLOCATOR_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_bytes() -> int:
    kib = _status_kib("VmRSS")
    return kib * 1024 if kib is not None else 0


def release() -> None:
    """Free what can be freed before a measurement: garbage, cached CUDA blocks, glibc's free lists."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_hwm() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # 5: reset the peak resident set to the current one
        return True
    except OSError:
        return False


class PeakMemory:
    """Peak memory above the start of the `with` block (see the module docstring for what is measured)."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.bytes = 0
        self.kind = ""

    def __enter__(self) -> "PeakMemory":
        release()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start = torch.cuda.memory_allocated(self.device)
            self.kind = "cuda_max_allocated"
        else:
            self.kind = "cpu_peak_rss_above_start" if _reset_hwm() else "cpu_peak_rss_above_start_unreset"
            self._start = rss_bytes()
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.bytes = torch.cuda.max_memory_allocated(self.device) - self._start
        else:
            hwm = _status_kib("VmHWM")
            self.bytes = max(0, (hwm * 1024 if hwm is not None else rss_bytes()) - self._start)
