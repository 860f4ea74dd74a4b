"""Rank-side helper for the pipeline training tests: a few optimizer steps of a tiny GPT through the
composition (`shardlab.parallel.build`) with any layout; returns the losses and the parameters this
rank holds (in full), which the tests merge across ranks and compare with one device."""
from __future__ import annotations

import torch

TINY4 = dict(n_layer=4, n_head=2, d_model=32, vocab_size=256, max_seq_len=16)


def train(steps: int = 3, accum: int = 4, rows: int = 4, model_kw: dict = TINY4, clip: float = 1.0,
          dp: str = "single", **parallel) -> dict:
    """`rows` sequences per microbatch over all data-parallel ranks: the same global batch at any layout."""
    from shardlab import comm, parallel as parallel_mod
    from shardlab.config import Config
    from shardlab.model.gpt import build_model
    import step_driver as driver
    from zero_harness import model_config

    cfg = Config()
    cfg.parallel.strategy = dp
    cfg.train.grad_accum, cfg.train.seq_len = accum, model_kw["max_seq_len"]
    for k, v in parallel.items():
        setattr(cfg.parallel, k, v)
    par = parallel_mod.build(cfg, torch.device("cpu"), build_model(model_config(model_kw), seed=0))
    dp_size = par.dims.dp_size
    micro = rows // dp_size
    seq = model_kw["max_seq_len"]
    tokens = accum * rows * seq  # the global batch's: the step weights the loss (par.loss_weight)
    weight = par.loss_weight(tokens)
    gen = torch.Generator().manual_seed(1234)
    losses = []
    for _ in range(steps):
        batch = torch.randint(0, model_kw["vocab_size"], (accum, rows, seq + 1), generator=gen)
        mine = batch[:, driver.rows(par, micro)]
        loss = par.step([(r[:, :-1], r[:, 1:]) for r in mine], max_norm=clip, global_tokens=tokens).loss_sum
        par.sum_over_data(loss, tag="test")
        losses.append(loss.item() * weight / dp_size)
    return {"losses": losses, "params": {k: v.detach().clone() for k, v in par.full_parameters().items()},
            "rank": comm.rank() if comm.is_initialized() else 0}
