"""`shardlab data prepare SRC --tokenizer T --out DIR [--workers K] [--val-fraction F] [--field NAME]`
(data/prepare.py) and `shardlab data inspect DIR`."""
from __future__ import annotations

import json
import os
from pathlib import Path

from shardlab.errors import OneLineParser, fail


def parser() -> OneLineParser:
    ap = OneLineParser(prog="shardlab data", description="Prepare token shards for data.source=tokens:DIR.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="tokenize a source into token shards (train with data.source=tokens:DIR)")
    p.add_argument("src", metavar="SRC", help="a text file or folder, .jsonl, .parquet, a saved Hugging Face dataset "
                   "directory (save_to_disk), or stdlib")
    p.add_argument("--tokenizer", default="bytes", help=f"{{{', '.join(x.strip() for x in _specs())}}} (default bytes)")
    p.add_argument("--out", required=True, type=Path, help="output directory (new, empty, or an earlier prepare's)")
    p.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1), help="encoding processes")
    p.add_argument("--val-fraction", type=float, default=0.0, help="documents held out for validation (default 0: "
                   "the run splits the tokens by data.val_fraction)")
    p.add_argument("--field", default="text", help=".jsonl / .parquet / dataset: the text field (default text)")
    p.add_argument("--shard-mb", type=float, default=4.0, help="MiB of text per shard (default 4)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    i = sub.add_parser("inspect", help="what a prepared directory holds")
    i.add_argument("dir", type=Path)
    return ap


def _specs() -> list[str]:
    from shardlab.data.tokenizer import SPECS
    return SPECS.split("|")


def cmd_prepare(args) -> int:
    from shardlab.data import DataError
    from shardlab.data.prepare import Job, prepare
    from shardlab.data.tokenizer import check_spec

    if args.workers < 1:
        return fail(f"--workers {args.workers}: must be at least 1")
    if not 0 <= args.val_fraction < 1:
        return fail(f"--val-fraction {args.val_fraction}: must be at least 0 and below 1")
    if args.shard_mb <= 0:
        return fail(f"--shard-mb {args.shard_mb}: must be positive")
    job = Job(src=args.src, out=args.out, spec=args.tokenizer, workers=args.workers, val_fraction=args.val_fraction,
              field=args.field, shard_mb=args.shard_mb, quiet=args.quiet)
    try:
        check_spec(args.tokenizer)
        meta = prepare(job, args.tokenizer)
    except DataError as e:
        return fail(str(e))
    if meta.get("resumed") == "complete":
        print(f"{args.out}: already prepared from {args.src} with {args.tokenizer} (nothing to do)")
    print(f"{args.out}: {meta['documents']:,} documents, {meta['tokens']:,} tokens ({meta['dtype']}, vocabulary "
          f"{meta['vocab_size']:,}, EOS {meta['eos_id']}; train {meta['splits']['train']['tokens']:,}, val "
          f"{meta['splits']['val']['tokens']:,}); train with data.source=tokens:{args.out}")
    return 0


def cmd_inspect(args) -> int:
    from shardlab.data import DataError
    from shardlab.data.tokens import read_meta

    try:
        meta = read_meta(args.dir)
    except DataError as e:
        return fail(str(e))
    meta = {k: v for k, v in meta.items() if k != "splits"} | {
        s: {k: v for k, v in d.items() if k != "shards"} | {"shards": len(d["shards"])} for s, d in meta["splits"].items()}
    print(json.dumps(meta, indent=1))
    return 0


def main(argv: list[str]) -> int:
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    return {"prepare": cmd_prepare, "inspect": cmd_inspect}[args.cmd](args)
