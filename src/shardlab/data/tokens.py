"""A run's corpus as token ids, whatever its tokenizer: `open_corpus(source, tokenizer, val_fraction)`.

    stdlib, text:PATH   bytes: the byte stream of corpus.py (files joined by a blank line: the default run's
                        tokens, unchanged). Another tokenizer: each document encoded and followed by the EOS
                        id, cached as $SHARDLAB_CACHE/<source>-<fingerprint>-<tokenizer>-v1.bin
    bin:PATH            raw uint16 ids (nanoGPT's format), with data.tokenizer naming what wrote them
    tokens:DIR          what `shardlab data prepare` wrote (data/prepare.py): token shards (uint16, or uint32
                        for vocabularies past 65,536), meta.json, tokenizer/; its own train / val split

Documents are separated by the tokenizer's EOS id (`Tokenizer.eos_id`; `tokenizer.eos_id(cfg)` for a run)
in every stream but the bytes one of stdlib / text:, which keeps today's blank-line join.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shardlab.errors import ConfigError

from . import tokenizer as tk
from .cache import cache_dir, write_atomic
from .corpus import load_tokens
from .dataset import split_train_val
from .errors import DataError
from .sources import documents, files_of, fingerprint

META = "meta.json"
PREPARED_FORMAT = 1
ENCODED_FORMAT = 1  # bump when the per-document stream of a non-bytes tokenizer changes


class ShardedTokens:
    """Token shards (memmaps) seen as one 1-D array: `len`, slices, integer-array indexing, `max()`."""

    def __init__(self, shards: list[np.ndarray]):
        self.shards = [s for s in shards if len(s)]
        self.offsets = np.cumsum([0] + [len(s) for s in self.shards])
        self.dtype = self.shards[0].dtype if self.shards else np.dtype(np.uint16)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                raise IndexError("ShardedTokens slices take step 1")
            parts = [s[max(start - o, 0):max(stop - o, 0)] for s, o in zip(self.shards, self.offsets)]
            parts = [p for p in parts if len(p)]
            return np.concatenate(parts) if len(parts) > 1 else (parts[0] if parts else np.empty(0, self.dtype))
        idx = np.asarray(key, dtype=np.int64)
        flat = idx.reshape(-1)
        which = np.searchsorted(self.offsets, flat, side="right") - 1
        out = np.empty(flat.shape, dtype=self.dtype)
        for k in np.unique(which):
            here = which == k
            out[here] = self.shards[k][flat[here] - self.offsets[k]]
        return out.reshape(idx.shape)

    def max(self) -> int:
        return max(int(s.max()) for s in self.shards)


@dataclass
class Corpus:
    """A run's tokens: `train` and `val` (arrays, or ShardedTokens), what made them, how big they are."""
    source: str
    tokenizer: tk.Tokenizer
    train: object
    val: object
    tokens: int
    documents: int
    samples: int = 0  # training sequences at the run's seq_len (set by the CLI's check)


def open_corpus(source: str, spec: str = "bytes", val_fraction: float = 0.05, documents: bool = False) -> Corpus:
    """`documents` (data.doc_mask): the bytes tokenizer's stdlib / text: as EOS-ended documents too, not the
    stream it has always read (corpus.py); every other tokenizer writes documents whatever it says."""
    tok = tk.run_tokenizer(source, spec)
    if source.startswith("tokens:"):
        return open_prepared(Path(source[len("tokens:"):]), val_fraction, tok)
    if tok.kind == "bytes" or source.startswith("bin:"):
        # (a bin: file's ids are checked against the model's vocabulary: the CLI)
        tokens = load_tokens(source, documents=documents)
    else:
        tokens = encoded(source, tok)
    if source.startswith("bin:"):  # its ids are whatever wrote them: one stream
        docs = 1
    elif tok.kind == "bytes" and not documents:  # the stream: a document per file, no EOS
        docs = len(files_of(source))
    else:
        docs = int(np.count_nonzero(tokens == tok.eos_id))
    train, val = split_train_val(tokens, val_fraction)
    return Corpus(source, tok, train, val, len(tokens), docs)


