"""Tokenizers: text <-> token ids, and the end-of-document id (EOS) that separates documents.

    bytes            one UTF-8 byte per token, vocabulary 256 (the default; nothing to train)
    bpe:N            a byte-level BPE of vocabulary N trained on the run's source, here (HF `tokenizers`)
    PATH             a `tokenizer.json`, or a Hugging Face tokenizer directory holding one
    tiktoken:FILE    a tiktoken BPE ranks file (`*.tiktoken`, Llama 3's `tokenizer.model`)

Every kind has an EOS id. bytes uses 0 (the NUL byte, which text does not contain: it is dropped when
encoding); the BPE kinds an `<|endoftext|>` special token (added when the tokenizer has no EOS of its own).
Special tokens are kept out of the text: a document that contains the string `<|endoftext|>` is encoded as
those characters, never as the EOS id, so only the data pipeline puts EOS into a token stream.

A tokenizer is stored as a directory (`save(dir)`, `load(dir)`): the HF files (`tokenizer.json`,
`tokenizer_config.json`) or a copy of the tiktoken file, and `shardlab_tokenizer.json` (kind, spec,
vocab_size, eos_id). `load` also reads a directory with only the HF files (a transformers checkpoint's).

The module-level `encode`, `decode` and `VOCAB_SIZE` are the bytes tokenizer's (the callers that predate
the others).
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from .cache import cache_dir
from .errors import DataError
from .sources import documents, fingerprint

VOCAB_SIZE = 256
BYTES_EOS = 0  # the NUL byte
EOS_TOKEN = "<|endoftext|>"
META_FILE = "shardlab_tokenizer.json"
HF_FILE, HF_CONFIG = "tokenizer.json", "tokenizer_config.json"
TIKTOKEN_FILE = "tokenizer.tiktoken"
# EOS names of well-known tokenizers, tried in order when a tokenizer.json comes without a config naming it
KNOWN_EOS = (EOS_TOKEN, "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>")
# The pre-tokenizer split of cl100k_base and Llama 3 (tiktoken files carry only the ranks, not the split)
TIKTOKEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                    r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECS = "bytes | bpe:N | PATH/tokenizer.json | HF tokenizer directory | tiktoken:FILE"


def _as_ids(ids) -> np.ndarray:
    if hasattr(ids, "detach"):  # a torch tensor, without importing torch here
        ids = ids.detach().cpu().numpy()
    return np.asarray(ids, dtype=np.int64).reshape(-1)


class Tokenizer:
    """What every kind has. `encode` gives a 1-D array (uint16 when the vocabulary fits, else uint32)."""
    kind = "?"

    def __init__(self, spec: str, vocab_size: int, eos_id: int):
        self.spec, self.vocab_size, self.eos_id = spec, int(vocab_size), int(eos_id)

    @property
    def dtype(self):
        """The narrowest unsigned dtype holding every id: what token shards store."""
        return np.uint16 if self.vocab_size <= 1 << 16 else np.uint32

    def encode(self, text: str) -> np.ndarray:
        raise NotImplementedError

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [self.encode(t) for t in texts]

    def decode(self, ids) -> str:
        raise NotImplementedError

    def _write(self, d: Path) -> None:
        """The kind's own files."""

    def meta(self) -> dict:
        return {"kind": self.kind, "spec": self.spec, "vocab_size": self.vocab_size, "eos_id": self.eos_id}

    def save(self, dir) -> Path:
        """Write the tokenizer directory atomically (a temp directory beside it, then renamed)."""
        d = Path(dir)
        d.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=d.parent, prefix=d.name + ".", suffix=".tmp"))
        try:
            self._write(tmp)
            (tmp / META_FILE).write_text(json.dumps(self.meta(), indent=1) + "\n")
            if d.exists():
                shutil.rmtree(d)
            os.replace(tmp, d)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return d

    def fingerprint(self) -> str:
        """Changes when any id would: the kind, the EOS and the files (caches of encoded corpora use it)."""
        with tempfile.TemporaryDirectory() as t:
            self._write(Path(t))
            h = hashlib.sha256(json.dumps([self.kind, self.vocab_size, self.eos_id]).encode())
            for p in sorted(Path(t).iterdir()):
                h.update(p.name.encode() + b"\0" + p.read_bytes())
        return h.hexdigest()[:16]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spec!r} vocab {self.vocab_size} eos {self.eos_id}>"


