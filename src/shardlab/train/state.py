"""What every trainer (the step loop, the asynchronous parameter server's roles) shares: the state a checkpoint
captures, and the run's data splits."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from shardlab.config import Config
from shardlab.data import GlobalSampler, TokenDataset
from shardlab.data.tokens import follow_vocab, open_corpus
from shardlab.train.scaler import LossScaler


@dataclass
class TrainState:
    """Everything a checkpoint must capture (see shardlab.checkpoint)."""
    cfg: Config
    strategy: object  # the data-parallel layer (shardlab.parallel.dp.base.Strategy)
    optimizer: torch.optim.Optimizer
    sampler: GlobalSampler
    scaler: LossScaler | None
    step: int = 0
    balance: object = None  # the data-parallel shares (shardlab.train.balance.Balancer), checkpointed


def datasets(cfg: Config) -> tuple[TokenDataset, TokenDataset]:
    """The run's training and validation splits (every trainer reads the corpus the same way); the model's
    vocabulary follows the tokenizer's when model.vocab_size is not set."""
    corpus = open_corpus(cfg.data.source, cfg.data.tokenizer, cfg.data.val_fraction, cfg.data.doc_mask)
    follow_vocab(cfg.model, corpus.tokenizer)  # (the CLI did, before writing config.toml; a trainer built by hand)
    return (TokenDataset(corpus.train, cfg.train.seq_len, name="training split"),
            TokenDataset(corpus.val, cfg.train.seq_len, name="validation split"))
