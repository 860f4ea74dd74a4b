"""Slow-rank injection (`debug.slow_rank=R debug.slow_ms=M`): a straggler on purpose.

`debug.slow_factor=F` instead makes rank R's compute F times slower: before each step's forwards it
sleeps (F - 1) x its own measured compute time for the samples it is about to process
(shardlab.train.balance measures it), so the delay scales with its share of the batch, as a slower
chip's would, and giving it fewer samples really helps.

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


def sleep_for(seconds: float, why: str) -> None:
    """An injected delay of `seconds`, visible in the trace as compute (`injected_delay`)."""
    if seconds > 0:
        with timeline.span("injected_delay", cat="compute", ms=1e3 * seconds, why=why):
            time.sleep(seconds)
