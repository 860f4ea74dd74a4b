"""The direct reader's building blocks, in one process: chunked hashing and the two-read zip parse."""
import io
import os

import torch

from shardlab.checkpoint import manifest as mf
from shardlab.checkpoint import reader


def test_chunked_hashing_hashes_every_byte_once_in_order(tmp_path, monkeypatch):
    # A chunk smaller than the views and not dividing them: the chunk loop's edges are exercised.
    monkeypatch.setattr(reader, "HASH_CHUNK", 7)
    data = os.urandom(1000)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    hasher = mf.new_hasher()
    with open(path, "rb", buffering=0) as f:
        walk = reader._Walk(f, hasher)
        walk.skip_to(13)
        view = memoryview(bytearray(500))
        walk.readinto(view)
        walk.finish()
    want = mf.new_hasher()
    want.update(data)
    assert bytes(view) == data[13:513] and walk.pos == len(data)
    assert hasher.hexdigest() == want.hexdigest()


def test_record_span_finds_the_tensor_bytes_of_a_large_and_a_small_item(tmp_path):
    # Large: data.pkl in the first read, the central directory in the last, the data between them.
    for n in (5, 100_000):
        t = torch.arange(n, dtype=torch.float32)
        buf = io.BytesIO()
        torch.save(t, buf)
        blob = b"x" * 37 + buf.getvalue()  # the item sits at an offset inside its shard file, as in DCP's
        path = tmp_path / f"item{n}.bin"
        path.write_bytes(blob)
        fd = os.open(path, os.O_RDONLY)
        try:
            at = reader.record_span(fd, 37, len(blob) - 37, torch.empty(n))
        finally:
            os.close(fd)
        assert at is not None
        assert blob[37 + at:37 + at + 4 * n] == t.numpy().tobytes()
