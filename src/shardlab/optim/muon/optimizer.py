"""The hybrid optimizer of the registry's `muon` row: Muon for the blocks' hidden matrices (every linear layer
of attention, the MLP and the experts, by model/anatomy.py's roles), AdamW for the embedding, the head, the
norms, the biases and the MoE routers (the Moonlight / Kimi split: Liu et al. 2025), in one torch optimizer
so the step, the checkpoints and the layers' state dicts see one optimizer.

Muon's step, per matrix W with gradient G (torch.optim.Muon's, Keller Jordan's muon.py):

    B <- mu B + (1 - mu) G                     momentum (mu = 0.95), kept on this rank's piece of W
    U <- (1 - mu) G + mu B                     Nesterov
    O <- NS5(U)                                quintic Newton-Schulz on the whole matrix (exchange.py)
    W <- (1 - lr wd) W - lr 0.2 sqrt(max(m, n)) O      decoupled decay; Moonlight's update-RMS match

Muon's learning rate is `train.muon_lr` (0: train.lr, as the RMS match intends), following the schedule
through its group's `lr_scale`.
"""
from __future__ import annotations

import torch

from shardlab.optim import bf16_state
from shardlab.optim.groups import param_groups
from shardlab.optim.muon import exchange
from shardlab.optim.muon.cost import hidden_matrices  # noqa: F401 - torch-free (the planner reads it)
from shardlab.optim.muon.newton_schulz import MOMENTUM, NESTEROV, rms_scale


class MuonAdamW(torch.optim.AdamW):
    """AdamW (fused, as the `adamw` row) over its groups; Muon over the groups marked `muon`. `matrices`:
    exchange.Matrix per Muon parameter (how the layers cut it); None: every Muon parameter whole (how
    ZeroRedundancyOptimizer rebuilds it over each rank's partition: `type(opt)(groups, lr=..., ...)`).
    `ns_dtype`: where Newton-Schulz runs (None: the parameters' dtype; torch.optim.Muon's is bfloat16).
    `sr_seed`: None keeps every state in fp32; a seed keeps AdamW's m, v and Muon's momentum in bf16,
    stochastically rounded (`train.optim_dtype=bf16`: bf16_state.py), a group hyperparameter so
    ZeroRedundancyOptimizer's rebuild by keyword carries it."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, matrices=None, sr_seed: int | None = None):
        self.matrices = list(matrices or [])
        self._sr_seed = sr_seed
        # bf16 states: its own step, whose `step` counts stay on the host (fused would move them to the device)
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=sr_seed is None)
        self.ns_dtype = None

    def __setstate__(self, state: dict) -> None:
        """Loading a state dict: Adam's fix-ups expect a `step` in every state; Muon's hold the momentum only."""
        muon = {id(p) for g in state["param_groups"] if g.get("muon") for p in g["params"]}
        kept = {p: state["state"].pop(p) for p in list(state["state"]) if id(p) in muon}
        super().__setstate__(state)
        self.state.update(kept)

    def add_param_group(self, param_group: dict) -> None:
        if getattr(self, "_sr_seed", None) is not None:
            param_group.setdefault("sr_seed", self._sr_seed)
        super().add_param_group(param_group)
        known = {id(m.param) for m in self.matrices}
        if param_group.get("muon"):  # whole matrices (no layer described them): no exchange
            self.matrices += [exchange.Matrix("", p, [], tuple(p.shape)) for p in param_group["params"]
                              if id(p) not in known]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._muon_step()
        every = self.param_groups
        # AdamW's step walks self.param_groups: it is shown its own groups only
        self.param_groups = [g for g in every if not g.get("muon")]
        try:
            if self.param_groups and "sr_seed" in self.param_groups[0]:
                bf16_state.adamw_step(self, self.param_groups)
            else:
                super().step()
        finally:
            self.param_groups = every
        return loss

    def _muon_step(self) -> None:
        group_of = {id(p): g for g in self.param_groups if g.get("muon") for p in g["params"]}
        updates = {}
        where = bf16_state.positions(self)
        local = bf16_state.local  # a DTensor's local piece (FSDP2, DTensor TP): its state stays a DTensor
        for m in self.matrices:  # every matrix takes part in the exchange, on every rank, in one order
            p, g = m.param, group_of[id(m.param)]
            if p.grad is None:
                updates[m] = torch.zeros_like(local(p))
                continue
            grad = local(p.grad)
            if "sr_seed" in g:
                buf = self._momentum_bf16(p, g, where[id(p)])
            else:
                buf = self.state[p].get("momentum_buffer")
                if buf is None:
                    buf = self.state[p]["momentum_buffer"] = torch.zeros_like(p.grad,
                                                                             memory_format=torch.preserve_format)
                buf = local(buf).lerp_(grad, 1 - g["momentum"])
            updates[m] = grad.lerp(buf, g["momentum"]) if g["nesterov"] else buf
        out = exchange.orthogonalise(self.matrices, updates, self.ns_dtype)
        for m in self.matrices:
            p, g = local(m.param), group_of[id(m.param)]
            if m.param.grad is None:
                continue
            p.mul_(1 - g["lr"] * g["weight_decay"])
            p.add_(out[m], alpha=-g["lr"] * rms_scale(m.shape))

    def _momentum_bf16(self, p, g, index: int) -> torch.Tensor:
        """The momentum update in the working precision from the bf16 buffer, stored back stochastically
        rounded (bf16_state.py); returns the unrounded buffer, which this step's update uses."""
        st, grad = self.state[p], bf16_state.local(p.grad)
        step = bf16_state.next_step(st)
        buf = bf16_state.local(bf16_state.bf16_state(st, "momentum_buffer", p.grad))
        work = buf.to(bf16_state.work_dtype(grad)).lerp_(grad, 1 - g["momentum"])
        buf.copy_(bf16_state.stochastic_round(work, bf16_state.noise_seed(g["sr_seed"], step, index, 2)))
        return work


def muon_factory(cfg, no_decay: set[str], routers: set[str] = frozenset()):
    """Returns factory(named_params, pieces=()) -> MuonAdamW; `pieces`: the sharding layers' descriptions of
    what they hand (optim/serving.py), outermost first."""
    from shardlab.model import anatomy

    t = cfg.train
    scale = float(getattr(cfg.model, "moe_router_lr_scale", 1.0))
    muon_lr = getattr(t, "muon_lr", 0.0) or t.lr
    a = anatomy.of(cfg.model)

    def factory(named_params, pieces=()):
        named = [(n, p) for n, p in named_params if p.requires_grad]
        hidden = hidden_matrices(a, [n for n, p in named if p.dim() == 2])
        mats = [(n, p) for n, p in named if n in hidden]
        groups = param_groups([(n, p) for n, p in named if n not in hidden], t, no_decay, routers, scale)
        muon = [{"params": [p for _, p in mats], "muon": True, "lr": muon_lr, "lr_scale": muon_lr / t.lr,
                 "weight_decay": t.weight_decay, "momentum": MOMENTUM, "nesterov": NESTEROV}] if mats else []
        return MuonAdamW(groups + muon, lr=t.lr, betas=(t.beta1, t.beta2), eps=1e-8,
                         matrices=exchange.matrices(mats, pieces),
                         sr_seed=t.seed if getattr(t, "optim_dtype", "fp32") == "bf16" else None)

    return factory
