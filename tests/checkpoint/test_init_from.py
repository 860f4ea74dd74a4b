"""`ckpt.init_from=CK`: a run starts from an imported model's weights under any layout -- ZeRO-3, tp=2,
pp=2 at world 2 -- with a fresh optimizer at step 0, and trains exactly as one process started from the
same weights does (float64 on every side: compare.py's FP64_TOL holds on any CPU). The model's shape comes
from the checkpoint (config.toml records it); a model.* key that contradicts it is one line, exit 2.
"""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from hf_harness import CASES, init_from_run, make_hf, write_tokenizer  # noqa: E402
from shardlab import config  # noqa: E402
from shardlab.checkpoint import cli  # noqa: E402
from shardlab.generate.load import load_model  # noqa: E402
from shardlab.testing import assert_float64_equal, in_float64  # noqa: E402

LAYOUTS = {"zero3": ["parallel.strategy=zero3"], "tp2": ["parallel.strategy=ddp", "parallel.tp=2"],
           "pp2": ["parallel.strategy=ddp", "parallel.pp=2"]}


@pytest.fixture(scope="module")
def ck(tmp_path_factory):
    """The imported GPT-2 with an untied head (vocabulary 1001) and the Llama with GQA, and each one's
    single-process run from it."""
    root = tmp_path_factory.mktemp("init")
    out = {}
    for case in ("gpt2-untied", "llama-gqa-sharded"):
        make_hf(case, root / case, std=0.02)  # trainable scale
        assert cli.main(["import", "--hf", str(root / case), "--out", str(root / f"{case}.ck")]) == 0
        single = in_float64(init_from_run, root / f"{case}-single", str(root / f"{case}.ck"),
                            ["parallel.strategy=single"], 1)
        out[case] = (root / f"{case}.ck", single)
    return out


def _weights(ck) -> dict:
    return {k: v.double() for k, v in load_model(ck).named_parameters()}


@pytest.mark.parametrize("case", ["gpt2-untied", "llama-gqa-sharded"])
def test_single_run_starts_from_the_imported_weights_fresh(ck, case):
    path, single = ck[case]
    assert single["start"] == 0 and single["fresh_optimizer"]
    assert single["model"].preset == "custom" and single["model"].vocab_size in (1001, 300)
    assert any("initialised the model from" in n for n in single["notes"])
    assert single["eps"] == [CASES[case]["eps"]]  # the checkpoint's epsilon, not the default (1e-5)
    for name, w in _weights(path).items():
        assert torch.equal(single["before"][name], w), name
    assert all(loss == loss for loss in single["losses"])


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("case", ["gpt2-untied", "llama-gqa-sharded"])
def test_init_from_under_any_layout_equals_one_process(pool2, ck, tmp_path, case, layout):
    path, single = ck[case]
    results = pool2.run(in_float64, init_from_run, tmp_path / "run", str(path), LAYOUTS[layout], 2)
    for r in results:  # (under pp each rank holds its stage's parameters: together, all of them)
        assert r["start"] == 0 and r["fresh_optimizer"]
        assert_float64_equal(r["before"], {k: single["before"][k] for k in r["before"]}, what="initial weights")
        assert_float64_equal(r["losses"], single["losses"], what=f"{layout} losses")
    assert set().union(*(r["before"] for r in results)) == set(single["before"])


def test_a_model_key_contradicting_the_checkpoint_is_one_line(ck, capsys):
    from shardlab.cli import cmd_train
    path, _ = ck["llama-gqa-sharded"]
    assert cmd_train(["--nproc", "1", "parallel.strategy=single", f"ckpt.init_from={path}",
                 "model.n_kv_heads=4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.n_kv_heads=4 contradicts ckpt.init_from" in err[0]
    cfg = config.load(None, [f"ckpt.init_from={path}", "model.dropout=0.0", "train.seq_len=32"])
    cfg = config.validate(cfg, 2)  # a training key stays the run's; the shape is the checkpoint's
    assert (cfg.model.arch, cfg.model.n_kv_heads, cfg.model.intermediate_size, cfg.model.norm_eps) == \
        ("llama", 2, 48, CASES["llama-gqa-sharded"]["eps"])


def test_the_checkpoints_tokenizer_comes_with_its_weights(tmp_path, capsys):
    """A run left at data.tokenizer=bytes trains with the imported tokenizer (config records its folder);
    another tokenizer named explicitly is one line, exit 2: the embedding's rows mean the checkpoint's tokens."""
    from shardlab.cli import cmd_train
    from shardlab.data import tokenizer as tk
    make_hf("gpt2-untied", tmp_path / "hf", std=0.02)
    write_tokenizer(tmp_path / "hf", 1001, eos=True)
    assert cli.main(["import", "--hf", str(tmp_path / "hf"), "--out", str(tmp_path / "ck")]) == 0
    step = tmp_path / "ck" / "checkpoints" / "step_000000"
    cfg = config.load(None, [f"ckpt.init_from={tmp_path / 'ck'}", "train.seq_len=16"])
    cfg = config.validate(cfg, 1)
    assert cfg.data.tokenizer == str(step / "tokenizer")
    assert tk.from_spec(cfg.data.tokenizer).vocab_size == 1001
    (tmp_path / "other").mkdir()
    write_tokenizer(tmp_path / "other", 900, eos=True)
    capsys.readouterr()
    assert cmd_train(["--nproc", "1", "--out", str(tmp_path / "run"), "parallel.strategy=single",
                      f"ckpt.init_from={tmp_path / 'ck'}", f"data.tokenizer={tmp_path / 'other' / 'tokenizer.json'}",
                      "train.seq_len=16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("drop data.tokenizer (a run from a checkpoint trains with the "
                                             "checkpoint's tokenizer)"), err
    assert f"data.tokenizer={tmp_path / 'other' / 'tokenizer.json'} is not the tokenizer ckpt.init_from=" in err[0]
    assert not (tmp_path / "run").exists()  # nothing half-written

    # data prepared with another tokenizer, data.tokenizer never set: the one thing to do is prepare again
    from shardlab.data import prepare as prep
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "a.txt").write_text("w1 w2 w3 " * 200)
    prep.prepare(prep.Job(src=f"text:{tmp_path / 'text'}", out=tmp_path / "tok", quiet=True), "bytes")
    assert cmd_train(["--nproc", "1", "--out", str(tmp_path / "run"), "parallel.strategy=single",
                      f"ckpt.init_from={tmp_path / 'ck'}", f"data.source=tokens:{tmp_path / 'tok'}",
                      "train.seq_len=16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "drop data.tokenizer" not in err[0], err
    assert f"data.source=tokens:{tmp_path / 'tok'} was prepared with bytes (vocabulary 256)" in err[0]
    assert (f"prepare the data again with the checkpoint's tokenizer, `shardlab data prepare text:{tmp_path / 'text'} "
            f"--tokenizer {step / 'tokenizer'} --out {tmp_path / 'tok'}-ck`") in err[0], err
    assert not (tmp_path / "run").exists()
