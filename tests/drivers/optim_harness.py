"""A toy optimizer whose update needs whole matrices, registered in the optimizer registry on each rank,
and a driver that builds a layout through the composition with it (tests/parallel/test_optim_serving.py)."""
from __future__ import annotations

import torch

TOY = "toy-whole-matrix"
COMPOSED = ["model.preset=tiny", "train.seq_len=16", "train.global_batch=4", "train.lr=0.001",
            "train.grad_clip=1.0", "ckpt.final=false", "train.micro_batch=2"]


class NormalisedSGD(torch.optim.Optimizer):
    """Each matrix steps along its gradient divided by the gradient's Frobenius norm: the norm of the whole
    matrix, so a shard cannot be updated alone (as Muon's orthogonalisation cannot)."""

    def __init__(self, params, lr: float = 1e-3):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad / (p.grad.norm() + 1e-12), alpha=-group["lr"])


def toy_factory(cfg, no_decay, routers=frozenset()):
    def factory(named_params):
        return NormalisedSGD([p for _, p in named_params if p.requires_grad], lr=cfg.train.lr)
    return factory


def register_toy():
    from shardlab.optim import registry

    return registry.register(registry.OptimizerRow(TOY, states=0, factory="optim_harness:toy_factory",
                                                   whole_matrix=True))


def build_with_toy(overrides: list[str]) -> str:
    """Build the layout of `overrides` with the toy optimizer named by the config and take one step:
    "served" (with the loss) or "refused: <the line>"."""
    import step_driver as driver
    from shardlab import comm, config
    from shardlab.errors import ConfigError
    from shardlab.parallel import build

    register_toy()
    cfg = config.load(None, COMPOSED + overrides)
    cfg = config.validate(cfg, comm.world_size())
    cfg.train.optimizer = TOY  # the entry named by the config (registry.training_name)
    try:
        par = build(cfg, comm.device())
    except ConfigError as e:
        return f"refused: {e}"
    t = cfg.train
    tokens = t.global_batch * t.seq_len
    data = driver.random_batch(0, (t.global_batch, t.seq_len + 1), seed=0)[driver.rows(par, t.micro_batch)]
    out = par.step([(data[:, :-1], data[:, 1:])], max_norm=t.grad_clip, global_tokens=tokens)
    assert isinstance(par.optimizer, NormalisedSGD) or type(par.optimizer).__name__ == "ZeroRedundancyOptimizer"
    before = {n: p.detach().clone() for n, p in par.model.named_parameters()}
    par.step([(data[:, :-1], data[:, 1:])], max_norm=t.grad_clip, global_tokens=tokens)
    moved = any(not torch.equal(before[n], p) for n, p in par.model.named_parameters())
    return "served" if torch.isfinite(out.loss_sum) and moved else f"served, but no step: {out}"
