"""The on-disk layout of a run's checkpoints, the manifest, and checksum verification.

    checkpoints/
      step_000006/            committed: has MANIFEST.json, the commit record
        .metadata             DCP's global index (which tensor chunk lives in which file)
        __0_0.distcp ...      DCP shards, one file per rank
        __0_0.index.json ...  each shard file's index: where its whole plain tensors' bytes lie (index.py)
        train_state.json      step, sampler, scaler, config, versions
        MANIFEST.json         every file's size and checksum (xxh3_128; sha256 in older checkpoints), world size,
                              layout (mesh degrees), strategy, step
      step_000008.tmp/        a save in progress or abandoned: never loaded, removed on the next start
      latest                  text file naming the newest committed checkpoint (replaced atomically)

A directory without MANIFEST.json is never loaded: the manifest is written last, after every rank
reported success, and the directory is renamed from .tmp only then.

Checksums guard against corruption (a torn write, a flipped bit, a truncated copy), not against an
adversary, so new checkpoints use a fast non-cryptographic 128-bit hash, as storage systems do (GCS and
HDFS: crc32c): xxh3_128 runs at ~20 GB/s on one core where sha256 runs at ~1.8 GB/s, which would cap a
verified load far below the speed of reading the bytes. Each manifest entry names its algorithm, so
checkpoints written before keep verifying with their sha256.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

try:
    import xxhash
except ImportError:  # an environment without it (a GPU machine's own torch): new checkpoints use sha256
    xxhash = None

MANIFEST = "MANIFEST.json"
LATEST = "latest"
_STEP_RE = re.compile(r"^step_(\d+)$")


def step_dirname(step: int) -> str:
    return f"step_{step:06d}"


# algorithm -> (new hasher, hex digest pattern). New checkpoints use CHECKSUM; sha256 is read for older ones.
def _xxh3_128():
    if xxhash is None:
        raise RuntimeError("this checkpoint's checksums are xxh3_128, which needs the xxhash package "
                           "(pip install xxhash)")
    return xxhash.xxh3_128()


ALGORITHMS = {"xxh3_128": (_xxh3_128, re.compile(r"^[0-9a-f]{32}$")),
              "sha256": (hashlib.sha256, re.compile(r"^[0-9a-f]{64}$"))}
CHECKSUM = "xxh3_128" if xxhash is not None else "sha256"


def new_hasher(algo: str = CHECKSUM):
    return ALGORITHMS[algo][0]()


def entry_algo(entry: dict) -> str | None:
    """The checksum algorithm a manifest entry records (exactly one, with a well-formed digest), or None."""
    found = [a for a in ALGORITHMS if a in entry]
    if len(found) != 1 or not isinstance(entry[found[0]], str) or not ALGORITHMS[found[0]][1].match(entry[found[0]]):
        return None
    return found[0]


def hash_file(path: Path, algo: str = CHECKSUM, chunk: int = 8 << 20) -> str:
    """The file's digest, read in `chunk`-byte pieces into one reused buffer (no allocation per piece; no
    larger than the file and a byte, so that a small file's check does not allocate 8 MiB)."""
    h = new_hasher(algo)
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(max(1, min(chunk, os.fstat(f.fileno()).st_size + 1)))
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def file_entry(path: Path) -> dict:
    return {"size": path.stat().st_size, CHECKSUM: hash_file(path)}


def check_size(path: Path, want: dict) -> str | None:
    """One problem line if the file is missing or not of its manifest size (no reading), else None."""
    if not path.is_file():
        return f"{path}: missing"
    if path.stat().st_size != want["size"]:
        return f"{path}: size {path.stat().st_size} != {want['size']} in the manifest"
    return None


def check_entry(path: Path, want: dict) -> str | None:
    """One problem line if the file does not match its manifest entry (size, then checksum), else None."""
    if (problem := check_size(path, want)) is not None:
        return problem
    algo = entry_algo(want)
    if hash_file(path, algo) != want[algo]:
        return f"{path}: {algo} mismatch (the file is corrupt)"
    return None


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in `path` durable (the directory entry itself)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: Path) -> None:
    """Make the files a library wrote under `path` (the tokenizer's) durable, and their directory entries:
    the manifest that lists them is written after, so a crash must not leave it naming unwritten bytes."""
    for p in sorted(Path(path).rglob("*")):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for d in sorted({p.parent for p in Path(path).rglob("*")} | {Path(path)}):
        fsync_dir(d)


