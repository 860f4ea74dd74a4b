"""Generation: time to first token, per-token latency, tokens/s and KV-cache bytes over prompt lengths,
batch sizes and layouts (figures `kv_cache_speedup`, `pp_lanes_gain`).

The small model (4 layers, d_model 256, byte vocabulary; untrained weights: speed does not depend on
them), fp32, one thread per rank. Two paired comparisons, each alternating A B A B in one process (or one
pool of ranks) and reported as the median ratio with min–max:
- kv_cache_speedup = tokens/s with the KV cache / without it (every step re-runs the whole sequence),
  one prompt of 32 bytes, 256 new tokens (--quick: 64, and the report says so);
- pp_lanes_gain = tokens/s at pp = 2 with 2 request lanes / with 1 lane, 4 prompts. Lanes win only when
  the two stages run at once (a free core each) and a forward outweighs its messages; on an
  oversubscribed machine each lane is just one more forward per stage, and the ratio drops below 1.
The layout table (single, tp 2, dp 2, pp 2) is one warm run each, for orientation; on a shared 2-core
machine two ranks compete with everything else, so read its absolute numbers with the load note.
"""
from __future__ import annotations

from pathlib import Path

import torch

from shardlab.bench import common
from shardlab.generate.engine import Layout, Options, generate
from shardlab.model.gpt import GPTConfig, build_model

CFG = GPTConfig(n_layer=4, n_head=4, d_model=256, vocab_size=256, max_seq_len=512)


def prompts(n: int, length: int) -> list[list[int]]:
    text = b"def generate(model, prompts, options):\n    return [model(p) for p in prompts]\n" * 8
    return [list(text[i:i + length]) for i in range(n)]


def measure(model, ps, opts: Options, layout: Layout = Layout()) -> dict:
    _, s = generate(model, ps, opts, layout)
    return {"ttft_ms": s.ttft_s * 1e3, "per_token_ms": s.per_token_s * 1e3, "tokens_per_s": s.tokens_per_s,
            "kv_bytes": s.kv_bytes}


def _on_ranks(max_new: int, pairs: int) -> dict:
    """On each of 2 ranks: the layout rows and the paired lanes comparison (rank 0's numbers)."""
    model = build_model(CFG, seed=0).eval()
    ps = prompts(4, 32)
    rows = []
    for name, layout, lanes in (("tp=2", Layout(tp=2), 0), ("dp=2", Layout(dp=2), 0),
                                ("pp=2, 1 lane", Layout(pp=2), 1), ("pp=2, 2 lanes", Layout(pp=2), 2)):
        opts = Options(max_new=max_new, lanes=lanes)
        measure(model, ps, Options(max_new=4, lanes=lanes), layout)  # warm-up: first calls allocate
        rows.append({"layout": name, "prompt_len": 32, "batch": 4, "cache": True, "new_tokens": max_new,
                     **measure(model, ps, opts, layout)})
    one, two = [], []
    for _ in range(pairs):
        one.append(measure(model, ps, Options(max_new=max_new, lanes=1), Layout(pp=2))["tokens_per_s"])
        two.append(measure(model, ps, Options(max_new=max_new, lanes=2), Layout(pp=2))["tokens_per_s"])
    return {"rows": rows, "lanes1": one, "lanes2": two}