def follow_vocab(m, tok: tk.Tokenizer) -> None:
    """model.vocab_size (`m`: the config's model section) = the tokenizer's when not set (a preset's does
    not count: the data decides); an explicit one may be larger (a padded embedding), never smaller."""
    if m.vocab_size == 0:
        m.vocab_size = tok.vocab_size
    elif m.vocab_size < tok.vocab_size:
        raise ConfigError(f"model.vocab_size={m.vocab_size} is smaller than the tokenizer's vocabulary "
                          f"({tok.vocab_size}, {tok.spec}); drop model.vocab_size (it follows the tokenizer) or "
                          f"set it to at least {tok.vocab_size}")


def encoded(source: str, tok: tk.Tokenizer) -> np.ndarray:
    """stdlib / text: with a non-bytes tokenizer: every document's ids followed by EOS, cached on disk."""
    kind = "stdlib" if source == "stdlib" else "text"
    key = hashlib.sha256(f"{fingerprint(source)}\0{tok.fingerprint()}".encode()).hexdigest()[:16]
    path = cache_dir() / f"{kind}-{key}-{np.dtype(tok.dtype).name}-v{ENCODED_FORMAT}.bin"
    if path.is_file():
        return np.memmap(path, dtype=tok.dtype, mode="r")
    eos = np.array([tok.eos_id], dtype=tok.dtype)
    texts = [text for _, text in documents(source)]
    tokens = np.concatenate([x for ids in tok.encode_batch(texts) for x in (ids, eos)] or [eos[:0]])
    if not len(tokens):
        raise DataError(f"data.source={source!r} holds no text; give a file or folder with some text in it")
    try:
        write_atomic(path, tokens)
    except OSError:  # an unwritable cache: train from memory
        return tokens
    return np.memmap(path, dtype=tok.dtype, mode="r")


def read_meta(d: Path) -> dict:
    """meta.json of a prepared directory; DataError when it is missing (a prepare that did not finish)."""
    p = Path(d) / META
    if not p.is_file():
        unfinished = (Path(d) / ".prepare").is_dir()
        raise DataError(f"tokens:{d} has no {META}: " + ("its `shardlab data prepare` did not finish; run the same "
                        "command again to resume it" if unfinished else "prepare it with `shardlab data prepare "
                        f"SRC --out {d}`"))
    try:
        meta = json.loads(p.read_text())
    except ValueError:
        raise DataError(f"{p} is not valid JSON; prepare the directory again") from None
    if meta.get("format") != PREPARED_FORMAT:
        raise DataError(f"{p}: format {meta.get('format')!r}, this shardlab reads {PREPARED_FORMAT}; prepare again")
    return meta


def shards(d: Path, meta: dict, split: str) -> ShardedTokens:
    dtype = np.dtype(meta["dtype"])
    arrays = []
    for s in meta["splits"][split]["shards"]:
        f = Path(d) / s["file"]
        if not f.is_file() or f.stat().st_size != s["tokens"] * dtype.itemsize:
            raise DataError(f"{f}: missing or not {s['tokens']} {dtype.name} tokens as {META} says; prepare "
                            "the directory again")
        if s["tokens"]:
            arrays.append(np.memmap(f, dtype=dtype, mode="r"))
    return ShardedTokens(arrays)


def open_prepared(d: Path, val_fraction: float, tok: tk.Tokenizer) -> Corpus:
    """tokens:DIR: its train shards, and its val shards (or, when prepare held none out, the split of
    dataset.py with data.val_fraction)."""
    meta = read_meta(d)
    train = shards(d, meta, "train")
    val = shards(d, meta, "val")
    if not len(train):
        raise DataError(f"tokens:{d} has no training tokens; prepare a source with some text in it")
    if not len(val):
        one = train.shards[0] if len(train.shards) == 1 else train
        train, val = split_train_val(one, val_fraction)
    return Corpus(f"tokens:{d}", tok, train, val, meta["tokens"], meta["documents"])
