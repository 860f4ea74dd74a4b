"""`shardlab data prepare SRC --tokenizer T --out DIR`: a source's documents as token shards a run reads
with `data.source=tokens:DIR` (nanoGPT's prepare.py, for any source and tokenizer).

The documents are cut, in source order, into shards of about `shard_mb` MiB of text; shard k's documents
are encoded (by one of `workers` processes), each followed by the EOS id, and written as `train-0000k.bin`
and `val-0000k.bin` (document i goes to validation when floor((i + 1) * F) > floor(i * F): an even spread of
a fraction F). Shard boundaries and the split depend on the source alone, never on the workers: the same
bytes at any --workers.

Restartable: every shard is written to a temp name and renamed, then recorded in `.prepare/shard-0000k.json`;
`meta.json` is written last (the one sign of a complete set: `tokens:DIR` refuses a directory without it).
A prepare started again with the same source, tokenizer and options keeps the recorded shards and encodes
the rest; with anything different it starts clean. A directory that is not a prepare's is never touched.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import sources
from . import tokenizer as tk
from .errors import DataError
from .tokens import META, PREPARED_FORMAT

STATE = ".prepare"


@dataclass
class Job:
    src: str
    out: Path
    spec: str = "bytes"
    workers: int = 1
    val_fraction: float = 0.0
    field: str = sources.TEXT_FIELD
    shard_mb: float = 4.0
    quiet: bool = False


def plan(job: Job, tok: tk.Tokenizer) -> dict:
    """What a prepared set depends on: a restart with another plan starts clean."""
    return {"format": PREPARED_FORMAT, "source": job.src, "source_fingerprint": sources.fingerprint(job.src, job.field),
            "field": job.field, "tokenizer": tok.meta(), "tokenizer_fingerprint": tok.fingerprint(),
            "val_fraction": job.val_fraction, "shard_mb": job.shard_mb}


def is_val(i: int, fraction: float) -> bool:
    return int((i + 1) * fraction) > int(i * fraction)


def batches(job: Job):
    """(k, first document index, texts) of every shard, in order."""
    limit, k, first, texts, size, i = job.shard_mb * 2**20, 0, 0, [], 0, 0
    for i, (_, text) in enumerate(sources.documents(job.src, job.field)):
        texts.append(text)
        size += len(text)
        if size >= limit:
            yield k, first, texts
            k, first, texts, size = k + 1, i + 1, [], 0
    if texts:
        yield k, first, texts


_worker_tok: tk.Tokenizer | None = None


def _init_worker(tok_dir: str) -> None:
    global _worker_tok
    _worker_tok = tk.load(tok_dir)


def encode_shard(out: str, k: int, first: int, texts: list[str], val_fraction: float, tok=None) -> dict:
    """Encode one shard's documents and write its two files and record (temp names, renamed)."""
    tok = tok or _worker_tok
    ids = tok.encode_batch(texts)
    eos = np.array([tok.eos_id], dtype=tok.dtype)
    record = {"shard": k, "documents": len(texts)}
    for split in ("train", "val"):
        parts = [x for i, a in enumerate(ids) if is_val(first + i, val_fraction) == (split == "val") for x in (a, eos)]
        arr = np.concatenate(parts) if parts else np.empty(0, tok.dtype)
        name = f"{split}-{k:05d}.bin"
        tmp = Path(out) / f"{name}.tmp"
        arr.tofile(tmp)
        os.replace(tmp, Path(out) / name)
        record[split] = {"file": name, "tokens": int(len(arr)), "documents": len(parts) // 2}
    _write_json(Path(out) / STATE / f"shard-{k:05d}.json", record)
    return record


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def start(job: Job, tok_or_spec) -> tuple[tk.Tokenizer, dict, dict]:
    """Open (or re-open) the output directory: (tokenizer, plan, shards already done)."""
    out = job.out
    ours = not out.exists() or not any(out.iterdir()) or (out / STATE).is_dir() or (out / META).is_file()
    if not ours:
        raise DataError(f"--out {out} exists and is not a prepared directory; give a new or empty directory")
    old = _read_json(out / STATE / "plan.json") or {}
    tok = tok_or_spec
    if isinstance(tok, str):  # a bpe:N trained before is reused when the source is the same
        same = old.get("source_fingerprint") == sources.fingerprint(job.src, job.field) \
            and old.get("tokenizer", {}).get("spec") == tok and (out / "tokenizer").is_dir()
        tok = tk.load(out / "tokenizer") if same and tok.startswith("bpe:") else tk.from_spec(tok, job.src)
    p = plan(job, tok)
    meta = _read_json(out / META)
    if meta is not None and {k: meta.get(k) for k in p} == p:
        return tok, p, {"complete": meta}
    done = {}
    if old == p:
        for f in sorted((out / STATE).glob("shard-*.json")):
            r = _read_json(f)
            if r and all((out / r[s]["file"]).is_file() and (out / r[s]["file"]).stat().st_size
                         == r[s]["tokens"] * np.dtype(tok.dtype).itemsize for s in ("train", "val")):
                done[r["shard"]] = r
    else:  # another source, tokenizer or options: start clean (meta.json first: never a complete-looking mix)
        (out / META).unlink(missing_ok=True)
        for f in [*out.glob("train-*.bin*"), *out.glob("val-*.bin*")]:
            f.unlink()
        shutil.rmtree(out / STATE, ignore_errors=True)
        shutil.rmtree(out / "tokenizer", ignore_errors=True)
        (out / STATE).mkdir(parents=True)
        tok.save(out / "tokenizer")
        _write_json(out / STATE / "plan.json", p)
    return tok, p, done


class Progress:
    """One line on stderr, rewritten in place on a terminal (every 5 s elsewhere, and once at the end):
    shards, tokens, tokens/s. Elsewhere a line is never repeated: the final one is left out when the last
    periodic line already said the same shards and tokens."""

    def __init__(self, quiet: bool, total_done: int):
        self.quiet, self.t0, self.tokens, self.shards = quiet, time.perf_counter(), 0, total_done
        self.last = self.t0  # the first periodic line after 5 s, not at the first shard
        self.said = None  # (shards, tokens) of the last line printed
        self.tty = sys.stderr.isatty()

    def add(self, record: dict, final: bool = False) -> None:
        if record:
            self.tokens += record["train"]["tokens"] + record["val"]["tokens"]
            self.shards += 1
        now = time.perf_counter()
        if self.quiet or not (final or self.tty or now - self.last >= 5):
            return
        if final and not self.tty and self.said == (self.shards, self.tokens):
            return
        self.last, self.said = now, (self.shards, self.tokens)
        rate = self.tokens / max(now - self.t0, 1e-9)
        line = f"[prepare] {self.shards} shards, {self.tokens:,} tokens encoded, {rate:,.0f} tokens/s"
        print(("\r" + line) if self.tty else line, end="\n" if final or not self.tty else "", file=sys.stderr,
              flush=True)

    @property
    def rate(self) -> float:
        return self.tokens / max(time.perf_counter() - self.t0, 1e-9)


def prepare(job: Job, tok_or_spec="bytes") -> dict:
    """Run the job; returns meta.json's contents (with `tokens_per_s` of this invocation beside it)."""
    job.out.mkdir(parents=True, exist_ok=True)
    tok, p, done = start(job, tok_or_spec)
    if "complete" in done:
        return {**done["complete"], "tokens_per_s": 0.0, "resumed": "complete"}
    progress = Progress(job.quiet, len(done))
    if done:
        print(f"[prepare] resuming {job.out}: {len(done)} shards already written", file=sys.stderr)
    records = dict(done)
    todo = ((k, first, texts) for k, first, texts in batches(job) if k not in done)
    # One thread per worker: the processes are the parallelism (so --workers K means K cores), and a fork
    # after `tokenizers` used its threads would only warn and fall back to one. Set after a bpe:N trained.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    if job.workers <= 1:
        for k, first, texts in todo:
            records[k] = encode_shard(str(job.out), k, first, texts, job.val_fraction, tok)
            progress.add(records[k])
    else:
        with ProcessPoolExecutor(job.workers, initializer=_init_worker, initargs=(str(job.out / "tokenizer"),)) as ex:
            pending = set()
            for k, first, texts in todo:
                pending.add(ex.submit(encode_shard, str(job.out), k, first, texts, job.val_fraction))
                if len(pending) >= 2 * job.workers:  # bounded: the source is read as fast as it is encoded
                    pending = _collect(pending, records, progress)
            while pending:
                pending = _collect(pending, records, progress)
    progress.add({}, final=True)
    return {**finish(job, tok, p, records), "tokens_per_s": progress.rate, "resumed": len(done)}


def _collect(pending: set, records: dict, progress: Progress) -> set:
    from concurrent.futures import FIRST_COMPLETED, wait

    finished, rest = wait(pending, return_when=FIRST_COMPLETED)
    for f in finished:
        r = f.result()
        records[r["shard"]] = r
        progress.add(r)
    return rest


def finish(job: Job, tok: tk.Tokenizer, p: dict, records: dict) -> dict:
    """meta.json, written last and atomically; then the restart records go."""
    order = [records[k] for k in sorted(records)]
    splits = {s: {"documents": sum(r[s]["documents"] for r in order), "tokens": sum(r[s]["tokens"] for r in order),
                  "shards": [{"file": r[s]["file"], "tokens": r[s]["tokens"]} for r in order]} for s in ("train", "val")}
    meta = {**p, "documents": sum(r["documents"] for r in order),
            "tokens": splits["train"]["tokens"] + splits["val"]["tokens"], "vocab_size": tok.vocab_size,
            "eos_id": tok.eos_id, "dtype": np.dtype(tok.dtype).name, "splits": splits}
    if not meta["documents"]:
        raise DataError(f"source {job.src} has no documents; give a source with some text in it")
    for tmp in job.out.glob("*.tmp"):  # a killed run's half-written file whose shard was written again
        tmp.unlink()
    _write_json(job.out / META, meta)
    shutil.rmtree(job.out / STATE, ignore_errors=True)
    return meta
