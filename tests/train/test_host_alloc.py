"""train/host_alloc.py: glibc keeps freed memory, so a step's fresh buffers cost no page faults."""
import resource

import torch

from shardlab.train import host_alloc


def _faults_reallocating(n: int) -> int:
    """Minor page faults of n allocate-write-free rounds of a 4 MiB tensor (an activation's size)."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(n):
        torch.empty(1 << 20).fill_(1.0)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_retained_memory_is_reused_without_page_faults(monkeypatch):
    for k in [k for k in __import__("os").environ if k.startswith("MALLOC_")]:
        monkeypatch.delenv(k)
    assert host_alloc.retain_freed_memory()
    _faults_reallocating(2)  # the first round maps the block once
    # without retention every round faults in its 1024 pages again (20 x 1024 = 20,480 faults); with it, none of
    # its own. The count is the whole process's: in the full suite, threads earlier tests left behind (gloo's,
    # a store's) fault meanwhile (1,046 were counted once), so the bound is a fifth of the no-retention count
    assert _faults_reallocating(20) < 20 * 1024 // 5


def test_a_malloc_environment_variable_is_left_alone(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert host_alloc.retain_freed_memory() is False
