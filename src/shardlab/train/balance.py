"""Uneven data-parallel shares (`data.shares`): give a slow rank less of the global batch.

Data parallelism waits for its slowest rank at every gradient collective. When ranks compute at
different speeds (another job on the node, a slower chip, thermal throttling), equal shares make every
step as long as the slowest rank's share. Giving rank r a share proportional to its speed, n_r ∝ 1/c_r
(c_r: its compute seconds per sample), makes the ranks finish their backward together.

The loss needs no change: each microbatch's summed token loss is scaled by D / global_tokens whatever
the rank's share, and the data-parallel layer averages (÷ D) what the ranks contribute, so the
gradient is Σ over every token of the global batch ÷ global_tokens: a token-weighted sum of the ranks'
contributions, the same at any shares. Every rank runs `train.grad_accum` microbatches (of
uneven sizes across ranks), so every rank issues the same collectives in the same order: ddp, zero1/2/3
and the torch-native layers see only different amounts of local work.

    data.shares=equal      every rank the same number of samples (the default)
    data.shares=1,3        fixed weights per data-parallel rank (whole samples, largest remainder)
    data.shares=auto       measured: compute seconds per sample per rank, the median over
                           `data.shares_window` steps (the first step after a start is warm-up), then
                           n_r ∝ 1/c_r; measured again every window, and re-set when two windows in a
                           row imply shares further than `data.shares_drift` (a fraction of the global
                           batch) from the current ones

"Compute" is the wall time of the step's forwards and backwards minus the time this rank was blocked
in a collective (the flight recorder's records), so a fast rank's waiting for the slow one is not
counted against it. The median keeps a few descheduled steps on a shared machine out of the estimate,
and the two-window rule keeps one noisy window from moving the shares. See docs/balance.md.
"""
from __future__ import annotations

import contextlib
import statistics
import time

from shardlab import comm
from shardlab.data.shares import parse, partition
from shardlab.observe import inject


def _blocked_s(order0: int, t0: float, t1: float) -> float:
    """Seconds of [t0, t1] this rank spent blocked in collectives it issued after record `order0`:
    synchronous calls from launch to completion, asynchronous ones from wait() to completion."""
    new = comm.RECORDER.order - order0
    if new <= 0:
        return 0.0
    records = list(comm.RECORDER.ring)[-new:]
    spans = []
    for r in records:
        start = r.t_wait if r.async_op else r.t_launch
        if start is None or r.t_done is None:
            continue
        a, b = max(start, t0), min(r.t_done, t1)
        if b > a:
            spans.append((a, b))
    total, end = 0.0, t0  # union of the intervals (ddp stamps several waits at once)
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


