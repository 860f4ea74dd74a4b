"""The KV cache for generation: keys and values of every position seen so far, per layer, so a decode step
runs one new token through the model instead of the whole sequence (prefill once, then decode).

Single-device code, like the model. `GPT.forward(ids, cache)` (and `Llama.forward`, whose attention
reads each layer's rotary positions through `LayerCache.positions`) reads positions and the attention mask
from it and advances it; each block's attention calls `cache.layer(name).attend(q, k, v)`, which appends
this step's k, v and attends over everything cached. Without a cache the model runs its training path
unchanged.

Prompts of different lengths share one batch by left padding: row b's first `pad[b]` slots are padding.
A real query never sees a padding key, and a row's positions count from its first real token, so each row
computes what it would alone. (A padding query sees only itself, which keeps its softmax finite: an
all-masked row would give NaN, and NaN times a zero weight is still NaN in the next layer.)

Grouped-query attention (fewer k/v heads than query heads, as in Llama) reuses this cache as it is: the
buffers take their head count from the first k written (a TP rank with n_kv_heads / tp heads allocates
that many), and `attend` repeats each k/v head over its group of query heads only for the product, so
the cache stores n_kv_heads, and its size is `nbytes(..., kv_dim=n_kv_heads * head_dim)`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def nbytes(n_layer: int, batch: int, length: int, kv_dim: int, elem_bytes: int = 4) -> int:
    """2 (k and v) * layers * batch * length * kv_dim * bytes per element; kv_dim = d_model for GPT-2."""
    return 2 * n_layer * batch * length * kv_dim * elem_bytes


class KVCache:
    def __init__(self, pad: torch.Tensor, max_len: int):
        self.pad = pad.long()  # (batch,) left-padding slots per row
        self.max_len = max_len
        self.length = 0  # slots filled (the same for every row: padding is on the left)
        self.k: dict[str, torch.Tensor] = {}
        self.v: dict[str, torch.Tensor] = {}

    @property
    def batch(self) -> int:
        return self.pad.shape[0]

    def positions(self, t: int) -> torch.Tensor:
        """(batch, t) position ids of the next t slots: counted from each row's first real token."""
        slots = torch.arange(self.length, self.length + t, device=self.pad.device)
        return (slots.unsqueeze(0) - self.pad.unsqueeze(1)).clamp(min=0)

    def mask(self, t: int) -> torch.Tensor:
        """(batch, 1, t, length + t) bool, True = may attend: causal, no padding keys, padding sees itself."""
        q = torch.arange(self.length, self.length + t, device=self.pad.device).view(1, t, 1)
        k = torch.arange(self.length + t, device=self.pad.device).view(1, 1, -1)
        real = k >= self.pad.view(-1, 1, 1)
        return (((k <= q) & real) | (k == q)).unsqueeze(1)

    def layer(self, name: str) -> "LayerCache":
        return LayerCache(self, name)

    def advance(self, t: int) -> None:
        self.length += t

    def allocated_bytes(self) -> int:
        return sum(x.numel() * x.element_size() for d in (self.k, self.v) for x in d.values())

    def _append(self, name: str, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t = k.shape[2]
        if self.length + t > self.max_len:
            raise ValueError(f"KV cache holds {self.max_len} positions; {self.length} + {t} do not fit")
        if name not in self.k:  # allocated on first use: the head count is whatever this rank's layer has
            shape = (k.shape[0], k.shape[1], self.max_len, k.shape[3])
            self.k[name] = k.new_zeros(shape)
            self.v[name] = v.new_zeros(shape)
        ks, vs = self.k[name], self.v[name]
        ks[:, :, self.length:self.length + t] = k
        vs[:, :, self.length:self.length + t] = v
        return ks[:, :, :self.length + t], vs[:, :, :self.length + t]


class LayerCache:
    """One layer's view of the cache: what the attention module calls instead of its causal core."""

    def __init__(self, cache: KVCache, name: str):
        self.cache, self.name = cache, name

    def positions(self, t: int) -> torch.Tensor:
        """(batch, t) positions of the new tokens (rotary attention rotates q and k by them)."""
        return self.cache.positions(t)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """(b, heads, t, head_dim) in and out; k, v may have fewer heads (GQA)."""
        k, v = self.cache._append(self.name, k, v)
        if k.shape[1] != q.shape[1]:  # grouped-query attention: each k/v head serves a group of q heads
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.cache.mask(q.shape[2]))


def run_blocks(blocks, x, cache=None, doc_pos=None):
    """The blocks in order; with a cache (generation) each reads and appends its own layer, and the cache
    advances by the new tokens once all have run; `doc_pos` (packed documents) goes to every block as a
    keyword. Shared by both model families."""
    if cache is None:
        for block in blocks.values():
            x = block(x) if doc_pos is None else block(x, doc_pos=doc_pos)
        return x
    for name, block in blocks.items():
        x = block(x, cache=cache.layer(name))
    cache.advance(x.shape[1])
    return x


def attend_block(attn, h: torch.Tensor, cache, doc_pos) -> torch.Tensor:
    """A block's attention call. Training without packed documents calls it exactly as before (wrappers
    applied from outside see no new argument); generation passes its cache, packed documents their
    positions (keyword arguments, which pre-hooks on the attention module leave alone). Both families."""
    if cache is not None:
        return attn(h, cache=cache)
    return attn(h) if doc_pos is None else attn(h, doc_pos=doc_pos)
