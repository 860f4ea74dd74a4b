"""Slow-rank injection (`debug.slow_rank=R debug.slow_ms=M`): a straggler on purpose.

Rank R sleeps M ms at the start of every step, before its forward pass, so it reaches each
gradient collective late; with M a sizeable part of the step (5% or more), `shardlab trace RUN` must
then name rank R as the straggler and show the other ranks' time inside the collectives as waiting,
not transfer.
"""
from __future__ import annotations

import time

from shardlab.observe import timeline


def maybe_slow(cfg, rank: int, step: int) -> None:
    """Called by the trainer at the start of each step; a no-op unless this rank is the slow one."""
    d = cfg.debug
    if d.slow_rank == rank and d.slow_ms > 0:
        with timeline.span("injected_delay", cat="compute", ms=d.slow_ms, step=step):
            time.sleep(d.slow_ms / 1000.0)
