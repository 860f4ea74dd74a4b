"""What packed documents cost (`shardlab bench packing`, data.doc_mask, docs/data.md): the loader's time per
step with and without the per-token document positions, and a training step with the block-causal masks
against the same step with plain causal attention.

The corpus is the standard library's files as documents, each ended by the bytes tokenizer's EOS (0),
cut into samples as the trainer cuts any corpus. Per step the loader gathers the step's samples
(`get_batch`) and, with masks, computes their positions (`packed_batch`); the step is `Parallel.step` on
one process at the default run's shape (model `small`, microbatch 8, seq 128, fp32). Both comparisons
alternate A B, B A step by step and report medians of the paired figures (common.median_ci).

Figures: `loader_s` and `loader_masked_s` (median seconds per step), `loader_mask_extra_s` (their paired
difference: the positions' cost), `loader_fraction_of_step` (the masked loader's time over the masked
step's), `masked_step_ratio` (t(step with masks) / t(plain step), paired).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from shardlab import config as config_mod
from shardlab.bench import common

# (loader steps, training steps, warm-up steps excluded) and the model: tests shrink them
STEPS = {"quick": (200, 16, 3), "full": (1000, 60, 5)}
PRESET = "small"


def document_corpus(max_tokens: int) -> np.ndarray:
    """The stdlib's files, each followed by EOS, up to about `max_tokens` tokens (uint16)."""
    from shardlab.data.sources import stdlib_files
    from shardlab.data.documents import BYTES_EOS

    parts, n = [], 0
    for f in stdlib_files():
        data = np.frombuffer(f.read_bytes(), dtype=np.uint8).astype(np.uint16)
        parts += [data, np.array([BYTES_EOS], dtype=np.uint16)]
        n += len(data) + 1
        if n >= max_tokens:
            break
    return np.concatenate(parts)


def _loader_pairs(ds, sampler, steps: int, eos: int) -> tuple[list[float], list[float]]:
    """Seconds per step of the loader without and with positions, alternated (A B, B A)."""
    from shardlab.data.documents import packed_batch

    plain, masked = [], []
    for i in range(steps):
        idx = sampler.next_batch()
        for side in (("plain", "masked") if i % 2 == 0 else ("masked", "plain")):
            t0 = time.perf_counter()
            packed_batch(ds, idx, eos if side == "masked" else None)
            (plain if side == "plain" else masked).append(time.perf_counter() - t0)
    return plain, masked


def _step_pairs(cfg, ds, sampler, steps: int, eos: int) -> tuple[list[float], list[float]]:
    """Seconds per training step with plain causal attention and with the document masks, alternated; two
    replicas of one initial model, each trained on the same batches."""
    from shardlab import parallel
    from shardlab.data.documents import packed_batch

    pars = {side: parallel.build(cfg, torch.device("cpu")) for side in ("plain", "masked")}
    tokens = cfg.train.micro_batch * cfg.train.seq_len
    times = {"plain": [], "masked": []}
    for i in range(steps):
        batch = packed_batch(ds, sampler.next_batch(), eos)
        for side in (("plain", "masked") if i % 2 == 0 else ("masked", "plain")):
            mb = batch if side == "masked" else batch[:2]
            t0 = time.perf_counter()
            pars[side].step([mb], 1.0 / tokens, cfg.train.grad_clip)
            times[side].append(time.perf_counter() - t0)
    return times["plain"], times["masked"]


def run(out: Path, quick: bool) -> dict:
    from shardlab.data import GlobalSampler, TokenDataset
    from shardlab.data.documents import BYTES_EOS, count_documents

    loader_steps, train_steps, warm = STEPS["quick" if quick else "full"]
    cfg = config_mod.load(None, [o for o in common.BASE if not o.startswith("data.")] + [
        f"model.preset={PRESET}", "train.micro_batch=8", "parallel.strategy=single", "data.doc_mask=true"])
    cfg = config_mod.validate(cfg, 1)
    torch.set_num_threads(1)
    tokens = document_corpus(2_000_000 if quick else 8_000_000)
    ds = TokenDataset(tokens, cfg.train.seq_len)
    docs = count_documents(tokens, BYTES_EOS)
    common.progress(f"loader: {loader_steps} paired steps over {len(tokens):,} tokens in {docs:,} documents")
    lp, lm = _loader_pairs(ds, GlobalSampler(len(ds), cfg.train.micro_batch, seed=0), loader_steps, BYTES_EOS)
    common.progress(f"training step: {train_steps} paired steps, plain causal vs document masks")
    sp, sm = _step_pairs(cfg, ds, GlobalSampler(len(ds), cfg.train.micro_batch, seed=1), train_steps, BYTES_EOS)
    lp, lm, sp, sm = lp[warm:], lm[warm:], sp[warm:], sm[warm:]
    extra = common.median_ci([b - a for a, b in zip(lp, lm)])
    ratio = common.paired_ratios(sp, sm)
    loader_s, loader_masked_s = common.stats(lp)["median"], common.stats(lm)["median"]
    step_masked_s = common.stats(sm)["median"]
    figures = {"loader_s": loader_s, "loader_masked_s": loader_masked_s, "loader_mask_extra_s": extra["median"],
               "loader_mask_extra_stats": extra, "loader_fraction_of_step": loader_masked_s / step_masked_s,
               "masked_step_ratio": ratio["median"], "masked_step_ratio_stats": ratio,
               "step_s": common.stats(sp)["median"], "step_masked_s": step_masked_s, "documents": docs,
               "corpus_tokens": int(len(tokens))}
    rows = ([{"what": "loader", "step": i, "plain_s": a, "masked_s": b} for i, (a, b) in enumerate(zip(lp, lm))]
            + [{"what": "train_step", "step": i, "plain_s": a, "masked_s": b} for i, (a, b) in enumerate(zip(sp, sm))])
    doc = common.write_results(out, "packing", figures, rows)
    common.write_report(out, "Packed documents: the loader and the step with document masks", [
        f"Corpus: {len(tokens):,} tokens, the stdlib's files as {docs:,} EOS-ended documents; model `{PRESET}`, "
        f"microbatch 8, seq {cfg.train.seq_len}, fp32, one thread; pairs alternate A B, B A; the first {warm} "
        f"excluded{' (--quick)' if quick else ''}.",
        common.md_table(["", "plain", "with document positions / masks", "paired"], [
            ["loader per step (ms)", f"{loader_s * 1e3:.3f}", f"{loader_masked_s * 1e3:.3f}",
             f"+{common.fmt_ci(extra, 1e6, 1)} µs"],
            ["training step (ms)", f"{figures['step_s'] * 1e3:.1f}", f"{step_masked_s * 1e3:.1f}",
             f"x{common.fmt_ci(ratio)}"]]),
        f"**The loader with positions takes {figures['loader_fraction_of_step']:.2%} of a masked training step.** "
        "The positions are one vectorised pass over the step's tokens (a compare, a where, a running maximum); "
        "the step's extra cost is the attention's: a masked kernel over an explicit (batch, 1, t, t) mask "
        "instead of the causal one.",
    ])
    return doc