class Balancer:
    """This rank's part of the shares: sets the sampler's counts, measures, re-sets (auto), and reports."""

    def __init__(self, cfg, dims, sampler, rank: int):
        self.cfg, self.dims, self.sampler, self.rank = cfg, dims, sampler, rank
        d = cfg.data
        # The sampler's slices: the data-parallel group's (fault-tolerant replicas: one slice each of R jobs)
        self.dp_size, self.dp_rank = sampler.world_size, sampler.rank
        self.global_batch, self.minimum = sampler.global_batch, cfg.train.grad_accum
        weights = parse(d.shares, self.dp_size)
        self.mode = "auto" if weights is None else "equal" if len(set(weights)) == 1 else "weights"
        self.counts = partition(self.global_batch, weights or [1.0] * self.dp_size, self.minimum)
        sampler.set_shares(self.counts)
        self.measured = False  # auto: shares set from a measurement yet
        self.s_per_sample: list[float] | None = None  # the last measurement, per data-parallel rank
        self.changes: list[dict] = []
        self.pending: dict | None = None  # what the next metrics record carries
        self.window: list[float] = []
        self.drifting = False  # the last window implied shares beyond data.shares_drift
        self.steps_seen = 0
        self._last: float | None = None  # this step's compute seconds per sample (None: not measured)
        self._est: float | None = None  # this rank's own compute per sample (no injected delay)
        dbg = cfg.debug
        self.slow = dbg.slow_rank == rank and dbg.slow_factor > 1

    # --- per step ------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def measure(self, n_samples: int):
        """Around a step's forwards and backwards on `n_samples` samples. With debug.slow_rank /
        slow_factor, the slow rank first sleeps (factor - 1) x its measured compute for these samples
        (before its gradient collectives, so the others really wait)."""
        delay = 0.0
        if self.slow and self._est is not None:
            delay = (self.cfg.debug.slow_factor - 1) * self._est * n_samples
            inject.sleep_for(delay, "slow_factor")
        order0, t0 = comm.RECORDER.order, time.perf_counter()
        yield
        t1 = time.perf_counter()
        own = max(1e-9, t1 - t0 - _blocked_s(order0, t0, t1))
        self._est = own / max(1, n_samples)
        self._last = (own + delay) / max(1, n_samples)

    def after_step(self, step: int) -> None:
        """After every completed step, on every rank (the exchange happens at the same steps everywhere).
        `step`: completed steps."""
        last, self._last = self._last, None
        if self.mode != "auto" or self.dp_size == 1 or last is None:
            return
        self.steps_seen += 1
        if self.steps_seen == 1:  # warm-up: first-touch allocations, lazy initialisation
            return
        self.window.append(last)
        if len(self.window) < self.cfg.data.shares_window:
            return
        mine, self.window = statistics.median(self.window), []
        per_dp = [0.0] * self.dp_size
        for dp_rank, s in comm.all_gather_object((self.dp_rank, mine)):
            per_dp[dp_rank] = max(per_dp[dp_rank], s)  # tp/pp/cp peers of one share: the slowest counts
        self.s_per_sample = per_dp
        proposed = partition(self.global_batch, [1.0 / s for s in per_dp], self.minimum)
        drift = max(abs(a - b) for a, b in zip(proposed, self.counts)) / self.global_batch
        beyond, confirmed = drift > self.cfg.data.shares_drift, self.drifting
        self.drifting = beyond
        if not self.measured:
            self._set(step, proposed, "measured")
        elif beyond and confirmed:  # two windows in a row: a change, not one noisy window
            self.drifting = False
            self._set(step, proposed, f"drift {drift:.3f} > data.shares_drift={self.cfg.data.shares_drift:g} "
                                      "in two windows")

    def _set(self, step: int, counts: list[int], reason: str) -> None:
        self.measured = True
        self.counts = counts
        self.sampler.set_shares(counts)
        change = {"step": step, "samples": list(counts), "s_per_sample": self.s_per_sample, "reason": reason}
        self.changes.append(change)
        self.pending = {"shares": self.fractions(), "shares_samples": list(counts),
                        "shares_s_per_sample": self.s_per_sample, "shares_reason": reason}
        if self.rank == 0:
            ms = ", ".join(f"{1e3 * s:.1f}" for s in self.s_per_sample or [])
            print(f"[shardlab balance] step {step}: shares {counts} of {self.global_batch} samples "
                  f"({reason}; compute ms/sample per data-parallel rank: {ms})", flush=True)

    def pop_log(self) -> dict | None:
        """The shares change for the next metrics record (once)."""
        out, self.pending = self.pending, None
        return out

    def fractions(self) -> list[float]:
        return [round(c / self.global_batch, 6) for c in self.counts]

    # --- reporting and checkpoints ----------------------------------------------------------------------
    def summary(self) -> dict:
        return {"mode": self.mode, "samples": list(self.counts), "fractions": self.fractions(),
                "s_per_sample": self.s_per_sample, "changes": self.changes,
                "slow_rank": self.cfg.debug.slow_rank if self.cfg.debug.slow_factor > 1 else None,
                "slow_factor": self.cfg.debug.slow_factor}

    def state_dict(self) -> dict:
        return {"mode": self.mode, "samples": list(self.counts), "dp_size": self.dp_size,
                "global_batch": self.global_batch, "measured": self.measured, "s_per_sample": self.s_per_sample}

    def load_state_dict(self, sd: dict) -> None:
        """Resume: auto keeps the recorded shares (data.shares_resume=keep) when the data-parallel size and
        global batch are the same, else measures again; equal and fixed weights follow the config."""
        if not sd or self.mode != "auto" or self.cfg.data.shares_resume != "keep":
            return
        if sd.get("dp_size") != self.dp_size or sd.get("global_batch") != self.global_batch or not sd.get("measured"):
            return
        self.measured, self.s_per_sample = True, sd.get("s_per_sample")
        self.counts = [int(c) for c in sd["samples"]]
        self.sampler.set_shares(self.counts)
        self.changes.append({"step": None, "samples": list(self.counts), "s_per_sample": self.s_per_sample,
                             "reason": "kept from the checkpoint"})
