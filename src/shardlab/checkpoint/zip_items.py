"""The torch.save zip of one DCP item, parsed just enough to read a tensor's bytes in place.

DCP's file writer stores each tensor item as its own torch.save archive inside the rank's shard file. A
plain contiguous tensor's storage is one uncompressed record of that archive, so its bytes on disk are the
tensor's memory: `record_span` finds where they start, from the item's first 4 KiB (the small records
torch.save writes before the storage) or, for an archive laid out otherwise, from its central directory.
Anything it cannot read this way gives None, and the reader takes DCP's own path.
"""
from __future__ import annotations

import collections
import io
import os
import pickle
import struct
import sys

import torch


class _TensorMeta(pickle.Unpickler):
    """Reads a torch.save'd plain tensor's data.pkl without building it: (dtype, storage key, storage
    numel, storage offset, size, stride). Anything else (a subclass, a parameter, quantized) raises."""

    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return lambda storage, offset, size, stride, *_: (*storage, offset, tuple(size), tuple(stride))
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch" and name in _STORAGE_DTYPES:
            return _STORAGE_DTYPES[name]
        raise pickle.UnpicklingError(f"not a plain tensor: {module}.{name}")

    def persistent_load(self, pid):
        kind, dtype, key, _location, numel = pid
        if kind != "storage" or not isinstance(dtype, torch.dtype):
            raise pickle.UnpicklingError(kind)
        return dtype, key, numel


def _contiguous_strides(size: tuple) -> tuple:
    strides, acc = [], 1
    for s in reversed(size):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


class _Bytes:
    """The bytes of one item's zip, [offset, offset + length), for the parsing below: its first and last
    EDGE bytes are read once (two preads: the records torch.save writes first, data.pkl and byteorder, and
    the central directory at the end), anything else with a pread of its own. Per item that is 2 system
    calls instead of 6, of which one read 64 KiB of tensor bytes (~2,400 items in a gpt2 load)."""

    EDGE = 4096

    def __init__(self, fd: int, offset: int, length: int):
        self.fd, self.offset, self.length = fd, offset, length
        self.head = os.pread(fd, min(length, self.EDGE), offset)
        tail_at = max(length - self.EDGE, len(self.head))
        self.tail_at, self.tail = tail_at, os.pread(fd, length - tail_at, offset + tail_at)

    def read(self, at: int, n: int) -> bytes:
        """Bytes [at, at + n) of the item (short at its end, as a pread is)."""
        n = max(0, min(n, self.length - at))
        if at + n <= len(self.head):
            return self.head[at:at + n]
        if at >= self.tail_at:
            return self.tail[at - self.tail_at:at - self.tail_at + n]
        return os.pread(self.fd, n, self.offset + at)


# end of central directory: sig, disk, cd disk, entries here, entries, cd size, cd offset, comment length
_EOCD = struct.Struct("<4s4H2IH")
_CENTRAL = struct.Struct("<4s6H3I5H2I")  # a central directory entry, up to its name
_LOCAL = struct.Struct("<4s5H3I2H")  # a local file header, up to its name


def _records(b: _Bytes) -> dict[str, tuple[int, int, int]] | None:
    """{name: (local header offset, size, compression method)} of the torch.save zip stored at
    [offset, offset + length), from its central directory (torch writes a data descriptor after each
    record, so the local headers carry no sizes). zipfile does the same in ~10x the time and checks
    CRCs that our shard files do not have (storage.crc32_off). None: a layout this does not read (zip64,
    a comment): the caller takes DCP's path."""
    length = b.length
    tail = b.read(length - min(length, _EOCD.size), _EOCD.size)  # no comment (else None): the EOCD ends the zip
    if len(tail) < _EOCD.size or tail[-_EOCD.size:-_EOCD.size + 4] != b"PK\x05\x06":
        return None
    *_, n, cd_size, cd_offset, _comment = _EOCD.unpack(tail[-_EOCD.size:])
    if cd_offset == 0xFFFFFFFF or cd_offset + cd_size > length:
        return None
    cd = b.read(cd_offset, cd_size)
    out, p = {}, 0
    for _ in range(n):
        if cd[p:p + 4] != b"PK\x01\x02":
            return None
        f = _CENTRAL.unpack_from(cd, p)
        method, csize, name_len, extra_len, comment_len, local = f[4], f[8], f[10], f[11], f[12], f[16]
        if csize == 0xFFFFFFFF or local == 0xFFFFFFFF:  # zip64 sizes live in the extra field
            return None
        out[cd[p + _CENTRAL.size:p + _CENTRAL.size + name_len].decode()] = (local, csize, method)
        p += _CENTRAL.size + name_len + extra_len + comment_len
    return out


