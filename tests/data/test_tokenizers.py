"""Tokenizer kinds (data/tokenizer.py): each round-trips text and gives exactly the ids of the library it
wraps (`tokenizers`, `tiktoken`; Python's own UTF-8 for bytes); special tokens stay out of the text; a saved
tokenizer loads back to the same ids; an HF checkpoint's files alone load too."""
import base64
import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardlab.data import DataError
from shardlab.data import tokenizer as tk

CORPUS = sorted(Path(tk.__file__).parent.glob("*.py"))  # this package's own source: text that does not change
TEXTS = [p.read_text() for p in CORPUS]
SAMPLE = "def main():\n    return {'é': 12345, \"x\": [1, 2]}  # ünïcode ✓ 中文\n\n\tend"


@pytest.fixture(scope="module")
def bpe():
    return tk.from_spec("bpe:600", TEXTS)


def test_bytes_is_utf8_with_nul_as_eos():
    b = tk.from_spec("bytes")
    assert b is tk.BYTES and (b.vocab_size, b.eos_id, b.kind) == (256, 0, "bytes")
    assert b.encode(SAMPLE).tolist() == list(SAMPLE.encode("utf-8"))
    assert b.encode("a\0b").tolist() == [97, 98]  # NUL is the EOS id: never in a text
    assert b.decode([97, 0, 98]) == "ab"  # and decodes to nothing


@given(st.text())
@settings(max_examples=60, deadline=None)
def test_every_kind_round_trips(text):
    text = text.replace("\0", "")
    for tok in (tk.BYTES, _BPE, _TIKTOKEN):
        assert tok.decode(tok.encode(text)) == text, tok


def test_bpe_is_the_library_s_own_encoding(bpe, tmp_path):
    from tokenizers import Tokenizer

    assert bpe.kind == "hf" and bpe.spec == "bpe:600" and bpe.vocab_size == 600
    assert bpe.tok.id_to_token(bpe.eos_id) == tk.EOS_TOKEN
    bpe.save(tmp_path / "t")
    lib = Tokenizer.from_file(str(tmp_path / "t" / "tokenizer.json"))
    for text in (SAMPLE, *TEXTS):
        if tk.EOS_TOKEN not in text:  # (the library, by default, reads the EOS string in a text as EOS)
            assert bpe.encode(text).tolist() == lib.encode(text).ids
    lib.encode_special_tokens = True  # the library told to keep special tokens out of the text, as we do
    for text in (SAMPLE, *TEXTS):
        assert bpe.encode(text).tolist() == lib.encode(text).ids
    assert len(bpe.encode(TEXTS[0])) < len(TEXTS[0].encode()) / 2  # merges were learnt
    # the same corpus trains the same tokenizer (caches and restarts rely on it)
    assert tk.from_spec("bpe:600", TEXTS).fingerprint() == bpe.fingerprint()
    again = tk.load(tmp_path / "t")
    assert (again.spec, again.vocab_size, again.eos_id) == ("bpe:600", 600, bpe.eos_id)
    assert again.encode(SAMPLE).tolist() == bpe.encode(SAMPLE).tolist()
    assert json.loads((tmp_path / "t" / tk.META_FILE).read_text()) == bpe.meta()


def test_special_tokens_in_a_document_are_text(bpe):
    text = f"one{tk.EOS_TOKEN}two"
    ids = bpe.encode(text).tolist()
    assert bpe.eos_id not in ids and bpe.decode(ids) == text
    assert _TIKTOKEN.eos_id not in _TIKTOKEN.encode(text).tolist()
    assert _TIKTOKEN.decode(_TIKTOKEN.encode(text)) == text


