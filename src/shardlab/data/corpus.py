"""Corpora: turn a source string into one flat uint16 token array.

    stdlib      the running interpreter's standard library source (default; cached on disk)
    text:PATH   a text file, or every text file under a folder (recursive, sorted)
    bin:PATH    a nanoGPT-style token file: raw uint16 values, opened as a memmap

Files are joined with SEPARATOR so the model sees where one file ends and the next begins.
"""
import os
import sys
import sysconfig
import tempfile
from pathlib import Path

import numpy as np

from .errors import DataError

SEPARATOR = b"\n\n"
# Bump when the stdlib recipe (skip rules, separator) changes, so old caches are not reused.
CACHE_FORMAT = 1
# Test suites are ~60% of the stdlib's bytes and full of deliberately odd inputs (encoding torture
# tests, generated tables, invalid syntax): noise for a model of Python code. The rest (~12 MB on
# 3.11) is far more than a few hundred steps can use, and skipping them halves the first build.
STDLIB_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test"}


def load_tokens(source: str = "stdlib") -> np.ndarray:
    """Return the corpus named by `source` as a 1-D uint16 array (possibly a read-only memmap)."""
    if source == "stdlib":
        return _load_stdlib()
    scheme, sep, path = source.partition(":")
    if sep and scheme == "text" and path:
        return _load_text(Path(path))
    if sep and scheme == "bin" and path:
        return _load_bin(Path(path))
    raise DataError(f"unknown data source {source!r}; use 'stdlib', 'text:PATH', 'bin:PATH' or 'tokens:DIR'")


def cache_dir() -> Path:
    """Where encoded corpora are cached: $SHARDLAB_CACHE, else ~/.cache/shardlab."""
    return Path(os.environ.get("SHARDLAB_CACHE") or Path.home() / ".cache" / "shardlab")


# ---- stdlib -------------------------------------------------------------------------------------

def stdlib_files() -> list[Path]:
    """The stdlib's *.py files in sorted path order (the order is part of the corpus)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in STDLIB_SKIP_DIRS]
        files += [Path(dirpath, f) for f in filenames if f.endswith(".py")]
    return sorted(files)


def _load_stdlib() -> np.ndarray:
    files = stdlib_files()
    sizes = [f.stat().st_size for f in files]
    if not files or sum(sizes) == 0:
        raise DataError(f"no Python files found in the standard library at "
                        f"{sysconfig.get_paths()['stdlib']}; use a text:PATH or bin:PATH source instead")
    # Cheap fingerprint: interpreter version + file count + total size. Stat-ing is ~40 ms; reading
    # and encoding everything again would not be.
    v = sys.version_info
    name = (f"stdlib-{sys.implementation.name}{v.major}.{v.minor}.{v.micro}"
            f"-{len(files)}files-{sum(sizes)}bytes-v{CACHE_FORMAT}.bin")
    path = cache_dir() / name
    expected = sum(sizes) + len(SEPARATOR) * len(files)
    if path.exists() and path.stat().st_size == 2 * expected:
        return np.memmap(path, dtype=np.uint16, mode="r")
    tokens = _join(files)
    try:
        _write_atomic(path, tokens)
    except OSError:  # read-only home, full disk...: still train, just without the cache
        return tokens
    return np.memmap(path, dtype=np.uint16, mode="r")


def _write_atomic(path: Path, tokens: np.ndarray) -> None:
    """Write to a temp file in the same folder, then rename: a reader (another rank starting at the
    same moment) sees either no cache or a complete one, never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(tokens.tobytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _join(files: list[Path]) -> np.ndarray:
    """Concatenate the files' raw bytes (byte-level: no decoding needed), each followed by SEPARATOR."""
    data = b"".join(f.read_bytes() + SEPARATOR for f in files)
    return np.frombuffer(data, dtype=np.uint8).astype(np.uint16)


# ---- text:PATH ----------------------------------------------------------------------------------

def _is_text(path: Path) -> bool:
    """Heuristic used by `git` and `grep`: a NUL byte near the start means binary."""
    with open(path, "rb") as f:
        return b"\0" not in f.read(8192)


def _load_text(path: Path) -> np.ndarray:
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*")
                       if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
                       and _is_text(p))
        if not files:
            raise DataError(f"text source folder {path} has no text files; point text: at a file or a "
                            f"folder of text files")
    else:
        raise DataError(f"text source {path} does not exist; give an existing file or folder after 'text:'")
    tokens = _join(files)
    if len(tokens) == len(SEPARATOR) * len(files):
        raise DataError(f"text source {path} is empty; give a file or folder with some text in it")
    return tokens


# ---- bin:PATH -----------------------------------------------------------------------------------

def _load_bin(path: Path) -> np.ndarray:
    if not path.is_file():
        raise DataError(f"token file {path} does not exist; give a uint16 token file after 'bin:'")
    size = path.stat().st_size
    if size == 0:
        raise DataError(f"token file {path} is empty; write uint16 token ids into it (e.g. arr.tofile(path))")
    if size % 2:
        raise DataError(f"token file {path} has an odd size ({size} bytes), so it is not raw uint16 tokens; "
                        f"write it with np.asarray(ids, dtype=np.uint16).tofile(path)")
    return np.memmap(path, dtype=np.uint16, mode="r")


def check_vocab(tokens: np.ndarray, vocab_size: int) -> None:
    """Raise DataError if a token id does not fit the model's vocabulary (e.g. a GPT-2 bin: file
    with a byte-level model). One pass over the tokens: call it once at start-up."""
    top = int(tokens.max())
    if top >= vocab_size:
        raise DataError(f"corpus has token id {top} but the model's vocabulary is {vocab_size}; "
                        f"use a model with vocab_size > {top} (model.vocab_size) and name the tokenizer that wrote the "
                        f"ids (data.tokenizer=PATH/tokenizer.json), or a byte-level corpus")
