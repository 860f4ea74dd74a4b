"""Keep freed host memory in the process: no page faults on every step's fresh activations (CPU runs).

glibc's malloc returns large freed blocks to the kernel: blocks above its mmap threshold are unmapped
on free, and the top of the heap is trimmed once more than M_TRIM_THRESHOLD is free there. A training
step frees and reallocates the same activations every step, so each step maps them afresh and the
kernel zero-fills every 4 KiB page on first touch (a minor page fault): ~4,000 faults per step on the
small model, a few percent of a one-thread step's CPU time, paid inside the GEMMs and elementwise ops
that first write each buffer.

`retain_freed_memory()` tells glibc (mallopt) to keep what it frees: the mmap threshold at its maximum
(32 MiB on 64-bit: smaller blocks come from the heap and are reused) and no trimming. The process's
resident set then stays at its high-water mark instead of following the frees; the peak itself is
unchanged (the same blocks are reused). Tensors above 32 MiB still get their own mapping.

It does nothing where the caller chose the allocator's behaviour: any MALLOC_*_ environment variable
set (the memory benches set MALLOC_MMAP_THRESHOLD_ so that the resident set follows the frees), or a C
library without mallopt (not glibc). `train.retain_host_memory=false` turns it off.
"""
from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit; larger values are refused
TRIM_NEVER = 2**31 - 1  # mallopt takes an int: about 2 GiB free at the top before the heap is trimmed


def retain_freed_memory() -> bool:
    """Set glibc's thresholds (see the module docstring); True when they were set."""
    if any(k.startswith("MALLOC_") and k.endswith("_") for k in os.environ):
        return False  # the caller's choice
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # both, in this order: setting either turns off glibc's dynamic threshold, so the mmap one must be set
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_NEVER))