def _data_offset(b: _Bytes, local: int) -> int | None:
    """Where a record's bytes start, relative to the zip's start: after its local header, whose name
    and extra fields vary in length (torch pads records to 64-byte alignment)."""
    header = b.read(local, _LOCAL.size)
    if len(header) != _LOCAL.size or header[:4] != b"PK\x03\x04":
        return None
    f = _LOCAL.unpack(header)
    return local + _LOCAL.size + f[-2] + f[-1]


def _record(b: _Bytes, rec: tuple[int, int, int]) -> bytes:
    """A small stored record's bytes."""
    local, size, method = rec
    at = _data_offset(b, local)
    if at is None or method != 0:
        raise ValueError("not a stored record")
    return b.read(at, size)


# "FloatStorage" -> torch.float32, ... (torch.save names a storage by its legacy typed class)
_STORAGE_DTYPES = {name: dtype for dtype, name in torch.storage._dtype_to_storage_type_map().items()}


def _head_records(head: bytes) -> tuple[dict[str, bytes], str, int] | None:
    """The small records torch.save writes before a tensor's storage, read from the item's first bytes
    alone: ({name: bytes}, the storage record's name, where its bytes start). torch.save writes the
    records in order (data.pkl, .format_version, .storage_alignment, byteorder, then data/<key>), each a
    local header, its bytes uncompressed, and a data descriptor (`PK\x07\x08`, crc, sizes) whose size
    is the record's length: a small record ends at the first descriptor that gives its own length and is
    followed by the next local header. None: anything else (compressed, cut off by `head`'s end)."""
    out, p = {}, 0
    while head[p:p + 4] == b"PK\x03\x04" and p + _LOCAL.size <= len(head):
        f = _LOCAL.unpack_from(head, p)
        name_len, extra_len, method = f[-2], f[-1], f[3]
        name = head[p + _LOCAL.size:p + _LOCAL.size + name_len].decode()
        at = p + _LOCAL.size + name_len + extra_len
        if method != 0:
            return None
        if "/data/" in name:
            return out, name, at
        q = at
        while True:
            q = head.find(b"PK\x07\x08", q)
            if q < 0 or q + 20 > len(head):
                return None
            if int.from_bytes(head[q + 8:q + 12], "little") == q - at and head[q + 16:q + 20] == b"PK\x03\x04":
                break
            q += 1
        out[name] = head[at:q]
        p = q + 16
    return None


def _matches(meta: tuple, order: str, dtype: torch.dtype, shape: tuple, numel: int) -> bool:
    """Whether the stored tensor (data.pkl's `meta`, the file's byte order) is, as it is, the bytes of a
    contiguous tensor of `dtype` and `shape` (`numel` elements)."""
    stored, _key, stored_numel, start, size, stride = meta
    return (order == sys.byteorder and stored == dtype and start == 0 and size == shape
            and stride == _contiguous_strides(size) and stored_numel == numel)


_PARSE_ERRORS = (KeyError, StopIteration, ValueError, TypeError, UnicodeDecodeError, struct.error,
                 pickle.UnpicklingError, EOFError)


CENTRAL = object()  # Heads.parse: ask the central directory


class Heads:
    """The heads parsed so far (of one file's items: a memo, not shared between threads). Items of equal
    dtype and shape have the same bytes up to their storage (the records before it hold no ids: torch.save's
    CRCs are off in our shard files, and its serialization id comes after the storage), so a gpt2 load's
    ~800 items parse a few dozen heads; the rest are one dictionary lookup."""

    def __init__(self):
        self.ats: list[int] = []  # where the storage starts, in the heads parsed so far
        self.seen: dict[bytes, tuple | None] = {}  # head[:at] -> (data.pkl's meta, byte order, at) or None

    def parse(self, head: bytes):
        """(data.pkl's meta, byte order, where the storage starts), None (not a tensor to read directly),
        or CENTRAL (a layout the head does not show: ask the central directory)."""
        for at in self.ats:
            if (hit := self.seen.get(head[:at], CENTRAL)) is not CENTRAL:
                return hit
        found = _head_records(head)
        if found is None:
            return CENTRAL
        recs, storage, at = found
        prefix = storage[:storage.index("/data/") + 1]
        meta = _TensorMeta(io.BytesIO(recs[prefix + "data.pkl"])).load()
        parsed = (meta, recs.get(prefix + "byteorder", b"little").decode(), at)
        if storage != f"{prefix}data/{meta[1]}":  # the storage is not the tensor's: no direct read
            parsed = None
        self.seen[head[:at]] = parsed
        if at not in self.ats:
            self.ats.append(at)
        return parsed


