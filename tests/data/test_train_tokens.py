"""Training on what `shardlab data prepare` wrote (`data.source=tokens:DIR`) with a BPE vocabulary: the model's
vocabulary follows the tokenizer, the run and its checkpoints carry the tokenizer, the start line says how big
the corpus is; `text:` / `stdlib` sources tokenize on the fly with any tokenizer and cache the result."""
import json
import tomllib

import numpy as np
import pytest

from bpe_harness import VOCAB, prepare, train
from cli_harness import run_in_process
from shardlab.data import tokenizer as tk
from shardlab.data.tokens import open_corpus


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    return prepare(tmp_path_factory.mktemp("bpe"))


def test_a_short_training_on_a_prepared_bpe_corpus(tokens, tmp_path):
    r, run = train(tmp_path, tokens)
    assert r.returncode == 0, r.stderr
    meta = json.loads((tokens / "meta.json").read_text())
    # the start line: corpus tokens, documents and the epochs the run covers
    line = next(x for x in r.stderr.splitlines() if x.startswith("[launch] starting"))
    assert f"tokens:{tokens} (bpe:{VOCAB} tokenizer, vocabulary {VOCAB}, EOS 0)" in line
    assert f"{meta['documents']:,} documents" in line and "epochs of the training split" in line
    cfg = tomllib.loads((run / "config.toml").read_text())
    assert cfg["model"]["vocab_size"] == VOCAB and cfg["data"]["source"] == f"tokens:{tokens}"
    summary = json.loads((run / "summary.json").read_text())
    assert np.isfinite(summary["final_train_loss"]) and np.isfinite(summary["final_val_loss"])
    # the tokenizer travels: the run's and the checkpoint's are the prepared one, listed in the manifest
    want = tk.load(tokens / "tokenizer").fingerprint()
    step = run / "checkpoints" / "step_000006"
    assert tk.load(run / "tokenizer").fingerprint() == tk.load(step / "tokenizer").fingerprint() == want
    manifest = json.loads((step / "MANIFEST.json").read_text())
    assert {"tokenizer/tokenizer.json", "tokenizer/shardlab_tokenizer.json"} <= set(manifest["files"])
    v = run_in_process(["ckpt", "verify", str(run)])
    assert v.returncode == 0 and "ok" in v.stdout, v.stdout + v.stderr
    (step / "tokenizer" / "tokenizer.json").write_text("{}")  # the tokenizer's bytes are checked like any file
    v = run_in_process(["ckpt", "verify", str(step)])
    assert v.returncode != 0 and "tokenizer/tokenizer.json" in v.stdout + v.stderr


@pytest.mark.parametrize("overrides,words", [
    (["model.vocab_size=300"], f"smaller than the tokenizer's vocabulary ({VOCAB}"),
    (["data.tokenizer=bpe:999"], "was prepared with 'bpe:384'"),
])
def test_a_vocabulary_or_tokenizer_that_does_not_fit_is_one_line(tokens, tmp_path, overrides, words):
    r, run = train(tmp_path, tokens, *overrides)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.stderr
    assert not run.exists()


def test_vocab_follows_the_tokenizer_unless_set():
    from shardlab import config
    from shardlab.data.tokens import follow_vocab

    tok = tk.from_spec("bpe:300", ["abc def " * 50])
    for preset, given, want in [("tiny", 0, tok.vocab_size), ("gpt2", 0, tok.vocab_size), ("tiny", 512, 512)]:
        cfg = config.load(None, [f"model.preset={preset}", f"model.vocab_size={given}"])
        follow_vocab(cfg.model, tok)  # a preset's vocabulary does not count; a larger explicit one stays
        assert cfg.model.vocab_size == want


def test_text_sources_tokenize_on_the_fly_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SHARDLAB_CACHE", str(tmp_path / "cache"))
    (tmp_path / "t").mkdir()
    docs = ["def f():\n    return 1\n" * 30, "class A:\n    pass\n" * 40, "x = [1, 2, 3]\n" * 50]
    for i, d in enumerate(docs):
        (tmp_path / "t" / f"{i}.py").write_text(d)
    first = open_corpus(f"text:{tmp_path / 't'}", "bpe:300", 0.05)
    tok = first.tokenizer
    want = [t for d in docs for t in [*tok.encode(d).tolist(), tok.eos_id]]
    assert first.documents == 3 and first.tokens == len(want)
    again = open_corpus(f"text:{tmp_path / 't'}", "bpe:300", 0.05)  # the trained tokenizer and the ids: cached
    assert again.tokenizer.fingerprint() == tok.fingerprint()
    assert np.array_equal(np.concatenate([again.train, again.val]), np.concatenate([first.train, first.val]))
    assert len(list((tmp_path / "cache" / "tokenizers").iterdir())) == 1 and list((tmp_path / "cache").glob("text-*.bin"))
    # the bytes tokenizer keeps the stream it always had (files joined by a blank line, no EOS), and with
    # data.doc_mask each file's bytes then EOS (the NUL byte)
    b = open_corpus(f"text:{tmp_path / 't'}", "bytes", 0.05)
    assert b.tokens == sum(len(d) + 2 for d in docs) and b.documents == 3
    d = open_corpus(f"text:{tmp_path / 't'}", "bytes", 0.05, documents=True)
    assert d.tokens == sum(len(x) + 1 for x in docs) and d.documents == 3
    assert np.count_nonzero(np.concatenate([d.train, d.val]) == tk.BYTES_EOS) == 3
