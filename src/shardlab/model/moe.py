"""Mixture of experts: a routed MLP (Switch Transformer, GShard, Mixtral), single-device code.

`MoE` replaces the MLP of every `moe_every`-th block. A linear `router` scores each token against E
experts (copies of the model's own MLP class, `experts.0`, `experts.1`, ...: one checkpoint key per
expert, so an expert-parallel checkpoint reshards like any other tensor). Per token:

1. routing: softmax over E in fp32 (Switch's advice: the exponent is where bf16 hurts), the top-k
   experts; their probabilities are the combine weights, renormalised to sum to one when k > 1
   (Mixtral's choice; k = 1 keeps the raw probability, as Switch does, so the router gets a gradient).
2. capacity: each expert takes at most ceil(moe_capacity * T * k / E) token-slots **per sequence**
   (GShard's group = one sequence), first come first served in position order; a slot over capacity is
   dropped: its MoE output is 0 and the residual stream carries the token. moe_capacity = 0 is dropless.
   Because a group is one sequence, the same slots are dropped whichever rank holds the sequence.
3. dispatch: the kept (token, slot) pairs are sorted by expert (stable: position order within an
   expert) and handed to `run_experts(x_sorted, counts_per_expert)`. Single device: each expert runs on
   its contiguous slice. Expert parallelism (parallel/ep/layer.py) replaces only this method: it sends each
   slice to the rank that holds the expert and brings the results back.
4. combine: the outputs are put back at their tokens, weighted by the combine weights.

Losses (added to the training loss by the step, `loss_term`, never to the reported LM loss):
- load balancing (Switch's form) per sequence: E * sum_i f_i * P_i, with f_i the share of the
  sequence's token-slots routed to expert i (before dropping) and P_i its mean router probability;
  averaged over sequences, times `moe_aux_weight`. 1.0 when perfectly balanced.
- router z-loss (ST-MoE): logsumexp(router logits)^2, averaged over tokens, times `moe_z_weight`.
Both are sums over sequences / tokens divided by a global count, so any data- or expert-parallel split of
the batch adds up to the single-device value.

Auxiliary-loss-free balancing (DeepSeek-V3, `moe_bias_update` = gamma > 0): a per-expert bias, a buffer
`expert_bias` (saved in checkpoints), is added to the router probabilities for the top-k *selection only*;
the combine weights stay the probabilities, so the bias steers tokens without entering the gradient. After
each optimizer step the step calls `update_bias(load)` with the step's tokens per expert over the global
batch (summed over every data rank by the parallel layer: this module knows no ranks):
b_i += gamma * sign(mean load - load_i). An overloaded expert becomes less attractive next step, whatever
the learning rate does to the router.
"""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from shardlab.model.configs import MOE_KEYS, MoEFields, moe_fields  # noqa: F401 - re-exported
from shardlab.model.dtypes import at_least_fp32


