"""`shardlab generate` and `ckpt export --hf` with a BPE run: the prompt is encoded and the stream decoded with
the run's tokenizer (not bytes), sampling is the default, and the export loads in transformers with its
tokenizer, which encodes like the run's, and computes the same logits."""
import json

import pytest
import torch

from bpe_harness import VOCAB, prepare, train
from cli_harness import run_in_process
from shardlab.data import tokenizer as tk
from shardlab.generate.engine import Options, generate
from shardlab.generate.load import load_model

PROMPT = "def main():\n    return"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bpe")
    r, run = train(root, prepare(root, workers=1))
    assert r.returncode == 0, r.stderr
    return run


def test_generate_encodes_and_decodes_with_the_run_s_tokenizer(run, capsys):
    from shardlab.generate.cli import main

    tok = tk.load(run / "tokenizer")
    assert tok.kind == "hf" and tok.vocab_size == VOCAB
    ids = tok.encode(PROMPT).tolist()
    assert len(ids) < len(PROMPT.encode())  # BPE ids, not bytes
    greedy = generate(load_model(run), [ids], Options(max_new=16))[0][0].tolist()
    assert main([str(run), "--prompt", PROMPT, "--max-new", "16", "--json", "--temperature", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokens"] == greedy and out["text"] == tok.decode(greedy)
    assert any(t >= 256 for t in greedy) or max(ids) >= 256  # ids a byte-level decode could not handle
    # streamed: the prompt, then the decoded text as it grows
    assert main([str(run), "--prompt", PROMPT, "--max-new", "16", "--temperature", "0"]) == 0
    assert capsys.readouterr().out == PROMPT + tok.decode(greedy) + "\n"


def test_sampling_is_the_default_and_seeded(run, capsys):
    from shardlab.generate.cli import main, parser

    args = parser().parse_args([str(run), "--prompt", "x"])
    assert args.temperature > 0 and args.top_k > 0 and args.repetition_penalty > 1
    texts = []
    for seed in (0, 0, 1):
        assert main([str(run), "--prompt", PROMPT, "--max-new", "24", "--json", "--seed", str(seed)]) == 0
        texts.append(json.loads(capsys.readouterr().out)["tokens"])
    assert texts[0] == texts[1] != texts[2]


def test_the_repetition_penalty_only_moves_sampling():
    from shardlab.generate.sampling import Sampler

    logits = torch.tensor([[3.0, 2.9, -1.0], [0.5, 0.4, 0.3]])
    greedy = Sampler(Options(repetition_penalty=2.0), [0, 1])
    assert [greedy(logits).tolist() for _ in range(3)] == [[0, 0]] * 3  # greedy is the argmax, always
    plain = Sampler(Options(temperature=1e-4, seed=3), [0, 1])  # ~greedy sampling, no penalty
    pen = Sampler(Options(temperature=1e-4, seed=3, repetition_penalty=2.0, repetition_window=1), [0, 1])
    assert [plain(logits).tolist() for _ in range(2)] == [[0, 0], [0, 0]]
    # the last pick's logit halved (3.0 -> 1.5 below 2.9; 0.5 -> 0.25 below 0.4): the runner-up; a window of 1
    # remembers only that, so the next pick may return
    assert [pen(logits).tolist() for _ in range(3)] == [[0, 0], [1, 1], [0, 0]]


def test_export_of_a_bpe_run_loads_in_transformers_with_its_tokenizer(run, tmp_path):
    transformers = pytest.importorskip("transformers")
    r = run_in_process(["ckpt", "export", str(run), "--hf", str(tmp_path / "hf")])
    assert r.returncode == 0, r.stderr
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    ours = tk.load(run / "tokenizer")
    assert config["vocab_size"] == VOCAB and config["eos_token_id"] == config["bos_token_id"] == ours.eos_id
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert len(theirs) == VOCAB and theirs.eos_token == tk.EOS_TOKEN and theirs.eos_token_id == ours.eos_id
    text = PROMPT + " {'é': [1, 2]}\n\tclass A(B):  # ✓"
    ids = ours.encode(text).tolist()
    assert theirs.encode(text) == ids and theirs.decode(ids) == text
    # the same logits: both sides in float64 (kernels differ only in rounding order, ~1e-15 relative)
    hf = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "hf")).double().eval()
    model = load_model(run).double()
    x = torch.tensor([ids[:32]])  # (the run's max_seq_len)
    with torch.no_grad():
        torch.testing.assert_close(model(x), hf(x).logits, rtol=1e-9, atol=1e-9)
