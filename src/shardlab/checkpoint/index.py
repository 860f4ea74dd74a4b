"""The shard files' index: where each whole plain tensor's bytes lie, written at save, read at load.

A load at the same layout reads every plain tensor's bytes straight into the live tensor; to find them it
had to unpickle DCP's `.metadata` (~800 dataclass entries for gpt2: 5-9 ms a load), look every tensor up
there, and parse each item's torch.save zip head in its shard file (a read of its own per item). All of it
is fixed at save time, so each rank writes, after its shard file `__R_0.distcp`, the index of that file,
`__R_0.index.json`:

    {"format": 1, "file": "__R_0.distcp",
     "tensors": [[fqn, data offset in the file, nbytes, dtype, shape], ...],  whole plain tensors
     "bytes": [[fqn, offset, length], ...],                                   DCP's BYTE_IO items
     "other": [fqn, ...]}                                                     anything else (a shard of a
                                                                              DTensor, a transformed item)

The offsets are found by the parser the reader used before (zip_items.span) on the bytes just written. The
index is a file of the checkpoint like any other: listed in the manifest with its checksum, rechecked by
one rank (the small files' share) before anything is read, so a damaged one is named and refused as any
file is. A checkpoint whose shard files do not all have their index listed (written before 2026-12-06, an
index the parser cannot use) loads through `.metadata` as before. Together the indexes name every key
`.metadata` has (a key that is not a whole plain tensor or bytes under "other"), so a load that needs no
other entry never unpickles `.metadata`.
"""
from __future__ import annotations

import json
import math
import os
import re
from itertools import chain, repeat
from operator import add, mul
from pathlib import Path

import torch
from torch.distributed.checkpoint.planner import WriteItemType

from shardlab.checkpoint import manifest as mf
from shardlab.checkpoint.zip_items import Heads, span

FORMAT = 1
SHARD_RE = re.compile(r"^(__\d+_\d+)\.distcp$")  # DCP's shard file of rank R: __R_0.distcp
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
    torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128)}
_ITEMSIZE = {name: d.itemsize for name, d in _DTYPES.items()}
_INT, _STR, _LIST = frozenset((int,)), frozenset((str,)), frozenset((list,))


def index_name(shard: str) -> str | None:
    """`__R_0.distcp` -> `__R_0.index.json` (None: not a shard file)."""
    m = SHARD_RE.match(shard)
    return f"{m.group(1)}.index.json" if m else None


# --- save -----------------------------------------------------------------------------------------------
def build(step_dir: Path, items, results) -> dict[str, dict]:
    """{index file name: its contents} for the shard files of one rank's write (DCP's write items and
    their results)."""
    by_index = {it.index: it for it in items}
    out: dict[str, dict] = {}
    heads: dict[str, Heads] = {}
    fds: dict[str, int] = {}
    try:
        for res in results:
            info, item = res.storage_data, by_index.get(res.index)
            name = index_name(info.relative_path)
            if name is None or item is None:
                continue
            idx = out.setdefault(name, {"format": FORMAT, "file": info.relative_path,
                                        "tensors": [], "bytes": [], "other": []})
            fqn = res.index.fqn
            if item.type == WriteItemType.BYTE_IO:
                if info.transform_descriptors:
                    idx["other"].append(fqn)
                else:
                    idx["bytes"].append([fqn, info.offset, info.length])
                continue
            entry = _tensor_entry(step_dir, item, info, heads, fds)
            (idx["tensors"] if entry is not None else idx["other"]).append(entry or fqn)
    finally:
        for fd in fds.values():
            os.close(fd)
    return out


def _tensor_entry(step_dir: Path, item, info, heads: dict, fds: dict) -> list | None:
    """[fqn, data offset, nbytes, dtype, shape] of a whole plain tensor's item, else None."""
    td = item.tensor_data
    dtype = td.properties.dtype
    name = str(dtype).removeprefix("torch.")
    if (info.transform_descriptors or any(td.chunk.offsets) or tuple(td.chunk.sizes) != tuple(td.size)
            or _DTYPES.get(name) is not dtype):
        return None
    path = info.relative_path
    if path not in fds:
        fds[path] = os.open(Path(step_dir) / path, os.O_RDONLY)
    shape = tuple(td.size)
    at = span(fds[path], info.offset, info.length, dtype, shape, heads.setdefault(path, Heads()))
    if at is None:
        return None
    nbytes = dtype.itemsize
    for s in shape:
        nbytes *= s
    return [item.index.fqn, info.offset + at, nbytes, name, list(shape)]


def write(step_dir: Path, indexes: dict[str, dict]) -> None:
    for name, idx in indexes.items():
        mf.write_json_atomic(Path(step_dir) / name, idx, compact=True)


