"""Data package: tokenizer, corpora, split, batching and the world-size-independent global sampler."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shardlab.data import (DataError, GlobalSampler, TokenDataset, check_vocab, decode, encode,
                           epoch_permutation, get_batch, load_tokens, split_train_val, val_indices_for_rank)
from shardlab.data import sources

WORLDS = [1, 2, 3, 4]


# ---- tokenizer ----------------------------------------------------------------------------------

@given(st.text())
def test_tokenizer_round_trip(text):
    text = text.replace("\0", "")  # NUL is the bytes tokenizer's EOS id: dropped from a text (test_tokenizers.py)
    ids = encode(text)
    assert ids.dtype == np.uint16 and ids.ndim == 1
    assert len(ids) == len(text.encode("utf-8"))
    assert decode(ids) == text
    assert decode(torch.from_numpy(ids.astype(np.int64))) == text
    assert decode(ids.tolist()) == text


def test_tokenizer_bytes_and_bad_utf8():
    assert encode("aé").tolist() == [97, 0xC3, 0xA9]
    assert decode([0xFF, 97]) == "\ufffda"  # invalid UTF-8 is replaced, not an exception
    with pytest.raises(ValueError):
        decode([256])


# ---- sampler ------------------------------------------------------------------------------------

def all_ranks_step(num_samples, gb, seed, W, state=None):
    """One sampler per rank (as W processes would have); returns them, optionally resumed from state."""
    samplers = [GlobalSampler(num_samples, gb, seed, W, r) for r in range(W)]
    if state is not None:
        for s in samplers:
            s.load_state_dict(state)
    return samplers


def run_steps(samplers, steps):
    """The global sequence of indices: per step, ranks' shares concatenated in rank order."""
    out = []
    for _ in range(steps):
        out.append([i for s in samplers for i in s.next_batch()])
    return out


@settings(max_examples=40, deadline=None)
@given(num_samples=st.integers(1, 300), per_rank=st.integers(1, 8), seed=st.integers(0, 2**31),
       W=st.sampled_from(WORLDS))
def test_every_index_once_per_epoch(num_samples, per_rank, seed, W):
    gb = per_rank * W
    if gb > num_samples:
        with pytest.raises(DataError, match="fewer than one global batch"):
            GlobalSampler(num_samples, gb, seed, W, 0)
        return
    samplers = all_ranks_step(num_samples, gb, seed, W)
    steps = num_samples // gb
    for epoch in range(2):
        assert all(s.epoch == epoch for s in samplers)
        seen = [i for batch in run_steps(samplers, steps) for i in batch]
        assert len(seen) == len(set(seen)) == steps * gb            # no duplicates
        assert set(seen) <= set(range(num_samples))
        # No gaps: only the documented remainder (< one global batch) is dropped, and it is exactly
        # the tail of this epoch's permutation.
        dropped = set(range(num_samples)) - set(seen)
        assert dropped == set(epoch_permutation(num_samples, seed, epoch)[steps * gb:].tolist())
        assert len(dropped) == num_samples % gb
        assert samplers[0].samples_seen == (epoch + 1) * steps * gb


@settings(max_examples=40, deadline=None)
@given(num_samples=st.integers(12, 200), gb_units=st.integers(1, 3), seed=st.integers(0, 2**31),
       steps=st.integers(1, 40))
def test_same_global_order_at_any_world_size(num_samples, gb_units, seed, steps):
    gb = 12 * gb_units  # divisible by 1, 2, 3 and 4
    if gb > num_samples:
        return
    sequences = [run_steps(all_ranks_step(num_samples, gb, seed, W), steps) for W in WORLDS]
    assert all(seq == sequences[0] for seq in sequences)
    # ... and it is what the sampler says the global batch of each step is.
    ref = GlobalSampler(num_samples, gb, seed)
    assert sequences[0] == [ref.global_batch_at(k) for k in range(steps)]


@settings(max_examples=40, deadline=None)
@given(num_samples=st.integers(12, 200), seed=st.integers(0, 2**31), split=st.integers(0, 30),
       total=st.integers(1, 30), W_before=st.sampled_from(WORLDS), W_after=st.sampled_from(WORLDS))
def test_resume_at_another_world_size_continues_the_sequence(num_samples, seed, split, total, W_before, W_after):
    gb = 12
    reference = run_steps(all_ranks_step(num_samples, gb, seed, 1), split + total)
    before = all_ranks_step(num_samples, gb, seed, W_before)
    first = run_steps(before, split)
    state = before[W_before - 1].state_dict()  # any rank's state: it is global
    assert all(s.state_dict() == state for s in before)
    assert set(state) == {"seed", "epoch", "cursor", "global_batch", "num_samples"}
    # The resumed job is built with a different seed: the state's seed must win.
    after = all_ranks_step(num_samples, gb, seed + 1, W_after, state=state)
    assert first + run_steps(after, total) == reference


