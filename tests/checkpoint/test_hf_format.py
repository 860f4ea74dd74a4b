"""Hugging Face safetensors through DCP (checkpoint/hf_dcp.py), at world 2 under ZeRO-3, tp=2 and pp=2:

- `ckpt.format=hf`: every rank writes its own pieces, rank 0 consolidates; transformers loads the
  directory as it is and computes the run's logits (float64 on both sides);
- `ckpt.init_from=HF_DIR`: a run started from a Hugging Face directory directly equals, bit for bit, the
  run started from that directory's `ckpt import --hf` checkpoint (the same weights before the first step,
  the same losses after).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from hf_harness import init_from_run, make_hf, reference_logits  # noqa: E402
from shardlab.checkpoint import cli  # noqa: E402
from shardlab.testing import assert_float64_equal, in_float64  # noqa: E402

LAYOUTS = {"zero3": ["parallel.strategy=zero3"], "tp2": ["parallel.strategy=ddp", "parallel.tp=2"],
           "pp2": ["parallel.strategy=ddp", "parallel.pp=2"]}


def hf_run(run_dir: Path, overrides: list[str], world: int) -> dict:
    """Two steps with ckpt.format=hf (the final save only); this rank's full parameters and the model config."""
    from ckpt_harness import _steps, make_cfg

    from shardlab.checkpoint import hf_dcp
    from shardlab.train.trainer import Trainer

    Path(run_dir).mkdir(parents=True, exist_ok=True)
    trainer = Trainer(make_cfg(["ckpt.format=hf", "ckpt.final=true", *overrides], world), Path(run_dir))
    _steps(trainer, 2)
    trainer.ckpt.close(trainer.state)
    return {"params": {k: v.detach().clone() for k, v in trainer.strategy.full_parameters().items()},
            "model_cfg": hf_dcp.model_config(trainer.state), "failed": trainer.ckpt.failed}


@pytest.mark.parametrize("model,layout", [("tiny", "zero3"), ("tiny", "tp2"), ("tiny", "pp2"),
                                          ("llama-tiny", "tp2")])
def test_hf_save_loads_in_transformers_with_the_runs_logits(pool2, tmp_path, model, layout):
    from shardlab.model.gpt import build_model

    run = tmp_path / "run"
    results = pool2.run(in_float64, hf_run, run, [f"model.preset={model}", *LAYOUTS[layout]], 2)
    assert all(not r["failed"] for r in results), results[0]["failed"]
    hf_dir = run / "hf" / "step_000002"
    assert sorted(p.name for p in hf_dir.iterdir()) == [
        "config.json", "model-00001-of-00001.safetensors", "model.safetensors.index.json", "tokenizer.json",
        "tokenizer_config.json"]  # the ranks' shards consolidated and removed
    params = {k: v for r in results for k, v in r["params"].items()}  # (under pp each rank its stage's)
    ours = in_float64(build_model, results[0]["model_cfg"], 0).double()
    missing, unexpected = ours.load_state_dict(params, strict=False)
    assert not unexpected and all(k.endswith("head.weight") for k in missing), missing  # a tied head
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        mine = in_float64(ours.eval(), ids)  # (rotary tables made at float64 too)
    theirs = reference_logits(hf_dir, ids)
    assert theirs.dtype == torch.float64
    assert_float64_equal(theirs, mine, what=f"{model} {layout} logits")


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    """A Hugging Face GPT-2 (untied head) and a Llama with GQA saved in two shards with an index, and each
    one's `ckpt import --hf` checkpoint."""
    root = tmp_path_factory.mktemp("hfdirs")
    out = {}
    for case in ("gpt2-untied", "llama-gqa-sharded"):
        make_hf(case, root / case, std=0.02)
        assert cli.main(["import", "--hf", str(root / case), "--out", str(root / f"{case}.ck")]) == 0
        out[case] = (root / case, root / f"{case}.ck")
    return out


@pytest.mark.parametrize("case,layout", [("gpt2-untied", "zero3"), ("gpt2-untied", "tp2"), ("gpt2-untied", "pp2"),
                                         ("llama-gqa-sharded", "zero3"), ("llama-gqa-sharded", "tp2"),
                                         ("llama-gqa-sharded", "pp2")])
def test_init_from_an_hf_dir_equals_the_imported_checkpoints_run_bitwise(pool2, hf_dirs, tmp_path, case, layout):
    hf_dir, imported = hf_dirs[case]
    direct = pool2.run(init_from_run, tmp_path / "direct", str(hf_dir), LAYOUTS[layout], 2)
    via = pool2.run(init_from_run, tmp_path / "via", str(imported), LAYOUTS[layout], 2)
    for a, b in zip(direct, via):
        assert a["start"] == 0 and a["fresh_optimizer"]
        assert any("Hugging Face directory" in n for n in a["notes"]) or not a["notes"]
        assert a["before"].keys() == b["before"].keys()
        for k in a["before"]:
            assert torch.equal(a["before"][k], b["before"][k]), k
        assert a["losses"] == b["losses"]
        assert a["model"] == b["model"]


def test_init_from_names_a_missing_tensor_in_one_line(tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    from shardlab.cli import cmd_train

    make_hf("gpt2-untied", tmp_path / "hf", std=0.02)
    sd = load_file(str(tmp_path / "hf" / "model.safetensors"))
    del sd["lm_head.weight"]
    save_file(sd, str(tmp_path / "hf" / "model.safetensors"), metadata={"format": "pt"})
    capsys.readouterr()  # (transformers' progress bars)
    try:
        rc = cmd_train(["--nproc", "1", "--out", str(tmp_path / "run"), "parallel.strategy=single", "train.steps=1",
                        f"ckpt.init_from={tmp_path / 'hf'}", "train.seq_len=32", "train.global_batch=2",
                        "train.micro_batch=2", "train.eval_every=0"])
    except SystemExit as e:  # (one process runs in this one)
        rc = e.code
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert rc == 2 and len(err) == 1 and "the weights have no tensor 'lm_head.weight'" in err[0], err
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "gpt2"