# --- load -----------------------------------------------------------------------------------------------
class Index:
    """The shard files' indexes of one checkpoint, merged: `tensors` fqn -> (file, data offset, nbytes, dtype,
    shape), `bytes` fqn -> (file, offset, length), `keys` every key of the checkpoint."""

    def __init__(self):
        self.tensors: dict[str, tuple] = {}
        self.bytes: dict[str, tuple] = {}
        self.keys: set[str] = set()

    @classmethod
    def read(cls, step_dir: Path, manifest: dict | None) -> Index | None:
        """The checkpoint's index, when the manifest lists one for every shard file (their checksums are
        rechecked with the small files, before any read), else None: the load takes `.metadata`."""
        files = (manifest or {}).get("files", {})
        names = [(shard, index_name(shard)) for shard in files if SHARD_RE.match(shard)]
        if not names or any(n not in files for _, n in names):
            return None
        out = cls()
        try:
            for shard, name in names:
                idx = json.loads((Path(step_dir) / name).read_bytes())
                if idx.get("format") != FORMAT or idx.get("file") != shard:
                    return None
                out._add(shard, idx, files[shard]["size"])
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None  # not an index this reader understands: `.metadata` (the file itself was verified)
        return out

    def _add(self, shard: str, idx: dict, size: int) -> None:
        """One file's index; ValueError (the caller falls back to `.metadata`) for an entry that does not
        fit the file (a checked index is what the save wrote: this guards the parsing, not the bytes)."""
        first = self._first
        if idx["tensors"]:
            self._add_tensors(shard, idx["tensors"], size)
        for fqn, at, length in idx["bytes"]:
            if not (type(at) is int and type(length) is int and 0 <= at and at + length <= size):
                raise ValueError(f"{shard}: bad index entry for {fqn}")
            if first(fqn):
                self.bytes[fqn] = (shard, at, length)
        for fqn in idx["other"]:
            first(fqn)

    def _add_tensors(self, shard: str, entries: list, size: int) -> None:
        """The whole plain tensors' entries, [fqn, data offset, nbytes, dtype, shape], checked column by
        column in C loops (an entry at a time in Python cost ~0.5 ms a gpt2 load): lists of five; the
        offsets and every dimension ints (not bools), none negative; a dtype this reader knows; nbytes what
        dtype and shape say; every tensor's bytes inside the file; the names strings."""
        if not _LIST.issuperset(map(type, entries)) or set(map(len, entries)) != {5}:
            raise ValueError(f"{shard}: bad index entries")
        fqns, ats, nbytes, names, shapes = zip(*entries)
        dts = list(map(_DTYPES.__getitem__, names))  # (KeyError: not a dtype this reader knows)
        if not _LIST.issuperset(map(type, shapes)):
            raise ValueError(f"{shard}: bad shapes in the index")
        dims = list(chain.from_iterable(shapes))
        n = tuple(map(mul, map(_ITEMSIZE.__getitem__, names), map(math.prod, shapes)))
        if (not _INT.issuperset(map(type, dims)) or min(dims, default=0) < 0 or not _INT.issuperset(map(type, ats))
                or min(ats) < 0 or nbytes != n or max(map(add, ats, n)) > size
                or not _STR.issuperset(map(type, fqns))):
            raise ValueError(f"{shard}: bad index entries")
        entries = zip(repeat(shard), ats, n, dts, map(tuple, shapes))
        if len(set(fqns)) == len(fqns) and self.keys.isdisjoint(fqns):  # every key new: all at once
            self.keys.update(fqns)
            self.tensors.update(zip(fqns, entries))
            return
        for fqn, e in zip(fqns, entries):  # a key seen before: first() drops it
            if self._first(fqn):
                self.tensors[fqn] = e

    def _first(self, fqn: str) -> bool:
        """Records the key; False (dropping what it had) when it was seen before: a key stored in more
        than one item (a DTensor's shards) is not the one whole item the index promises: DCP reads it."""
        if type(fqn) is not str:
            raise TypeError(fqn)
        if fqn in self.keys:
            self.tensors.pop(fqn, None)
            self.bytes.pop(fqn, None)
            return False
        self.keys.add(fqn)
        return True

    def size(self, fqn: str) -> tuple:
        """The shape of a whole plain tensor of the checkpoint."""
        return self.tensors[fqn][4]

    def taker(self, direct: dict):
        """reader.split_direct's `take` from the index, into `direct` (shard file -> items): a contiguous CPU
        tensor whose entry is of its dtype and shape, as the pair (data offset, the tensor)."""
        tensors = self.tensors
        lists = {}  # (one list per file, looked up once)

        def take(fqn: str, v: torch.Tensor) -> bool:
            e = tensors.get(fqn)
            if e is not None and v.dtype is e[3] and v.is_cpu and v.is_contiguous() and v.shape == e[4]:
                items = lists.get(e[0])
                if items is None:
                    items = lists[e[0]] = direct.setdefault(e[0], [])
                items.append((e[1], v))
                return True
            return False

        return take

    def stored(self, keys) -> list[tuple] | None:
        """[(fqn, file, offset, length)] of `keys` (DCP's flattened ones) when they are all bytes items (what
        DDP leaves to DCP: the optimizer's hyperparameters), else None (DCP then loads them from `.metadata`)."""
        if any(k not in self.bytes for k in keys):
            return None
        return [(k, *self.bytes[k]) for k in keys]
