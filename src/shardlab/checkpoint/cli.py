"""`shardlab ckpt ls|verify|inspect|export` — look at, check and convert checkpoints.

    shardlab ckpt ls RUN_OR_PATH                 checkpoints of a run: step, state, size, world, strategy
    shardlab ckpt verify RUN_OR_PATH             recheck every file's sha256 (exit 1 if anything is corrupt)
    shardlab ckpt inspect PATH [--tensors]       train state, manifest and (optionally) every stored tensor
    shardlab ckpt export PATH --hf DIR           Hugging Face GPT-2: model.safetensors + config.json

RUN_OR_PATH is a run directory, its checkpoints/ directory, or one checkpoint (`.../step_000100`);
where one checkpoint is needed, a run means its `latest`. Bad input: one line on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from shardlab.checkpoint import manifest as mf
from shardlab.checkpoint.state import STATE_FILE


class _Usage(Exception):
    pass


def _fail(msg: str) -> int:
    print(f"shardlab ckpt: error: {msg}", file=sys.stderr)
    return 2


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _one(path: str) -> Path:
    """A single committed checkpoint from RUN_OR_PATH (a run means its latest)."""
    try:
        p, kind = mf.resolve(path)
    except FileNotFoundError as e:
        raise _Usage(str(e)) from None
    if kind == "ckpts":
        found = mf.resume_candidates(p)
        if not found:
            raise _Usage(f"{p} has no committed checkpoint")
        p = found[0]
    if mf.read_manifest(p) is None:
        raise _Usage(f"{p} has no {mf.MANIFEST}: not a committed checkpoint (an interrupted or failed save)")
    return p


def cmd_ls(args) -> int:
    try:
        p, kind = mf.resolve(args.path)
    except FileNotFoundError as e:
        raise _Usage(str(e)) from None
    infos = [mf.CkptInfo(0, p, True)] if kind == "step" else mf.list_checkpoints(p)
    latest = mf.read_latest(p) if kind == "ckpts" else None
    if not infos:
        print(f"{p}: no checkpoints")
        return 0
    print(f"{'checkpoint':<16} {'state':<10} {'size':>10} {'world':>5}  strategy")
    for c in infos:
        m = mf.read_manifest(c.path)
        state = "committed" if m else "incomplete"
        size = _human(m["total_bytes"]) if m else "-"
        mark = "  <- latest" if latest is not None and latest.name == c.path.name else ""
        print(f"{c.path.name:<16} {state:<10} {size:>10} {m['world_size'] if m else '-':>5}  "
              f"{m['strategy'] if m else '-'}{mark}")
    return 0


def cmd_verify(args) -> int:
    try:
        p, kind = mf.resolve(args.path)
    except FileNotFoundError as e:
        raise _Usage(str(e)) from None
    dirs = [p] if kind == "step" else [c.path for c in mf.list_checkpoints(p) if c.committed]
    if not dirs:
        raise _Usage(f"{p} has no committed checkpoint to verify")
    bad = 0
    for d in dirs:
        problems = mf.verify(d)
        if problems:
            bad += 1
            print(f"CORRUPT {d}")
            for line in problems:
                print(f"  {line}")
        else:
            n = len(mf.read_manifest(d)["files"])
            print(f"ok      {d} ({n} files, sha256 checked)")
    return 1 if bad else 0


def cmd_inspect(args) -> int:
    p = _one(args.path)
    m = mf.read_manifest(p)
    meta = json.loads((p / STATE_FILE).read_text())
    print(f"checkpoint  {p}")
    print(f"step        {meta['step']}")
    print(f"strategy    {meta['strategy']} at world size {meta['world_size']}")
    if meta.get("layout"):
        print(f"layout      {' x '.join(f'{k}={v}' for k, v in meta['layout'].items())}")
    print(f"sampler     {meta['sampler']}")
    print(f"scaler      {meta['scaler']}")
    print(f"model       {meta['model']}")
    print(f"versions    {meta['versions']}")
    print(f"files       {len(m['files'])}, {_human(m['total_bytes'])}")
    if args.tensors:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        md = dcp.FileSystemReader(str(p)).read_metadata()
        for key, v in sorted(md.state_dict_metadata.items()):
            if isinstance(v, TensorStorageMetadata):
                print(f"  {key:<56} {str(v.properties.dtype).replace('torch.', ''):<8} {list(v.size)} "
                      f"({len(v.chunks)} chunk{'s' if len(v.chunks) > 1 else ''})")
            else:
                print(f"  {key:<56} object")
    return 0


def cmd_export(args) -> int:
    if not args.hf:
        raise _Usage("export needs --hf DIR (the only export format)")
    p = _one(args.path)
    problems = mf.verify(p)
    if problems:
        raise _Usage(f"{p} failed verification: {problems[0]}")
    from shardlab.checkpoint.hf import export_hf

    out = export_hf(p, Path(args.hf))
    print(f"exported {p} -> {out}/model.safetensors, {out}/config.json (load with transformers.GPT2LMHeadModel)")
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="shardlab ckpt", description="List, verify, inspect and export checkpoints.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("ls", help="list a run's checkpoints").add_argument("path", metavar="RUN_OR_PATH")
    sub.add_parser("verify", help="recheck every sha256").add_argument("path", metavar="RUN_OR_PATH")
    ins = sub.add_parser("inspect", help="show the training state of one checkpoint")
    ins.add_argument("path", metavar="RUN_OR_PATH")
    ins.add_argument("--tensors", action="store_true", help="also list every stored tensor")
    exp = sub.add_parser("export", help="write a Hugging Face GPT-2")
    exp.add_argument("path", metavar="RUN_OR_PATH")
    exp.add_argument("--hf", metavar="DIR", help="output directory for model.safetensors + config.json")
    return ap


def main(argv: list[str]) -> int:
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:  # argparse already printed one usage line
        return 2 if e.code else 0
    try:
        return {"ls": cmd_ls, "verify": cmd_verify, "inspect": cmd_inspect, "export": cmd_export}[args.cmd](args)
    except _Usage as e:
        return _fail(str(e))
