"""`shardlab ckpt ls|verify|inspect|export|import` — look at, check and convert checkpoints.

    shardlab ckpt ls RUN_OR_PATH                 checkpoints of a run: step, state, size, world, strategy
    shardlab ckpt verify RUN_OR_PATH             recheck every file's checksum (exit 2 if anything is damaged)
    shardlab ckpt inspect PATH [--tensors]       train state, manifest and (optionally) every stored tensor
    shardlab ckpt export PATH --hf DIR           Hugging Face GPT-2 or LlamaForCausalLM: model.safetensors, config.json, tokenizer
    shardlab ckpt import --hf DIR --out CK       a GPT2LMHeadModel / LlamaForCausalLM directory -> a checkpoint (step 0)

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
    from shardlab.errors import one_line

    print(f"shardlab ckpt: error: {one_line(msg)}", file=sys.stderr)
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
    manifest, problem = mf.load_manifest(p)
    if manifest is None and not (p / mf.MANIFEST).exists():
        raise _Usage(f"{p} has no {mf.MANIFEST}: not a committed checkpoint (an interrupted or failed save)")
    if manifest is None:
        raise _Usage(f"{problem}; `shardlab ckpt verify` checks every checkpoint")
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
        state = "committed" if m else ("corrupt" if c.committed else "incomplete")
        size = _human(sum(e["size"] for e in m["files"].values())) if m else "-"
        mark = "  <- latest" if latest is not None and latest.name == c.path.name else ""
        print(f"{c.path.name:<16} {state:<10} {size:>10} {m.get('world_size', '?') if m else '-':>5}  "
              f"{m.get('strategy', '?') if m else '-'}{mark}")
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
            print(f"ok      {d} ({n} files, checksums checked)")
    return 2 if bad else 0  # damaged input: exit 2, as everywhere (docs/training.md, "When a run fails")


def _train_state(p: Path) -> dict:
    try:
        meta = json.loads((p / STATE_FILE).read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise _Usage(f"{p} has no {STATE_FILE}: not a complete checkpoint (`shardlab ckpt verify {p}`)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise _Usage(f"{p / STATE_FILE} is not valid JSON: the checkpoint is corrupt (`shardlab ckpt verify {p}`)") from None
    missing = [k for k in ("step", "strategy", "world_size") if not isinstance(meta, dict) or k not in meta]
    if missing:
        raise _Usage(f"{p / STATE_FILE} has no {missing[0]!r}: the checkpoint is corrupt (`shardlab ckpt verify {p}`)")
    return meta


def _tensor_lines(p: Path) -> list[str]:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    lines = []
    for key, v in sorted(dcp.FileSystemReader(str(p)).read_metadata().state_dict_metadata.items()):
        if isinstance(v, TensorStorageMetadata):
            lines.append(f"  {key:<56} {str(v.properties.dtype).replace('torch.', ''):<8} {list(v.size)} "
                         f"({len(v.chunks)} chunk{'s' if len(v.chunks) > 1 else ''})")
        else:
            lines.append(f"  {key:<56} object")
    return lines


def cmd_inspect(args) -> int:
    p = _one(args.path)
    m = mf.read_manifest(p)
    meta = _train_state(p)
    tensors = []
    if args.tensors:  # read before printing anything: a corrupt index is one error line, not half a report
        try:
            tensors = _tensor_lines(p)
        except Exception as e:  # noqa: BLE001 - DCP unpickles the index: garbage raises anything at all
            raise _Usage(f"{p / '.metadata'} is unreadable ({type(e).__name__}): the checkpoint is corrupt "
                         f"(`shardlab ckpt verify {p}`)") from None
    print(f"checkpoint  {p}")
    print(f"step        {meta['step']}")
    print(f"strategy    {meta['strategy']} at world size {meta['world_size']}")
    if meta.get("layout"):
        print(f"layout      {' x '.join(f'{k}={v}' for k, v in meta['layout'].items())}")
    for key in ("sampler", "scaler", "model", "versions"):
        print(f"{key:<11} {meta.get(key)}")
    print(f"files       {len(m['files'])}, {_human(sum(e['size'] for e in m['files'].values()))}")
    for line in tensors:
        print(line)
    return 0


def cmd_export(args) -> int:
    if not args.hf:
        raise _Usage("export needs --hf DIR (the only export format)")
    p = _one(args.path)
    problems = mf.verify(p)
    if problems:
        raise _Usage(f"{p} failed verification: {problems[0]}")
    from shardlab.checkpoint.hf import export_hf

    try:
        experts = (json.loads((p / STATE_FILE).read_text()).get("model") or {}).get("moe_experts", 0)
    except (OSError, ValueError):
        experts = 0  # export_hf names what is missing
    if experts:  # GPT2LMHeadModel / LlamaForCausalLM have one MLP per block: nothing to hold E experts
        raise _Usage(f"{p} is a mixture-of-experts model (model.moe_experts={experts}); --hf exports dense GPT-2 "
                     f"and Llama only: run it with `shardlab generate {p}` instead")
    out = export_hf(p, Path(args.hf))
    cls = json.loads((out / "config.json").read_text())["architectures"][0]
    print(f"exported {p} -> {out}/: model.safetensors, config.json, tokenizer.json, tokenizer_config.json "
          f"(load with transformers.{cls} and AutoTokenizer)")
    return 0


def cmd_import(args) -> int:
    from shardlab.checkpoint.hf_import import HFImportError, import_hf, note_no_tokenizer

    if not args.hf or not args.out:
        raise _Usage("import needs --hf DIR (a Hugging Face model directory) and --out CK (a new directory)")
    if not Path(args.hf).is_dir():
        raise _Usage(f"--hf {args.hf}: no such directory")
    try:
        step, record = import_hf(Path(args.hf), Path(args.out))
    except HFImportError as e:
        raise _Usage(str(e)) from None
    if not record["tokenizer"]:
        note_no_tokenizer(Path(args.hf))
    meta = json.loads((step / STATE_FILE).read_text())["model"]
    print(f"imported {args.hf} ({record['architecture']}, {meta['n_layer']} layers, d_model {meta['d_model']}, "
          f"vocabulary {meta['vocab_size']}, {record['dtype']}) -> {step}; train from it with "
          f"ckpt.init_from={args.out}, or `shardlab generate {args.out}`")
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="shardlab ckpt", description="List, verify, inspect and export checkpoints.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("ls", help="list a run's checkpoints").add_argument("path", metavar="RUN_OR_PATH")
    sub.add_parser("verify", help="recheck every checksum").add_argument("path", metavar="RUN_OR_PATH")
    ins = sub.add_parser("inspect", help="show the training state of one checkpoint")
    ins.add_argument("path", metavar="RUN_OR_PATH")
    ins.add_argument("--tensors", action="store_true", help="also list every stored tensor")
    exp = sub.add_parser("export", help="write a Hugging Face GPT-2 or LlamaForCausalLM")
    exp.add_argument("path", metavar="RUN_OR_PATH")
    exp.add_argument("--hf", metavar="DIR", help="output directory: model.safetensors, config.json, tokenizer")
    imp = sub.add_parser("import", help="a Hugging Face GPT-2 or Llama directory as a shardlab checkpoint")
    imp.add_argument("--hf", metavar="DIR", help="the model directory (config.json, safetensors, tokenizer files)")
    imp.add_argument("--out", metavar="CK", help="the new checkpoint directory (a run-like CK/checkpoints/step_000000)")
    return ap


def main(argv: list[str]) -> int:
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:  # argparse already printed one usage line
        return 2 if e.code else 0
    try:
        return {"ls": cmd_ls, "verify": cmd_verify, "inspect": cmd_inspect, "export": cmd_export,
                "import": cmd_import}[args.cmd](args)
    except _Usage as e:
        return _fail(str(e))
