"""DCP storage pieces for the save path: a file writer that hashes while writing (so the manifest needs
no second pass over the files), the failure drill, and a planner with DCP's plan cache on."""
from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

from torch.distributed.checkpoint import DefaultSavePlanner, FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem

# Drill: make rank R's storage write fail at step S ("R@S"), as a full disk or a dead NFS mount would.
FAIL_ENV = "SHARDLAB_CKPT_FAIL"


class HashingStream:
    """A DCP output file that computes its sha256 from the bytes as they are written, so the manifest
    needs no second pass over the file. DCP appends only (write, tell); anything else, a seek
    included, is not offered, so a future DCP that rewrote a file would fail loudly, not hash wrongly."""

    def __init__(self, raw):
        self.raw, self.sha, self.size = raw, hashlib.sha256(), 0

    def write(self, b) -> int:
        n = self.raw.write(b)
        self.sha.update(memoryview(b).cast("B")[:n])  # the bytes that reached the file
        self.size += n
        return n

    def tell(self) -> int:
        return self.raw.tell()

    def fileno(self) -> int:
        return self.raw.fileno()

    def flush(self) -> None:
        self.raw.flush()

    def close(self) -> None:
        self.raw.close()


class HashingFileSystem(FileSystem):
    """DCP's local file system; records {file name: manifest entry} of every file it writes."""

    def __init__(self):
        super().__init__()
        self.entries: dict[str, dict] = {}

    @contextlib.contextmanager
    def create_stream(self, path, mode):
        with super().create_stream(path, mode) as raw:
            if mode != "wb":
                yield raw
                return
            stream = HashingStream(raw)
            yield stream
            self.entries[Path(path).name] = {"size": stream.size, "sha256": stream.sha.hexdigest()}


class Writer(FileSystemWriter):
    """DCP's file writer (fsync on, one file per rank) that hashes while writing, plus the failure drill.
    An exception here is caught by DCP and re-raised on every rank as a CheckpointException naming the
    rank, so no rank is left waiting."""

    def __init__(self, path: Path, fail: bool):
        super().__init__(path, sync_files=True, single_file_per_rank=True)
        self.fs = HashingFileSystem()
        self._fail = fail

    def write_data(self, plan, planner):
        if self._fail:
            raise OSError(f"injected checkpoint write failure ({FAIL_ENV})")
        return super().write_data(plan, planner)


class Planner(DefaultSavePlanner):
    """DCP's default planner with its plan cache on: from the second save of the same state-dict layout,
    each rank sends an empty "unchanged" plan instead of its full plan, and the coordinator reuses the
    global plan and metadata instead of pickling, exchanging and deduplicating them again. DCP keys that
    cache by planner class, process-wide; a key per manager keeps two managers in one process (tests)
    from comparing against each other's plans."""

    def __init__(self, cache_key: str):
        super().__init__(enable_plan_caching=True)
        self._cached_plans_key = cache_key
