"""DCP's file reader without the extra copies, verifying the shard files as it reads them.

DCP's FileSystemReader torch.load()s every tensor item into a freshly allocated tensor (page faults, a
copy out of the page cache) and then copies that into the target: two copies, one of them faulting. In
the common case (the same layout: DDP, or the same sharding) a stored chunk is read whole into a
contiguous CPU target of the same dtype, and its bytes on disk are exactly the target's memory: a
torch.save zip stores each storage uncompressed as one record (`<archive>/data/0`). Then we read the
record's bytes straight into the target (one copy, into memory that the model already touched). Where
those bytes lie comes from the shard files' index (index.py) when the checkpoint has one, else from
`.metadata` and the item's zip head (zip_items.py). Anything else (resharding, narrowing, a transform,
another dtype; BYTE_IO items the index does not hold) takes DCP's path unchanged.

Verification overlaps the read: for the shard files this rank checks (`verify`: name -> manifest entry),
the reader walks the file once from start to end, hashing every byte as it passes (the records it loads
are hashed from the target's memory, the rest from a scratch buffer), so a verified load reads those
files once instead of twice. A mismatch is reported in `problems` after the load (the targets then hold
garbage: the caller must load something else into them or stop).
"""
from __future__ import annotations

import io
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from operator import itemgetter
from pathlib import Path

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index  # (where DCP's reader takes it from)
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint._nested_dict import flatten_state_dict
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import create_default_local_load_plan
from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, ReadItem
from torch.distributed.checkpoint.stateful import Stateful
from torch.futures import Future

from shardlab.checkpoint import manifest as mf
from shardlab.checkpoint.index import Index
from shardlab.checkpoint.walk import SCRATCH, Walk, bytes_of, pread_into, pread_parts
from shardlab.checkpoint.zip_items import Heads, plain_value, record_span

THREADS = 4  # at most, files read at once per rank (see file_threads())



class Stored:
    """A bytes item (DCP's BYTE_IO: a torch.save'd Python value, e.g. a hyperparameter) read in the walk;
    `data` holds its bytes once read, `path` where it goes in the state dict."""

    __slots__ = ("offset", "length", "path", "data")

    def __init__(self, offset: int, length: int, path: tuple):
        self.offset, self.length, self.path, self.data = offset, length, path, None


