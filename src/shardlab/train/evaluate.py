"""Validation loss: the same fixed set of validation sequences at any layout, split across the
data-parallel ranks (ranks of one tensor/pipeline group evaluate the same share), aggregated as
(sum of token losses, token count) over the data-parallel ranks so the mean is exact."""
from __future__ import annotations

import math

import torch

from shardlab import comm
from shardlab.data import val_indices_for_rank
from shardlab.data.documents import packed_batch


def val_loss(trainer) -> float:
    cfg, ds = trainer.cfg, trainer.val_ds
    mb = cfg.train.micro_batch
    limit = min(cfg.train.eval_seqs, len(ds))
    par = trainer.par
    dp_size, dp_rank = par.dims.dp_size, par.dims.dp_rank
    mine = val_indices_for_rank(len(ds), dp_size, dp_rank, limit=limit)
    # Every rank must run the same number of forwards: sharded strategies all-gather parameters
    # inside forward, so a rank with one batch fewer would leave the others waiting forever.
    most = max(len(val_indices_for_rank(len(ds), dp_size, r, limit=limit)) for r in range(dp_size))
    n_batches = math.ceil(most / mb)
    module = par.module
    was_training = module.training
    module.eval()
    totals = torch.zeros(2, dtype=torch.float64, device=trainer.device)
    comm.set_phase("eval")
    for b in range(n_batches):
        chunk = mine[b * mb:(b + 1) * mb]
        real = len(chunk)
        chunk = chunk or mine[:1] or [0]  # a padding forward whose loss is not counted
        batch = [t.to(trainer.device) for t in packed_batch(ds, chunk, trainer.doc_eos)]
        loss = par.eval_loss_sum(*batch)
        y = batch[1]
        if real:
            totals[0] += loss.double()
            totals[1] += real * y.shape[1] // par.dims.cp  # under cp this rank scored 1/cp of each sequence
    module.train(was_training)
    par.sum_over_data(totals, tag="eval")
    return float(totals[0] / totals[1])
