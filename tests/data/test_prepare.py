"""`shardlab data prepare` (data/prepare.py) and `data.source=tokens:DIR` (data/tokens.py): every source kind
gives each document's ids followed by EOS, in source order; the same bytes at any --workers; uint32 shards
for a vocabulary past 65,536; an interrupted prepare never looks complete and resumes to the same bytes."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shardlab.data import DataError, TokenDataset, get_batch
from shardlab.data import prepare as prep
from shardlab.data import tokenizer as tk
from shardlab.data.tokens import ShardedTokens, open_corpus

DOCS = [f"document {i}: " + "def f(x):\n    return x * %d\n" % i * (1 + i % 5) for i in range(40)] + ["é ✓ 中文", "last"]


def expected(tok, docs, val_fraction=0.0, split="train"):
    """What prepare must write: each document's ids (the tokenizer's own encode) then EOS, in order."""
    keep = [d for i, d in enumerate(docs) if prep.is_val(i, val_fraction) == (split == "val")]
    return [t for d in keep for t in [*tok.encode(d).tolist(), tok.eos_id]]


def stream(d: Path, split="train") -> list[int]:
    meta = json.loads((d / "meta.json").read_text())
    return [int(t) for s in meta["splits"][split]["shards"] for t in np.fromfile(d / s["file"], dtype=meta["dtype"])]


def run(src, out, tok="bytes", **kw) -> dict:
    return prep.prepare(prep.Job(src=str(src), out=Path(out), quiet=True, **kw), tok)


def write_sources(root: Path) -> dict:
    """The same documents as a folder of text files, a .jsonl, a .parquet and a saved `datasets` dataset."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "folder").mkdir(parents=True)
    for i, d in enumerate(DOCS):
        (root / "folder" / f"{i:03d}.txt").write_text(d)
    (root / "folder" / ".hidden").write_text("skipped")
    (root / "docs.jsonl").write_text("".join(json.dumps({"id": i, "body": d}) + "\n" for i, d in enumerate(DOCS)))
    pq.write_table(pa.table({"body": DOCS}), root / "docs.parquet", row_group_size=7)  # several row groups
    out = {"folder": root / "folder", "jsonl": root / "docs.jsonl", "parquet": root / "docs.parquet"}
    import datasets  # in the test extra (for users optional: the reading itself is pyarrow's)
    datasets.Dataset.from_dict({"body": DOCS}).save_to_disk(str(root / "saved"))
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"body": DOCS})}).save_to_disk(str(root / "dict"))
    out |= {"saved": root / "saved", "dict": root / "dict"}
    return out


@pytest.fixture(scope="module")
def srcs(tmp_path_factory):
    return write_sources(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="module")
def bpe():
    return tk.from_spec("bpe:320", DOCS)


@pytest.mark.parametrize("kind", ["folder", "jsonl", "parquet", "saved", "dict"])
def test_every_source_kind_gives_each_document_then_eos(srcs, bpe, tmp_path, kind):
    field = "text" if kind == "folder" else "body"
    meta = run(srcs[kind], tmp_path / "out", bpe, field=field, val_fraction=0.1, shard_mb=0.0005)
    assert stream(tmp_path / "out") == expected(bpe, DOCS, 0.1)
    assert stream(tmp_path / "out", "val") == expected(bpe, DOCS, 0.1, "val")
    assert meta["documents"] == len(DOCS) and meta["splits"]["val"]["documents"] == 4
    assert meta["eos_id"] == bpe.eos_id and meta["vocab_size"] == bpe.vocab_size and meta["dtype"] == "uint16"
    assert len(meta["splits"]["train"]["shards"]) > 3  # small shards: several
    assert meta["tokens"] == len(stream(tmp_path / "out")) + len(stream(tmp_path / "out", "val"))
    assert tk.load(tmp_path / "out" / "tokenizer").encode(DOCS[3]).tolist() == bpe.encode(DOCS[3]).tolist()
    assert not (tmp_path / "out" / prep.STATE).exists()


