"""DCP's file reader without the extra copies, verifying the shard files as it reads them.

DCP's FileSystemReader torch.load()s every tensor item into a freshly allocated tensor (page faults, a
copy out of the page cache) and then copies that into the target: two copies, one of them faulting. In
the common case (the same layout: DDP, or the same sharding) a stored chunk is read whole into a
contiguous CPU target of the same dtype, and its bytes on disk are exactly the target's memory: a
torch.save zip stores each storage uncompressed as one record (`<archive>/data/0`). Then we read the
record's bytes straight into the target (one copy, into memory that the model already touched). Anything
else (resharding, narrowing, a transform, another dtype, BYTE_IO items) takes DCP's path unchanged.

Verification overlaps the read: for the shard files this rank checks (`verify`: name -> manifest entry),
the reader walks the file once from start to end, hashing every byte as it passes (the records it loads
are hashed from the target's memory, the rest from a scratch buffer), so a verified load reads those
files once instead of twice. A mismatch is reported in `problems` after the load (the targets then hold
garbage: the caller must load something else into them or stop).
"""
from __future__ import annotations

import collections
import ctypes
import io
import os
import pickle
import struct
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index  # (where DCP's reader takes it from)
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint.default_planner import create_default_local_load_plan
from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, ReadItem
from torch.futures import Future

from shardlab.checkpoint import manifest as mf

SCRATCH = 8 << 20  # bytes hashed per read between the records we load
THREADS = 4  # files read at once per rank
HASH_CHUNK = 1 << 20  # bytes read, then hashed at once while in the CPU cache (1 MiB beat 256 KiB and 4 MiB)


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


def _matches(meta: tuple, order: str, target: torch.Tensor) -> bool:
    """Whether the stored tensor (data.pkl's `meta`, the file's byte order) is target's bytes as they are."""
    dtype, _key, numel, start, size, stride = meta
    return (order == sys.byteorder and dtype == target.dtype and start == 0 and size == tuple(target.shape)
            and stride == _contiguous_strides(size) and numel == target.numel())


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
    stored uncompressed in native byte order; else None (the caller takes DCP's path). One read of the
    item's first 4 KiB finds it (the records before the storage, _head_records; `heads` remembers the
    parses); an item laid out otherwise is parsed from its central directory (_records)."""
    nbytes = target.numel() * target.element_size()
    head = os.pread(fd, min(length, _Bytes.EDGE), offset)
    try:
        parsed = (heads or Heads()).parse(head)
        if parsed is None:
            return None
        if parsed is not CENTRAL:
            meta, order, at = parsed
            return at if _matches(meta, order, target) and at + nbytes <= length else None
    except _PARSE_ERRORS:
        pass
    return _central_span(fd, offset, length, target, nbytes)


def _central_span(fd: int, offset: int, length: int, target: torch.Tensor, nbytes: int) -> int | None:
    """record_span from the zip's central directory (any record order)."""
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
    if not (_matches(meta, order, target) and method == 0 and size == nbytes):
        return None
    data = _data_offset(b, local)
    return data if data is not None and data + nbytes <= length else None


def _bytes_of(t: torch.Tensor) -> memoryview:
    """A writable view of a contiguous CPU tensor's memory, whatever its dtype (through ctypes: a seventh
    of the time of a numpy view; the caller holds `t` while it uses the view)."""
    n = t.numel() * t.element_size()
    if n == 0:
        return memoryview(bytearray())
    return memoryview((ctypes.c_char * n).from_address(t.data_ptr())).cast("B")


