"""`parallel.pp_split=auto`: stage boundaries from measured per-layer forward+backward times.

The default split balances a FLOP count (`stage.layer_costs`); a measurement sees what FLOPs do not:
the head's softmax over the vocabulary, memory-bound LayerNorms, kernels that run faster at some
shapes than others, a layer made slower on purpose. Before the split, rank 0 times the embedding, each
block and the head + loss, forward and backward, on one microbatch of the run's shape (a warm-up pass,
then the median of `REPEATS`), and broadcasts the times through comm: every rank cuts at the same
blocks (a measurement on each rank would differ by noise and the stages would not line up).
"""
from __future__ import annotations

import statistics
import time

import torch

from shardlab import comm

REPEATS = 3


def _time(fn, inp: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Seconds for fn(inp) forward + backward (gradient of ones), and the output (detached)."""
    if inp.is_floating_point():
        inp = inp.detach().requires_grad_(True)
    t0 = time.perf_counter()
    out = fn(inp)
    out.backward(torch.ones_like(out))
    return time.perf_counter() - t0, out.detach()


def measure(model, micro_batch: int, seq_len: int, repeats: int = REPEATS) -> tuple[float, list[float], float]:
    """(embedding, [each block], head + loss) forward+backward seconds of `model` on one microbatch.
    Leaves the model's parameters and gradients as they were (gradients are dropped) and the RNG untouched."""
    from shardlab.model.loss import cross_entropy

    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(0)
    vocab = model.cfg.vocab_size
    ids = torch.randint(0, vocab, (micro_batch, seq_len), generator=gen).to(device)
    pos = torch.arange(seq_len, device=device)
    blocks = list(model.blocks.values())
    runs = []
    with torch.random.fork_rng(devices=[]):
        for _ in range(repeats + 1):  # the first pass is warm-up (allocations, lazy kernels)
            t_embed, h = _time(lambda i: model.drop(model.wte(i) + model.wpe(pos)), ids)
            t_blocks = []
            for block in blocks:
                t, h = _time(block, h)
                t_blocks.append(t)
            t_head, _ = _time(lambda x: cross_entropy(model.lm_head(model.ln_f(x)), ids, reduction="sum"), h)
            runs.append((t_embed, t_blocks, t_head))
    for p in model.parameters():
        p.grad = None
    runs = runs[1:]
    return (statistics.median(r[0] for r in runs),
            [statistics.median(r[1][i] for r in runs) for i in range(len(blocks))],
            statistics.median(r[2] for r in runs))


def measured_costs(model, cfg) -> tuple[float, list[float], float]:
    """Rank 0's measurement, the same on every rank (call on every rank: it broadcasts)."""
    costs = measure(model, cfg.train.micro_batch, cfg.train.seq_len) if comm.rank() == 0 else None
    costs = comm.broadcast_object(costs)
    if comm.rank() == 0:
        ms = ", ".join(f"{1e3 * c:.1f}" for c in costs[1])
        print(f"[shardlab pipeline] parallel.pp_split=auto: measured forward+backward ms: embedding "
              f"{1e3 * costs[0]:.1f}, blocks {ms}, head {1e3 * costs[2]:.1f}", flush=True)
    return costs
