"""A toy precision converter (every linear of the blocks becomes a `CountingLinear`, which computes x W^T + b
as nn.Linear does and counts its calls) registered as a precision row on each rank, and a driver that builds
a layout through the composition with it (tests/test_precision.py)."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

TOY = "toy-counting"
COMPOSED = ["model.preset=tiny", "train.seq_len=16", "train.global_batch=4", "train.lr=0.001",
            "train.grad_clip=1.0", "ckpt.final=false", "train.micro_batch=4"]


class CountingLinear(nn.Linear):
    """A converted linear: its own product, `matmul(x, weight, bias)`, which TP's modules call with their piece
    of the weight (parallel/tp/modules.py). `calls` counts the products computed."""
    calls = 0

    def matmul(self, x, weight, bias=None):
        self.calls += 1
        return F.linear(x, weight, bias)

    def forward(self, x):
        return self.matmul(x, self.weight, self.bias)


def count_linears(model: nn.Module) -> nn.Module:
    """The converter: every plain nn.Linear of the blocks, in place (names and parameters unchanged)."""
    for m in model.blocks.modules():
        if type(m) is nn.Linear:
            m.__class__ = CountingLinear
    return model


def register_toy():
    from shardlab import precision

    return precision.register(precision.Precision(TOY, 4, "float32", compute="converter", planned_as="fp32",
                                                  wire=None, outer=False, converter=TOY),
                              converter="converter_harness:count_linears")


def converted_steps(overrides: list[str], steps: int = 2) -> dict | None:
    """`steps` steps of the composition with the toy precision: the global losses, how many modules are
    converted after the layers applied and how many of them ran a product, on rank 0."""
    import step_driver as driver
    from shardlab import comm, config
    from shardlab.parallel import build

    register_toy()
    cfg = config.load(None, COMPOSED + overrides)
    cfg = config.validate(cfg, comm.world_size())
    cfg.train.dtype = TOY
    par = build(cfg, comm.device())
    t = cfg.train
    tokens = t.global_batch * t.seq_len
    losses = []
    for step in range(steps):
        data = driver.random_batch(step, (t.global_batch, t.seq_len + 1))
        losses.append(driver.step(par, [(data[:, :-1], data[:, 1:])], tokens, t.grad_clip)[1])
    counting = [m for m in par.model.modules() if isinstance(m, CountingLinear)]
    wrappers = [type(m).__name__ for m in par.model.modules() if getattr(m, "converted", None) is not None]
    return {"losses": losses, "converted": len(counting), "ran": sum(m.calls > 0 for m in counting),
            "wrappers": sorted(set(wrappers))} if comm.rank() == 0 else None
