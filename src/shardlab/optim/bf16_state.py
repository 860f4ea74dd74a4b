"""Optimizer state kept in bfloat16 (`train.optim_dtype=bf16`): AdamW's m and v, Muon's momentum.

Each step reads the bf16 state into the update's precision (fp32, or the parameters' own when wider), updates
it there, uses that unrounded value for this step's update, and stores it back in bf16 by **stochastic
rounding** (not Kahan-style compensation, which would keep a second bf16 tensor and give back half the saving):

    SR(x) = bf16 of (bits(x) + r) with the low 16 bits cleared,  r uniform in [0, 2^16)

x's fp32 pattern is a sign and a magnitude, so adding r rounds |x| up with probability (the dropped low
bits) / 2^16, its distance to the lower bf16 neighbour over one bf16 ulp: E[SR(x)] = x for every finite x in
bf16's range. Round-to-nearest would lose every increment below half an ulp (an EMA with beta2 = 0.999 adds
(1 - beta2) v per step, about 2^-10 of v, under bf16's 2^-8 ulp: v would stop moving); unbiased rounding keeps
them in expectation (Gupta et al. 2015, "Deep Learning with Limited Numerical Precision"; Zamirai et al.
2020, "Revisiting BFloat16 Training").

Reproducible: r comes from a generator seeded with (train.seed, the state's step, the tensor's position in
the optimizer, which state), nothing else. The guarantee: the same config (layout included) and seed give
bitwise the same run, a resumed run is bitwise the straight one (the step is in the checkpointed state), and
replicas of a tensor (ddp, HSDP) draw the same r, so they stay equal. Different layouts cut the tensors
differently, so their noise differs: their trajectories agree to the rounding noise, not bitwise (the fp32
state's parity guarantees are for `optim_dtype=fp32`).
"""
from __future__ import annotations

import math

import torch

_LOW = 1 << 16
_MIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9)  # splitmix64's constants: nearby keys, unrelated seeds


def noise_seed(seed: int, step: int, index: int, slot: int) -> int:
    """The generator seed of one state tensor's rounding at one step (63 bits)."""
    key = (seed * _MIX[0] + step) % 2 ** 64
    key = (key * _MIX[1] + index * 4 + slot) % 2 ** 64
    return (key ^ (key >> 31)) % 2 ** 63


def stochastic_round(x: torch.Tensor, seed: int) -> torch.Tensor:
    """bf16 of x, unbiased (E = x): |x| rounded up with probability its distance to the lower neighbour."""
    x = x.to(torch.float32).contiguous()
    if x.device.type == "meta":  # a dry run's simulated step: shapes and dtypes only
        return x.to(torch.bfloat16)
    g = torch.Generator(device=x.device)
    g.manual_seed(seed)
    r = torch.randint(0, _LOW, x.shape, dtype=torch.int32, device=x.device, generator=g)
    return ((x.view(torch.int32) + r) & -_LOW).view(torch.float32).to(torch.bfloat16)


def local(t):
    """The local tensor of a DTensor (FSDP2 / DTensor TP shards: the update is elementwise), else t."""
    return t.to_local() if hasattr(t, "to_local") else t


def work_dtype(p: torch.Tensor) -> torch.dtype:
    return torch.promote_types(p.dtype, torch.float32)


def bf16_state(st: dict, key: str, like: torch.Tensor) -> torch.Tensor:
    """st[key] as bf16 (zeros on first use). A loaded state comes back in the parameters' dtype (torch's
    load_state_dict casts): its values are bf16's, so casting back is exact and a resume stays bitwise."""
    t = st.get(key)
    if t is None:
        t = st[key] = torch.zeros_like(like, dtype=torch.bfloat16, memory_format=torch.preserve_format)
    elif t.dtype != torch.bfloat16:
        t = st[key] = t.to(torch.bfloat16)
    return t


def next_step(st: dict) -> int:
    """Count this state's step (a 0-d tensor, as torch's AdamW keeps it, so checkpoints carry it)."""
    if "step" not in st:
        st["step"] = torch.tensor(0.0, dtype=torch.float32)
    st["step"] += 1
    return int(st["step"].item())


def positions(optimizer) -> dict:
    """id(param) -> its position in the optimizer (every group, in order): the rounding's tensor index."""
    return {id(p): k for k, p in enumerate(p for g in optimizer.param_groups for p in g["params"])}


@torch.no_grad()
def adamw_step(optimizer, groups) -> None:
    """AdamW (decoupled decay, bias-corrected; torch.optim.AdamW's arithmetic) over `groups`, m and v in
    bf16, one tensor at a time (the fp32 working copies are one tensor's, not the model's)."""
    where = positions(optimizer)
    for group in groups:
        lr, wd, eps, (b1, b2) = group["lr"], group["weight_decay"], group["eps"], group["betas"]
        for p in group["params"]:
            if p.grad is None:
                continue
            st, w, g = optimizer.state[p], local(p), local(p.grad)
            step, seed, k = next_step(st), group["sr_seed"], where[id(p)]
            # the states are shaped like p (a DTensor's are DTensors, as the layers' state dicts expect)
            m = local(bf16_state(st, "exp_avg", p)).to(work_dtype(w)).lerp_(g, 1 - b1)
            v = local(bf16_state(st, "exp_avg_sq", p)).to(work_dtype(w)).mul_(b2).addcmul_(g, g, value=1 - b2)
            w.mul_(1 - lr * wd)
            denom = (v.sqrt() / math.sqrt(1 - b2 ** step)).add_(eps)
            w.addcdiv_(m.to(w.dtype), denom.to(w.dtype), value=-lr / (1 - b1 ** step))
            local(st["exp_avg"]).copy_(stochastic_round(m, noise_seed(seed, step, k, 0)))
            local(st["exp_avg_sq"]).copy_(stochastic_round(v, noise_seed(seed, step, k, 1)))


class AdamWBF16(torch.optim.AdamW):
    """The `adamw` row with `train.optim_dtype=bf16`: torch's AdamW groups and state keys (exp_avg, exp_avg_sq,
    step: checkpoints and the layers' state dicts see AdamW's), m and v in bf16, stochastically rounded.
    `sr_seed`: the rounding's seed (train.seed), a group hyperparameter so ZeroRedundancyOptimizer's
    rebuild by keyword carries it."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, sr_seed: int = 0):
        self._sr_seed = sr_seed
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self.defaults["sr_seed"] = sr_seed

    def add_param_group(self, param_group: dict) -> None:
        param_group.setdefault("sr_seed", getattr(self, "_sr_seed", 0))
        super().add_param_group(param_group)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        adamw_step(self, self.param_groups)
        return loss
