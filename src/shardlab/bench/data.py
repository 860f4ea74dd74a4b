"""The data pipeline's costs (`shardlab bench data`): `shardlab data prepare` throughput with 1 and 2 workers.

The corpus is the standard library's source (the default run's; `--quick`: its first 3 MiB of files), as
one document per file, tokenized with a byte-level BPE of 4096 trained on it first (not timed). Each round
prepares it twice into fresh directories, once with 1 worker and once with 2, alternating which goes first
(A B, B A, ...), and times the whole `prepare` call (reading, encoding, writing the shards, meta.json).
Figures: `prepare_tokens_per_s_w1` and `_w2` (median tokens/s over rounds) and `prepare_speedup_w2`
(median over rounds of time with 1 worker ÷ time with 2; min-max and interval beside). Each worker is one
process encoding with one thread, so the speedup is what a second core gives; on a machine whose cores
are busy it is less.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from shardlab.bench import common

VOCAB = 4096
SHARD_MB = 0.5  # small shards so 2 workers have work to share even in --quick


def corpus(work: Path, quick: bool) -> Path:
    """The stdlib's files as a .jsonl (one document each), capped at 3 MiB of text for --quick."""
    import json

    from shardlab.data.sources import stdlib_files

    path, size = work / "stdlib.jsonl", 0
    with open(path, "w", encoding="utf-8") as f:
        for p in stdlib_files():
            text = p.read_bytes().decode("utf-8", errors="replace")
            f.write(json.dumps({"text": text}) + "\n")
            size += len(text)
            if quick and size > 3 * 2**20:
                break
    return path


def timed_prepare(src: Path, tok, out: Path, workers: int) -> dict:
    from shardlab.data.prepare import Job, prepare

    t0 = time.perf_counter()
    meta = prepare(Job(src=str(src), out=out, workers=workers, shard_mb=SHARD_MB, quiet=True), tok)
    wall = time.perf_counter() - t0
    shutil.rmtree(out)
    return {"workers": workers, "tokens": meta["tokens"], "wall_s": wall, "tokens_per_s": meta["tokens"] / wall}


def run(out: Path, quick: bool) -> dict:
    from shardlab.data import tokenizer as tk
    from shardlab.data.sources import documents

    rounds = 2 if quick else 4
    with tempfile.TemporaryDirectory(prefix="shardlab-bench-data-") as t:
        work = Path(t)
        src = corpus(work, quick)
        common.progress(f"training a bpe:{VOCAB} on {src.stat().st_size / 2**20:.1f} MiB (not timed)")
        tok = tk.train_bpe((text for _, text in documents(str(src))), VOCAB)
        rows = []
        for r in range(rounds):
            for w in ((1, 2) if r % 2 == 0 else (2, 1)):
                row = timed_prepare(src, tok, work / f"out-{r}-{w}", w) | {"round": r}
                common.progress(f"round {r}: {w} worker(s) {row['tokens_per_s']:,.0f} tokens/s")
                rows.append(row)
    by = {w: sorted((x for x in rows if x["workers"] == w), key=lambda x: x["round"]) for w in (1, 2)}
    speedup = common.paired_ratios([x["wall_s"] for x in by[2]], [x["wall_s"] for x in by[1]])
    figures = {"prepare_tokens_per_s_w1": common.stats([x["tokens_per_s"] for x in by[1]])["median"],
               "prepare_tokens_per_s_w2": common.stats([x["tokens_per_s"] for x in by[2]])["median"],
               "prepare_speedup_w2": speedup["median"], "prepare_speedup_w2_summary": speedup}
    doc = common.write_results(out, "data", figures, rows)
    table = common.md_table(["round", "workers", "tokens", "wall s", "tokens/s"],
                            [[x["round"], x["workers"], f"{x['tokens']:,}", f"{x['wall_s']:.2f}",
                              f"{x['tokens_per_s']:,.0f}"] for x in rows])
    common.write_report(out, "Data pipeline: prepare throughput", [
        f"`shardlab data prepare` of the standard library ({rows[0]['tokens']:,} tokens, bpe:{VOCAB}), "
        f"{rounds} rounds, 1 and 2 workers alternating.",
        f"- tokens/s, 1 worker: **{figures['prepare_tokens_per_s_w1']:,.0f}**\n"
        f"- tokens/s, 2 workers: **{figures['prepare_tokens_per_s_w2']:,.0f}**\n"
        f"- speedup with 2 workers (time 1 ÷ time 2, paired): {common.fmt_stats(speedup)}", table])
    return doc