class BytesTokenizer(Tokenizer):
    kind = "bytes"

    def __init__(self):
        super().__init__("bytes", VOCAB_SIZE, BYTES_EOS)

    def encode(self, text: str) -> np.ndarray:
        data = text.encode("utf-8")
        if b"\0" in data:  # the NUL byte is the EOS id: never part of a text
            data = data.replace(b"\0", b"")
        return np.frombuffer(data, dtype=np.uint8).astype(np.uint16)

    def decode(self, ids) -> str:
        ids = _as_ids(ids)
        if ids.size and (ids.min() < 0 or ids.max() >= VOCAB_SIZE):
            raise ValueError(f"token id out of range 0..{VOCAB_SIZE - 1}: got {ids.min()}..{ids.max()}")
        return ids[ids != BYTES_EOS].astype(np.uint8).tobytes().decode("utf-8", errors="replace")


class HFTokenizer(Tokenizer):
    """A `tokenizers.Tokenizer` (its own special tokens matched as text: `encode_special_tokens`)."""
    kind = "hf"

    def __init__(self, tok, spec: str, eos_id: int, config: dict | None = None):
        tok.encode_special_tokens = True  # "<|endoftext|>" inside a document is text, not the EOS id
        self.tok, self.config = tok, dict(config or {})
        super().__init__(spec, tok.get_vocab_size(with_added_tokens=True), eos_id)

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.tok.encode(text, add_special_tokens=False).ids, dtype=self.dtype)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(e.ids, dtype=self.dtype) for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids) -> str:
        return self.tok.decode(_as_ids(ids).tolist(), skip_special_tokens=True)

    @property
    def eos_token(self) -> str:
        return self.tok.id_to_token(self.eos_id)

    def _write(self, d: Path) -> None:
        self.tok.save(str(d / HF_FILE))
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
                  **self.config, "eos_token": self.eos_token}
        (d / HF_CONFIG).write_text(json.dumps(config, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


class TiktokenTokenizer(Tokenizer):
    """A tiktoken ranks file with the cl100k / Llama 3 split; EOS `<|endoftext|>` appended after the ranks."""
    kind = "tiktoken"

    def __init__(self, path: Path, spec: str):
        import tiktoken  # deferred: only this kind needs it

        self.path = Path(path)
        ranks = read_ranks(self.path)
        eos = max(ranks.values()) + 1
        self.enc = tiktoken.Encoding(name=self.path.stem, pat_str=TIKTOKEN_PATTERN, mergeable_ranks=ranks,
                                     special_tokens={EOS_TOKEN: eos})
        super().__init__(spec, eos + 1, eos)

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.enc.encode(text, disallowed_special=()), dtype=self.dtype)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(x, dtype=self.dtype) for x in self.enc.encode_batch(texts, disallowed_special=())]

    def decode(self, ids) -> str:
        ids = _as_ids(ids)
        return self.enc.decode(ids[ids != self.eos_id].tolist())

    def _write(self, d: Path) -> None:
        shutil.copyfile(self.path, d / TIKTOKEN_FILE)

    def ranks(self) -> dict[bytes, int]:
        return self.enc._mergeable_ranks  # tiktoken keeps them; the HF export rebuilds merges from them


