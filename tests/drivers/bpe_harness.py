"""Shared pieces of the tokenizer tests: a small corpus (some standard-library modules as a .jsonl), prepared
with a byte-level BPE, and a short `shardlab train` on it (one process, single device: through shardlab's main in
the test's process, the launcher's own one-process path), as a user would run them."""
from __future__ import annotations

import json
import sysconfig
from pathlib import Path

from shardlab.testing.cli import run_cli

MODULES = ("json", "email", "html", "urllib")  # ~600 KiB of Python: enough for a 384-token BPE and a few steps
VOCAB = 384
TRAIN = ["--nproc", "1", "model.preset=tiny", "parallel.strategy=single", "train.steps=6", "train.seq_len=32",
         "train.micro_batch=4", "train.warmup_steps=2", "train.eval_every=3", "train.eval_seqs=8", "ckpt.every=6"]


def corpus(root: Path) -> Path:
    """One JSON line per module file: {"text": its source}."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(f for m in MODULES for f in (lib / m).rglob("*.py"))
    path = root / "corpus.jsonl"
    path.write_text("".join(json.dumps({"text": f.read_text(encoding="utf-8")}) + "\n" for f in files))
    return path


def prepare(root: Path, workers: int = 2) -> Path:
    out = root / "tokens"
    r = run_cli(["data", "prepare", str(corpus(root)), "--tokenizer", f"bpe:{VOCAB}", "--out", str(out),
                 "--workers", str(workers), "--val-fraction", "0.1", "--shard-mb", "0.1"], timeout=240)
    assert r.returncode == 0, r.stderr
    return out


def train(root: Path, tokens: Path, *overrides: str):
    """`shardlab train` on tokens:DIR; returns (returncode, stdout and stderr as a completed process, the run
    directory). In this process: a subprocess added only a fresh interpreter and torch's import."""
    from cli_harness import run_in_process

    run = root / "run"
    r = run_in_process(["train", "--out", str(run), *TRAIN, f"data.source=tokens:{tokens}", *overrides])
    return r, run
