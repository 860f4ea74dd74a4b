"""Byte-level corpora: a source string as one flat uint16 token array (the `bytes` tokenizer's ids).

    stdlib      the running interpreter's standard library source (default; cached on disk)
    text:PATH   a text file, or every text file under a folder (recursive, sorted)
    bin:PATH    a nanoGPT-style token file: raw uint16 values, opened as a memmap

Two recipes. The stream (`documents=False`, the default run's): the files' raw bytes joined by a blank
line, as shardlab has always read them, so a checkpoint's data position stays valid on resume. Documents
(`documents=True`, what `data.doc_mask=true` trains on): every document (a file; a .jsonl line or a table
row, read as `data prepare` reads them) followed by EOS, the NUL byte (`BYTES_EOS`), so positions and
attention restart there; a NUL byte inside a document is dropped (the bytes tokenizer drops it too), so EOS
only ever ends a document. Every other tokenizer always writes documents (tokens.py).
"""
import sys
import sysconfig
from pathlib import Path

import numpy as np

from .cache import cache_dir, write_atomic
from .errors import DataError
from .sources import documents as source_documents, is_text, stdlib_files
from .tokenizer import BYTES_EOS

SEPARATOR = b"\n\n"  # the stream's: between files
EOS = bytes([BYTES_EOS])  # the documents': after each one
# Bump when a stdlib recipe (skip rules, separator) changes, so old caches are not reused. The stream is
# format 1; the documents are format 2.
STREAM_FORMAT, DOCUMENTS_FORMAT = 1, 2


def load_tokens(source: str = "stdlib", documents: bool = False) -> np.ndarray:
    """Return the corpus named by `source` as a 1-D uint16 array (possibly a read-only memmap); with
    `documents`, EOS-ended documents instead of the stream."""
    if source == "stdlib":
        return _load_stdlib(documents)
    scheme, sep, path = source.partition(":")
    if sep and scheme == "text" and path:
        return _text_documents(source) if documents else _load_text(Path(path))
    if sep and scheme == "bin" and path:
        return _load_bin(Path(path))
    raise DataError(f"unknown data source {source!r}; use 'stdlib', 'text:PATH', 'bin:PATH' or 'tokens:DIR'")


# ---- stdlib -------------------------------------------------------------------------------------

def _load_stdlib(documents: bool) -> np.ndarray:
    files = stdlib_files()
    sizes = [f.stat().st_size for f in files]
    if not files or sum(sizes) == 0:
        raise DataError(f"no Python files found in the standard library at "
                        f"{sysconfig.get_paths()['stdlib']}; use a text:PATH or bin:PATH source instead")
    # Cheap fingerprint: interpreter version + file count + total size. Stat-ing is ~40 ms; reading
    # and encoding everything again would not be.
    v = sys.version_info
    fmt, end = (DOCUMENTS_FORMAT, EOS) if documents else (STREAM_FORMAT, SEPARATOR)
    name = (f"stdlib-{sys.implementation.name}{v.major}.{v.minor}.{v.micro}"
            f"-{len(files)}files-{sum(sizes)}bytes-v{fmt}.bin")
    path = cache_dir() / name
    # (documents: a file with NUL bytes makes the corpus shorter, so the check rebuilds it each time, still right)
    if path.exists() and path.stat().st_size == 2 * (sum(sizes) + len(end) * len(files)):
        return np.memmap(path, dtype=np.uint16, mode="r")
    # the stdlib's raw bytes (no decoding: a file in another encoding stays as it is), a document per file
    raw = (f.read_bytes() for f in files)
    tokens = _join_documents(raw) if documents else _join(raw)
    try:
        write_atomic(path, tokens)
    except OSError:  # read-only home, full disk...: still train, just without the cache
        return tokens
    return np.memmap(path, dtype=np.uint16, mode="r")


def _join(raw) -> np.ndarray:
    """The stream: the files' raw bytes, each followed by SEPARATOR."""
    data = b"".join(d + SEPARATOR for d in raw)
    return np.frombuffer(data, dtype=np.uint8).astype(np.uint16)


def _join_documents(docs) -> np.ndarray:
    """The documents' bytes, NUL bytes dropped, each followed by EOS."""
    data = b"".join(d.replace(EOS, b"") + EOS for d in docs)
    return np.frombuffer(data, dtype=np.uint8).astype(np.uint16)


# ---- text:PATH ----------------------------------------------------------------------------------

def _load_text(path: Path) -> np.ndarray:
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*")
                       if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
                       and is_text(p))
        if not files:
            raise DataError(f"text source folder {path} has no text files; point text: at a file or a "
                            f"folder of text files")
    else:
        raise DataError(f"text source {path} does not exist; give an existing file or folder after 'text:'")
    tokens = _join(f.read_bytes() for f in files)
    if len(tokens) == len(SEPARATOR) * len(files):
        raise DataError(f"text source {path} is empty; give a file or folder with some text in it")
    return tokens


def _text_documents(source: str) -> np.ndarray:
    tokens = _join_documents(text.encode("utf-8") for _, text in source_documents(source))
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
