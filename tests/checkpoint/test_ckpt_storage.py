"""The checkpoint save path after the speed work: the checksum computed while writing (overlapped with the
write in a helper thread) is the checksum of the file on disk (xxh3_128, sha256 alike); torch.save's CRC32
is off only while shard files are written, and such files load bit-exactly; a --quick `bench checkpoint`
writes its figures and a fixed-cost breakdown whose phases add up to the save."""
import hashlib
import os
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.utils.serialization import config as serialization_config

from shardlab.checkpoint import manifest as mf
from shardlab.checkpoint import storage


@pytest.mark.parametrize("algo", ["xxh3_128", "sha256"])
@pytest.mark.parametrize("hasher_on", [True, False])
@pytest.mark.parametrize("writeback", [storage.WRITEBACK_BYTES, 1])
def test_overlapped_hash_equals_the_hash_of_the_file_on_disk(tmp_path, monkeypatch, algo, hasher_on, writeback):
    from concurrent.futures import ThreadPoolExecutor

    import xxhash

    big = os.urandom(3 * storage.OVERLAP_MIN_BYTES + 17)  # hashed by the helper thread during the write
    tensor = torch.arange(storage.OVERLAP_MIN_BYTES, dtype=torch.float32)  # a tensor's memory, as torch.save passes it
    pieces = [b"header", big, memoryview(b"x" * 1000), tensor.numpy().data, b"", b"tail" * 3]
    path = tmp_path / "f.bin"
    timing = {}
    # writeback 1: the kernel is asked to start writing after every large write (the bytes and their hash
    # must be unaffected by it)
    monkeypatch.setattr(storage, "WRITEBACK_BYTES", writeback)
    with ThreadPoolExecutor(1) as hasher, open(path, "wb") as raw:
        stream = storage.HashingStream(raw, hasher if hasher_on else None, timing, algo)
        for p in pieces:
            assert stream.write(p) == memoryview(p).nbytes
        stream.close()
    on_disk = path.read_bytes()
    assert stream.size == len(on_disk)
    reference = {"xxh3_128": xxhash.xxh3_128, "sha256": hashlib.sha256}[algo](on_disk).hexdigest()
    assert stream.hash.hexdigest() == mf.hash_file(path, algo) == reference
    # the large buffers' path was taken (the small pieces are hashed without a clock)
    assert timing["fsync_s"] >= 0 and ("hash_wait_s" if hasher_on else "hash_inline_s") in timing
    if writeback == 1 and storage.start_writeback is not None:
        assert "writeback_s" in timing and stream._flushed_to > 0