def _word_level(tmp_path: Path, words: int, eos: str | None) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, **{f"w{i}": i + 1 for i in range(words)}}
    if eos:
        vocab[eos] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if eos:
        from tokenizers import AddedToken
        tok.add_special_tokens([AddedToken(eos, special=True)])
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_a_tokenizer_json_or_hf_directory(tmp_path, bpe):
    from tokenizers import Tokenizer

    # a tokenizer.json path: the library's ids; no EOS of its own -> <|endoftext|> appended after the vocabulary
    path = _word_level(tmp_path, 50, eos=None)
    tok = tk.from_spec(str(path))
    text = "w3 w7 w49 nope w1"
    assert tok.encode(text).tolist() == Tokenizer.from_file(str(path)).encode(text).ids == [4, 8, 50, 0, 2]
    assert (tok.vocab_size, tok.eos_id) == (52, 51)
    # an HF directory whose tokenizer_config.json names the EOS
    d = tmp_path / "hf"
    d.mkdir()
    _word_level(d, 50, eos="</s>")
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "</s>"}}))
    tok = tk.from_spec(str(d))
    assert (tok.vocab_size, tok.eos_id) == (52, 51) and tok.encode(text).tolist() == [4, 8, 50, 0, 2]
    # a transformers checkpoint directory: tokenizer.json + a config naming nothing; config.json's eos_token_id
    ck = tmp_path / "ck"
    ck.mkdir()
    bpe.tok.save(str(ck / "tokenizer.json"))
    (ck / "tokenizer_config.json").write_text("{}")
    (ck / "config.json").write_text(json.dumps({"eos_token_id": [7, 8]}))
    loaded = tk.load(ck)
    assert loaded.eos_id == 7 and loaded.encode(SAMPLE).tolist() == bpe.encode(SAMPLE).tolist()


def _tiktoken_file(tmp_path: Path) -> Path:
    from tiktoken._educational import bpe_train  # tiktoken's own trainer (slow, pure Python: a small text)

    with contextlib.redirect_stdout(io.StringIO()):  # it prints its merges
        ranks = bpe_train(TEXTS[0][:6000], 300, tk.TIKTOKEN_PATTERN)
    path = tmp_path / "tiny.tiktoken"
    path.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for t, r in ranks.items()))
    return path


def test_tiktoken_is_the_library_s_own_encoding(tmp_path):
    import tiktoken

    tok = tk.from_spec(f"tiktoken:{_TIKTOKEN_PATH}")
    ranks = tk.read_ranks(_TIKTOKEN_PATH)
    lib = tiktoken.Encoding("tiny", pat_str=tk.TIKTOKEN_PATTERN, mergeable_ranks=ranks, special_tokens={})
    assert (tok.vocab_size, tok.eos_id) == (301, 300)
    for text in (SAMPLE, *TEXTS):
        assert tok.encode(text).tolist() == lib.encode(text, disallowed_special=())
    tok.save(tmp_path / "t")
    assert (tmp_path / "t" / tk.TIKTOKEN_FILE).read_bytes() == _TIKTOKEN_PATH.read_bytes()
    assert tk.load(tmp_path / "t").encode(SAMPLE).tolist() == tok.encode(SAMPLE).tolist()
    # its HF form (what an export writes) encodes every text to the same ids
    hf = tk.tiktoken_to_hf(tok)
    assert hf.eos_id == tok.eos_id and hf.vocab_size == tok.vocab_size
    for text in (SAMPLE, *TEXTS):
        assert hf.encode(text).tolist() == tok.encode(text).tolist()


def test_eos_id_of_a_config_or_a_directory(tmp_path, bpe):
    from shardlab import config

    cfg = config.load(None, [])
    assert tk.eos_id(cfg) == 0
    bpe.save(tmp_path / "t")
    assert tk.eos_id(tmp_path / "t") == bpe.eos_id


@pytest.mark.parametrize("spec,words", [("bpe:100", "N > 256"), ("bpe:x", "N > 256"), ("wat:x", "not a tokenizer"),
                                        ("", "not a tokenizer"), ("/nonexistent/tok.json", "no such file")])
def test_bad_specs_are_one_line(spec, words):
    with pytest.raises(DataError, match=words) as e:
        tk.from_spec(spec)
    assert "\n" not in str(e.value)


def test_a_bad_tiktoken_file_is_one_line(tmp_path):
    (tmp_path / "bad.tiktoken").write_text("not base64!! x\n")
    with pytest.raises(DataError, match="cannot read it"):
        tk.from_spec(f"tiktoken:{tmp_path / 'bad.tiktoken'}")


# module-level tokenizers for the hypothesis test (a fixture cannot be used with @given)
_BPE = tk.from_spec("bpe:600", TEXTS)
_TIKTOKEN_PATH = _tiktoken_file(Path(__import__("tempfile").mkdtemp(prefix="shardlab-tiktoken-")))
_TIKTOKEN = tk.from_spec(f"tiktoken:{_TIKTOKEN_PATH}")
assert isinstance(_BPE.encode(SAMPLE), np.ndarray)
