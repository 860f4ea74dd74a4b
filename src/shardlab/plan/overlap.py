"""ZeRO's unit-wise collectives hidden behind compute, unit by unit (GPU presets; docs/planner.md, "The GPU
terms": per-unit overlap).

FSDP gathers one unit at a time and keeps one unit ahead of the compute: a unit's all-gather is issued while
the unit before it computes (forward; FSDP1 without forward_prefetch still issues it as soon as the CPU, which
runs ahead of the device, reaches the unit; torch's rate limiter, limit_all_gathers, allows two gathered units
at a time), and in the backward the next unit's all-gather is issued around the current unit's gradient
computation (BACKWARD_PRE before it, BACKWARD_POST after it, both before the current unit's reduce-scatter),
which is issued once the unit's gradients exist (Zhao et al. 2023, PyTorch FSDP: backward and forward
prefetching, the rate limiter). Every collective of a process group runs on that group's one NCCL stream, in
issue order (ProcessGroupNCCL; the FSDP paper's reason for issuing the next gather before the current
reduce-scatter), so in the backward one unit's window carries the all-gather of one unit and the reduce-scatter
of another.

The step is then simulated as two streams, compute and communication, over the units in their order: the
compute of a unit waits for its gather; the stream runs the collectives in issue order. What the compute waits
for is exposed gathering; what the stream still runs after the last compute is the exposed reduction (the
last units' reduce-scatters, the root's among them). A slow network exposes a little every unit instead of
nothing until the step's whole budget is spent, which is what the budget model (step.py) assumed.
"""
from __future__ import annotations

from dataclasses import dataclass

from .comm_time import call_time, group_placement
from .geometry import padded_units


@dataclass(frozen=True)
class Stage:
    """One span of compute in unit order: forward seconds, backward seconds, the all-gather it waits for
    before its forward and before its backward, and the reduce-scatter its backward ends with."""
    fwd: float
    bwd: float
    ag_fwd: float = 0.0
    ag_bwd: float = 0.0
    rs: float = 0.0


def simulate(stages: list[Stage], m: int, rs_every: bool = True) -> tuple[float, float, float]:
    """(step seconds, seconds the compute waited for gathers, seconds the stream ran past the last compute)
    for m micro batches over `stages` (forward order). Forward: a stage's gather is issued when the stage
    before it starts computing (the first at the micro batch's start). Backward (reverse order): the next
    stage's gather is issued when the current one starts, its reduce-scatter when it ends. `rs_every` False:
    the reductions only on the last micro batch (ZeRO-1)."""
    t = comm = wait = 0.0
    n = len(stages)
    for mb in range(m):
        issue = t
        for i, s in enumerate(stages):  # forward
            comm = max(comm, issue) + s.ag_fwd if s.ag_fwd else comm
            start = max(t, comm) if s.ag_fwd else t
            wait += start - t
            issue, t = start, start + s.fwd
        pending = [None] * n  # each stage's gather end, issued one stage ahead
        first = n - 1
        if stages[first].ag_bwd:
            comm = max(comm, t) + stages[first].ag_bwd
            pending[first] = comm
        reduce = rs_every or mb == m - 1
        for i in range(n - 1, -1, -1):  # backward
            s = stages[i]
            start = max(t, pending[i]) if pending[i] is not None else t
            wait += start - t
            if i > 0 and stages[i - 1].ag_bwd:  # prefetch the next unit
                comm = max(comm, start) + stages[i - 1].ag_bwd
                pending[i - 1] = comm
            t = start + s.bwd
            if reduce and s.rs:
                comm = max(comm, t) + s.rs
    tail = max(0.0, comm - t)
    return max(t, comm), wait, tail


def stages(model, lay, cluster, mt, m: int, ag, rs, k: float = 1.0) -> list[Stage]:
    """The plan's units as stages: the embedding (the root unit's gather and reduce-scatter), the blocks,
    the head (final norm, logits, loss: the root stays gathered from its forward to its backward). Per-unit
    collective times from the alpha-beta model at each unit's payload, scaled so their sum is the collective's
    own time (its per-call latency and the FP8 saving included); compute windows scaled by `k` (the
    tensor-parallel collectives on the critical path widen them)."""
    full = padded_units(model, lay.tp, lay.pp, lay.v, lay.shard, lay.padding)[1]
    blocks = len(full) - 1
    emb_f = max(0.0, mt.fwd - blocks * mt.block[0] - mt.head[0])
    emb_b = max(0.0, mt.bwd - blocks * mt.block[1] - mt.head[1])
    ag_f = ag_b = [0.0] * len(full)
    if ag is not None:
        ag_f, ag_b = _per_unit(ag, full, lay, cluster, bwd=lay.reshard_after_forward, root=lay.root_reshards, m=m)
    rs_t = _per_unit(rs, full, lay, cluster, m=m)[0] if rs is not None else [0.0] * len(full)
    out = [Stage(k * emb_f, k * emb_b, ag_f[0], ag_b[0], rs_t[0])]
    out += [Stage(k * mt.block[0], k * mt.block[1], ag_f[i], ag_b[i], rs_t[i]) for i in range(1, len(full))]
    return out + [Stage(k * mt.head[0], k * mt.head[1])]


def _per_unit(cl, full, lay, cluster, bwd: bool = False, root: bool = False, m: int = 1):
    """(forward, backward) seconds of a collective's call for each unit, scaled to the collective's total."""
    c = cl.c
    local = min(group_placement(c.group, lay, cluster), c.n)
    per = [call_time(c.op, x, c.n, local, cluster)[0] for x in full]
    again = [t if (i > 0 or root) else 0.0 for i, t in enumerate(per)] if bwd else [0.0] * len(per)
    reps = m if c.per_micro else 1
    raw = reps * (sum(per) + sum(again))
    scale = cl.time / raw if raw else 0.0
    return [t * scale for t in per], [t * scale for t in again]