class MoE(nn.Module):
    def __init__(self, d_model: int, experts: list[nn.Module], top_k: int = 2, capacity: float = 1.25,
                 aux_weight: float = 0.01, z_weight: float = 0.001, bias_update: float = 0.0):
        super().__init__()
        self.n_experts, self.top_k, self.capacity_factor = len(experts), top_k, capacity
        self.aux_weight, self.z_weight, self.bias_update = aux_weight, z_weight, bias_update
        self.router = nn.Linear(d_model, self.n_experts, bias=False)
        # Only with the bias on, so every other MoE model's state dict keeps its keys.
        self.register_buffer("expert_bias", torch.zeros(self.n_experts) if bias_update > 0 else None)
        self.experts = nn.ModuleList(experts)
        self.stats: dict = {}
        # Fixed-shape dispatch (`_dispatch_static`): set by the simulation, which has no data to route by
        self.static_shapes = False
        # The auxiliary losses of the last forward as a term of the *summed* token loss (the step divides
        # the sum by the global token count): aux_weight * T * sum_seq(aux) + z_weight * sum_tok(z).
        self.loss_term: torch.Tensor | None = None

    def capacity(self, t: int) -> int | None:
        """Token-slots each expert takes per sequence of t tokens; None = dropless."""
        if self.capacity_factor <= 0:
            return None
        return math.ceil(self.capacity_factor * t * self.top_k / self.n_experts)

    def route(self, x: torch.Tensor):
        """(b, t, d) -> combine weights (b, t*k), experts (b, t*k), kept (b, t*k) bool, and the losses'
        per-sequence / per-token parts. Slots are token-major: slot j*k + c is token j's c-th choice."""
        b, t, _ = x.shape
        E, k = self.n_experts, self.top_k
        logits = at_least_fp32(self.router(x))
        probs = logits.softmax(-1)
        if self.expert_bias is None:
            weight, expert = probs.topk(k, dim=-1)
        else:  # the bias picks the experts; the probabilities weight them (DeepSeek-V3)
            expert = (probs + self.expert_bias.to(probs.dtype)).topk(k, dim=-1).indices
            weight = probs.gather(-1, expert)
        if k > 1:
            weight = weight / weight.sum(-1, keepdim=True)
        expert, weight = expert.reshape(b, t * k), weight.reshape(b, t * k)
        onehot = F.one_hot(expert, E)  # (b, t*k, E)
        routed = onehot.sum(1)  # (b, E): slots per expert per sequence, before dropping
        aux = E * (routed.to(probs.dtype) / (t * k) * probs.mean(1)).sum(-1)  # (b,)
        z = torch.logsumexp(logits, -1).pow(2)  # (b, t)
        cap = self.capacity(t)
        if cap is None:
            kept = torch.ones_like(expert, dtype=torch.bool)
        else:  # a slot's place in its expert's queue for this sequence, counted in position order
            place = (onehot.cumsum(1) * onehot).sum(-1) - 1
            kept = place < cap
        return weight, expert, kept, routed, aux, z

    # Under `train.compile` this runs eager inside the compiled block (parallel/compile.py says why).
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        weight, expert, kept, routed, aux, z = self.route(x)
        if self.static_shapes:
            out = self._dispatch_static(x, weight, expert, kept)
        else:
            out = self._dispatch_sorted(x, weight, expert, kept)
        self.loss_term = self.aux_weight * t * aux.sum() + self.z_weight * z.sum()
        # tensors, read on the host only when a step is logged: no host sync per layer per forward
        self.stats = {"tokens_per_expert": routed.sum(0).detach(), "dropped": (~kept).sum().detach(),
                      "aux": aux.detach().mean(), "z": z.detach().mean()}
        return out.view(b, t, d)

    def _dispatch_sorted(self, x, weight, expert, kept) -> torch.Tensor:
        """The kept slots sorted by expert, each expert on its rows (shapes follow the routing)."""
        b, t, d = x.shape
        slots = kept.reshape(-1).nonzero().squeeze(1)
        chosen = expert.reshape(-1)[slots]
        order = torch.argsort(chosen, stable=True)  # by expert; position order within one
        slots = slots[order]
        tokens = torch.div(slots, self.top_k, rounding_mode="floor")
        x_flat = x.reshape(b * t, d)
        counts = torch.bincount(chosen, minlength=self.n_experts)
        y = self.run_experts(x_flat[tokens], counts)
        y = y * weight.reshape(-1)[slots].unsqueeze(1).to(y.dtype)
        return y.new_zeros(b * t, d).index_add(0, tokens, y)

    def _dispatch_static(self, x, weight, expert, kept) -> torch.Tensor:
        """Capacity-bounded dispatch with fixed shapes (GShard's dense form): every expert gets b x cap
        rows, slot (sequence s, place p) of expert e at row e*b*cap + s*cap + p, unused rows zero; a dropped
        slot goes to a spare last row that is never read back. No shape depends on the routing, so the
        meta device (the simulated accelerator, shardlab.simulate) runs it; dropless routing takes the
        worst case, cap = t x k. Same kept slots and experts as the sorted dispatch."""
        b, t, d = x.shape
        E, k = self.n_experts, self.top_k
        cap = self.capacity(t) or t * k
        rows = b * cap
        onehot = F.one_hot(expert, E)
        place = (onehot.cumsum(1) * onehot).sum(-1) - 1  # a slot's place in its expert's queue (b, t*k)
        seq = torch.arange(b, device=x.device).unsqueeze(1)
        dest = torch.where(kept, expert * rows + seq * cap + place, E * rows).reshape(-1)
        tokens = (torch.arange(t * k, device=x.device) // k + seq * t).reshape(-1)
        x_flat = x.reshape(b * t, d)
        buf = x_flat.new_zeros(E * rows + 1, d).index_copy(0, dest, x_flat[tokens])
        y = self.run_experts(buf[:-1], [rows] * E)
        y = torch.cat([y, y.new_zeros(1, y.shape[1])])[dest] * weight.reshape(-1, 1).to(y.dtype)
        return y.new_zeros(b * t, d).index_add(0, tokens, y)

    @torch.no_grad()
    def update_bias(self, load: torch.Tensor) -> None:
        """After an optimizer step: `load` = tokens per expert over the step's global batch (E,)."""
        load = load.to(self.expert_bias.device, torch.float64)
        self.expert_bias += (self.bias_update * torch.sign(load.mean() - load)).to(self.expert_bias.dtype)

    def run_experts(self, x_sorted: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Each expert on its contiguous slice of the expert-sorted tokens. Every expert runs, even on
        zero rows, so each one's parameters get a gradient (zeros) every step: a data-parallel layer
        waiting for every gradient never waits for an expert nobody chose. `counts`: rows per expert, a
        tensor (read on the host: the split sizes) or, from the fixed-shape dispatch, a list."""
        chunks = x_sorted.split(counts if isinstance(counts, list) else counts.tolist())
        return torch.cat([expert(c) for expert, c in zip(self.experts, chunks)])


def mlp_for(cfg, index: int, make_mlp) -> nn.Module:
    """Block `index`'s MLP: an MoE of `cfg.moe_experts` copies of `make_mlp()` on every
    `cfg.moe_every`-th block (blocks moe_every-1, 2*moe_every-1, ...), else `make_mlp()`."""
    E = getattr(cfg, "moe_experts", 0)
    if not E or index % cfg.moe_every != cfg.moe_every - 1:
        return make_mlp()
    return MoE(cfg.d_model, [make_mlp() for _ in range(E)], cfg.moe_top_k, cfg.moe_capacity,
               cfg.moe_aux_weight, cfg.moe_z_weight, getattr(cfg, "moe_bias_update", 0.0))


def moe_layers(model: nn.Module) -> list[MoE]:
    return [m for m in model.modules() if isinstance(m, MoE)]


@contextlib.contextmanager
def static_shapes(model: nn.Module):
    """Fixed-shape, capacity-bounded dispatch in every MoE layer inside the block (restored after)."""
    layers = moe_layers(model)
    for m in layers:
        m.static_shapes = True
    try:
        yield model
    finally:
        for m in layers:
            m.static_shapes = False


@contextlib.contextmanager
def dropless(model: nn.Module):
    """Route without capacity inside the block (restored after). Generation runs this way: capacity is
    per sequence, ceil(factor x T x k / E), so it depends on the length T of the chunk a forward sees. A
    KV-cache decode step sees T = 1 (nothing can drop) while a forward over the whole sequence may drop
    the same token, and the cap grows with the sequence, so a token's drop would change as text is
    appended: no cache could replay it. Dropless routing makes each token's output depend only on the
    tokens before it, so the cache, recomputing the sequence, and left padding all agree."""
    layers = moe_layers(model)
    saved = [m.capacity_factor for m in layers]
    for m in layers:
        m.capacity_factor = 0.0
    try:
        yield model
    finally:
        for m, c in zip(layers, saved):
            m.capacity_factor = c


def loss_term(layers: list[MoE]) -> torch.Tensor | None:
    """The auxiliary losses of the last forward, summed over layers (as Switch sums them)."""
    terms = [m.loss_term for m in layers if m.loss_term is not None]
    return sum(terms) if terms else None


def collect(layers: list[MoE]) -> dict | None:
    """The last forward's stats summed over the MoE layers: tokens per expert (this rank's tokens, before
    dropping), dropped token-slots, and the aux and z losses (each layer's, summed as in the loss)."""
    if not layers or not layers[0].stats:
        return None
    return {"tokens_per_expert": sum(m.stats["tokens_per_expert"] for m in layers),
            "dropped": sum(m.stats["dropped"] for m in layers),
            "aux": sum(m.stats["aux"] for m in layers), "z": sum(m.stats["z"] for m in layers)}