def read_ranks(path: Path) -> dict[bytes, int]:
    """A tiktoken ranks file: `base64(token) rank` per line. Read here, not with tiktoken.load, which
    caches a file by its path name (a changed file at the same path would be read stale)."""
    ranks = {}
    try:
        for n, line in enumerate(path.read_bytes().splitlines(), 1):
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token, validate=True)] = int(rank)
    except (OSError, ValueError) as e:  # binascii.Error is a ValueError
        raise DataError(f"tiktoken file {path}: cannot read it ({type(e).__name__}); give a tiktoken BPE ranks "
                        "file (a base64 token and its rank per line)") from None
    if sorted(ranks.values()) != list(range(len(ranks))) or len(ranks) < 256:
        raise DataError(f"tiktoken file {path}: its ranks are not 0..N-1 over at least the 256 bytes; not a "
                        "tiktoken BPE ranks file")
    return ranks


BYTES = BytesTokenizer()


def encode(text: str) -> np.ndarray:
    """The bytes tokenizer: UTF-8 bytes of `text` (NUL dropped) as a 1-D uint16 array."""
    return BYTES.encode(text)


def decode(ids) -> str:
    """The bytes tokenizer: ids (list, numpy array or tensor) back to text; invalid UTF-8 becomes U+FFFD."""
    return BYTES.decode(ids)


# ---- choosing, training, loading ----------------------------------------------------------------

def check_spec(spec: str) -> None:
    """Cheap syntax check of a data.tokenizer value (config validation; nothing is read)."""
    if spec == "bytes" or spec.startswith("tiktoken:") and len(spec) > 9:
        return
    if spec.startswith("bpe:"):
        n = spec[4:]
        if not n.isdigit() or int(n) <= VOCAB_SIZE:
            raise DataError(f"data.tokenizer={spec!r}: bpe:N needs a vocabulary N > 256 (the 256 bytes, "
                            "then merges and the EOS token), e.g. bpe:4096")
        return
    scheme = spec.partition(":")[0] if ":" in spec.split("/")[0] else ""
    if not spec or scheme and not Path(spec).exists():  # an unknown scheme (a path seldom has a colon)
        raise DataError(f"data.tokenizer={spec!r}: not a tokenizer; use {SPECS}")


def from_spec(spec: str = "bytes", corpus_text_or_source=None) -> Tokenizer:
    """The tokenizer a `data.tokenizer` value names. `bpe:N` trains on `corpus_text_or_source`: an iterable
    of document texts, or a source name (`stdlib`, `text:PATH`, anything `data prepare` reads)."""
    check_spec(spec)
    if spec == "bytes":
        return BYTES
    if spec.startswith("bpe:"):
        if corpus_text_or_source is None:
            raise DataError(f"data.tokenizer={spec}: training a BPE needs text to train on")
        texts = corpus_text_or_source
        if isinstance(texts, str):
            texts = (text for _, text in documents(texts))
        return train_bpe(texts, int(spec[4:]), spec)
    if spec.startswith("tiktoken:"):
        path = Path(spec[len("tiktoken:"):])
        if not path.is_file():
            raise DataError(f"data.tokenizer={spec!r}: {path} is not a file; give a tiktoken ranks file")
        return TiktokenTokenizer(path, spec)
    return _from_path(Path(spec), spec)


def train_bpe(texts, vocab_size: int, spec: str | None = None) -> HFTokenizer:
    """A byte-level BPE (GPT-2's byte alphabet and split) trained on `texts` here; `<|endoftext|>` is id 0."""
    from tokenizers import Tokenizer as HFTok, decoders, models, pre_tokenizers, trainers  # deferred: heavy

    tok = HFTok(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS_TOKEN], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return HFTokenizer(tok, spec or f"bpe:{vocab_size}", tok.token_to_id(EOS_TOKEN))


