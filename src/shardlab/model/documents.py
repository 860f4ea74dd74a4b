"""Block-causal attention over packed documents (`data.doc_mask`, docs/data.md).

A packed sample carries each token's position inside its document, `doc_pos` (batch, seq), restarting
at 0 after every end-of-document token (shardlab.data.documents). Documents are contiguous, so query i
(global index i in the sample, position p_i) belongs to the document that starts at i - p_i, and may
attend exactly the keys j with

    i - p_i <= j <= i

No document ids are needed, and a core that holds only some queries and some keys (context
parallelism's ring) needs only their global indices and the queries' positions: `allowed`.

A query never loses its own key (p_i >= 0), so no softmax row is empty over the whole sequence; a row
can be empty within one block of keys (the ring's), which the ring handles (parallel/cp/ring.py).
"""
from __future__ import annotations

import torch


def allowed(q_index: torch.Tensor, q_start: torch.Tensor, k_index: torch.Tensor) -> torch.Tensor:
    """(batch, 1, t_q, t_k) bool, True = may attend: keys at global indices `k_index` (t_k,) for queries at
    `q_index` (t_q,) whose documents start at `q_start` (batch, t_q). The 1 broadcasts over heads."""
    k = k_index.view(1, 1, -1)
    return ((k <= q_index.view(1, -1, 1)) & (k >= q_start.unsqueeze(-1))).unsqueeze(1)


def block_causal_mask(doc_pos: torch.Tensor) -> torch.Tensor:
    """(batch, 1, t, t) bool mask of a whole packed sample (queries and keys alike at 0..t-1)."""
    index = torch.arange(doc_pos.shape[-1], device=doc_pos.device)
    return allowed(index, index - doc_pos, index)
