"""The on-disk layout of a run's checkpoints, the manifest, and checksum verification.

    checkpoints/
      step_000006/            committed: has MANIFEST.json, the commit record
        .metadata             DCP's global index (which tensor chunk lives in which file)
        __0_0.distcp ...      DCP shards, one file per rank
        train_state.json      step, sampler, scaler, config, versions
        MANIFEST.json         every file's size and sha256, world size, layout (mesh degrees), strategy, step
      step_000008.tmp/        a save in progress or abandoned: never loaded, removed on the next start
      latest                  text file naming the newest committed checkpoint (replaced atomically)

A directory without MANIFEST.json is never loaded: the manifest is written last, after every rank
reported success, and the directory is renamed from .tmp only then.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "MANIFEST.json"
LATEST = "latest"
_STEP_RE = re.compile(r"^step_(\d+)$")


def step_dirname(step: int) -> str:
    return f"step_{step:06d}"


def sha256_file(path: Path, chunk: int = 8 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def file_entry(path: Path) -> dict:
    return {"size": path.stat().st_size, "sha256": sha256_file(path)}


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in `path` durable (the directory entry itself)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_manifest(step_dir: Path, files: dict[str, dict], **info) -> dict:
    manifest = {"format": 1, **info, "files": dict(sorted(files.items())),
                "total_bytes": sum(e["size"] for e in files.values())}
    write_json_atomic(step_dir / MANIFEST, manifest)
    return manifest


# Files every committed checkpoint has besides the ranks' shards: a manifest without them is not ours.
REQUIRED = (".metadata", "train_state.json")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")


def load_manifest(step_dir: Path) -> tuple[dict | None, str | None]:
    """(manifest, None), or (None, one line saying what is wrong with it). A manifest is only trusted when
    it is a JSON object listing at least the required files, each with a size and a sha256, by plain name."""
    path = Path(step_dir) / MANIFEST
    try:
        manifest = json.loads(path.read_bytes().decode("utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return None, f"{step_dir}: no {MANIFEST} (an incomplete or foreign directory)"
    except OSError as e:
        return None, f"{path}: unreadable ({e.strerror})"
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None, f"{path}: not valid JSON (the manifest is corrupt)"
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        return None, f"{path}: has no file list (the manifest is corrupt)"
    if not files:
        return None, f"{path}: lists no files (the manifest is corrupt)"
    for name, entry in files.items():
        if Path(name).name != name or name in (".", ".."):
            return None, f"{path}: file name {name!r} is not a plain name in the checkpoint (the manifest is corrupt)"
        if not (isinstance(entry, dict) and type(entry.get("size")) is int and entry["size"] >= 0
                and isinstance(entry.get("sha256"), str) and _SHA_RE.match(entry["sha256"])):
            return None, f"{path}: entry {name!r} has no valid size and sha256 (the manifest is corrupt)"
    missing = [n for n in REQUIRED if n not in files]
    if missing:
        return None, f"{path}: does not list {missing[0]} (the manifest is corrupt or not shardlab's)"
    return manifest, None


def read_manifest(step_dir: Path) -> dict | None:
    """The manifest, or None when it is missing or not trustworthy (see load_manifest for why)."""
    return load_manifest(step_dir)[0]


def verify_files(step_dir: Path, entries: dict[str, dict]) -> list[str]:
    """Recheck the given manifest entries; one problem line per bad file (empty = intact)."""
    problems = []
    for name, want in entries.items():
        path = Path(step_dir) / name
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif path.stat().st_size != want["size"]:
            problems.append(f"{path}: size {path.stat().st_size} != {want['size']} in the manifest")
        elif sha256_file(path) != want["sha256"]:
            problems.append(f"{path}: sha256 mismatch (the file is corrupt)")
    return problems


def verify(step_dir: Path) -> list[str]:
    manifest, problem = load_manifest(step_dir)
    if manifest is None:
        return [problem]
    return verify_files(step_dir, manifest["files"]) + unlisted(step_dir, manifest)


def unlisted(step_dir: Path, manifest: dict) -> list[str]:
    """The commit lists every file of the directory: one it does not list was added, or its entry removed."""
    names = sorted(p.name for p in Path(step_dir).iterdir() if p.name not in manifest["files"] and p.name != MANIFEST)
    return [f"{Path(step_dir) / n}: not listed in the manifest" for n in names]


@dataclass
class CkptInfo:
    step: int
    path: Path
    committed: bool  # has a manifest (a .tmp directory never is)


def list_checkpoints(ckpt_dir: Path) -> list[CkptInfo]:
    """All step directories, committed or not, by step."""
    out = []
    if not Path(ckpt_dir).is_dir():
        return out
    for p in Path(ckpt_dir).iterdir():
        name = p.name[:-4] if p.name.endswith(".tmp") else p.name
        m = _STEP_RE.match(name)
        if m and p.is_dir():
            committed = not p.name.endswith(".tmp") and (p / MANIFEST).is_file()
            out.append(CkptInfo(int(m.group(1)), p, committed))
    return sorted(out, key=lambda c: (c.step, c.committed))


def read_latest(ckpt_dir: Path) -> Path | None:
    try:
        name = (Path(ckpt_dir) / LATEST).read_text().strip()
    except (OSError, UnicodeDecodeError):  # missing or garbage: no usable pointer, as if never written
        return None
    return Path(ckpt_dir) / name if name and Path(name).name == name else None


def write_latest(ckpt_dir: Path, step_dir: Path) -> None:
    tmp = Path(ckpt_dir) / (LATEST + ".partial")
    with open(tmp, "w") as f:
        f.write(Path(step_dir).name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, Path(ckpt_dir) / LATEST)  # atomic: readers see the old or the new name, never half
    fsync_dir(Path(ckpt_dir))


def resume_candidates(ckpt_dir: Path) -> list[Path]:
    """Committed checkpoints to try for `resume=latest`, best first: the one `latest` names, then older
    ones (a newer directory that `latest` does not name belongs to an abandoned timeline)."""
    committed = [c for c in list_checkpoints(ckpt_dir) if c.committed]
    latest = read_latest(ckpt_dir)
    top = next((c for c in committed if latest is not None and c.path.name == latest.name), None)
    if top is not None:
        committed = [c for c in committed if c.step <= top.step]
    return [c.path for c in sorted(committed, key=lambda c: -c.step)]


def resolve(path: str | Path) -> tuple[Path, str]:
    """A user's RUN_OR_PATH: a run directory, its checkpoints/ directory, or one step directory.
    Returns (path, kind) with kind in {"step", "ckpts"}; raises FileNotFoundError with a clear message."""
    p = Path(path)
    if (p / MANIFEST).is_file() or _STEP_RE.match(p.name.removesuffix(".tmp")):
        if not p.is_dir():
            raise FileNotFoundError(f"{p} does not exist")
        return p, "step"
    if (p / "checkpoints").is_dir():
        return p / "checkpoints", "ckpts"
    if p.is_dir() and (list_checkpoints(p) or (p / LATEST).exists()):
        return p, "ckpts"
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist")
    if (p / "config.toml").is_file():  # a run directory that never saved
        raise FileNotFoundError(f"{p}: this run saved no checkpoint ({_ckpt_settings(p / 'config.toml')}); "
                                "set ckpt.every=N or ckpt.final=true to keep one")
    raise FileNotFoundError(f"{p} is neither a run directory, a checkpoints/ directory nor a checkpoint")


def _ckpt_settings(config_toml: Path) -> str:
    import tomllib
    try:
        ckpt = tomllib.loads(config_toml.read_text()).get("ckpt", {})
    except (OSError, ValueError):
        ckpt = {}
    final = ckpt.get("final", "?")
    return f"ckpt.every={ckpt.get('every', '?')}, ckpt.final={str(final).lower()}"
