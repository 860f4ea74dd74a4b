"""What every generation layout shares: the options, the next-token sampler, left padding of a batch of
prompts and the last position's logits.

Below engine.py (single, tp, dp and the layout's entry point) and lanes.py (pipeline request lanes),
which both import these from here and not from each other.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Options:
    max_new: int = 32
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0: the whole vocabulary
    seed: int = 0
    # sampling only: the logits of tokens among a row's last `repetition_window` picks are divided by this
    # (multiplied when negative; CTRL's penalty, Keskar et al. 2019). 1 = off
    repetition_penalty: float = 1.0
    repetition_window: int = 64
    use_cache: bool = True
    lanes: int = 0  # pipeline request lanes; 0: one per stage


class Sampler:
    """Picks the next token of every row from its (batch, vocab) logits. Row r (the r-th prompt overall)
    draws from its own generator seeded by (seed, r), so where a prompt runs does not change what it draws."""

    def __init__(self, opts: Options, rows: list[int]):
        self.temperature, self.top_k = opts.temperature, opts.top_k
        self.penalty, self.window, self.picked = opts.repetition_penalty, opts.repetition_window, []
        self.gens = None
        if self.temperature > 0:
            self.gens = [torch.Generator().manual_seed(opts.seed * 1_000_003 + r) for r in rows]

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        if self.gens is None:  # greedy: the model's argmax, nothing else
            return logits.argmax(-1)
        if self.penalty != 1 and self.picked:
            # a small model's favourite (a run of spaces, one repeated word) would otherwise take over the text
            seen = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, torch.stack(self.picked[-self.window:], 1), True)
            logits = torch.where(seen, torch.where(logits > 0, logits / self.penalty, logits * self.penalty), logits)
        tok = self._sample(logits)
        if self.penalty != 1:
            self.picked.append(tok)
        return tok

    def _sample(self, logits: torch.Tensor) -> torch.Tensor:
        logits = logits / self.temperature
        if self.top_k:
            kth = logits.topk(min(self.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1).cpu()
        return torch.cat([torch.multinomial(p, 1, generator=g) for p, g in zip(probs, self.gens)]).to(logits.device)


def left_pad(prompts: list[list[int]], device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch, longest) ids with padding (id 0) on the left, and each row's padding count."""
    longest = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), longest, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, longest - len(p):] = torch.tensor(p, dtype=torch.long)
    pad = torch.tensor([longest - len(p) for p in prompts], dtype=torch.long)
    return ids.to(device), pad.to(device)


def last_logits(logits: torch.Tensor, vocab_size: int, tp=None) -> torch.Tensor:
    """The last position's (batch, vocab) logits. Under tensor parallelism (`tp`: the TP layer's object that
    `apply_tp` returned) the vocab-parallel head's shards are all-gathered, so every TP rank picks the same
    token; otherwise the columns past `vocab_size` (a padded head's) are dropped."""
    last = logits[:, -1]
    return tp.gather_logits(last) if tp is not None else last[..., :vocab_size]
