"""The data-parallel tests' shared models, batches and steps (test_ddp, test_exposed): toy models that
exercise unused, frozen and tied parameters and SyncBatchNorm, the tiny GPT, and the one microbatch step."""
from __future__ import annotations

import torch
import torch.nn as nn

from shardlab import comm, parallel
from shardlab.config import Config
from shardlab.model.gpt import PRESETS, GPTConfig, build_model
from shardlab.model.loss import cross_entropy
from shardlab.parallel.dp.sync_batchnorm import SyncBatchNorm

SMALL_BUCKETS = dict(bucket_mb=0.05, first_bucket_mb=0.05)  # several buckets even for tiny models


# --- models --------------------------------------------------------------------------------------

class UnusedBranch(nn.Module):
    """`never` takes no part in the loss; `rank0_only` is used on rank 0 only (dynamic control flow)."""

    def __init__(self):
        super().__init__()
        self.a, self.never, self.rank0_only, self.b = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 16), \
            nn.Linear(16, 4)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        if comm.rank() == 0:
            h = h + self.rank0_only(h)
        return self.b(h).pow(2).mean()


class FrozenTied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(32, 16)
        self.frozen = nn.Linear(16, 16)
        self.frozen.requires_grad_(False)
        self.mid = nn.Linear(16, 16)
        self.head = nn.Linear(16, 32, bias=False)
        self.head.weight = self.emb.weight  # tied

    def forward(self, x):
        return self.head(torch.relu(self.mid(self.frozen(self.emb(x))))).logsumexp(-1).mean()


class SyncBNNet(nn.Module):
    def __init__(self, bn=nn.SyncBatchNorm):
        super().__init__()
        self.fc, self.bn, self.out = nn.Linear(6, 8), bn(8), nn.Linear(8, 1)

    def forward(self, x):
        return self.out(torch.relu(self.bn(self.fc(x)))).pow(2).mean()


class TorchDDPSyncBN(nn.BatchNorm1d):
    """Our SyncBatchNorm's CPU path under another class name: torch DDP refuses CPU `nn.SyncBatchNorm`."""
    process_group = None
    forward = SyncBatchNorm.forward


def _gpt():
    return build_model(GPTConfig(**PRESETS["tiny"], max_seq_len=16), seed=0)


def _model(kind: str) -> nn.Module:
    torch.manual_seed(0)
    return {"gpt": _gpt, "unused": UnusedBranch, "frozen_tied": FrozenTied, "syncbn": SyncBNNet}[kind]()


def _batch(kind: str, rank: int, step: int, micro: int = 0):
    g = torch.Generator().manual_seed(1000 * step + 10 * rank + micro)
    if kind == "gpt":
        x = torch.randint(0, 256, (2, 16), generator=g)
        return (x, torch.roll(x, -1, 1))
    if kind == "frozen_tied":
        return (torch.randint(0, 32, (4, 5), generator=g),)
    return (torch.randn(4, 8 if kind == "unused" else 6, generator=g),)


def _wrap(name: str, model: nn.Module, **kw):
    """The data-parallel layer the composition applies to `model` (its optimizer is not used here)."""
    cfg = Config()
    cfg.parallel.strategy = name
    for k, v in kw.items():
        setattr(cfg.parallel, k, v)
    return parallel.build(cfg, torch.device("cpu"), model).dp


def _loss(module, batch):
    """The toy models return their loss; the GPT returns logits, scored by the loss function."""
    if len(batch) == 2:
        return cross_entropy(module(batch[0]), batch[1], reduction="mean")
    return module(*batch)


def _step(strategy, kind, step, micro=0):
    loss = _loss(strategy.module, _batch(kind, comm.rank(), step, micro))
    loss.backward()
    strategy.finish_backward()


def _grads(model):
    return {n: (p.grad.clone() if p.grad is not None else None) for n, p in model.named_parameters()}


# --- equivalence with torch DDP --------------------------------------------------------------------

def _assert_same_grad(a, b, exact, scale, what):
    """World 2: bitwise equal. World 4: gloo's ring sums 4 addends in an order that depends on where an
    element sits in its bucket, so layouts that differ (torch's first step uses one bucket for all)
    differ by an ulp of the addends: rtol 1e-6, with atol 1e-6 of the model's largest gradient entry
    for entries that cancel to nearly zero (e.g. a bias before BatchNorm, whose true gradient is 0)."""
    if exact:
        assert torch.equal(a, b), f"{what}: max diff {(a - b).abs().max().item():.3g}"
    else:
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6 * scale, msg=lambda m: f"{what}: {m}")
