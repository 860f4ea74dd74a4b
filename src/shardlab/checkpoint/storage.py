"""DCP storage pieces for the save path: a file writer that hashes while writing (so the manifest needs
no second pass over the files), the failure drill, and a planner with DCP's plan cache on.

Where a large save's seconds went before this file was tuned (gpt2 preset, world 2, ~780 MB per rank,
cProfile of rank 0): the kernel's write into the page cache 55%, sha256 15%, the CRC32 that torch.save
computes for every zip record 9%, fsync 8%, waiting for the other rank 7%. Hence, here:
- the checksum (xxh3_128 since it replaced sha256, see manifest.py) runs in a helper thread *while* the
  same buffer is written (the hash and the write system call both release the GIL), so a large write
  costs max(write, hash) instead of their sum; no copy is made: `write` returns only when both are done
  with the caller's buffer;
- torch.save's CRC32 is off while shard files are written: the manifest's checksum of every file covers
  the same bytes (and is what resume verifies); torch.load reads such records (DCP's reader does not
  check zip CRCs);
- the shard files are fsynced by us at close (DCP's fsync stays on for its .metadata), so the time is
  known; one file per rank, as before;
- every 32 MiB the stream asks the kernel to start writing what it has written (sync_file_range,
  asynchronous). The dirty pages used to wait for the fsync at close: the disk idled while the rank
  serialised, then the rank idled while the disk wrote ~0.4 s of it. Now the two overlap and the fsync
  waits for the last few MiB (docs/checkpoint.md, "The disk's write-out started early").
"""
from __future__ import annotations

import contextlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from torch.distributed.checkpoint import DefaultSavePlanner, FileSystemWriter
from torch.distributed.checkpoint.planner import WriteItemType
from torch.distributed.checkpoint.filesystem import DEFAULT_SUFFIX, FileSystem
from torch.utils.serialization import config as serialization_config

from shardlab.checkpoint import index
from shardlab.checkpoint import manifest as mf

# Drill: make rank R's storage write fail at step S ("R@S"), as a full disk or a dead NFS mount would.
FAIL_ENV = "SHARDLAB_CKPT_FAIL"
# "save|load[@STEP]:SECONDS:MARKER": the first rank to write (save) or read (load) a checkpoint (of step
# STEP or later) creates the file MARKER and sleeps SECONDS, once per marker: the window in which the
# chaos drills signal (bench/chaos.py)
DELAY_ENV = "SHARDLAB_CKPT_DELAY"


def _step_of(path) -> int:
    digits = "".join(c for c in Path(str(path)).name.split(".")[0] if c.isdigit())
    return int(digits) if digits else 0


def injected_delay(kind: str, step: int = 0) -> None:
    spec = os.environ.get(DELAY_ENV, "")
    if not spec.startswith(kind):
        return
    what, seconds, marker = spec.split(":", 2)
    if what.split("@")[0] != kind or step < int(what.partition("@")[2] or 0):
        return
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    time.sleep(float(seconds))

# Below this a buffer is hashed inline: handing it to the helper thread costs more than hashing it.
OVERLAP_MIN_BYTES = 1 << 20
# Every this many bytes written, the stream asks the kernel to start writing them to the disk (see
# `_writeback`), so that the disk works while the rest of the file is being serialised.
WRITEBACK_BYTES = 32 << 20


