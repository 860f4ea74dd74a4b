"""Reading a checkpoint's file forward, every byte hashed once as it passes, straight into the tensors.

A verified load reads each shard file once (reader.py decides what goes where): `Walk` reads the file from its
start to its end, the bytes of the records that are loaded straight into their targets' memory, the bytes
between them into a scratch buffer, each piece hashed right after its read while it is still in the CPU
cache; `pread_parts` reads the records of a file that another rank verifies, without hashing. Both take
several small records and the gaps between them in one readv / preadv.
"""
from __future__ import annotations

import ctypes
import os

import torch

# Bytes read (and hashed) at a time between the records we load and after the last: as HASH_CHUNK, so
# that they too are hashed while in the CPU cache (and the buffer costs no 8 MiB allocation per file).
SCRATCH = 256 << 10
assert SCRATCH >= 256 << 10  # (Walk.read_parts: a readv's gaps, HASH_CHUNK bytes at most, fit in it)
# Bytes read, then hashed at once while in the CPU cache. 256 KiB: with two ranks on two cores, a gpt2 load's
# reads and hashes into the live tensors ran at 0.92 of a plain read with 128-512 KiB, 0.85 with 1-2 MiB (the
# chunk leaves the 2 MiB L2 before it is hashed) and 0.83 with 64 KiB (system calls).
HASH_CHUNK = 256 << 10


def bytes_of(t: torch.Tensor) -> memoryview:
    """A writable view of a contiguous CPU tensor's memory, whatever its dtype (through ctypes: a seventh
    of the time of a numpy view; the caller holds `t` while it uses the view)."""
    n = t.numel() * t.element_size()
    if n == 0:
        return memoryview(bytearray())
    return memoryview((ctypes.c_char * n).from_address(t.data_ptr())).cast("B")


def pread_into(f, at: int, view: memoryview) -> None:
    """`view` <- the file's bytes at `at` (a pread: the file position, the walk's, does not move)."""
    fd, got = f.fileno(), 0
    while got < view.nbytes:
        n = os.preadv(fd, [view[got:]], at + got)
        if not n:
            raise OSError(f"{f.name}: ends early, at byte {at + got} (the file is truncated)")
        got += n


def _fill(f, bufs: list, total: int, at: int | None) -> int:
    """Fill `bufs` (`total` bytes together) from file `f`: one readv at its position (`at` None), or one
    preadv at `at`, and more only when the system returns less. Returns the bytes read: fewer than
    `total` only where the file ends."""
    fd, got = f.fileno(), 0
    while True:
        n = os.readv(fd, bufs) if at is None else os.preadv(fd, bufs, at + got)
        got += n
        if got == total or not n:
            return got
        i = 0
        while n >= bufs[i].nbytes:
            n -= bufs[i].nbytes
            i += 1
        bufs = [bufs[i][n:], *bufs[i + 1:]]


def pread_parts(f, parts: list, scratch: memoryview) -> None:
    """Read `parts` ([(offset, view)], by offset) with preads, the small ones near each other together: one
    preadv fills several views and the bytes between them (into `scratch`, thrown away) up to HASH_CHUNK
    bytes of the file: a system call per item was ~1/3 of the CPU a gpt2 load spends besides the copy."""
    i, count = 0, len(parts)
    while i < count:
        at, view = parts[i]
        bufs, end, i = [view], at + view.nbytes, i + 1
        while i < count and len(bufs) < _IOV:
            nxt, v = parts[i]
            if nxt < end or nxt + v.nbytes - at > HASH_CHUNK or nxt - end > scratch.nbytes:
                break
            if nxt > end:
                bufs.append(scratch[:nxt - end])
            bufs.append(v)
            end, i = nxt + v.nbytes, i + 1
        got = _fill(f, bufs, end - at, at)
        if got < end - at:
            raise OSError(f"{f.name}: ends early, at byte {at + got} (the file is truncated)")


_IOV = 512  # buffers per readv / preadv at most (the system's IOV_MAX is 1024)


class Walk:
    """Reads one file forward from the start, every byte it passes hashed, in order. The file's position
    is always `pos` (the reads that are not the walk's are preads)."""

    def __init__(self, f, hasher):
        self.f, self.hasher, self.pos = f, hasher, 0
        self.scratch = memoryview(bytearray(SCRATCH))

    def read_parts(self, parts: list) -> None:
        """Read `parts` ([(offset, view)], by offset) in the walk, hashing every byte passed: each readv fills
        the next HASH_CHUNK bytes of the file (or fewer), however many views and gaps between them they
        span (a gap's bytes into the scratch buffer, apart from the other gaps of the same readv), and its
        pieces are hashed in order right after it. A part the walk has passed already is preaded."""
        batch, size, used = [], 0, 0  # the next readv's pieces, their bytes, the scratch they use
        end = self.pos  # where the batch ends in the file
        for at, view in parts:
            if at < end:
                pread_into(self.f, at, view)
                continue
            for buf, total in ((None, at - end), (view, view.nbytes)):
                off = 0
                while off < total:
                    if size == HASH_CHUNK or len(batch) == _IOV:
                        self._readv(batch, size)
                        batch, size, used = [], 0, 0
                    k = min(HASH_CHUNK - size, total - off)
                    if buf is None:
                        batch.append(self.scratch[used:used + k])
                        used += k
                    else:
                        batch.append(buf[off:off + k] if k != total else buf)
                    size, off = size + k, off + k
                end += total
        if batch:
            self._readv(batch, size)

    def _readv(self, pieces: list, size: int) -> None:
        got = _fill(self.f, list(pieces), size, None)
        update, left = self.hasher.update, got
        for piece in pieces:  # (what was read, where the file ends early: finish() hashes on from there)
            if left < piece.nbytes:
                update(piece[:left])
                break
            update(piece)
            left -= piece.nbytes
        self.pos += got
        if got < size:
            raise OSError(f"{self.f.name}: ends early, at byte {self.pos} (the file is truncated)")

    def readinto(self, view: memoryview) -> None:
        # Read in chunks and hash each one at once, while it is still in the CPU cache: hashing a whole
        # large tensor after its read fetched it from DRAM a second time (0.055 s of a 0.40 s gpt2 load).
        readinto, update, total = self.f.readinto, self.hasher.update, view.nbytes
        got = 0
        while got < total:
            chunk = view[got:got + HASH_CHUNK]
            n = readinto(chunk)
            if not n:
                raise OSError(f"{self.f.name}: ends early, at byte {self.pos} (the file is truncated)")
            update(chunk if n == chunk.nbytes else chunk[:n])
            got += n
            self.pos += n

    def skip_to(self, offset: int) -> None:
        while self.pos < offset:
            self.readinto(self.scratch[:min(SCRATCH, offset - self.pos)])

    def finish(self) -> None:
        """Hash what is left of the file."""
        readinto, update, scratch = self.f.readinto, self.hasher.update, self.scratch
        while n := readinto(scratch):
            update(scratch[:n])
            self.pos += n