def test_sampler_seed_changes_order_and_epochs_differ():
    a = GlobalSampler(100, 10, seed=0)
    b = GlobalSampler(100, 10, seed=1)
    assert a.global_batch_at(0) != b.global_batch_at(0)
    assert a.global_batch_at(0) != a.global_batch_at(a.steps_per_epoch)  # a new permutation each epoch
    # (seed, epoch) pairs do not collide the way seed + epoch would
    assert GlobalSampler(100, 10, seed=1).global_batch_at(0) != GlobalSampler(100, 10, seed=0).global_batch_at(10)


def test_sampler_rank_shares_are_contiguous_slices():
    samplers = all_ranks_step(50, 8, 3, 4)
    whole = samplers[0].global_batch_at(0)
    assert [s.next_batch() for s in samplers] == [whole[0:2], whole[2:4], whole[4:6], whole[6:8]]


def test_sampler_errors():
    with pytest.raises(DataError, match="multiple of the world size 3"):
        GlobalSampler(100, 8, 0, world_size=3, rank=0)
    with pytest.raises(DataError, match="outside"):
        GlobalSampler(100, 8, 0, world_size=2, rank=2)
    s = GlobalSampler(100, 8)
    with pytest.raises(DataError, match="global_batch=16 but this run has 8"):
        s.load_state_dict({**s.state_dict(), "global_batch": 16})
    with pytest.raises(DataError, match="num_samples=99"):
        s.load_state_dict({**s.state_dict(), "num_samples": 99})


@given(n=st.integers(0, 500), W=st.sampled_from(WORLDS), limit=st.none() | st.integers(1, 600))
def test_val_indices_cover_each_index_once(n, W, limit):
    shares = [val_indices_for_rank(n, W, r, limit) for r in range(W)]
    flat = [i for share in shares for i in share]
    expected = n if limit is None else min(n, limit)
    assert len(flat) == len(set(flat)) == expected
    assert set(flat) <= set(range(n))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    assert flat == val_indices_for_rank(n, 1, 0, limit)  # same set, same order at any world size


# ---- dataset, split, batches --------------------------------------------------------------------

def test_dataset_samples_and_batches():
    tokens = np.arange(1000, dtype=np.uint16)
    ds = TokenDataset(tokens, seq_len=10)
    assert len(ds) == 99  # sample 98 ends at token 990; sample 99 would need token 1000
    x, y = get_batch(ds, [0, 98, 5])
    assert x.dtype == y.dtype == torch.int64 and x.shape == y.shape == (3, 10)
    assert x[1].tolist() == list(range(980, 990)) and y[1].tolist() == list(range(981, 991))
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert ds[5][0].tolist() == x[2].tolist()
    with pytest.raises(IndexError):
        get_batch(ds, [99])
    with pytest.raises(DataError, match="too few for one sample"):
        TokenDataset(tokens[:10], seq_len=10)


@given(n=st.integers(2, 300_000), frac=st.sampled_from([0.01, 0.05, 0.1, 0.5]))
@settings(max_examples=30, deadline=None)
def test_split_partitions_the_corpus(n, frac):
    tokens = np.arange(n, dtype=np.int64)  # distinct values: positions can be checked
    train, val = split_train_val(tokens, frac)
    assert len(train) + len(val) == n
    assert sorted(np.concatenate([train, val]).tolist()) == list(range(n))
    assert np.all(np.diff(train) > 0) and np.all(np.diff(val) > 0)  # corpus order kept in each part
    assert abs(len(val) - n * frac) <= 20
    t2, v2 = split_train_val(tokens, frac)
    assert np.array_equal(train, t2) and np.array_equal(val, v2)


def test_split_val_spans_the_corpus():
    tokens = np.arange(2_000_000, dtype=np.int64)
    _, val = split_train_val(tokens, 0.05)
    assert val.min() < 100_000 and val.max() == 1_999_999  # not just the tail


def test_split_rejects_bad_fraction():
    with pytest.raises(DataError, match="val_fraction"):
        split_train_val(np.arange(100), 0.0)


# ---- sources ------------------------------------------------------------------------------------

def test_stdlib_corpus_is_big_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("SHARDLAB_CACHE", str(tmp_path))
    first = load_tokens("stdlib")
    assert first.dtype == np.uint16 and first.ndim == 1 and len(first) > 5_000_000
    assert int(first.max()) < 256
    (cached,) = tmp_path.glob("stdlib-*.bin")
    assert cached.stat().st_size == 2 * len(first)
    assert not list(tmp_path.glob("*.tmp"))  # the temp file was renamed, not left behind
    assert "import" in decode(first[:20000])
    second = load_tokens("stdlib")
    # from the cache: a memory map of the file, not a re-tokenisation (no wall-clock bound: it timed the load)
    assert isinstance(second, np.memmap) and np.array_equal(first, second)


