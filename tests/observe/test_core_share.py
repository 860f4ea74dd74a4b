"""observe/core_share.py: a step shorter than a scheduler tick still records the share it ran at (the thread's CPU
clock is read up to date; schedstat's own CPU field advances only at a tick or a switch, so 1 ms steps read 0)."""
import time
from pathlib import Path

import pytest

from shardlab.observe.core_share import CoreShare


@pytest.mark.skipif(not Path("/proc/thread-self/schedstat").exists(), reason="no /proc schedstat on this system")
def test_a_step_shorter_than_a_tick_records_its_share():
    for _ in range(20):
        share = CoreShare()
        share.begin()
        t = time.perf_counter()
        while time.perf_counter() - t < 0.001:  # busy 1 ms: on a CPU or queued, never blocked
            pass
        share.end(count=True)
        assert share.value is not None and 0 < share.value <= 1
