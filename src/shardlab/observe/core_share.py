"""The share of a core a rank got while it had work, from the kernel's scheduler statistics.

On a machine with fewer free cores than ranks (2 cores, 4 ranks; a CI box shared with other jobs) a rank's
compute takes its CPU time divided by the share of a core it was given. The planner predicts CPU time and
needs that share to turn it into wall time; probing it before or after the run measures another moment.
Linux counts, per thread, the nanoseconds spent on a CPU and the nanoseconds spent runnable but waiting on
a run queue (the thread's CPU clock; `/proc/thread-self/schedstat` field 2): run / (run + wait) over the timed
steps is the share the rank had while it was not blocked (a rank waiting in a collective or a sleep is in neither).
Only the thread that runs the step counts (one compute thread per rank on CPU): the process's other
threads (gloo's, the doctor's heartbeat) wake briefly and queue behind busy ranks, and their waits are
not on the step's path. Elsewhere (no /proc) the share is None.
"""
from __future__ import annotations

import time


def sample() -> tuple[int, int] | None:
    """(ns on a CPU, ns waiting on a run queue) of the calling thread; None without /proc. The CPU time is the
    thread's clock (CLOCK_THREAD_CPUTIME_ID, which brings the running slice up to date), not schedstat's first
    field: that one advances only at a scheduler tick or a switch, so a step shorter than a tick (4 ms at 250 Hz)
    read 0 on a CPU and 0 waiting, and a run whose timed steps were all that short recorded no share."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            fields = f.read().split()
        return time.thread_time_ns(), int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


class CoreShare:
    """Sums the scheduler's run and wait time over the steps `end(count=True)` closes."""

    def __init__(self):
        self.run = self.wait = 0
        self._start = None

    def begin(self) -> None:
        self._start = sample()

    def end(self, count: bool) -> None:
        now = sample()
        if count and now is not None and self._start is not None:
            run, wait = now[0] - self._start[0], now[1] - self._start[1]
            if run >= 0 and wait >= 0:
                self.run, self.wait = self.run + run, self.wait + wait
        self._start = None

    @property
    def value(self) -> float | None:
        total = self.run + self.wait
        return self.run / total if total else None