def test_a_refused_early_write_out_is_not_asked_again_and_changes_no_byte(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(storage, "WRITEBACK_BYTES", 1)
    monkeypatch.setattr(storage, "start_writeback", lambda fd, offset, nbytes: calls.append(offset) or -1)
    path = tmp_path / "f.bin"
    with open(path, "wb") as raw:
        stream = storage.HashingStream(raw, None)
        for _ in range(3):
            stream.write(os.urandom(storage.OVERLAP_MIN_BYTES))
        stream.close()
    assert calls == [0]  # asked once, refused, never again for this file
    assert stream.size == path.stat().st_size and stream.hash.hexdigest() == mf.hash_file(path)


def test_writer_hashes_match_disk_crc_is_off_only_while_writing_and_files_load_exactly(tmp_path):
    state = {"big": torch.randn(600_000), "small": torch.arange(10), "nested": {"w": torch.randn(3, 4)}}
    writer = storage.Writer(tmp_path, fail=False)
    crc_before = serialization_config.save.compute_crc32
    dcp.save(state, storage_writer=writer, planner=storage.Planner("test-storage"), no_dist=True)
    assert serialization_config.save.compute_crc32 == crc_before  # restored
    assert writer.sync_files  # DCP's fsync stays on for .metadata
    assert writer.fs.hasher is None  # the helper thread is gone after the write
    shards = {n: e for n, e in writer.fs.entries.items() if n.endswith(".distcp")}
    assert shards
    for name, entry in shards.items():
        assert entry == mf.file_entry(tmp_path / name)
    loaded = {"big": torch.zeros(600_000), "small": torch.zeros(10, dtype=torch.long),
              "nested": {"w": torch.zeros(3, 4)}}
    dcp.load(loaded, checkpoint_id=str(tmp_path), no_dist=True)
    assert torch.equal(loaded["big"], state["big"]) and torch.equal(loaded["small"], state["small"])
    assert torch.equal(loaded["nested"]["w"], state["nested"]["w"])
    for key in ("write_start", "write_end", "finish_start", "finish_end"):
        assert key in writer.marks


def test_failed_write_restores_crc_and_stops_the_hasher(tmp_path):
    writer = storage.Writer(tmp_path, fail=True)
    with pytest.raises(CheckpointException, match="injected checkpoint write failure"):  # DCP's wrapper
        dcp.save({"t": torch.randn(10)}, storage_writer=writer, planner=storage.Planner("test-fail"), no_dist=True)
    assert serialization_config.save.compute_crc32 is True and writer.sync_files and writer.fs.hasher is None


def test_a_plan_that_writes_an_uncopied_tensor_is_refused(tmp_path):
    """An async save copies only what this rank wrote last time; if DCP's plan ever assigned it another
    tensor, writing it would read live state: the save is abandoned instead."""
    planner = storage.Planner("test-refuse", staged_only={"a"})
    with pytest.raises(CheckpointException, match="async copy does not hold"):
        dcp.save({"a": torch.ones(3), "b": torch.zeros(3)}, storage_writer=storage.Writer(tmp_path, fail=False),
                 planner=planner, no_dist=True)


def _async_copies_only_what_the_rank_writes(work):
    from shardlab import comm
    from shardlab.bench import checkpoint as bench
    from shardlab.checkpoint import state as st_mod
    from shardlab.checkpoint.hf import load_model_tensors

    tr = bench._trainer(Path(work), bench._overrides("tiny", 4))
    mgr, st = tr.ckpt, tr.state
    mgr.save(st, async_=False)  # the first save: now each rank knows which tensors DCP gave it
    assert mgr.wait() is None
    st.step += 1
    before = {k: v.clone() for k, v in tr.strategy.full_parameters().items()}
    mgr.save(st, async_=True)
    tr.train_step()  # the optimizer step waits for the copy; the checkpoint holds the state before it
    assert mgr.wait() is None, mgr.last_outcome
    staged, full = mgr.staged_bytes, bench._nbytes(st_mod.tensor_state(st))
    saved = load_model_tensors(mf.read_latest(mgr.dir))
    same = all(torch.equal(saved[n], v) for n, v in before.items())
    problems = mf.verify(mf.read_latest(mgr.dir))
    comm.barrier()
    mgr.close(st)
    return staged, full, same, problems


def test_async_save_copies_only_what_the_rank_writes(pool2, tmp_path):
    """Under DDP every rank holds every tensor but DCP writes each replicated one from one rank: the async
    copy holds about half of the state at world 2, and the checkpoint is still exactly the saved step's."""
    results = pool2.run(_async_copies_only_what_the_rank_writes, str(tmp_path), timeout=300)
    for staged, full, same, problems in results:
        assert 0 < staged < 0.75 * full
        assert same and problems == []
    assert sum(r[0] for r in results) == pytest.approx(results[0][1], rel=0.05)  # together: one copy


def test_bench_checkpoint_quick(pool2, tmp_path):
    from shardlab.bench import checkpoint

    doc = checkpoint.run(tmp_path, quick=True, pool=pool2)
    fig = doc["figures"]
    for name in ("save_bw_ratio", "save_fsync_ratio", "load_bw_ratio", "load_cpu_ratio", "async_block_ratio",
                 "save_fixed_ms"):
        assert fig[name] > 0 and fig[f"{name}_lo90"] <= fig[name] <= fig[f"{name}_hi90"]
    assert set(doc["verdicts"]) == {"save_bw_ratio", "load_bw_ratio", "async_block_ratio"}
    assert doc["load_avg"]["tiny"]["start"] >= 0
    fixed = [r for r in doc["rows"] if r["test"] == "fixed"]
    for r in fixed:  # the breakdown accounts for the whole save on rank 0
        parts = sum(r[f"rank0_{p}"] for p in checkpoint.PHASES)
        assert parts == pytest.approx(r["rank0_total_s"], rel=1e-6)
        assert min(r[f"rank0_{p}"] for p in checkpoint.PHASES if p != "other_s") >= 0
    assert "save_fixed_fsync_ms" in fig and "save_fixed_stage_ms" in fig
    assert "Fixed cost of a save" in (tmp_path / "REPORT.md").read_text()
    assert not (tmp_path / "work").exists()  # what it wrote is deleted


@pytest.mark.parametrize("algo", ["xxh3_128", "sha256"])
def test_new_and_old_style_manifests_verify_and_catch_a_flipped_byte(tmp_path, algo):
    """New checkpoints record xxh3_128; those written before record sha256 and keep verifying with it."""
    files = {".metadata": b"m" * 100, "train_state.json": b"{}", "__0_0.distcp": os.urandom(3 << 20)}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    entries = {n: {"size": len(d), algo: mf.hash_file(tmp_path / n, algo)} for n, d in files.items()}
    if algo == mf.CHECKSUM:
        assert entries == {n: mf.file_entry(tmp_path / n) for n in files}  # what a save records today
    else:  # exactly what the manifest of an older checkpoint holds
        assert entries["__0_0.distcp"]["sha256"] == hashlib.sha256(files["__0_0.distcp"]).hexdigest()
    mf.write_manifest(tmp_path, entries, step=1)
    assert mf.load_manifest(tmp_path)[1] is None and mf.verify(tmp_path) == []
    data = bytearray(files["__0_0.distcp"])
    data[len(data) // 2] ^= 0x01
    (tmp_path / "__0_0.distcp").write_bytes(bytes(data))
    assert mf.verify(tmp_path) == [f"{tmp_path / '__0_0.distcp'}: {algo} mismatch (the file is corrupt)"]


def test_manifest_entry_with_no_or_two_checksums_is_not_trusted(tmp_path):
    for name in (".metadata", "train_state.json"):
        (tmp_path / name).write_bytes(b"x")
    good = {"size": 1, "sha256": hashlib.sha256(b"x").hexdigest()}
    for bad in ({"size": 1}, {**good, "xxh3_128": "0" * 32}, {"size": 1, "xxh3_128": "0" * 64}):
        mf.write_manifest(tmp_path, {".metadata": good, "train_state.json": bad})
        manifest, problem = mf.load_manifest(tmp_path)
        assert manifest is None and "'train_state.json' has no valid size and checksum" in problem


def _save_then_read_latest(work):
    """A synchronous save returns on every rank only once the commit (rename, `latest`) is visible: rank 0's
    commit is slowed down, and rank 1 looks right after its save() returns. Then a load of that checkpoint
    reads the shard bytes straight into the live tensors and restores them exactly."""
    from shardlab import comm
    from shardlab.bench import checkpoint as bench
    from shardlab.checkpoint import manager as manager_mod

    tr = bench._trainer(Path(work), bench._overrides("tiny", 4))
    mgr, st = tr.ckpt, tr.state
    seen = []
    write_latest = manager_mod.mf.write_latest

    def slow_write_latest(*args):  # widen the window in which a missing barrier would show
        import time
        time.sleep(0.5)
        write_latest(*args)
    for step in (1, 2):
        st.step = step
        manager_mod.mf.write_latest = slow_write_latest if comm.rank() == 0 else write_latest
        try:
            mgr.save(st, async_=False)
        finally:
            manager_mod.mf.write_latest = write_latest
        latest = mf.read_latest(mgr.dir)
        seen.append((latest.name if latest else None, mf.read_manifest(latest) is not None if latest else False))
    saved = {k: v.clone() for k, v in tr.strategy.full_parameters().items()}
    tr.train_step()  # move the live state away from the checkpoint
    found = mgr.load_first("latest", st)
    same = all(torch.equal(saved[k], v) for k, v in tr.strategy.full_parameters().items())
    comm.barrier()
    mgr.close(st)
    return seen, found[1] if found else None, same, mgr.load_timing["direct_bytes"], bench._nbytes(saved)


def test_sync_save_returns_after_the_commit_is_visible_and_loads_directly(pool2, tmp_path):
    results = pool2.run(_save_then_read_latest, str(tmp_path), timeout=300)
    for seen, step, same, direct, param_bytes in results:
        assert seen == [("step_000001", True), ("step_000002", True)]
        assert step == 2 and same
        assert direct > 2 * param_bytes  # under DDP every rank reads model and AdamW state straight in


def test_the_tokenizer_files_are_durable_before_the_manifest_lists_them(tmp_path, monkeypatch):
    """rank 0's small files: train_state.json (written atomically, fsynced) and the tokenizer a library writes,
    whose files and directory entries are fsynced before the commit's manifest names them."""
    import types

    from shardlab.checkpoint import manager, manifest as mf

    synced = []
    real = os.fsync
    monkeypatch.setattr(mf.os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))

    class Tok:
        def save(self, d):
            (d / "sub").mkdir(parents=True)
            (d / "vocab.json").write_text("{}")
            (d / "sub" / "merges.txt").write_text("a b")

    fake = types.SimpleNamespace(tokenizer=Tok())
    manager.CheckpointManager._write_small(fake, tmp_path, {"step": 1})
    tok = tmp_path / "tokenizer"
    for p in (tmp_path / "train_state.json.partial", tok / "vocab.json", tok / "sub" / "merges.txt", tok, tok / "sub"):
        assert str(p) in synced, (p, synced)
