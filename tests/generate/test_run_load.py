"""`shardlab.run.load(RUN).logits(tokens)`: a run's model in one Python process, whatever layout trained it,
equal to its Hugging Face export loaded by transformers (docs/models.md's five lines, run as written)."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import torch

import shardlab.run
from shardlab.testing import assert_float64_equal

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "tiny.toml"


def _train_zero3(run: Path) -> None:
    """What `shardlab train --config configs/tiny.toml --nproc 2 parallel.dp=zero3 ...` runs on each rank:
    every parameter sharded over the two ranks, so the checkpoint holds each tensor in two halves."""
    from shardlab import comm, config
    from shardlab.launch import launcher as launch
    from shardlab.train.trainer import Trainer

    cfg = config.load(CONFIG, ["parallel.dp=zero3", "train.steps=2", "train.eval_every=0"])
    cfg = config.validate(cfg, comm.world_size())
    if comm.rank() == 0:
        launch.write_config(run, cfg)
    with contextlib.redirect_stdout(io.StringIO()):
        Trainer(cfg, run).run()


@pytest.fixture(scope="module")
def zero3_run(tmp_path_factory, pool2):
    run = tmp_path_factory.mktemp("access") / "run"
    pool2.run(_train_zero3, run, timeout=300)
    return run


def test_run_logits_equal_the_hf_export_in_transformers(zero3_run, tmp_path):
    transformers = pytest.importorskip("transformers")
    from shardlab.checkpoint import cli

    run, hf = str(zero3_run), str(tmp_path / "hf")
    # docs/models.md, "Logits in Python", line for line (the export is `shardlab ckpt export RUN --hf DIR`)
    assert cli.main(["export", run, "--hf", hf]) == 0
    theirs = transformers.AutoModelForCausalLM.from_pretrained(hf).eval()
    ids = torch.tensor([[5, 17, 42, 99, 3, 250, 7, 64]])
    ours = shardlab.run.load(run).logits(ids)
    # fp32 on both sides through two implementations (transformers' GPT-2 blocks, ours): the same arithmetic,
    # not necessarily in the same summation order, so not bitwise; measured 1.2e-7 at logits up to 1.8 (a few
    # fp32 ulps), and 1e-5 leaves room for other kernels. The float64 comparison below is the exact one.
    torch.testing.assert_close(ours, theirs(ids).logits, rtol=0, atol=1e-5)

    r = shardlab.run.load(run)
    assert ours.shape == (1, 8, r.model().cfg.vocab_size) and r.checkpoint.name == "step_000002"
    with torch.no_grad():
        assert_float64_equal(r.model().double()(ids), theirs.double()(ids).logits)


def test_load_takes_a_checkpoint_a_sequence_and_names_its_tokenizer(zero3_run):
    step = zero3_run / "checkpoints" / "step_000002"
    r = shardlab.run.load(step)
    assert r.path == zero3_run and r.checkpoint == step  # the run's records come with one of its checkpoints
    assert r.config.parallel.dp == "zero3" and r.summary is not None and r.metrics
    ids = [5, 17, 42]
    whole = shardlab.run.load(zero3_run).logits([ids])
    assert torch.equal(r.logits(ids), whole)  # one sequence is a batch of one; the same weights either way
    assert r.tokenizer.decode(r.tokenizer.encode("hi")) == "hi"  # tiny.toml's data: the bytes tokenizer


def test_load_refuses_what_is_not_a_run_or_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither config.toml nor checkpoints"):
        shardlab.run.load(tmp_path)