def file_threads() -> int:
    """Files a rank reads at once: one per core it has to itself (the CPUs it may run on over the ranks
    of its node), up to THREADS. The reads and the hash release the GIL, so a rank with cores to spare
    streams its files side by side; where the ranks already fill the cores (2 ranks on 2 cores) a second
    thread only adds its start and the switching between them."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    return max(1, min(THREADS, cores // max(local, 1)))


class Direct:
    """A plain tensor read straight from its record, found through `.metadata`: where its item (a torch.save
    zip, whose head says where the bytes start) lies in which file, and the target. (An item of the shard
    index, whose offset is the tensor's bytes themselves, is the pair (offset, the target tensor).)"""

    __slots__ = ("offset", "length", "target")

    def __init__(self, offset: int, length: int, target: torch.Tensor):
        self.offset, self.length, self.target = offset, length, target


def split_direct(state_dict: Mapping, take) -> dict:
    """The rest of `state_dict` (nested as it was, for DCP's planner) once `take` took the plain tensors read
    straight into place. `take(fqn, tensor)`: True when it recorded the tensor (as an (offset, item) pair, in
    the dict of shard file -> pairs it was made with: `from_metadata`, or the shard files' `index.Index.taker`). Those
    are read without DCP's planning: its generic flattening, planning and per-item lookups were ~0.1 s of a
    0.35 s gpt2 load at world 2, where the reads themselves take 0.23 s. Keys are DCP's: the path joined by
    dots."""
    def walk(node: Mapping, prefix: str) -> dict:
        rest = {}
        for k, v in node.items():
            if type(v) is torch.Tensor:  # (first: most leaves are; an ABC isinstance costs ~1 us)
                if take(f"{prefix}{k}", v):
                    continue
            elif type(v) is dict or isinstance(v, Mapping):  # (an ABC isinstance: only for the rest)
                sub = walk(v, f"{prefix}{k}.")
                if sub or not v:
                    rest[k] = sub if sub else v
                continue
            rest[k] = v
        return rest

    return walk(state_dict, "")


def from_metadata(metadata, direct: dict):
    """split_direct's `take` from DCP's `.metadata`, into `direct` (shard file -> [(offset, Direct)]): a contiguous CPU
    tensor whose entry is one whole chunk of its shape and dtype, stored without a transform."""
    md, storage = metadata.state_dict_metadata, metadata.storage_data

    def take(fqn: str, v: torch.Tensor) -> bool:
        m = md.get(fqn)
        if (v.device.type == "cpu" and v.is_contiguous() and isinstance(m, TensorStorageMetadata)
                and len(m.chunks) == 1 and m.properties.dtype == v.dtype
                and v.size() == m.size == m.chunks[0].sizes and not any(m.chunks[0].offsets)):
            info = storage.get(MetadataIndex(fqn, m.chunks[0].offsets))
            if info is not None and not info.transform_descriptors:
                direct.setdefault(info.relative_path, []).append((info.offset, Direct(info.offset, info.length, v)))
                return True
        return False

    return take


class Reader(FileSystemReader):
    """DCP's file reader that reads whole same-layout chunks straight into their targets and verifies the
    shard files named in `verify` while reading them. `direct_bytes` counts what took the direct path."""

    def __init__(self, path: Path, verify: dict[str, dict] | None = None, threads: int | None = None,
                 index: Index | None = None):
        super().__init__(str(path))
        self.threads = file_threads() if threads is None else threads
        self.index = index  # the shard files' index (index.py), when the checkpoint has one
        self.verify = dict(verify or {})
        self.problems: list[str] = []
        self.direct_bytes = 0
        self.direct: dict[str, list] = {}  # split's items (Direct, Stored), read with DCP's in one pass per file
        self._stored_into: dict | None = None  # where the Stored items go (split's rest)
        self._metadata = None

    def read_metadata(self, *args, **kwargs):
        """.metadata, unpickled once per load (the manager reads it before DCP does)."""
        if args or kwargs:  # a rank-local metadata file: DCP's fallback, not ours to cache
            return super().read_metadata(*args, **kwargs)
        if self._metadata is None:
            self._metadata = super().read_metadata()
        return self._metadata

    def split(self, tensors: dict) -> dict:
        """Set `direct` to what of `tensors` is read straight into place; returns the rest, for DCP's load.
        From the index when there is one: then `.metadata` is not read unless DCP needs more of it than
        the index holds (a tensor stored otherwise, say, resharded)."""
        self.direct = {}
        if self.index is None:
            return split_direct(tensors, from_metadata(self.read_metadata(), self.direct))
        rest = split_direct(tensors, self.index.taker(self.direct))
        if not rest or any(isinstance(v, Stateful) for v in rest.values()):
            return rest
        flat, mappings = flatten_state_dict(rest)
        found = self.index.stored(flat)
        if found is None:
            return rest
        # Only bytes items are left (DDP: the hyperparameters): read in the same pass and unpickled as DCP's
        # planner does (load_bytes: torch.load, set_element), without DCP's load around them.
        self._stored_into = rest
        for fqn, name, at, length in found:
            self.direct.setdefault(name, []).append((at, Stored(at, length, mappings[fqn])))
        return {}

    def stored_keys(self):
        """Every key the checkpoint holds (a container: `in`)."""
        return self.index.keys if self.index is not None else self.read_metadata().state_dict_metadata

    def stored_size(self, fqn: str) -> tuple:
        """The shape of a whole plain tensor of the checkpoint."""
        if self.index is not None and fqn in self.index.tensors:
            return self.index.size(fqn)
        return tuple(self.read_metadata().state_dict_metadata[fqn].size)

    def read_direct(self) -> None:
        """Read `direct` (and verify), when nothing is left for DCP's planner."""
        self.storage_data = {}
        self.read_data(LoadPlan([]), None)
        if self._stored_into is not None:
            for items in self.direct.values():
                for _, d in items:
                    if type(d) is Stored:
                        plain, value = plain_value(bytes(d.data))
                        if not plain:
                            value = torch.load(io.BytesIO(d.data), weights_only=False)
                        set_element(self._stored_into, d.path, value)

    def read_data(self, plan, planner) -> Future:
        from shardlab.checkpoint.storage import injected_delay
        injected_delay("load")
        per_file: dict[str, list] = {}
        for req in plan.items:
            md = self.storage_data[req.storage_index]
            per_file.setdefault(md.relative_path, []).append((md.offset, req))
        for name, items in self.direct.items():
            per_file.setdefault(name, []).extend(items)
        names = sorted(set(per_file) | set(self.verify))
        jobs = [(n, sorted(per_file.get(n, []), key=itemgetter(0))) for n in names]
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
        """Read `reqs` ([(offset, item)], by offset) from file `name` in one forward pass (hashing it when it
        is to be verified); returns the bytes read straight into their targets."""
        path = Path(self.path) / name
        direct = 0
        entry = self.verify.get(name)
        algo = mf.entry_algo(entry) if entry is not None else None
        hasher = mf.new_hasher(algo) if algo is not None else None
        heads = Heads()
        with open(path, "rb", buffering=0) as f:
            walk = Walk(f, hasher) if hasher is not None else None
            parts = []  # (offset, view) of the index's items in a row, read together (read_parts, pread_parts)
            try:
                for at, req in reqs:
                    kind = type(req)
                    if kind is torch.Tensor:  # the shard index's item: its bytes at `at`
                        view = bytes_of(req)
                        parts.append((at, view))
                        direct += view.nbytes
                        continue
                    if kind is Stored:
                        req.data = bytearray(req.length)
                        parts.append((at, memoryview(req.data)))
                        continue
                    self._read_parts(f, walk, parts)
                    parts = []
                    if kind is Direct:
                        direct += self._read_direct(f, walk, req, heads)
                    else:
                        direct += self._read_item(f, walk, req, planner, heads)
                self._read_parts(f, walk, parts)
                if walk is not None:
                    walk.finish()
            except Exception:
                if walk is None:
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

    @staticmethod
    def _read_parts(f, walk: Walk | None, parts: list) -> None:
        if parts:
            if walk is not None:
                walk.read_parts(parts)
            else:
                pread_parts(f, parts, memoryview(bytearray(SCRATCH)))

    def _read_direct(self, f, walk: Walk | None, d: Direct, heads: Heads) -> int:
        """A split_direct item: its record's bytes straight into the target, or (a record laid out otherwise)
        DCP's way: torch.load the item's bytes and copy them in."""
        at = record_span(f.fileno(), d.offset, d.length, d.target, heads)
        if at is not None:
            return self._into(f, walk, d.offset + at, bytes_of(d.target))
        data = bytearray(d.length)
        self._into(f, walk, d.offset, memoryview(data))
        d.target.copy_(torch.load(io.BytesIO(data), map_location="cpu", weights_only=True))
        return 0

    @staticmethod
    def _into(f, walk: Walk | None, at: int, view: memoryview) -> int:
        """Read the file's bytes at `at` into `view`: through the walk (hashed) when it has not passed
        them; else (a file not verified here, or bytes passed already: a second request) a pread."""
        if walk is not None and at >= walk.pos:
            walk.skip_to(at)
            walk.readinto(view)
        else:
            pread_into(f, at, view)
        return view.nbytes

    def _read_item(self, f, walk: Walk | None, req, planner, heads: Heads | None = None) -> int:
        md = self.storage_data[req.storage_index]
        if req.type != LoadItemType.BYTE_IO and not md.transform_descriptors:
            target = planner.resolve_tensor(req).detach()
            if (type(target) is torch.Tensor and target.device.type == "cpu" and target.is_contiguous()
                    and all(o == 0 for o in req.storage_offsets) and tuple(req.lengths) == tuple(target.shape)):
                at = record_span(f.fileno(), md.offset, md.length, target, heads)
                if at is not None:
                    n = self._into(f, walk, md.offset + at, bytes_of(target))
                    planner.commit_tensor(req, target)
                    return n
        # DCP's path (FileSystemReader.read_data), on the item's bytes read once.
        data = bytearray(md.length)
        self._into(f, walk, md.offset, memoryview(data))
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