def test_a_text_file_is_one_document_and_bytes_use_nul_as_eos(tmp_path):
    (tmp_path / "a.txt").write_text("hello\0 world")
    meta = run(tmp_path / "a.txt", tmp_path / "out")
    assert stream(tmp_path / "out") == [*b"hello world", 0] and meta["documents"] == 1


def test_the_same_bytes_at_any_number_of_workers(srcs, bpe, tmp_path):
    one = run(srcs["jsonl"], tmp_path / "one", bpe, field="body", val_fraction=0.05, shard_mb=0.0005, workers=1)
    two = run(srcs["jsonl"], tmp_path / "two", bpe, field="body", val_fraction=0.05, shard_mb=0.0005, workers=2)
    assert one["splits"] == two["splits"] and len(one["splits"]["train"]["shards"]) > 4
    for s in one["splits"]["train"]["shards"] + one["splits"]["val"]["shards"]:
        assert (tmp_path / "one" / s["file"]).read_bytes() == (tmp_path / "two" / s["file"]).read_bytes()


def test_shards_keep_the_source_order_when_workers_finish_out_of_order(srcs, bpe, tmp_path, monkeypatch):
    """The shard-order rule without timing: real worker processes, but the prepare's wait for "the first
    finished" is handed the newest shard of those finished (last in, first out), so shards are collected in a
    fixed order far from the source's (k, k+1, ... then back down to 0). meta.json and every shard file must
    still be the one-worker run's: order comes from the shard index, never from which worker finished first."""
    import concurrent.futures as cf

    real_wait, collected = cf.wait, []

    def newest_first(fs, timeout=None, return_when=cf.ALL_COMPLETED):
        real_wait(fs)  # every pending shard finished: choose which one "finished first"
        newest = max(fs, key=lambda f: f.result()["shard"])
        collected.append(newest.result()["shard"])
        return {newest}, set(fs) - {newest}

    monkeypatch.setattr(cf, "wait", newest_first)
    kw = dict(field="body", val_fraction=0.05, shard_mb=0.0005)
    three = run(srcs["jsonl"], tmp_path / "three", bpe, workers=3, **kw)
    monkeypatch.undo()
    one = run(srcs["jsonl"], tmp_path / "one", bpe, workers=1, **kw)
    n = len(one["splits"]["train"]["shards"])
    assert n > 6 and sorted(collected) == list(range(n)) and collected != sorted(collected)  # out of order, all
    assert collected[:2] == [5, 6]  # the window of 2 x 3 pending shards: 0..5 submitted, 5 collected first
    assert three["splits"] == one["splits"]
    assert stream(tmp_path / "three") == stream(tmp_path / "one") == expected(bpe, DOCS, 0.05)
    for s in one["splits"]["train"]["shards"] + one["splits"]["val"]["shards"]:
        assert (tmp_path / "one" / s["file"]).read_bytes() == (tmp_path / "three" / s["file"]).read_bytes()


