"""Non-finite and spike detection, on LOCAL values, before the gradient reduction.

Why local: after the all-reduce (or reduce-scatter) one rank's NaN is in every rank's gradient, so
every rank looks guilty. The doctor therefore looks at what each rank computed by itself:

* the loss of each microbatch (always local: it is computed before any gradient exists);
* the local gradient contribution of each parameter, measured by a tensor hook on the parameter
  (`param.register_hook`). Autograd calls it with the gradient of this microbatch *before* it is
  accumulated into `.grad`, i.e. before the DDP reducer copies it into a bucket and all-reduces it,
  even when the all-reduce overlaps backward. The hook records ||g|| without a host sync; the
  squares are added into a device vector in one go when read. (With several microbatches this is the
  sum over microbatches of ||g_i||^2: right for finiteness and spikes, not the norm of the accumulated
  gradient.)

Sharded strategies (FSDP2's DTensor parameters) reduce-scatter inside their own autograd machinery:
the hook on the sharded parameter never sees a local gradient. For them the local signal is the loss
only; a non-finite *reduced* gradient norm still raises the alarm, and the replay of every rank's
microbatch (localize.py) finds the rank and module.

The per-rank signals are all-gathered once per step (one small collective); every rank then takes
the same decision from the same numbers (`decide`).
"""
from __future__ import annotations

import math
import statistics
from collections import deque

import torch

from shardlab.model.dtypes import wide_dtype

# One row per rank in the step's all-gather (float64: exact for counts and flags).
FIELDS = ("loss", "tokens", "grad_sq", "loss_finite", "grad_finite", "first_bad_micro", "has_data_next",
          "hooks_fired")


class LocalGradMonitor:
    """Per-parameter tensor hooks that accumulate the squared norm of each local gradient contribution."""

    def __init__(self, named_params: list[tuple[str, torch.Tensor]], device: torch.device):
        # Sharded (DTensor) parameters are skipped: their hooks would see reduced shards, not local grads.
        self.names = [n for n, p in named_params if p.requires_grad and not hasattr(p, "to_local")]
        params = {n: p for n, p in named_params}
        self.device = device
        self._sq = torch.zeros(len(self.names), device=device, dtype=torch.float32)
        # (parameter index, ||g||) of the hooks fired since the last fold: a hook runs one norm and appends
        # it; the squares are added into `sq` in one index_add_ when read (per hook, an indexed in-place
        # add costs four more operator calls, more than the norm itself on small tensors).
        self._pending: list[tuple[int, torch.Tensor]] = []
        self.fired = 0
        self.handles = [params[n].register_hook(self._hook(i)) for i, n in enumerate(self.names)]

    def _hook(self, i: int):
        def hook(grad: torch.Tensor | None):
            # A zero-bubble split backward (parallel/pp/zero_bubble.py) reaches each weight twice: its input-
            # gradient pass (I) computes no weight gradient, so autograd calls the hook with None; the weight-
            # gradient pass (W) then brings the gradient itself. Count it once, when it exists.
            if grad is None:
                return None
            self._pending.append((i, torch.linalg.vector_norm(grad.detach(), dtype=wide_dtype(grad.dtype)).float()))
            self.fired += 1
            return None  # observe only: the gradient is not changed
        return hook

    @property
    def sq(self) -> torch.Tensor:
        """Per parameter, the sum over this step's microbatches of ||local gradient||² (float32)."""
        if self._pending:
            # built on the host and copied without waiting for the device stream (no host sync on CUDA)
            idx = torch.tensor([i for i, _ in self._pending]).to(self.device, non_blocking=True)
            self._sq.index_add_(0, idx, torch.stack([n for _, n in self._pending]).square())
            self._pending = []
        return self._sq

    def reset(self) -> None:
        self._sq.zero_()
        self._pending = []
        self.fired = 0

    def per_param(self) -> dict[str, float]:
        return {n: math.sqrt(v) if math.isfinite(v) else v for n, v in zip(self.names, self.sq.tolist())}

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []


class SpikeDetector:
    """A loss above `factor` x the running median of the last `window` finite losses is a spike."""

    def __init__(self, factor: float, window: int = 50, warmup: int = 10):
        self.factor, self.warmup = factor, warmup
        self.history: deque[float] = deque(maxlen=window)

    def median(self) -> float | None:
        return statistics.median(self.history) if len(self.history) >= self.warmup else None

    def is_spike(self, loss: float) -> bool:
        med = self.median()
        return self.factor > 0 and med is not None and math.isfinite(loss) and loss > self.factor * med

    def add(self, loss: float) -> None:
        if math.isfinite(loss):
            self.history.append(loss)


def decide(rows: list[dict], global_grad_norm: float, found_inf: bool, spike: SpikeDetector) -> dict | None:
    """The anomaly verdict from every rank's signals (identical input on every rank -> identical output).

    Returns None when the step is healthy, else {"kind", "ranks", "loss", "median", "reason"}.
    `found_inf` (fp16 loss scaling) means overflowing gradients are expected: only the loss counts then.
    """
    tokens = sum(r["tokens"] for r in rows)
    loss = sum(r["loss"] * r["tokens"] for r in rows) / max(tokens, 1)  # token-weighted mean over ranks
    bad_loss = [i for i, r in enumerate(rows) if not r["loss_finite"]]
    bad_grad = [] if found_inf else [i for i, r in enumerate(rows) if not r["grad_finite"]]
    med = spike.median()
    if bad_loss or bad_grad:
        ranks = sorted(set(bad_loss) | set(bad_grad))
        what = "loss" if bad_loss else "local gradient"
        return {"kind": "non-finite", "ranks": ranks, "loss": float("nan") if bad_loss else loss, "median": med,
                "reason": f"non-finite {what} on rank{'s' if len(ranks) > 1 else ''} "
                          f"{', '.join(map(str, ranks))} before the gradient reduction"}
    if not found_inf and not math.isfinite(global_grad_norm):
        # Every local signal was finite (e.g. a sharded strategy without local grad hooks): the replay
        # on every rank will say where it came from.
        return {"kind": "non-finite", "ranks": list(range(len(rows))), "loss": loss, "median": med,
                "reason": "the reduced gradient norm is non-finite although every rank's local loss was finite"}
    if spike.is_spike(loss):
        # The rank whose local loss is furthest above the median is the prime suspect.
        worst = max(range(len(rows)), key=lambda i: rows[i]["loss"])
        return {"kind": "spike", "ranks": [worst], "loss": loss, "median": med,
                "reason": f"loss {loss:.4g} > {spike.factor:g} x running median {med:.4g} "
                          f"(rank {worst} local loss {rows[worst]['loss']:.4g})"}
    return None
