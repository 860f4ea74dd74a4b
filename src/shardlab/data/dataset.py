"""Fixed-length samples over a token array, the train/val split, and batching.

Samples do not overlap: sample i covers tokens[i*seq_len : i*seq_len + seq_len + 1]; its first
seq_len tokens are the inputs and the last seq_len the targets (inputs shifted by one).

torch is imported where a batch is built, not with the module: `shardlab data prepare` and each of its
worker processes read corpora and tokenizers only, and would pay a torch import (~1.2 s of CPU) each.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .errors import DataError

if TYPE_CHECKING:
    import torch

# Validation is the tail of each of up to VAL_PIECES equal segments of the corpus, so it samples
# the whole corpus (the stdlib is sorted by path: a plain tail split would validate on xml/, zipfile
# and zoneinfo only). Each piece has at least MIN_VAL_PIECE tokens so few samples straddle a seam.
VAL_PIECES = 20
MIN_VAL_PIECE = 4096


class TokenDataset:
    """`len()` full samples of seq_len + 1 tokens; `ds[i]` -> (x, y) int64 tensors of shape [seq_len]."""

    def __init__(self, tokens: np.ndarray, seq_len: int, name: str = "corpus"):
        if seq_len < 1:
            raise DataError(f"seq_len must be at least 1, got {seq_len}")
        if len(tokens) < seq_len + 1:
            raise DataError(f"the {name} has {len(tokens)} tokens, too few for one sample of seq_len + 1 = "
                            f"{seq_len + 1}; use a larger corpus or a smaller train.seq_len")
        self.tokens = tokens
        self.seq_len = seq_len

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.seq_len

    def __getitem__(self, i: int):
        x, y = get_batch(self, [i])
        return x[0], y[0]


def get_batch(dataset: TokenDataset, indices) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples `indices` as (x, y): int64 tensors of shape [len(indices), seq_len]."""
    n, L = len(dataset), dataset.seq_len
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise IndexError(f"sample index out of range 0..{n - 1}: {idx.min()}..{idx.max()}")
    # One fancy-indexing gather (works on memmaps too): row j = tokens[idx[j]*L : idx[j]*L + L + 1].
    rows = dataset.tokens[idx[:, None] * L + np.arange(L + 1)]
    import torch

    rows = torch.from_numpy(rows.astype(np.int64))
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


def split_train_val(tokens: np.ndarray, val_fraction: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic split into (train_tokens, val_tokens), depending only on len(tokens) and val_fraction.

    The corpus is cut into P equal segments (P = VAL_PIECES, fewer for small corpora so each val piece
    keeps >= MIN_VAL_PIECE tokens; P = 1 is a plain tail split); the last val_fraction of every segment
    goes to validation, the rest to training. Pieces are concatenated (a copy; P = 1 returns views).
    """
    if not 0 < val_fraction < 1:
        raise DataError(f"val_fraction must be between 0 and 1 (exclusive), got {val_fraction}")
    n = len(tokens)
    n_val = int(n * val_fraction)
    pieces = max(1, min(VAL_PIECES, n_val // MIN_VAL_PIECE))
    bounds = [n * k // pieces for k in range(pieces + 1)]  # segment k = tokens[bounds[k]:bounds[k+1]]
    train, val = [], []
    for start, end in zip(bounds[:-1], bounds[1:]):
        cut = end - int((end - start) * val_fraction)
        train.append(tokens[start:cut])
        val.append(tokens[cut:end])
    if pieces == 1:
        return train[0], val[0]
    return np.concatenate(train), np.concatenate(val)