def _from_path(p: Path, spec: str) -> Tokenizer:
    if p.is_dir() and (p / META_FILE).is_file():  # a run's or a checkpoint's tokenizer/ folder
        return load(p)
    if p.is_dir():
        if not (p / HF_FILE).is_file():
            raise DataError(f"data.tokenizer={spec!r}: {p} has no {HF_FILE}; give a tokenizer.json or a Hugging "
                            "Face directory with one (slow sentencepiece-only tokenizers are not read)")
        return _hf_dir(p, spec)
    if not p.is_file():
        raise DataError(f"data.tokenizer={spec!r}: no such file or directory; use {SPECS}")
    return _hf_file(p, spec, {}, None)


def is_byte_export(path: Path) -> bool:
    """A tokenizer.json that is the bytes tokenizer written out (checkpoint/hf.py's export of a bytes run:
    a byte-level BPE of the 256 bytes, no merges, no added tokens)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        model = doc["model"]
        return (model.get("type") == "BPE" and not model.get("merges") and not doc.get("added_tokens")
                and model.get("vocab") == {ch: b for b, ch in byte_alphabet().items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _hf_file(path: Path, spec: str, config: dict, eos_name: str | None) -> Tokenizer:
    from tokenizers import AddedToken, Tokenizer as HFTok  # deferred: heavy

    if is_byte_export(path):
        return BYTES

    try:
        tok = HFTok.from_file(str(path))
    except Exception as e:  # noqa: BLE001 - the user's file
        raise DataError(f"{path}: not a Hugging Face tokenizer.json ({type(e).__name__}: {str(e)[:80]})") from None
    eos = tok.token_to_id(eos_name) if eos_name else None
    for name in KNOWN_EOS:
        if eos is None:
            eos = tok.token_to_id(name)
    if eos is None:  # a tokenizer without an end of document: give it one, after its vocabulary
        tok.add_special_tokens([AddedToken(EOS_TOKEN, special=True)])
        eos = tok.token_to_id(EOS_TOKEN)
    keep = {k: config[k] for k in ("bos_token", "model_max_length", "add_bos_token") if k in config}
    return HFTokenizer(tok, spec, eos, keep)


def _token_name(value) -> str | None:
    """tokenizer_config.json writes a token as a string or as {"content": ...}."""
    return value.get("content") if isinstance(value, dict) else value


def _hf_dir(d: Path, spec: str, eos_id: int | None = None) -> Tokenizer:
    config = _read_json(d / HF_CONFIG)
    name = _token_name(config.get("eos_token"))
    if name is None:  # a transformers checkpoint directory: config.json names the id
        ids = _read_json(d / "config.json").get("eos_token_id")
        eos_id = eos_id if eos_id is not None else (ids[0] if isinstance(ids, list) and ids else ids)
    tok = _hf_file(d / HF_FILE, spec, config, name)
    if tok is BYTES:
        return tok
    if name is None and isinstance(eos_id, int) and 0 <= eos_id < tok.vocab_size:
        tok.eos_id = eos_id
    return tok


def _read_json(p: Path) -> dict:
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def load(dir) -> Tokenizer:
    """The tokenizer saved in `dir` (by `save`, or a directory with HF tokenizer files only)."""
    d = Path(dir)
    meta = _read_json(d / META_FILE)
    kind = meta.get("kind")
    if kind == "bytes":
        return BYTES
    if kind == "tiktoken":
        return TiktokenTokenizer(d / TIKTOKEN_FILE, meta.get("spec", "tiktoken"))
    if (d / HF_FILE).is_file():
        tok = _hf_dir(d, meta.get("spec") or str(d), meta.get("eos_id"))
        if "eos_id" in meta and tok is not BYTES:
            tok.eos_id = int(meta["eos_id"])
        return tok
    raise DataError(f"{d} holds no tokenizer ({META_FILE} or {HF_FILE}); a run's or checkpoint's tokenizer/ "
                    "directory, or a Hugging Face tokenizer directory")


def eos_id(cfg_or_dir) -> int:
    """The end-of-document id of a run's config (data.tokenizer and data.source) or a tokenizer directory."""
    if isinstance(cfg_or_dir, (str, os.PathLike)):
        return load(cfg_or_dir).eos_id
    return run_tokenizer(cfg_or_dir.data.source, cfg_or_dir.data.tokenizer).eos_id