def record_span(fd: int, offset: int, length: int, target: torch.Tensor, heads: Heads | None = None) -> int | None:
    """Where, relative to the item's start, the raw bytes of `target` lie in the torch.save zip stored at
    [offset, offset + length), if that item is a plain contiguous tensor of target's dtype and shape
    stored uncompressed in native byte order; else None (the caller takes DCP's path)."""
    return span(fd, offset, length, target.dtype, tuple(target.shape), heads)


def span(fd: int, offset: int, length: int, dtype: torch.dtype, shape: tuple, heads: Heads | None = None) -> int | None:
    """record_span for a tensor of `dtype` and `shape` (the save's index asks it of what it just wrote). One
    read of the item's first 4 KiB finds it (the records before the storage, _head_records; `heads`
    remembers the parses); an item laid out otherwise is parsed from its central directory (_records)."""
    numel = 1
    for s in shape:
        numel *= s
    nbytes = numel * dtype.itemsize
    head = os.pread(fd, min(length, _Bytes.EDGE), offset)
    try:
        parsed = (heads or Heads()).parse(head)
        if parsed is None:
            return None
        if parsed is not CENTRAL:
            meta, order, at = parsed
            return at if _matches(meta, order, dtype, shape, numel) and at + nbytes <= length else None
    except _PARSE_ERRORS:
        pass
    return _central_span(fd, offset, length, dtype, shape, numel)


def _central_span(fd: int, offset: int, length: int, dtype: torch.dtype, shape: tuple, numel: int) -> int | None:
    """span from the zip's central directory (any record order)."""
    nbytes = numel * dtype.itemsize
    try:
        b = _Bytes(fd, offset, length)
        recs = _records(b)
        if recs is None:
            return None
        pkl = next(n for n in recs if n.endswith("/data.pkl"))
        prefix = pkl[:-len("data.pkl")]
        order = _record(b, recs[prefix + "byteorder"]).decode() if prefix + "byteorder" in recs else "little"
        meta = _TensorMeta(io.BytesIO(_record(b, recs[pkl]))).load()
        local, size, method = recs[f"{prefix}data/{meta[1]}"]
    except _PARSE_ERRORS:
        return None
    if not (_matches(meta, order, dtype, shape, numel) and method == 0 and size == nbytes):
        return None
    data = _data_offset(b, local)
    return data if data is not None and data + nbytes <= length else None


class _PlainValue(pickle.Unpickler):
    """Unpickles a value made of Python's own types alone: a class to import or a storage raises (the
    caller then asks torch.load, which knows torch's types)."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"not a plain value: {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("holds a storage")


def plain_value(item: bytes) -> tuple[bool, object]:
    """(True, the value) of a torch.save'd item that holds a plain Python value (DCP's BYTE_IO items: the
    optimizer's hyperparameters, floats, tuples, bools), read from its data.pkl, the archive's first
    record: what torch.load gives for it (DCP's load_bytes), without torch.load's archive reader and
    unpickler set-up (~50 us an item). (False, None): anything else (a torch type, a storage, another
    layout): the caller uses torch.load."""
    if item[:4] != b"PK\x03\x04" or len(item) < _LOCAL.size:
        return False, None
    f = _LOCAL.unpack_from(item, 0)
    name_len, extra_len, method = f[-2], f[-1], f[3]
    at = _LOCAL.size + name_len + extra_len
    if method != 0 or not item[_LOCAL.size:_LOCAL.size + name_len].endswith(b"/data.pkl"):
        return False, None
    q = at
    while True:  # the record ends at the data descriptor that gives its own length (as in _head_records)
        q = item.find(b"PK\x07\x08", q)
        if q < 0 or q + 16 > len(item):
            return False, None
        if int.from_bytes(item[q + 8:q + 12], "little") == q - at:
            break
        q += 1
    try:
        return True, _PlainValue(io.BytesIO(item[at:q])).load()
    except _PARSE_ERRORS:
        return False, None
