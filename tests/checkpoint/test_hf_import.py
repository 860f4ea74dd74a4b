"""`shardlab ckpt import --hf DIR --out CK`: tiny random GPT2LMHeadModel / LlamaForCausalLM directories made
with transformers here (no download) become ordinary checkpoints whose model computes what transformers
computes: logits equal in float64 on both sides (hf_harness.float64_reference says why transformers needs
its float32 upcasts raised for that) at compare.FP64_TOL, and the same greedy tokens. Import -> export gives
back the stored tensors bit for bit in their dtype; what the model cannot compute is one line, exit 2, and
nothing is left behind.

Greedy ids are compared exactly: both sides run in float64 (round-off ~1e-14 on logits of ~8, measured
above), so an argmax could only flip on a top-two gap below that.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from hf_harness import (CASES, MAPPED, hf_field, make_hf, make_hf_config, prompts, reference_greedy,  # noqa: E402
                        reference_logits, write_tokenizer)
from shardlab.checkpoint import cli, manifest as mf  # noqa: E402
from shardlab.checkpoint.hf import export_hf  # noqa: E402
from shardlab.generate.engine import Options, generate  # noqa: E402
from shardlab.generate.load import load_model  # noqa: E402
from shardlab.model.configs import GPTConfig  # noqa: E402
from shardlab.testing import assert_float64_equal, in_float64  # noqa: E402


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """case -> (the HF directory, the imported checkpoint CK), every case imported once through the CLI."""
    root = tmp_path_factory.mktemp("hf")
    out = {}
    for case in CASES:
        make_hf(case, root / case)
        if case == "llama-gqa-sharded":
            write_tokenizer(root / case, CASES[case]["vocab"])
        assert cli.main(["import", "--hf", str(root / case), "--out", str(root / f"{case}.ck")]) == 0
        out[case] = (root / case, root / f"{case}.ck")
    return out


def _ours_logits(ck: Path, ids: torch.Tensor) -> torch.Tensor:
    model = load_model(ck).double()
    with torch.no_grad():
        return model(ids)


@pytest.mark.parametrize("case", list(CASES))
def test_imported_logits_equal_transformers_in_float64(imported, case):
    hf_dir, ck = imported[case]
    ids = torch.tensor([sum(prompts(CASES[case]["vocab"]), [])])  # 21 positions
    ours = in_float64(_ours_logits, ck, ids)
    theirs = reference_logits(hf_dir, ids)
    assert ours.dtype == theirs.dtype == torch.float64 and ours.shape == (1, 21, CASES[case]["vocab"])
    assert_float64_equal(ours, theirs, what=f"{case} logits")


def _logits_with_default_eps(ck: Path, ids: torch.Tensor) -> torch.Tensor:
    model = load_model(ck).double()
    default = 1e-5 if isinstance(model.cfg, GPTConfig) else 1e-6  # hf_import's fallbacks
    for m in model.modules():
        if isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm)):
            m.eps = default
    with torch.no_grad():
        return model(ids)


@pytest.mark.parametrize("case", list(CASES))
def test_a_wrong_epsilon_moves_the_logits_far_beyond_the_tolerance(imported, case):
    """The float64 comparison above is sensitive to the epsilon: the same weights with the default epsilon
    (what a misread key falls back to) give logits off by far more than FP64_TOL."""
    from shardlab.testing.compare import FP64_TOL
    hf_dir, ck = imported[case]
    ids = torch.tensor([sum(prompts(CASES[case]["vocab"]), [])])
    wrong = in_float64(_logits_with_default_eps, ck, ids)
    assert (wrong - reference_logits(hf_dir, ids)).abs().max() > 1e4 * FP64_TOL


def _ours_greedy(ck: Path, max_new: int) -> torch.Tensor:
    model = load_model(ck).double()
    return generate(model, prompts(model.cfg.vocab_size), Options(max_new=max_new))[0]


@pytest.mark.parametrize("case", list(CASES))
def test_imported_greedy_tokens_equal_transformers_generate(imported, case):
    hf_dir, ck = imported[case]
    ours = in_float64(_ours_greedy, ck, 10)
    assert len(set(ours.flatten().tolist())) >= 6  # the paths wander: equal tokens prove something
    for i, p in enumerate(prompts(CASES[case]["vocab"])):
        assert ours[i].tolist() == reference_greedy(hf_dir, p, 10), f"{case} prompt {i}"


def _record(ck: Path) -> dict:
    return json.loads((ck / "checkpoints" / "step_000000" / "train_state.json").read_text())["model"]


def test_every_mapped_field_is_away_from_its_defaults_in_some_case():
    """The fixtures themselves: a key misread and replaced by a default goes unseen unless the fixture's
    value differs from that default (transformers' config class's and shardlab's dataclass's)."""
    import dataclasses

    import transformers

    from shardlab.model.configs import GPTConfig, LlamaConfig
    theirs = {"gpt2": transformers.GPT2Config().to_dict(), "llama": transformers.LlamaConfig().to_dict()}
    ours = {"gpt2": {f.name: f.default for f in dataclasses.fields(GPTConfig)},
            "llama": {f.name: f.default for f in dataclasses.fields(LlamaConfig)}}
    for arch, table in MAPPED.items():
        confs = [make_hf_config(case) for case, c in CASES.items() if c["arch"] == arch]
        for field, name in table.items():
            values = [hf_field(conf, field) for conf in confs]
            assert any(v != hf_field(theirs[arch], field) for v in values), f"{arch} {field}: all at default"
            assert any(v != ours[arch].get(name) for v in values), f"{arch} {name}: all at shardlab's default"
        eps = "layer_norm_epsilon" if arch == "gpt2" else "rms_norm_eps"  # the field once misread: every case
        assert all(conf[eps] not in (1e-5, 1e-6) for conf in confs)


def test_import_maps_every_config_field_it_reads(imported):
    for case, (hf_dir, ck) in imported.items():
        conf, m = json.loads((hf_dir / "config.json").read_text()), _record(ck)
        for field, name in MAPPED[CASES[case]["arch"]].items():
            assert m[name] == hf_field(conf, field), f"{case}: {field} -> {name}"
    m = {case: _record(ck) for case, (_, ck) in imported.items()}
    assert m["gpt2-tied"]["tie_embeddings"] is True and m["gpt2-untied"]["tie_embeddings"] is False
    assert (m["llama-gqa-sharded"]["n_kv_heads"], m["llama-gqa-sharded"]["rope_theta"]) == (2, 5000.0)
    assert m["llama-gqa-sharded"]["intermediate_size"] == 48 and m["llama-gqa-sharded"]["norm_eps"] == 1e-2
    assert m["gpt2-untied"]["layer_norm_eps"] == 2e-2
    assert m["llama3-tied-scaled"]["rope_scaling"] == CASES["llama3-tied-scaled"]["scaling"]
    assert m["llama3-tied-scaled"]["tie_embeddings"] is True and m["llama3-tied-scaled"]["n_kv_heads"] == 1
    assert (imported["llama-gqa-sharded"][0] / "model.safetensors.index.json").is_file()  # it was sharded
    # the llama3 case exercises all three bands of the scaling: kept, blended, divided
    from shardlab.model.llama import inv_frequencies
    plain = inv_frequencies(8, 500000.0, torch.float64)
    ratio = inv_frequencies(8, 500000.0, torch.float64, scaling=CASES["llama3-tied-scaled"]["scaling"]) / plain
    assert ratio[0] == 1 and 0.25 < ratio[1] < 1 and torch.allclose(ratio[2:], torch.full((2,), 0.25, dtype=torch.float64))


def test_an_imported_checkpoint_is_ordinary_and_carries_its_tokenizer(imported, capsys, tmp_path):
    hf_dir, ck = imported["llama-gqa-sharded"]
    step = ck / "checkpoints" / "step_000000"
    assert mf.verify(step) == [] and mf.read_latest(ck / "checkpoints") == step
    files = mf.read_manifest(step)["files"]
    assert {"tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json"} <= set(files)
    assert (step / "tokenizer" / "tokenizer.json").read_bytes() == (hf_dir / "tokenizer.json").read_bytes()
    capsys.readouterr()
    assert cli.main(["verify", str(ck)]) == 0 and cli.main(["ls", str(ck)]) == 0
    assert cli.main(["inspect", str(ck), "--tensors"]) == 0
    out = capsys.readouterr().out
    assert "committed" in out and "model.blocks.1.attn.k.weight" in out and "[16, 32]" in out
    # the tokenizer goes on to an export, byte for byte
    export_hf(step, tmp_path / "hf")
    assert (tmp_path / "hf" / "tokenizer.json").read_bytes() == (hf_dir / "tokenizer.json").read_bytes()
    # a tampered tokenizer file is damage like any other
    shutil.copytree(step, tmp_path / "step_000000")
    (tmp_path / "step_000000" / "tokenizer" / "tokenizer.json").write_text("{}")
    assert any("tokenizer/tokenizer.json" in p for p in mf.verify(tmp_path / "step_000000"))


def test_import_without_a_tokenizer_says_so_in_one_line(imported, capsys, tmp_path):
    hf_dir, _ = imported["gpt2-tied"]
    assert cli.main(["import", "--hf", str(hf_dir), "--out", str(tmp_path / "ck")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no tokenizer" in err[0]
    assert not (tmp_path / "ck" / "checkpoints" / "step_000000" / "tokenizer").exists()


def test_export_writes_every_mapped_field_and_imports_back_to_the_same_model(imported, tmp_path):
    """Export's config.json carries each mapped field's value (in transformers 4's spelling, which 5 reads),
    and importing that export builds the same model record: export's keys and import's are one table."""
    for case, (hf_dir, ck) in imported.items():
        out = export_hf(ck / "checkpoints" / "step_000000", tmp_path / case)
        conf, orig = (json.loads((d / "config.json").read_text()) for d in (out, hf_dir))
        for field in MAPPED[CASES[case]["arch"]]:
            assert hf_field(conf, field) == hf_field(orig, field), f"{case}: exported {field}"
        assert cli.main(["import", "--hf", str(out), "--out", str(tmp_path / f"{case}.ck")]) == 0
        assert _record(tmp_path / f"{case}.ck") == _record(ck), case


@pytest.mark.parametrize("case,dtype", [("llama3-tied-scaled", torch.bfloat16), ("gpt2-untied", torch.float16),
                                        ("llama-gqa-sharded", torch.float32)])
def test_import_then_export_is_bitwise_in_the_stored_dtype(tmp_path, case, dtype):
    from safetensors.torch import load_file

    from shardlab.checkpoint.hf_import import read_tensors
    make_hf(case, tmp_path / "hf", dtype=dtype)
    assert cli.main(["import", "--hf", str(tmp_path / "hf"), "--out", str(tmp_path / "ck")]) == 0
    step = tmp_path / "ck" / "checkpoints" / "step_000000"
    assert cli.main(["export", str(step), "--hf", str(tmp_path / "out")]) == 0
    theirs, back = read_tensors(tmp_path / "hf"), load_file(str(tmp_path / "out" / "model.safetensors"))
    assert back.keys() == theirs.keys()
    for name, t in theirs.items():
        assert back[name].dtype == t.dtype == dtype and torch.equal(back[name], t), name
    conf, orig = (json.loads((d / "config.json").read_text()) for d in (tmp_path / "out", tmp_path / "hf"))
    assert conf["tie_word_embeddings"] == orig["tie_word_embeddings"]
    assert conf["torch_dtype"] == str(dtype).removeprefix("torch.")
    import transformers
    again = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "out"))  # loads as it is
    assert type(again).__name__ == orig["architectures"][0]
    if "rope_parameters" in orig and orig["rope_parameters"].get("rope_type") == "llama3":
        assert again.config.rope_parameters["rope_type"] == "llama3"
        assert again.config.rope_parameters["original_max_position_embeddings"] == 32


def _edit(src: Path, dst: Path, **changes) -> Path:
    shutil.copytree(src, dst)
    c = json.loads((dst / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    (dst / "config.json").write_text(json.dumps(c))
    return dst


@pytest.mark.parametrize("case,changes,needle", [
    ("gpt2-tied", {"architectures": ["MistralForCausalLM"], "model_type": "mistral"}, "architectures="),
    ("gpt2-tied", {"activation_function": "gelu"}, "activation_function='gelu'"),
    ("gpt2-tied", {"n_inner": 100}, "n_inner=100"),
    ("gpt2-tied", {"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx=True"),
    ("llama-gqa-sharded", {"attention_bias": True}, "attention_bias=True"),
    ("llama-gqa-sharded", {"mlp_bias": True}, "mlp_bias=True"),
    ("llama-gqa-sharded", {"hidden_act": "gelu"}, "hidden_act='gelu'"),
    ("llama-gqa-sharded", {"head_dim": 16}, "head_dim=16"),
    ("llama-gqa-sharded", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}},
     "rope_parameters.rope_type='yarn'"),
    ("llama-gqa-sharded", {"rope_parameters": None, "rope_theta": 1e4, "rope_scaling": {"type": "dynamic"}},
     "rope_scaling.rope_type='dynamic'"),
    ("llama-gqa-sharded", {"intermediate_size": None}, "no 'intermediate_size'"),
    ("llama-gqa-sharded", {"vocab_size": 301}, "model.embed_tokens.weight"),
])
def test_unsupported_input_is_one_line_exit_2_nothing_written(imported, tmp_path, capsys, case, changes, needle):
    hf_dir = _edit(imported[case][0], tmp_path / "hf", **changes)
    capsys.readouterr()
    assert cli.main(["import", "--hf", str(hf_dir), "--out", str(tmp_path / "ck")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no CK, no hidden half of one


def test_a_tensor_without_a_place_or_a_missing_one_is_one_line(imported, tmp_path, capsys):
    from safetensors.torch import load_file, save_file
    hf_dir = _edit(imported["gpt2-untied"][0], tmp_path / "hf")
    sd = load_file(str(hf_dir / "model.safetensors"))
    save_file({**sd, "transformer.h.0.attn.extra.weight": torch.zeros(2)}, str(hf_dir / "model.safetensors"))
    assert cli.main(["import", "--hf", str(hf_dir), "--out", str(tmp_path / "ck")]) == 2
    assert "'h.0.attn.extra.weight'" in capsys.readouterr().err
    del sd["lm_head.weight"]
    save_file(sd, str(hf_dir / "model.safetensors"))
    assert cli.main(["import", "--hf", str(hf_dir), "--out", str(tmp_path / "ck")]) == 2
    assert "lm_head.weight" in capsys.readouterr().err and not (tmp_path / "ck").exists()
    assert cli.main(["import", "--hf", str(tmp_path / "nope"), "--out", str(tmp_path / "ck")]) == 2
    assert cli.main(["import", "--hf", str(hf_dir)]) == 2


def test_an_interrupted_import_leaves_nothing_and_an_existing_out_is_refused(imported, tmp_path, monkeypatch, capsys):
    hf_dir = imported["llama3-tied-scaled"][0]

    def interrupted(*_):
        raise KeyboardInterrupt  # as a Ctrl-C during the last write would
    monkeypatch.setattr(mf, "write_latest", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cli.main(["import", "--hf", str(hf_dir), "--out", str(tmp_path / "ck")])
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "mine.txt").write_text("keep")
    capsys.readouterr()
    assert cli.main(["import", "--hf", str(hf_dir), "--out", str(tmp_path / "ck")]) == 2
    assert "not empty" in capsys.readouterr().err and (tmp_path / "ck" / "mine.txt").read_text() == "keep"