def _sync_file_range():
    """Linux's sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE) (Python has no binding), or None
    where it is missing (then the fsync at close does all the writing, as before)."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    write_only = 2  # SYNC_FILE_RANGE_WRITE: start writing the dirty pages, do not wait for them
    return lambda fd, offset, nbytes: fn(fd, offset, nbytes, write_only)


start_writeback = _sync_file_range()


class HashingStream:
    """A DCP output file that computes its checksum from the bytes as they are written, so the manifest
    needs no second pass over the file. DCP appends only (write, tell); anything else, a seek
    included, is not offered, so a future DCP that rewrote a file would fail loudly, not hash wrongly.
    Large buffers are hashed by `hasher` (one thread: updates stay in order) during their write.

    Every WRITEBACK_BYTES the stream starts the kernel's write-out of what it has written so far
    (sync_file_range, asynchronous): without it the dirty pages sit in memory until the fsync at close,
    and the disk idles while the rank serialises; with it the fsync at close waits only for the tail.
    It is a head start, not a guarantee: durability is still the fsync at close."""

    def __init__(self, raw, hasher: ThreadPoolExecutor | None = None, timing: dict | None = None,
                 algo: str = mf.CHECKSUM):
        self.raw, self.algo, self.hash, self.size = raw, algo, mf.new_hasher(algo), 0
        self.hasher = hasher
        self.timing = timing if timing is not None else {}
        self._flushed_to = 0  # where the last write-out request ended

    def _add(self, key: str, seconds: float) -> None:
        self.timing[key] = self.timing.get(key, 0.0) + seconds

    def write(self, b) -> int:
        view = memoryview(b).cast("B")
        if view.nbytes < OVERLAP_MIN_BYTES:
            # A zip record's header, a pickle, padding (~35 per tensor): no clock, no bookkeeping beyond
            # the hash; their time is counted as writing.
            n = self.raw.write(view)
            self.hash.update(view[:n])  # the bytes that reached the file
            self.size += n
            return n
        t0 = time.perf_counter()
        if self.hasher is None:
            n = self.raw.write(view)
            t1 = time.perf_counter()
            self.hash.update(view[:n])
            self._add("hash_inline_s", time.perf_counter() - t1)
        else:
            pending = self.hasher.submit(self.hash.update, view)
            n = self.raw.write(view)
            t1 = time.perf_counter()
            pending.result()  # the caller's buffer must not be released before the hash has read it
            self._add("hash_wait_s", time.perf_counter() - t1)  # hashing that the write did not hide
            if n != view.nbytes:  # a buffered file writes all or raises; anything else would hash wrongly
                raise OSError(f"short write: {n} of {view.nbytes} bytes")
        self.size += n
        self._add("write_s", time.perf_counter() - t0)
        if self.size - self._flushed_to >= WRITEBACK_BYTES:
            self._writeback()
        return n

    def _writeback(self) -> None:
        """Start the disk write of the bytes written since the last request (the few still in the
        BufferedWriter's buffer, if any, go with the next one or with the fsync)."""
        if start_writeback is None:
            return
        t0 = time.perf_counter()
        if start_writeback(self.raw.fileno(), self._flushed_to, self.size - self._flushed_to) != 0:
            # a file system that refuses it: no more requests for this file (the fsync at close does it all)
            self._flushed_to = float("inf")
        else:
            self._flushed_to = self.size
        self._add("writeback_s", time.perf_counter() - t0)

    def tell(self) -> int:
        return self.raw.tell()

    def fileno(self) -> int:
        return self.raw.fileno()

    def flush(self) -> None:
        self.raw.flush()

    def close(self) -> None:
        """Durable before it counts as written: flush and fsync (timed), then close."""
        if not self.raw.closed:
            self.raw.flush()
            t0 = time.perf_counter()
            os.fsync(self.raw.fileno())
            self._add("fsync_s", time.perf_counter() - t0)
        self.raw.close()


class HashingFileSystem(FileSystem):
    """DCP's local file system; records {file name: manifest entry} of every file it writes, and the
    seconds spent writing, hashing and fsyncing them (`timing`)."""

    def __init__(self):
        super().__init__()
        self.entries: dict[str, dict] = {}
        self.timing: dict[str, float] = {}
        self.hasher: ThreadPoolExecutor | None = None

    @contextlib.contextmanager
    def create_stream(self, path, mode):
        with super().create_stream(path, mode) as raw:
            if mode != "wb" or not str(path).endswith(DEFAULT_SUFFIX):  # .metadata: DCP fsyncs it, the commit hashes it
                yield raw
                return
            if self.hasher is None:
                self.hasher = ThreadPoolExecutor(1, thread_name_prefix="ckpt-hash")
            stream = HashingStream(raw, self.hasher, self.timing)
            yield stream
            stream.close()  # (DCP closes it already; a second close is a no-op)
            self.entries[Path(path).name] = {"size": stream.size, stream.algo: stream.hash.hexdigest()}

    def shutdown(self) -> None:
        if self.hasher is not None:
            self.hasher.shutdown()
            self.hasher = None


@contextlib.contextmanager
def crc32_off():
    """torch.save without its per-record CRC32 (the checksum of the whole file replaces it). The switch is
    process-wide: a torch.save elsewhere in this process meanwhile also writes none (torch.load reads
    such files all the same); shardlab itself calls torch.save nowhere else."""
    saved = serialization_config.save.compute_crc32
    serialization_config.save.compute_crc32 = False
    try:
        yield
    finally:
        serialization_config.save.compute_crc32 = saved


class Writer(FileSystemWriter):
    """DCP's file writer (one file per rank) that hashes while writing, plus the failure drill.
    An exception here is caught by DCP and re-raised on every rank as a CheckpointException naming the
    rank, so no rank is left waiting. `marks` records when DCP entered and left each phase (perf_counter)."""

    def __init__(self, path: Path, fail: bool):
        super().__init__(path, sync_files=True, single_file_per_rank=True)
        self.fs = HashingFileSystem()
        self._fail = fail
        self.marks: dict[str, float] = {}

    def write_data(self, plan, planner):
        self.marks["write_start"] = time.perf_counter()
        try:
            if self._fail:
                raise OSError(f"injected checkpoint write failure ({FAIL_ENV})")
            injected_delay("save", _step_of(self.path))
            # Shard files are fsynced by HashingStream.close (timed there); DCP's own fsync is for .metadata.
            self.sync_files = False
            with crc32_off():
                fut = super().write_data(plan, planner)  # synchronous: the future is already complete
            # Each shard file's index (where its tensors' bytes lie), so that a load need not find them.
            index.write(self.path, index.build(self.path, plan.items, fut.value()))
            return fut
        finally:
            self.sync_files = True
            self.fs.shutdown()
            self.marks["write_end"] = time.perf_counter()

    def finish(self, metadata, results) -> None:
        self.marks["finish_start"] = time.perf_counter()
        super().finish(metadata, results)
        self.marks["finish_end"] = time.perf_counter()


class Planner(DefaultSavePlanner):
    """DCP's default planner with its plan cache on: from the second save of the same state-dict layout,
    each rank sends an empty "unchanged" plan instead of its full plan, and the coordinator reuses the
    global plan and metadata instead of pickling, exchanging and deduplicating them again. DCP keys that
    cache by planner class, process-wide; a key per manager keeps two managers in one process (tests)
    from comparing against each other's plans."""

    def __init__(self, cache_key: str, staged_only: set | None = None):
        super().__init__(enable_plan_caching=True)
        self._cached_plans_key = cache_key
        self.staged_only = staged_only  # an async save copied only these keys (state.stage's `only`)
        self.written: set | None = None  # the keys of the items this rank writes, once planned

    def finish_plan(self, new_plan):
        plan = super().finish_plan(new_plan)
        self.written = {item.index.fqn for item in plan.items}
        if self.staged_only is not None:
            missing = sorted(item.index.fqn for item in plan.items
                             if item.type != WriteItemType.BYTE_IO and item.index.fqn not in self.staged_only)
            if missing:  # writing them would read live tensors that the optimizer may be changing
                raise RuntimeError(f"DCP assigned this rank {len(missing)} tensor(s) its async copy does not hold "
                                   f"(e.g. {missing[0]}): the plan changed since the last save; the next async "
                                   "save copies every tensor")
        return plan