class _Walk:
    """Reads one file forward from the start; with a hasher, every byte it passes is hashed, in order."""

    def __init__(self, f, hasher):
        self.f, self.hasher, self.pos = f, hasher, 0
        self.scratch = memoryview(bytearray(SCRATCH)) if hasher is not None else None

    def readinto(self, view: memoryview) -> None:
        # With a hasher, read in chunks and hash each one at once, while it is still in the CPU cache:
        # hashing a whole large tensor after its read fetched it from DRAM a second time (0.055 s of a
        # 0.40 s gpt2 load). Without one, one read call per view (the fewest system calls).
        step = HASH_CHUNK if self.hasher is not None else view.nbytes
        got = 0
        while got < view.nbytes:
            chunk = view[got:got + step]
            done = 0
            while done < chunk.nbytes:
                n = self.f.readinto(chunk[done:])
                if not n:
                    raise OSError(f"{self.f.name}: ends early, at byte {self.pos + got + done} "
                                  "(the file is truncated)")
                done += n
            if self.hasher is not None:
                self.hasher.update(chunk)
            got += done
        self.pos += got

    def skip_to(self, offset: int) -> None:
        if self.hasher is None:
            self.f.seek(offset)
            self.pos = offset
            return
        self.f.seek(self.pos)
        while self.pos < offset:
            self.readinto(self.scratch[:min(SCRATCH, offset - self.pos)])

    def finish(self) -> None:
        """Hash what is left of the file (nothing to do without a hasher)."""
        if self.hasher is None:
            return
        self.f.seek(self.pos)
        while n := self.f.readinto(self.scratch):
            self.hasher.update(self.scratch[:n])
            self.pos += n


class Reader(FileSystemReader):
    """DCP's file reader that reads whole same-layout chunks straight into their targets and verifies the
    shard files named in `verify` while reading them. `direct_bytes` counts what took the direct path."""

    def __init__(self, path: Path, verify: dict[str, dict] | None = None, threads: int = THREADS):
        super().__init__(str(path))
        self.threads = threads
        self.verify = dict(verify or {})
        self.problems: list[str] = []
        self.direct_bytes = 0
        self._metadata = None

    def read_metadata(self, *args, **kwargs):
        """.metadata, unpickled once per load (the manager reads it before DCP does)."""
        if args or kwargs:  # a rank-local metadata file: DCP's fallback, not ours to cache
            return super().read_metadata(*args, **kwargs)
        if self._metadata is None:
            self._metadata = super().read_metadata()
        return self._metadata

    def read_data(self, plan, planner) -> Future:
        from shardlab.checkpoint.storage import injected_delay
        injected_delay("load")
        per_file: dict[str, list] = {}
        for req in plan.items:
            per_file.setdefault(self.storage_data[req.storage_index].relative_path, []).append(req)
        names = sorted(set(per_file) | set(self.verify))
        jobs = [(n, sorted(per_file.get(n, []), key=lambda r: self.storage_data[r.storage_index].offset))
                for n in names]
        # One thread per file (up to THREADS): the reads (readinto) and the hashing (xxhash) release the GIL,
        # so the files of one rank stream concurrently; the items of one file stay in order (one pass).
        if len(jobs) > 1 and self.threads > 1:
            with ThreadPoolExecutor(min(self.threads, len(jobs)), thread_name_prefix="ckpt-read") as pool:
                direct = list(pool.map(lambda job: self._read_file(*job, planner), jobs))
        else:
            direct = [self._read_file(*job, planner) for job in jobs]
        self.direct_bytes += sum(direct)
        fut: Future = Future()
        fut.set_result(None)
        return fut

    def _read_file(self, name: str, reqs: list, planner) -> int:
        """Read `reqs` from file `name` in one forward pass (hashing it when it is to be verified); returns
        the bytes read straight into their targets."""
        path = Path(self.path) / name
        direct = 0
        entry = self.verify.get(name)
        algo = mf.entry_algo(entry) if entry is not None else None
        hasher = mf.new_hasher(algo) if algo is not None else None
        heads = Heads()
        with open(path, "rb", buffering=0) as f:
            walk = _Walk(f, hasher)
            try:
                for req in reqs:
                    direct += self._read_item(f, walk, req, planner, heads)
                walk.finish()
            except Exception:
                if hasher is None:
                    raise
                # A corrupt file can break the parse before its hash is complete: hash the rest and report
                # the corruption; an intact file's error is a real one.
                walk.finish()
                if walk.pos == entry["size"] and hasher.hexdigest() == entry[algo]:
                    raise
        if hasher is not None:
            problem = (f"{path}: size {walk.pos} != {entry['size']} in the manifest" if walk.pos != entry["size"]
                       else f"{path}: {algo} mismatch (the file is corrupt)" if hasher.hexdigest() != entry[algo]
                       else None)
            if problem is not None:
                self.problems.append(problem)
        return direct

    def _read_item(self, f, walk: _Walk, req, planner, heads: Heads | None = None) -> int:
        md = self.storage_data[req.storage_index]
        forward = md.offset >= walk.pos  # else a second request for bytes already passed (read them again)
        if forward:
            walk.skip_to(md.offset)
        if req.type != LoadItemType.BYTE_IO and not md.transform_descriptors:
            target = planner.resolve_tensor(req).detach()
            if (type(target) is torch.Tensor and target.device.type == "cpu" and target.is_contiguous()
                    and all(o == 0 for o in req.storage_offsets) and tuple(req.lengths) == tuple(target.shape)):
                at = record_span(f.fileno(), md.offset, md.length, target, heads)
                if at is not None:
                    view = _bytes_of(target)
                    if forward:
                        walk.skip_to(md.offset + at)
                        walk.readinto(view)
                    else:
                        f.seek(md.offset + at)
                        _Walk(f, None).readinto(view)
                    planner.commit_tensor(req, target)
                    return view.nbytes
        # DCP's path (FileSystemReader.read_data), on the item's bytes read once.
        data = bytearray(md.length)
        if forward:
            walk.readinto(memoryview(data))
        else:
            f.seek(md.offset)
            _Walk(f, None).readinto(memoryview(data))
        stream = self.transforms.transform_load_stream(req, md.transform_descriptors or (), io.BytesIO(data))
        raw = io.BytesIO(stream.read(-1))
        if req.type == LoadItemType.BYTE_IO:
            planner.load_bytes(req, raw)
            return 0
        tensor = narrow_tensor_by_index(torch.load(raw, map_location="cpu", weights_only=True),
                                        req.storage_offsets, req.lengths)
        target = planner.resolve_tensor(req).detach()
        if target.size() != tensor.size():
            raise AssertionError(f"req {req.storage_index} mismatch sizes {target.size()} vs {tensor.size()}")
        target.copy_(tensor)
        planner.commit_tensor(req, target)
        return 0


