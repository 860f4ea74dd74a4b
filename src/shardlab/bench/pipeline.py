"""The pipeline study's measurement: a schedule timed with compute emulation.

Each stage sleeps for its forward / backward time instead of computing, while the engine sends real
activations and gradients through comm. Sleeping ranks need no core, so p = 4 stages run faithfully on
a 2-core machine and the step time measures the schedule (and the point-to-point latency), not the
arithmetic. Measured bubble = 1 - (the busy time every rank must spend) / step time.
"""
from __future__ import annotations

import statistics
import time

import torch


def emulated_step_times(name: str, m: int, virtual: int, f_s: float, b_s: float, steps: int = 5,
                        micro: int = 1, seq: int = 16, d_model: int = 32) -> list[float]:
    """Rank-side: time `steps` steps of schedule `name` (pp = world size), stage times f_s / b_s per
    stage (split evenly over virtual stages). Returns the step times seen by this rank."""
    from shardlab import comm
    from shardlab.parallel.pp.engine import Emulation, PipelineEngine
    from shardlab.parallel.pp.schedule import build

    pp, rank = comm.world_size(), comm.rank()
    sched = build(name, pp, m, virtual)
    v = sched.virtual
    emu = Emulation(f_s=f_s / v, b_s=b_s / v)
    engine = PipelineEngine(sched, {s: None for s in sched.stages_of(rank)}, stage_rank=sched.rank_of,
                            pp_rank=rank, loss_fn=None, act_shape=lambda x: (micro, seq, d_model),
                            device=torch.device("cpu"), emulate=emu)
    mbs = [(torch.zeros(micro, seq, dtype=torch.long), None)] * m
    times = []
    for _ in range(steps + 1):  # the first step warms up the connections
        comm.barrier()
        t0 = time.perf_counter()
        engine.step(mbs, 1.0)
        comm.barrier()
        times.append(time.perf_counter() - t0)
    return times[1:]


def measured_bubble(step_s: float, m: int, f_s: float, b_s: float) -> float:
    return 1.0 - m * (f_s + b_s) / step_s


def median(xs: list[float]) -> float:
    return statistics.median(xs)