def run(out: Path, quick: bool) -> dict:
    torch.set_num_threads(1)
    model = build_model(CFG, seed=0).eval()
    new_tokens = 64 if quick else 256
    pairs = 2 if quick else 3
    rows = []
    common.progress("single device: prompt lengths x batch sizes, with and without the KV cache")
    for plen in ((16, 64) if quick else (16, 64, 128)):
        for batch in ((1, 4) if quick else (1, 4, 8)):
            ps = prompts(batch, plen)
            measure(model, ps, Options(max_new=2))
            n = 16 if quick else 32
            for cache in (True, False):
                rows.append({"layout": "single", "prompt_len": plen, "batch": batch, "cache": cache,
                             "new_tokens": n, **measure(model, ps, Options(max_new=n, use_cache=cache))})
    common.progress(f"kv_cache_speedup: 1 prompt of 32, {new_tokens} new tokens, {pairs} A/B pairs")
    ps = prompts(1, 32)
    with_c, without = [], []
    for _ in range(pairs):
        without.append(measure(model, ps, Options(max_new=new_tokens, use_cache=False))["tokens_per_s"])
        with_c.append(measure(model, ps, Options(max_new=new_tokens))["tokens_per_s"])
    kv = common.paired_ratios(without, with_c)
    common.progress("layouts at world 2 and pp_lanes_gain (2 ranks)")
    ranks = common.run_on_ranks(_on_ranks, 32 if quick else 64, pairs, world=2, timeout=900)
    rows += ranks["rows"]
    lanes = common.paired_ratios(ranks["lanes1"], ranks["lanes2"])
    figures = {"kv_cache_speedup": kv["median"], "pp_lanes_gain": lanes["median"]}
    doc = common.write_results(out, "generate", figures, rows)
    doc["figure_stats"] = {"kv_cache_speedup": kv, "pp_lanes_gain": lanes}  # interval and load of each
    doc["figure_notes"] = {
        "kv_cache_speedup": f"tokens/s with / without the KV cache, 1 prompt of 32 bytes, {new_tokens} new tokens"
                            f"{' (--quick; the full suite uses 256)' if quick else ''}; median of {pairs} pairs",
        "pp_lanes_gain": f"tokens/s at pp=2 with 2 lanes / 1 lane, 4 prompts; median of {pairs} pairs; "
                         "two ranks on a shared machine: measured under load"}
    (out / "results.json").write_text(__import__("json").dumps(doc, indent=1, default=str) + "\n")
    _plot(out, rows)
    table = common.md_table(
        ["layout", "prompt", "batch", "KV cache", "new", "TTFT ms", "ms/token", "tokens/s", "KV bytes/rank"],
        [[r["layout"], r["prompt_len"], r["batch"], "yes" if r["cache"] else "no", r["new_tokens"],
          f"{r['ttft_ms']:.1f}", f"{r['per_token_ms']:.2f}", f"{r['tokens_per_s']:.1f}",
          f"{r['kv_bytes']:,}" if r["cache"] else "-"] for r in rows])
    common.write_report(out, "Generation: KV cache, layouts, pipeline lanes", [
        f"**kv_cache_speedup** = {common.fmt_stats(kv)} ({doc['figure_notes']['kv_cache_speedup']}).",
        f"**pp_lanes_gain** = {common.fmt_stats(lanes)} ({doc['figure_notes']['pp_lanes_gain']}).",
        "Without the cache every step re-runs the whole sequence, so its cost per token grows with the length; "
        "with it a decode step runs one position per row against the cached keys and values. KV bytes = "
        "2 x layers x batch x (prompt + new) x d_model x 4 per rank (divided by tp, by the stage's share of the "
        "layers under pp, by the replica's share of the prompts under dp).",
        table, "![tokens/s](tokens_per_s.png)"])
    return doc


def _plot(out: Path, rows: list[dict]) -> None:
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(9, 4))
    labels = [f"{r['layout']} p{r['prompt_len']} b{r['batch']}{'' if r['cache'] else ' no-cache'}" for r in rows]
    ax.barh(range(len(rows)), [r["tokens_per_s"] for r in rows],
            color=["tab:blue" if r["cache"] else "tab:gray" for r in rows])
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.set_xlabel("tokens/s (generated, all prompts)")
    ax.set_title("generate: tokens/s by layout, prompt length, batch; grey = without KV cache")
    fig.tight_layout()
    fig.savefig(out / "tokens_per_s.png", dpi=110)
    plt.close(fig)