def run_tokenizer(source: str, spec: str = "bytes") -> Tokenizer:
    """The tokenizer a run with `data.source` and `data.tokenizer` trains with: a `tokens:DIR` source carries
    its own (DIR/tokenizer/); `bpe:N` on another source is trained once and cached by the source's
    fingerprint ($SHARDLAB_CACHE/tokenizers/), so every rank and every later run finds the same one."""
    if source.startswith("tokens:"):
        d = Path(source[len("tokens:"):]) / "tokenizer"
        if not d.is_dir():
            raise DataError(f"data.source={source!r}: {d} is missing; prepare the directory with "
                            "`shardlab data prepare SRC --out DIR`")
        tok = load(d)
        if spec not in ("bytes", tok.spec):
            raise DataError(f"data.tokenizer={spec!r}, but data.source={source!r} was prepared with {tok.spec!r} "
                            "and carries that tokenizer; drop data.tokenizer (or prepare again with yours)")
        return tok
    if spec.startswith("bpe:") and source.startswith("bin:"):
        raise DataError(f"data.tokenizer={spec}: a bin: source is token ids already, there is no text to train "
                        "on; name the tokenizer that wrote it (PATH/tokenizer.json), or prepare text with "
                        "`shardlab data prepare`")
    if not spec.startswith("bpe:"):
        return from_spec(spec)
    d = cache_dir() / "tokenizers" / f"{spec.replace(':', '')}-{fingerprint(source)}"
    if (d / META_FILE).is_file():
        return load(d)
    tok = from_spec(spec, source)
    try:
        tok.save(d)
    except OSError:  # an unwritable cache, or another rank renamed its identical copy first
        pass
    return tok


def tiktoken_to_hf(tok: TiktokenTokenizer) -> HFTokenizer:
    """The same BPE as a `tokenizers` byte-level BPE (for an HF export): each token's string in GPT-2's
    byte alphabet, and as merges every split of a multi-byte token into two tokens, in the order of the
    tokens' ranks (tiktoken merges the adjacent pair whose union ranks lowest; BPE the earliest merge)."""
    from tokenizers import AddedToken, Regex, Tokenizer as HFTok, decoders, models, pre_tokenizers

    alphabet = byte_alphabet()
    ranks = tok.ranks()
    text = {b: "".join(alphabet[c] for c in b) for b in ranks}
    merges = []
    for b, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        # every split of b into two tokens: whichever pair the parts are when they meet, they merge at b's rank
        splits = sorted((ranks[b[:i]], ranks[b[i:]], i) for i in range(1, len(b)) if b[:i] in ranks and b[i:] in ranks)
        merges += [(text[b[:i]], text[b[i:]]) for _, _, i in splits]
    hf = HFTok(models.BPE(vocab={text[b]: r for b, r in ranks.items()}, merges=merges, ignore_merges=True))
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(TIKTOKEN_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens([AddedToken(EOS_TOKEN, special=True)])
    return HFTokenizer(hf, tok.spec, hf.token_to_id(EOS_TOKEN))


def byte_alphabet() -> dict[int, str]:
    """GPT-2's map from the 256 bytes to printable characters (a BPE vocabulary is made of strings):
    printable Latin-1 bytes stand for themselves, the others for chr(256 + n)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = [b for b in range(256) if b not in keep]
    return {**{b: chr(b) for b in keep}, **{b: chr(256 + n) for n, b in enumerate(extra)}}


__all__ = ["Tokenizer", "BytesTokenizer", "HFTokenizer", "TiktokenTokenizer", "BYTES", "VOCAB_SIZE", "EOS_TOKEN",
           "encode", "decode", "from_spec", "load", "eos_id", "train_bpe", "check_spec", "tiktoken_to_hf",
           "byte_alphabet"]
