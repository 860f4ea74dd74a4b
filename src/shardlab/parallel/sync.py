"""Synchronising replicas less often than every step: local SGD and DiLoCo (`parallel.sync`, docs/sync.md).

Put in front of a replicating data-parallel layer (`single`, `ddp`) by the composition. Between two
synchronisations each replica steps alone on its own share of the batch: the layer is told never to
synchronise gradients, so the inner optimizer sees this replica's gradient only. Every H
(`parallel.sync_every`) inner steps, across the data-parallel group:

- **local SGD** (Stich 2019; Lin et al. 2020, "post-local SGD"): the parameters are averaged.
- **DiLoCo** (Douillard et al. 2023): the pseudo-gradient Δ = θ_start − θ_end is averaged (optionally in
  bf16/fp16, `parallel.outer_dtype`) and an outer Nesterov SGD (`parallel.outer_lr`,
  `parallel.outer_momentum`) steps θ_start with it; every replica starts the next period there.
  With outer lr 1 and no momentum, θ_start − mean(Δ) = mean(θ_end): DiLoCo is then local SGD.

One all-reduce of the whole model per H steps instead of one of the gradients per step: 1/H of the bytes.
The inner optimizer's state stays per replica (as in DiLoCo), so with AdamW even H = 1 is not ddp (Adam
of an average is not the average of Adams); with SGD it is.

Between synchronisations the replicas differ by design: `replicas_in_sync` tells the doctor, and
`sync_state_dict` gives checkpoints what exact resume mid-period needs: the step within the period,
DiLoCo's θ_start and outer momentum (the same on every replica), and each replica's own parameters and
inner optimizer state (keyed by replica, like the RNG streams).
"""
from __future__ import annotations

import torch

from shardlab import comm

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class PeriodicSync:
    """The dp layer with its gradient all-reduce replaced by a periodic model synchronisation."""

    def __init__(self, dp, pcfg, group, optimizer):
        self.__dict__.update(dp=dp, mode=pcfg.sync, every=int(pcfg.sync_every), group=group,
                             optimizer=optimizer, inner_step=0, wire_dtype=_DTYPES[pcfg.outer_dtype])
        # The trainable parameters once each (a tied weight once), in one fixed order on every replica.
        seen, params = set(), []
        for p in dp.model.parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                params.append(p)
        self.__dict__["params"] = params
        self.__dict__["replica"] = comm.rank(group)
        if self.mode == "diloco":
            # θ_start, one flat fp32 tensor, is what the outer optimizer updates; torch's SGD does the maths.
            start = self._flat().float()
            momentum = float(pcfg.outer_momentum)
            outer = torch.optim.SGD([start], lr=float(pcfg.outer_lr), momentum=momentum,
                                    nesterov=momentum > 0, foreach=False)
            if momentum > 0:
                # A zero buffer is what SGD's first step would start from (buf = g with no dampening);
                # allocated now so a checkpoint has it before the first outer step.
                outer.state[start]["momentum_buffer"] = torch.zeros_like(start)
            self.__dict__.update(start=start, outer=outer)

    def __getattr__(self, name):  # everything not named here is the dp layer's own
        return getattr(self.__dict__["dp"], name)

    # --- the step ---------------------------------------------------------------------------------------
    def set_requires_gradient_sync(self, requires: bool) -> None:
        self.dp.set_requires_gradient_sync(False)  # each replica steps on its own gradient

    @property
    def replicas_in_sync(self) -> bool:
        """True at a period boundary, when every replica holds the same parameters."""
        return self.inner_step % self.every == 0

    def optimizer_step(self, optimizer) -> None:
        self.dp.optimizer_step(optimizer)
        self.__dict__["inner_step"] = self.inner_step + 1
        if self.inner_step % self.every == 0:
            self.synchronise()

    @torch.no_grad()
    def synchronise(self) -> None:
        """The outer step: average the parameters (local SGD) or the pseudo-gradient (DiLoCo)."""
        n = comm.world_size(self.group)
        if self.mode == "local_sgd":
            flat = self._flat()
            if n > 1:
                comm.all_reduce(flat, group=self.group, tag="local_sgd average")
                flat.div_(n)
            self._unflatten(flat)
            return
        delta = (self.start - self._flat().float()).to(self.wire_dtype)  # Δ = θ_start − θ_end
        if n > 1:
            comm.all_reduce(delta, group=self.group, tag="diloco pseudo-gradient")
        self.start.grad = delta.float().div_(n)
        self.outer.step()
        self.start.grad = None
        self._unflatten(self.start)

    def _flat(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.params])

    def _unflatten(self, flat: torch.Tensor) -> None:
        offset = 0
        for p in self.params:
            p.data.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()

    # --- checkpoint state -------------------------------------------------------------------------------
    def sync_state_dict(self) -> dict:
        """Tensors for DCP. Shared (equal on every replica): the step within the period, DiLoCo's θ_start
        and momentum. Per replica (`replica<r>`: only that replica writes it): its parameters and inner
        optimizer state, which differ from the others' mid-period. Copies, so a load into them never
        aliases the live tensors the `model`/`optim` entries load into."""
        sd = {"inner_step": torch.tensor(self.inner_step, dtype=torch.int64)}
        if self.mode == "diloco":
            sd["start"] = self.start.detach().clone()
            buf = self.outer.state[self.start].get("momentum_buffer")
            if buf is not None:
                sd["momentum"] = buf.detach().clone()
        opt = {str(i): {k: v.detach().clone() for k, v in self.optimizer.state[p].items() if torch.is_tensor(v)}
               for i, p in enumerate(self.params) if p in self.optimizer.state}
        opt = {i: st for i, st in opt.items() if st}  # no empty entries (plain SGD keeps no tensor state)
        sd[f"replica{self.replica}"] = {"params": self._flat().clone(), "optim": opt}
        return sd

    @torch.no_grad()
    def load_sync_state_dict(self, sd: dict) -> None:
        """After the model and optimizer were loaded: what a checkpoint had of this state (a checkpoint
        of another run keeps the loaded model as θ_start and starts a fresh period)."""
        self.__dict__["inner_step"] = int(sd["inner_step"]) if "inner_step" in sd else 0
        mine = sd.get(f"replica{self.replica}")
        if mine is not None:  # this replica's own mid-period parameters and inner optimizer state
            self._unflatten(mine["params"])
            for i, p in enumerate(self.params):
                for k, v in mine.get("optim", {}).get(str(i), {}).items():
                    if k in self.optimizer.state.get(p, {}):
                        self.optimizer.state[p][k].copy_(v)
        if self.mode == "diloco":
            self.start.copy_(sd["start"] if "start" in sd else self._flat().float())
            if "momentum" in sd and self.outer.state[self.start].get("momentum_buffer") is not None:
                self.outer.state[self.start]["momentum_buffer"].copy_(sd["momentum"])