def test_stdlib_cache_is_rebuilt_when_truncated(tmp_path, monkeypatch):
    monkeypatch.setenv("SHARDLAB_CACHE", str(tmp_path))
    n = len(load_tokens("stdlib"))
    (cached,) = tmp_path.glob("stdlib-*.bin")
    with open(cached, "r+b") as f:
        f.truncate(1000)  # as if a crashed writer had bypassed the atomic rename
    assert len(load_tokens("stdlib")) == n


def test_stdlib_skips_tests_and_site_packages():
    files = sources.stdlib_files()
    assert files == sorted(files)
    assert not any(set(f.parts) & sources.STDLIB_SKIP_DIRS for f in files)
    assert any(f.name == "json" or f.parent.name == "json" for f in files)


def test_concurrent_first_loads_never_see_a_partial_cache(tmp_path):
    """Two 'ranks' building the cache at once both get the full corpus."""
    code = "from shardlab.data import load_tokens; print(len(load_tokens('stdlib')))"
    env = {**os.environ, "SHARDLAB_CACHE": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    lengths = {int(p.communicate(timeout=60)[0]) for p in procs}
    assert len(lengths) == 1 and lengths.pop() > 5_000_000
    assert len(list(tmp_path.glob("stdlib-*.bin"))) == 1 and not list(tmp_path.glob("*.tmp"))


def test_text_source_file_and_folder(tmp_path):
    (tmp_path / "b.txt").write_text("second")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.md").write_text("third é")
    (tmp_path / "a.py").write_text("first")
    (tmp_path / "blob.bin").write_bytes(b"\0\1\2binary")  # skipped: not text
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("hidden")    # skipped: hidden
    (tmp_path / "d.jsonl").write_text('{"text": "four"}\n{"text": "fi\\u0000ve"}\n')  # a document per line
    # the stream (the default run's, as it always was): sorted paths, the files' bytes joined by a blank line
    stream = '{"text": "four"}\n{"text": "fi\\u0000ve"}\n'
    assert decode(load_tokens(f"text:{tmp_path}")) == f"first\n\nsecond\n\n{stream}\n\nthird é\n\n"
    assert decode(load_tokens(f"text:{tmp_path / 'a.py'}")) == "first\n\n"
    # documents (data.doc_mask): each ended by EOS (the NUL byte, id 0), a .jsonl line each, a NUL inside dropped
    tokens = load_tokens(f"text:{tmp_path}", documents=True)
    assert bytes(tokens.astype(np.uint8)) == "first\0second\0four\0five\0third é\0".encode()
    assert bytes(load_tokens(f"text:{tmp_path / 'a.py'}", documents=True).astype(np.uint8)) == b"first\0"


def test_bin_source(tmp_path):
    ids = np.array([1, 2, 300, 65535], dtype=np.uint16)
    ids.tofile(tmp_path / "train.bin")
    tokens = load_tokens(f"bin:{tmp_path / 'train.bin'}")
    assert isinstance(tokens, np.memmap) and tokens.tolist() == ids.tolist()
    with pytest.raises(DataError, match="vocabulary is 256"):
        check_vocab(tokens, 256)
    check_vocab(tokens, 65536)


@pytest.mark.parametrize("source, message", [
    ("nope:x", "unknown data source 'nope:x'; use 'stdlib', 'text:PATH', 'bin:PATH' or 'tokens:DIR'"),
    ("text:", "unknown data source"),
    ("text:/does/not/exist", "does not exist"),
    ("bin:/does/not/exist.bin", "does not exist"),
])
def test_bad_sources_raise_clear_errors(source, message):
    with pytest.raises(DataError, match=message):
        load_tokens(source)


def test_bad_file_contents_raise_clear_errors(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "odd.bin").write_bytes(b"abc")
    (tmp_path / "empty.bin").write_bytes(b"")
    (tmp_path / "bins").mkdir()
    (tmp_path / "bins" / "x").write_bytes(b"\0\0")
    for source, message in [(f"text:{tmp_path / 'empty.txt'}", "is empty"),
                            (f"text:{tmp_path / 'bins'}", "has no text files"),
                            (f"bin:{tmp_path / 'odd.bin'}", "odd size"),
                            (f"bin:{tmp_path / 'empty.bin'}", "is empty")]:
        with pytest.raises(DataError, match=message) as err:
            load_tokens(source)
        assert "\n" not in str(err.value)  # one line, for the CLI's stderr
