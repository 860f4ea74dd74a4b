"""The one loop the harnesses drive a composition with, as the trainer does: build `Parallel` from config
overrides, cut this data-parallel rank's share of the same global batch at any layout, and call
`par.step(..., global_tokens=N)`, which weights the loss (the ranks that saw different tokens over the
tokens of the global batch) itself. Each harness adds what it measures around these calls."""
from __future__ import annotations

import torch


def build(overrides: list[str], base: list[str] = ()):
    """(cfg, par): the validated config of `base + overrides` at this world and its composition."""
    from shardlab import comm, config
    from shardlab.parallel import build as build_parallel

    cfg = config.load(None, [*base, *overrides])
    cfg = config.validate(cfg, comm.world_size() if comm.is_initialized() else 1)
    return cfg, build_parallel(cfg, comm.device())


def rows(par, per_rank: int) -> slice:
    """This data-parallel rank's rows of a global batch (the cp ranks of one dp rank take the same rows: the
    step cuts them into chunks)."""
    r = par.dims.dp_rank
    return slice(r * per_rank, (r + 1) * per_rank)


def random_batch(step: int, shape: tuple[int, ...], vocab: int = 256, seed: int = 100) -> torch.Tensor:
    """Step `step`'s global batch of tokens (the same at every layout): `shape[-1]` is sequence + 1."""
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed + step))


def step(par, microbatches: list, global_tokens: int, clip: float, double: bool = False):
    """One optimizer step: (its StepResult, the global mean token loss)."""
    out = par.step(microbatches, max_norm=clip, global_tokens=global_tokens)
    loss = out.loss_sum.double() if double else out.loss_sum
    return out, float(par.sum_over_data(loss, "loss")) / global_tokens


def train(par, cfg, steps: int, accum: int = 1, before_step=None) -> dict:
    """`steps` steps on `random_batch(step)` of `train.global_batch` sequences in `accum` microbatches, each
    rank taking `train.micro_batch` rows of each: {"losses": global mean token losses, "norms": clipped
    gradient norms}. `before_step(step)` runs before each."""
    t = cfg.train
    tokens = t.global_batch * t.seq_len
    mine = rows(par, t.micro_batch)
    out = {"losses": [], "norms": []}
    for s in range(steps):
        data = random_batch(s, (accum, t.global_batch // accum, t.seq_len + 1))[:, mine]
        if before_step is not None:
            before_step(s)
        res, loss = step(par, [(d[:, :-1], d[:, 1:]) for d in data], tokens, t.grad_clip)
        out["norms"].append(res.grad_norm)
        out["losses"].append(loss)
    return out