def test_uint32_shards_for_a_large_vocabulary(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = 70_000  # past uint16
    tok = Tokenizer(models.WordLevel({"[UNK]": 0, **{f"w{i}": i + 1 for i in range(words)}}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": f"w{i} w{69_999 - i} w5"}) + "\n" for i in range(30)))
    meta = run(tmp_path / "d.jsonl", tmp_path / "out", str(tmp_path / "tokenizer.json"))
    eos = words + 1  # <|endoftext|> added after the vocabulary
    assert meta["dtype"] == "uint32" and meta["vocab_size"] == words + 2 and meta["eos_id"] == eos
    assert stream(tmp_path / "out") == [t for i in range(30) for t in (i + 1, 70_000 - i, 6, eos)]
    corpus = open_corpus(f"tokens:{tmp_path / 'out'}", "bytes", 0.05)
    assert corpus.tokenizer.vocab_size == words + 2 and corpus.train[:4].tolist() == [1, 70_000, 6, eos]


def test_tokens_source_reads_the_shards_as_one_stream(srcs, bpe, tmp_path):
    run(srcs["jsonl"], tmp_path / "out", bpe, field="body", val_fraction=0.1, shard_mb=0.0005)
    corpus = open_corpus(f"tokens:{tmp_path / 'out'}", "bytes", 0.05)
    assert isinstance(corpus.train, ShardedTokens) and len(corpus.train.shards) > 3
    want = np.array(expected(bpe, DOCS, 0.1))
    assert np.array_equal(corpus.train[:], want) and np.array_equal(corpus.train[5:len(want) - 3], want[5:-3])
    assert corpus.tokenizer.fingerprint() == bpe.fingerprint() and corpus.documents == len(DOCS)
    ds = TokenDataset(corpus.train, 16)
    x, y = get_batch(ds, [0, 3, len(ds) - 1])  # samples across shard seams: the flat stream's
    assert x.tolist() == [want[i * 16:i * 16 + 16].tolist() for i in (0, 3, len(ds) - 1)]
    assert y[:, -1].tolist() == [int(want[i * 16 + 16]) for i in (0, 3, len(ds) - 1)]
    assert np.array_equal(corpus.val[:], np.array(expected(bpe, DOCS, 0.1, "val")))
    assert tk.eos_id(tmp_path / "out" / "tokenizer") == bpe.eos_id
    with pytest.raises(DataError, match="was prepared with"):  # a tokens: source carries its tokenizer
        open_corpus(f"tokens:{tmp_path / 'out'}", "bpe:999", 0.05)


def test_an_interrupted_prepare_never_looks_complete_and_resumes_to_the_same_bytes(srcs, bpe, tmp_path, monkeypatch):
    clean = tmp_path / "clean"
    run(srcs["jsonl"], clean, bpe, field="body", val_fraction=0.1, shard_mb=0.0005)
    out = tmp_path / "out"
    real, calls = prep.encode_shard, []

    def dies_on_the_fourth(*a, **kw):
        calls.append(a[1])
        if len(calls) == 4:
            (out / "train-00003.bin.tmp").write_bytes(b"half")  # killed mid-write
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(prep, "encode_shard", dies_on_the_fourth)
    with pytest.raises(KeyboardInterrupt):
        run(srcs["jsonl"], out, bpe, field="body", val_fraction=0.1, shard_mb=0.0005)
    assert not (out / "meta.json").exists()
    with pytest.raises(DataError, match="did not finish; run the same command again"):
        open_corpus(f"tokens:{out}", "bytes", 0.05)
    (out / "train-00002.bin").write_bytes(b"xx")  # a recorded shard damaged since: redone, not trusted
    monkeypatch.setattr(prep, "encode_shard", real)
    calls.clear()
    monkeypatch.setattr(prep, "encode_shard", lambda *a, **kw: calls.append(a[1]) or real(*a, **kw))
    meta = run(srcs["jsonl"], out, bpe, field="body", val_fraction=0.1, shard_mb=0.0005)
    assert meta["resumed"] == 2 and calls[0] == 2  # shards 0 and 1 kept
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in clean.iterdir())
    for p in clean.glob("*.bin"):
        assert (out / p.name).read_bytes() == p.read_bytes(), p.name
    # done: the same command again has nothing to do; another tokenizer starts clean
    assert run(srcs["jsonl"], out, bpe, field="body", val_fraction=0.1, shard_mb=0.0005)["resumed"] == "complete"
    run(srcs["jsonl"], out, "bytes", field="body", val_fraction=0.1, shard_mb=0.0005)
    assert stream(out) == expected(tk.BYTES, DOCS, 0.1)


def test_a_changed_source_starts_clean(tmp_path, bpe):
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    out = tmp_path / "out"
    real = prep.encode_shard

    def dies(*a, **kw):
        raise KeyboardInterrupt

    prep.encode_shard = dies
    try:
        with pytest.raises(KeyboardInterrupt):
            run(src, out, bpe, shard_mb=0.0005)
    finally:
        prep.encode_shard = real
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS[:5]))
    meta = run(src, out, bpe, shard_mb=0.0005)
    assert meta["resumed"] == 0 and stream(out) == expected(bpe, DOCS[:5])


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "shardlab", "data", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def test_cli_prepares_and_refuses_bad_input_in_one_line(srcs, tmp_path):
    r = _cli("prepare", srcs["jsonl"], "--out", tmp_path / "out", "--field", "body", "--workers", "1")
    assert r.returncode == 0, r.stderr
    assert f"data.source=tokens:{tmp_path / 'out'}" in r.stdout and f"{len(DOCS)} documents" in r.stdout
    assert "tokens/s" in r.stderr  # the progress line
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "notes.txt").write_text("mine")
    for args, words in [((srcs["jsonl"], "--out", tmp_path / "x"), "no string field 'text'"),
                        ((tmp_path / "nope", "--out", tmp_path / "x"), "does not exist"),
                        ((srcs["jsonl"], "--out", tmp_path / "theirs", "--field", "body"), "not a prepared directory"),
                        ((srcs["jsonl"], "--out", tmp_path / "x", "--tokenizer", "bpe:3"), "N > 256"),
                        ((srcs["parquet"], "--out", tmp_path / "x"), "no column 'text'"),
                        ((srcs["jsonl"], "--out", tmp_path / "x", "--workers", "0"), "--workers 0")]:
        r = _cli("prepare", *args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, (args, r.stderr)
    assert (tmp_path / "theirs" / "notes.txt").read_text() == "mine"
    r = _cli("inspect", tmp_path / "out")
    assert r.returncode == 0 and json.loads(r.stdout)["documents"] == len(DOCS)


def test_a_prepare_killed_with_sigkill_resumes_to_the_same_bytes(bpe, tmp_path):
    """A real process, killed (SIGKILL: no clean-up runs) once it has written a few shards."""
    import os
    import signal
    import time

    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS * 60))  # ~2,500 documents
    bpe.save(tmp_path / "tok")
    args = [sys.executable, "-m", "shardlab", "data", "prepare", str(src), "--tokenizer", str(tmp_path / "tok"),
            "--workers", "1", "--shard-mb", "0.0005", "--quiet"]
    subprocess.run([*args, "--out", str(tmp_path / "clean")], check=True, timeout=120)
    proc = subprocess.Popen([*args, "--out", str(tmp_path / "out")], start_new_session=True)
    deadline = time.time() + 60
    while not (tmp_path / "out" / prep.STATE / "shard-00003.json").exists() and time.time() < deadline:
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if (tmp_path / "out" / "meta.json").exists():
        pytest.skip("the prepare finished before it could be killed (a very fast machine)")
    with pytest.raises(DataError, match="did not finish"):
        open_corpus(f"tokens:{tmp_path / 'out'}", "bytes", 0.05)
    r = subprocess.run([*args, "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "resuming" in r.stderr, r.stderr
    clean = json.loads((tmp_path / "clean" / "meta.json").read_text())
    assert json.loads((tmp_path / "out" / "meta.json").read_text())["splits"] == clean["splits"]
    for s in clean["splits"]["train"]["shards"]:
        assert (tmp_path / "out" / s["file"]).read_bytes() == (tmp_path / "clean" / s["file"]).read_bytes()
    assert not list((tmp_path / "out").glob("*.tmp"))


def test_the_progress_line_is_printed_once_at_the_end(srcs, tmp_path, capsys, monkeypatch):
    """Off a terminal, a short prepare says `[prepare] N shards, ...` once: the line after the last shard and
    the final line were the same line twice. A long one prints every 5 s and the final line only if it differs."""
    prep.prepare(prep.Job(src=str(srcs["folder"]), out=tmp_path / "a", shard_mb=0.0005), "bytes")
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[prepare]")]
    assert len(lines) == 1 and lines[0].startswith("[prepare] ") and "shards" in lines[0], lines
    assert int(lines[0].split()[1]) > 1  # several shards: each one did not print a line of its own
    clock = iter(range(0, 1000, 6))  # 6 s between calls: every shard is due a periodic line
    monkeypatch.setattr(prep.time, "perf_counter", lambda: next(clock))
    p = prep.Progress(quiet=False, total_done=0)
    for _ in range(2):
        p.add({"train": {"tokens": 10}, "val": {"tokens": 0}})
    p.add({}, final=True)  # nothing new since the last line: not said again
    said = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[prepare]")]
    assert [ln.split(",")[0] for ln in said] == ["[prepare] 1 shards", "[prepare] 2 shards"], said