def write_json_atomic(path: Path, obj, compact: bool = False) -> None:
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "w") as f:
        if compact:  # a file for programs (the shard index), not for people
            json.dump(obj, f, separators=(",", ":"))
        else:
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


def load_manifest(step_dir: Path) -> tuple[dict | None, str | None]:
    """(manifest, None), or (None, one line saying what is wrong with it). A manifest is only trusted when
    it is a JSON object listing at least the required files, each with a size and one checksum (xxh3_128, or
    sha256 in checkpoints written before), by plain name."""
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
        if not plain_entry(name):
            return None, f"{path}: file name {name!r} is not a plain name in the checkpoint (the manifest is corrupt)"
        if not (isinstance(entry, dict) and type(entry.get("size")) is int and entry["size"] >= 0
                and entry_algo(entry) is not None):
            return None, (f"{path}: entry {name!r} has no valid size and checksum (one of "
                          f"{', '.join(ALGORITHMS)}) (the manifest is corrupt)")
    missing = [n for n in REQUIRED if n not in files]
    if missing:
        return None, f"{path}: does not list {missing[0]} (the manifest is corrupt or not shardlab's)"
    return manifest, None


def read_manifest(step_dir: Path) -> dict | None:
    """The manifest, or None when it is missing or not trustworthy (see load_manifest for why)."""
    return load_manifest(step_dir)[0]


SERIAL_BYTES = 16 << 20  # verify_files hashes files one after the other below this total


def verify_files(step_dir: Path, entries: dict[str, dict], threads: int = 4) -> list[str]:
    """Recheck the given manifest entries; one problem line per bad file (empty = intact), in the entries'
    order. Several files are hashed at once (the reads and xxhash release the GIL): the launcher's check
    before a resume reads the ranks' shard files side by side instead of one after the other."""
    items = list(entries.items())

    def check(item):
        return check_entry(Path(step_dir) / item[0], item[1])

    # (small files, a rank's share before a load: one after the other; starting threads would cost more)
    if len(items) > 1 and threads > 1 and sum(e.get("size", 0) for _, e in items) > SERIAL_BYTES:
        with ThreadPoolExecutor(min(threads, len(items)), thread_name_prefix="ckpt-verify") as pool:
            found = list(pool.map(check, items))
    else:
        found = [check(item) for item in items]
    return [p for p in found if p is not None]


def verify(step_dir: Path) -> list[str]:
    manifest, problem = load_manifest(step_dir)
    if manifest is None:
        return [problem]
    return verify_files(step_dir, manifest["files"]) + unlisted(step_dir, manifest)


def unlisted(step_dir: Path, manifest: dict) -> list[str]:
    """The commit lists every file of the directory: one it does not list was added, or its entry removed."""
    names = sorted(n for n in entry_names(Path(step_dir)) if n not in manifest["files"] and n != MANIFEST)
    return [f"{Path(step_dir) / n}: not listed in the manifest" for n in names]


# The one folder a checkpoint holds: the run's tokenizer (shardlab.data.tokenizer's directory), its files
# listed in the manifest as "tokenizer/NAME" like every other file.
SUBDIRS = ("tokenizer",)


def plain_entry(name: str) -> bool:
    """A manifest name is a plain file name, or one inside a SUBDIRS folder."""
    parts = name.split("/")
    if len(parts) == 2 and parts[0] in SUBDIRS:
        parts = parts[1:]
    return len(parts) == 1 and Path(parts[0]).name == parts[0] and parts[0] not in ("", ".", "..")


def entry_names(step_dir: Path) -> list[str]:
    """What a step directory holds, as manifest names (a SUBDIRS folder's files as "folder/NAME")."""
    out = []
    for p in Path(step_dir).iterdir():
        if p.is_dir() and p.name in SUBDIRS:
            out += [f"{p.name}/{q.name}" for q in p.iterdir()] or [p.name]
        else:
            out.append(p.name)
    return out


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
