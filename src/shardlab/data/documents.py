"""Document packing (`data.doc_mask`, docs/data.md): documents follow each other in the token stream, each
ended by the tokenizer's end-of-document id (EOS), and a sample of seq_len + 1 tokens is cut from that
stream wherever it falls, so it holds the end of one document, some whole ones and the start of another.

With `data.doc_mask=true` the batch carries, beside (x, y), each input token's position inside its
document (`doc_positions`), computed here from the whole sample before any layer cuts it: attention is
then block-causal (a token sees the earlier tokens of its own document only) and positions restart at 0
after every EOS (learned positions, RoPE). The EOS token belongs to the document it ends (Megatron's
reset_position_ids / reset_attention_mask convention), and the first token of a sample starts a document
whatever came before it.

The positions are all the layers need: documents are contiguous, so token i (position p_i) sees exactly
the keys j with i - p_i <= j <= i (model/documents.py), and a layer that holds only some of the queries
(context parallelism's chunks) knows their global indices and cuts the positions with the tokens.

Nothing here knows about ranks; with `data.doc_mask=false` (the default) nothing here runs.
"""
from __future__ import annotations

import numpy as np
import torch

from .dataset import TokenDataset, get_batch

BYTES_EOS = 0  # the bytes tokenizer's end of document: the NUL byte, which text never contains


def eos_id_of(cfg) -> int:
    """The end-of-document id of the run's tokenizer (data/tokenizer.py; the bytes tokenizer's: 0)."""
    from shardlab.data import tokenizer as tk  # deferred: a bpe tokenizer is found (or trained) only when asked

    return tk.eos_id(cfg)


def doc_positions(x: torch.Tensor, eos_id: int) -> torch.Tensor:
    """(batch, seq) int64: each input token's position inside its document, restarting after every EOS.

        x   = [a, b, EOS, c, d, e, EOS, f]
        pos = [0, 1, 2,   0, 1, 2, 3,   0]
    """
    b, t = x.shape
    index = torch.arange(t, device=x.device).expand(b, t)
    # the index of each token's document start: the latest j <= i with j == 0 or x[j - 1] == EOS
    start = torch.zeros_like(index)
    start[:, 1:] = torch.where(x[:, :-1] == eos_id, index[:, 1:], 0)
    return index - start.cummax(dim=1).values


def packed_batch(dataset: TokenDataset, indices, eos_id: int | None = None) -> tuple[torch.Tensor, ...]:
    """`get_batch`'s (x, y), and with `eos_id` (data.doc_mask=true) the per-token document positions as a
    third tensor: (x, y, doc_pos), each (len(indices), seq_len)."""
    x, y = get_batch(dataset, indices)
    if eos_id is None:
        return x, y
    return x, y, doc_positions(x, eos_id)


def count_documents(tokens: np.ndarray, eos_id: int) -> int:
    """Documents in a token stream: its EOS ids, plus one for a last document left without one. One pass."""
    n = int(np.count_nonzero(np.asarray(tokens) == eos_id))
    return n + int(len(tokens) > 0 and int(tokens[-1]) != eos_id)
