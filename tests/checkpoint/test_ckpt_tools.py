"""`shardlab ckpt ls|verify|inspect|export` and the HF GPT-2 export (in-process, strategy single)."""
import json
import os
import stat

import pytest
import torch
from ckpt_harness import make_cfg

from shardlab.checkpoint import CheckpointError, CheckpointManager
from shardlab.checkpoint import cli as ckpt_cli
from shardlab.checkpoint import manifest as mf
from shardlab.testing import run_cli


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from shardlab.train.trainer import Trainer

    run = tmp_path_factory.mktemp("single")
    trainer = Trainer(make_cfg(["parallel.strategy=single", "train.steps=3", "ckpt.every=2", "ckpt.final=true"], 1),
                      run)
    trainer.run()
    return run, trainer


def test_ls_verify_inspect(trained, capsys):
    run, _ = trained
    assert ckpt_cli.main(["ls", str(run)]) == 0
    out = capsys.readouterr().out
    assert "step_000002" in out and "step_000003" in out and "<- latest" in out and "committed" in out
    assert ckpt_cli.main(["verify", str(run)]) == 0
    assert capsys.readouterr().out.count("ok ") == 2
    assert ckpt_cli.main(["inspect", str(run), "--tensors"]) == 0
    out = capsys.readouterr().out
    assert "step        3" in out and "model.wte.weight" in out and "optim.state.wte.weight.exp_avg" in out


def test_bad_input_exits_2(tmp_path, capsys):
    assert ckpt_cli.main(["verify", str(tmp_path / "nope")]) == 2
    (tmp_path / "step_000005").mkdir()  # an uncommitted directory: never loaded, never exported
    assert ckpt_cli.main(["export", str(tmp_path / "step_000005"), "--hf", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "MANIFEST.json" in err[1]
    assert ckpt_cli.main(["frobnicate"]) == 2


def test_resume_from_uncommitted_path_is_a_clear_error(trained, tmp_path):
    run, trainer = trained
    (tmp_path / "step_000005").mkdir()
    cfg = make_cfg(["parallel.strategy=single", f"ckpt.resume={tmp_path / 'step_000005'}"], 1)
    with pytest.raises(CheckpointError, match="no MANIFEST.json"):
        CheckpointManager(tmp_path / "other", cfg).resume(trainer.state)


def test_hf_export_same_logits(trained, tmp_path):
    transformers = pytest.importorskip("transformers")
    run, trainer = trained
    assert ckpt_cli.main(["export", str(run), "--hf", str(tmp_path / "hf")]) == 0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["n_layer"] == 2
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    ours = trainer.strategy.model.eval()
    idx = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(hf(idx).logits, ours(idx), atol=1e-5, rtol=0)


def test_one_process_train_and_export_are_quiet_shareable_and_carry_the_tokenizer(tmp_path):
    """As a user runs them (fresh processes): `--nproc 1` training that saves, then the export, print no
    torch 'distributed is disabled' warning; the model file is readable by others; the tokenizer loads in
    `transformers` and encodes text to the byte ids the model was trained on."""
    transformers = pytest.importorskip("transformers")
    from shardlab.data import tokenizer

    run, out = tmp_path / "run", tmp_path / "hf"
    p = run_cli(["train", "--nproc", "1", "--config", "configs/tiny.toml", "--out", str(run), "train.steps=2",
                 "train.eval_every=0", "ckpt.every=2"], timeout=180)
    assert p.returncode == 0, p.stderr
    assert "distributed is disabled" not in p.stderr and "UserWarning" not in p.stderr, p.stderr
    p = run_cli(["ckpt", "export", str(run), "--hf", str(out)], timeout=120)
    assert p.returncode == 0, p.stderr
    assert "distributed is disabled" not in p.stderr and "UserWarning" not in p.stderr, p.stderr
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((out / "model.safetensors").stat().st_mode) == 0o666 & ~umask  # not safetensors' 0600
    tok = transformers.AutoTokenizer.from_pretrained(out)
    text = "def f(x):\n\treturn x  # héllo, wörld ☃\x00"
    ids = tok(text)["input_ids"]
    assert ids == list(text.encode("utf-8"))
    assert tokenizer.encode(text).tolist() == ids[:-1]  # NUL is shardlab's end of document, never text
    assert tok.decode(ids) == text and len(tok) == tokenizer.VOCAB_SIZE


def test_train_with_uncommitted_resume_path_exits_2(tmp_path, capsys):
    from shardlab.cli import cmd_train

    (tmp_path / "step_000004").mkdir()
    rc = cmd_train(["--config", "configs/tiny.toml", "--out", str(tmp_path / "run"),
                    f"ckpt.resume={tmp_path / 'step_000004'}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "no MANIFEST.json" in err
    assert not (tmp_path / "run").exists()  # nothing written


def test_async_copy_is_taken_before_the_next_optimizer_step(trained, tmp_path, monkeypatch):
    """The async writer copies the tensors in the background; an optimizer step issued meanwhile must wait
    for the copy, so the checkpoint holds the state of the step it was taken at. (Runs last: it moves the
    trained model.)"""
    import time

    from shardlab.checkpoint import state as st_mod
    from shardlab.checkpoint.hf import load_model_tensors

    _, trainer = trained
    copy, slept = st_mod.stage, []

    def slow_copy(obj, *args):  # stage() recurses through this too: sleep once, at the top
        if not slept:
            slept.append(time.sleep(0.5))
        return copy(obj, *args)

    monkeypatch.setattr(st_mod, "stage", slow_copy)
    mgr = CheckpointManager(tmp_path, trainer.cfg)
    before = {k: v.clone() for k, v in trainer.strategy.full_parameters().items()}
    mgr.save(trainer.state, async_=True)
    for p in trainer.strategy.model.parameters():
        p.grad = torch.ones_like(p)
    trainer.state.optimizer.step()  # right away, while the copy is still sleeping
    assert mgr.hook_wait_s > 0.2
    assert mgr.wait() is None
    saved = load_model_tensors(mf.read_latest(tmp_path / "checkpoints"))
    for name, value in before.items():
        assert torch.equal(saved[name], value), name
        assert not torch.equal(trainer.strategy.full_parameters()[name], value)  # the step did happen


def test_resume_with_another_global_batch_exits_2(trained, tmp_path, capsys):
    """The sample order can only continue with the same global batch: caught before anything starts."""
    from shardlab.cli import cmd_train
    from ckpt_harness import BASE

    run, _ = trained
    batch = make_cfg([], 1).train.global_batch
    args = [a for a in BASE if not a.startswith(("train.global_batch", "train.micro_batch"))]
    rc = cmd_train(["--nproc", "1", "--out", str(tmp_path / "run"), *args, "parallel.strategy=single",
                    f"train.micro_batch={batch * 2}", f"ckpt.resume={run}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and f"global_batch={batch}" in err
    assert not (tmp_path / "run").exists()
