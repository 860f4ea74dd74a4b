"""Byte-level corpora: a source string as one flat uint16 token array (the `bytes` tokenizer's ids).

    stdlib      the running interpreter's standard library source (default; cached on disk)
    text:PATH   a text file, or a folder of text / .jsonl / .parquet files (sources.py reads them)
    bin:PATH    a nanoGPT-style token file: raw uint16 values, opened as a memmap

Every document (a file; a .jsonl line or a table row) is followed by EOS, the NUL byte (`BYTES_EOS`): the
model sees where one ends, `data.doc_mask` restarts positions and attention there, and generation stops at it.
A NUL byte inside a document is dropped, as the bytes tokenizer drops it, so EOS only ever ends a document.
"""
import sys
import sysconfig
from pathlib import Path

import numpy as np

from .cache import cache_dir, write_atomic
from .errors import DataError
from .sources import documents, stdlib_files
from .tokenizer import BYTES_EOS

EOS = bytes([BYTES_EOS])
# Bump when the stdlib recipe (skip rules, document end) changes, so old caches are not reused.
# 2: documents end with EOS (1 put two newlines between files, and no EOS)
CACHE_FORMAT = 2


def load_tokens(source: str = "stdlib") -> np.ndarray:
    """Return the corpus named by `source` as a 1-D uint16 array (possibly a read-only memmap)."""
    if source == "stdlib":
        return _load_stdlib()
    scheme, sep, path = source.partition(":")
    if sep and scheme == "text" and path:
        return _load_text(source)
    if sep and scheme == "bin" and path:
        return _load_bin(Path(path))
    raise DataError(f"unknown data source {source!r}; use 'stdlib', 'text:PATH', 'bin:PATH' or 'tokens:DIR'")


# ---- stdlib -------------------------------------------------------------------------------------

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
    # (a file with NUL bytes in it would make the joined corpus shorter: the check then rebuilds it, still right)
    if path.exists() and path.stat().st_size == 2 * (sum(sizes) + len(files)):
        return np.memmap(path, dtype=np.uint16, mode="r")
    # the stdlib's raw bytes (no decoding: a file in another encoding stays as it is), one document per file
    tokens = _join(f.read_bytes() for f in files)
    try:
        write_atomic(path, tokens)
    except OSError:  # read-only home, full disk...: still train, just without the cache
        return tokens
    return np.memmap(path, dtype=np.uint16, mode="r")


def _join(docs) -> np.ndarray:
    """The documents' bytes, NUL bytes dropped, each followed by EOS."""
    data = b"".join(d.replace(EOS, b"") + EOS for d in docs)
    return np.frombuffer(data, dtype=np.uint8).astype(np.uint16)


# ---- text:PATH ----------------------------------------------------------------------------------

def _load_text(source: str) -> np.ndarray:
    tokens = _join(text.encode("utf-8") for _, text in documents(source))
    if not np.count_nonzero(tokens != BYTES_EOS):
        raise DataError(f"text source {source[5:]} is empty; give a file or folder with some text in it")
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
