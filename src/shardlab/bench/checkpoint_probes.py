"""One rank's timed operations for `bench checkpoint`: its trainer's save and load, and the plain write and
read of the same bytes that they are held against (the baselines: what the same writers and readers do
with the same bytes and nothing else). Each runs from a barrier to a barrier, so rank 0's clock covers
every rank."""
from __future__ import annotations

import os
import time
from pathlib import Path

CHUNK = 8 << 20  # the plain write's and the streamed read's buffer


def _plain_write(path: Path, nbytes: int, buf: bytes, early: bool = True) -> None:
    """Write `nbytes` (repeats of `buf`) sequentially to a new file and fsync it. `early`: ask the kernel to
    start writing every WRITEBACK_BYTES as they are written, as the save's stream does (checkpoint/storage.py);
    without it the whole file waits in the page cache for the fsync, which on this machine's disk took ~1.5x
    as long (the plain write of the figures before 2026-12-06, now `save_fsync_ratio`)."""
    from shardlab.checkpoint import storage

    with open(path, "wb", buffering=0) as f:
        left, done, started = nbytes, 0, 0
        while left > 0:
            n = f.write(buf[:min(left, len(buf))])
            left, done = left - n, done + n
            if early and storage.start_writeback is not None and done - started >= storage.WRITEBACK_BYTES:
                storage.start_writeback(f.fileno(), started, done - started)
                started = done
        os.fsync(f.fileno())


def _plain_read(paths: list[Path], buf: bytearray) -> int:
    """Read every file once, sequentially, into one reused buffer; returns the bytes read."""
    view, total = memoryview(buf), 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while n := f.readinto(view):
                total += n
    return total


def _plain_read_resident(paths: list[Path], view: memoryview) -> int:
    """Read every file once, each into its own place in `view` (as large as all of them together): the
    bytes end up in memory, as a load leaves them; returns the bytes read."""
    total = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while n := f.readinto(view[total:]):
                total += n
    return total


class Probes:
    """One rank's timed operations: its trainer's save and load, and the plain write and read of the same
    bytes. Each runs from a barrier to a barrier, so rank 0's clock covers every rank."""

    def __init__(self, work: Path, tr):
        self.work, self.mgr, self.st = work, tr.ckpt, tr.state
        self.buf = os.urandom(CHUNK)  # incompressible; made once, outside the timing
        self.readbuf = bytearray(CHUNK)
        self.resident = None  # the resident buffer of the plain read, made (and touched) once, outside the timing

    def save(self) -> tuple[float, dict]:
        """A synchronous save; returns its manifest (which files, how many bytes)."""
        from shardlab import comm
        from shardlab.checkpoint import manifest as mf

        comm.barrier()
        t0 = time.perf_counter()
        self.mgr.save(self.st, async_=False)  # returns once committed
        comm.barrier()
        dt = time.perf_counter() - t0
        assert self.mgr.last_outcome is None, self.mgr.last_outcome
        self.mgr.wait()  # retention of older checkpoints: not part of the save, must not overlap what comes next
        comm.barrier()
        return dt, mf.read_manifest(mf.read_latest(self.mgr.dir))

    @staticmethod
    def my_bytes(manifest: dict) -> int:
        """The bytes this rank wrote in that save: its shard files; rank 0 also the files it wrote alone."""
        from shardlab import comm

        files = manifest["files"]
        if comm.rank() == 0:
            return sum(e["size"] for n, e in files.items() if n.startswith("__0_") or not n.startswith("__"))
        return sum(e["size"] for n, e in files.items() if n.startswith(f"__{comm.rank()}_"))

    def plain_write(self, nbytes: int, early: bool = True) -> float:
        from shardlab import comm

        path = self.work / f"plain_{comm.rank()}.bin"
        comm.barrier()
        t0 = time.perf_counter()
        _plain_write(path, nbytes, self.buf, early)
        comm.barrier()
        dt = time.perf_counter() - t0
        path.unlink()
        return dt

    def load(self, path: Path) -> tuple[float, dict]:
        """Verify (each rank a share of the files) and load, as a resume does; (seconds, phases)."""
        from shardlab import comm

        # A resumed run's fresh optimizer holds the schedule's first learning rate, not the checkpoint's: make
        # the live one differ, so this load applies the hyperparameters as a resume does (loading into a state
        # that already equals the checkpoint's lets the in-place path skip torch's optimizer load).
        for group in getattr(self.st.optimizer, "param_groups", ()):
            group["lr"] = group["lr"] * 0.5 + 1e-9
        comm.barrier()
        t0 = time.perf_counter()
        c0 = time.process_time()
        self.mgr.load_first(str(path), self.st)
        cpu = time.process_time() - c0
        comm.barrier()
        t2 = time.perf_counter()
        timing = self.mgr.load_timing
        return t2 - t0, {"read_s": timing["read_s"], "apply_s": timing["apply_s"],
                         "direct_bytes": timing["direct_bytes"], "cpu_s": cpu}

    def plain_read(self, path: Path, stream: bool) -> float:
        """Seconds, barrier to barrier; `cpu_s` afterwards: this process's CPU time for the read alone."""
        from shardlab import comm

        files = sorted(p for p in path.iterdir() if p.is_file())
        if not stream and self.resident is None:
            import torch

            self.resident = memoryview(torch.zeros(sum(p.stat().st_size for p in files), dtype=torch.uint8).numpy())
        comm.barrier()
        t0 = time.perf_counter()
        c0 = time.process_time()
        if stream:
            _plain_read(files, self.readbuf)
        else:
            _plain_read_resident(files, self.resident)
        self.cpu_s = time.process_time() - c0
        comm.barrier()
        return time.perf_counter() - t0