class Planner(DefaultLoadPlanner):
    """DCP's load planner, with the read items of whole plain tensors made directly. A plain tensor whose
    checkpoint entry is one chunk of the same size (a DDP state, or any state saved and loaded at the
    same layout that is not a DTensor) is read as one item from offset 0; DCP's general overlap search
    (create_read_items_for_chunk_list) gives the same item at ~0.2 ms each, ~0.15 s of a gpt2 load's
    ~800 items. Everything else (DTensors, resharding, bytes) goes through DCP's planning unchanged."""

    def create_local_plan(self) -> LoadPlan:
        md = self.metadata.state_dict_metadata
        fast, rest = [], {}
        for fqn, obj in self.state_dict.items():
            m = md.get(fqn)
            if (type(obj) is torch.Tensor and isinstance(m, TensorStorageMetadata) and len(m.chunks) == 1
                    and obj.size() == m.size == m.chunks[0].sizes and not any(m.chunks[0].offsets)):
                zeros = torch.Size([0] * obj.dim())
                fast.append(ReadItem(type=LoadItemType.TENSOR, dest_index=MetadataIndex(fqn, zeros),
                                     dest_offsets=zeros, storage_index=MetadataIndex(fqn, zeros),
                                     storage_offsets=zeros, lengths=m.size))
            else:
                rest[fqn] = obj
        plan = create_default_local_load_plan(rest, self.metadata, not self.allow_partial_load)
        return LoadPlan(fast + plan.items, plan.storage_data, plan.planner_data)
