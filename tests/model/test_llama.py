"""The llama family on one process: real shapes' parameter counts, the planner's formulas against what the
model measures, grouped-query attention, the Hugging Face export, configuration errors and a training run."""
from __future__ import annotations

import json

import pytest
import torch

from shardlab import cli, config
from shardlab.config import ConfigError
from shardlab.model.gpt import build_model, causal_attention, resolve_model_config
from shardlab.model.llama import PRESETS, Llama, LlamaConfig, ffn_hidden, repeat_kv
from shardlab.testing import run_cli


# Meta's published totals (model cards / Hugging Face: 8.03B, 70.6B, 405.9B), and the exact counts the
# shapes give: embedding + head 2vh, per block 2h^2 + 2gh + 3fh + 2h, the final norm h.
PUBLISHED = {"llama3-8b": ("8.03", 8_030_261_248), "llama3-70b": ("70.6", 70_553_706_496),
             "llama3-405b": ("405.9", 405_853_388_800)}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_meta_device_parameter_count_equals_published(name):
    cfg = LlamaConfig(**PRESETS[name])
    with torch.device("meta"):
        model = Llama(cfg)
    got = model.num_params()
    published, exact = PUBLISHED[name]
    h, g, f, v, L = cfg.d_model, cfg.n_kv_heads * cfg.head_dim, cfg.ffn_hidden, cfg.vocab_size, cfg.n_layer
    assert got == exact == 2 * v * h + L * (2 * h * h + 2 * g * h + 3 * f * h + 2 * h) + h
    digits = len(published.split(".")[1])  # billions, to the digits Meta publishes
    assert f"{got / 1e9:.{digits}f}" == published


def test_swiglu_width_is_llama3s():
    assert [ffn_hidden(4096, 1024, 1.3), ffn_hidden(8192, 4096, 1.3), ffn_hidden(16384, 4096, 1.2)] == \
        [14336, 28672, 53248]
    assert ffn_hidden(256, 64) == 704  # llama-small: 2/3 x 4 x 256 = 682, up to a multiple of 64


def test_planner_params_and_activation_bytes_equal_measured_llama_small():
    """Exact, fp32 (twice the planner's 16-bit count), fused attention: parameters name by name, and
    per-block saved-tensor bytes for none / selective / full recompute."""
    from shardlab.config import Config
    from shardlab.observe.activations import ActivationBytes
    from shardlab.parallel import recompute
    from shardlab.plan.presets import PRESETS as PLAN
    from shardlab.plan.activations import activation_bytes_per_layer

    spec = PLAN["llama-small"]
    b, s = 3, 32  # b·s = 96: no coincidental sizes with h = 256, f = 704, g = 64
    for mode in ("none", "selective", "full"):
        model = build_model(LlamaConfig(**PRESETS["llama-small"], max_seq_len=s), 0)
        if mode == "none":
            assert [(n, p.numel()) for n, p in model.named_parameters()] == spec.param_shapes()
            assert model.num_params() == spec.params
        cfg = Config()
        cfg.train.recompute = mode
        recompute.apply(model, cfg)
        with ActivationBytes(model) as acts:
            out = model(torch.randint(0, 256, (b, s)))
        out.sum().backward()
        want = 2 * activation_bytes_per_layer(spec, b, s, recompute=mode, flash=True)
        assert set(acts.held.values()) == {want}, mode  # what each block keeps
        if mode == "none":
            assert acts.saved == acts.held


def test_gqa_planner_counts_less_than_mha():
    """GQA saves k and v at their own width: n_kv_heads=2 keeps 2sb(2h - 2g) bytes fewer than 8 heads."""
    from dataclasses import replace

    from shardlab.plan.presets import PRESETS as PLAN
    from shardlab.plan.activations import activation_bytes_per_layer

    gqa = PLAN["llama-small"]
    mha = replace(gqa, n_kv_heads=8)
    diff = activation_bytes_per_layer(mha, 1, 128, flash=True) - activation_bytes_per_layer(gqa, 1, 128, flash=True)
    assert diff == 2 * 128 * (2 * 256 - 2 * 64)
    assert mha.params - gqa.params == 4 * 2 * (256 - 64) * 256


def test_grouped_attention_equals_repeated_heads():
    """The attention core takes k, v with n_kv_heads heads; the same as repeating them for ordinary
    multi-head attention (an attention core that needs equal heads uses repeat_kv)."""
    model = build_model(LlamaConfig(**PRESETS["llama-tiny"], max_seq_len=16), 0)
    x = torch.randint(0, 256, (2, 16))
    want = model(x)
    for block in model.blocks.values():
        block.attn.attend = lambda q, k, v, p: causal_attention(q, repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1]), p)
    torch.testing.assert_close(model(x), want, rtol=1e-6, atol=1e-6)


def test_pipeline_stage_without_embedding_is_not_first():
    """Untied head: only the first stage holds `wte` (no position table marks it), the last ln_f and head."""
    from shardlab.parallel.pp.stage import build_stage

    model = build_model(LlamaConfig(**dict(PRESETS["llama-tiny"], n_layer=4), max_seq_len=16), 0)
    first, last = build_stage(model, 0, 2, range(0, 2)), build_stage(model, 1, 2, range(2, 4))
    assert first.wte is not None and first.lm_head is None and last.wte is None and last.lm_head is not None
    x = torch.randint(0, 256, (2, 16))
    torch.testing.assert_close(last(first(x)), model(x), rtol=0, atol=0)


def test_hf_export_is_llama_for_causal_lm_with_equal_logits(tmp_path):
    """`shardlab ckpt export --hf` of a trained llama: transformers loads it offline as LlamaForCausalLM
    and its logits equal shardlab's (atol 1e-5)."""
    transformers = pytest.importorskip("transformers")
    from ckpt_harness import make_cfg

    from shardlab.checkpoint import cli as ckpt_cli
    from shardlab.train.trainer import Trainer

    run = tmp_path / "run"
    trainer = Trainer(make_cfg(["model.preset=llama-tiny", "parallel.strategy=single", "train.steps=2",
                                "ckpt.final=true"], 1), run)
    trainer.run()
    assert ckpt_cli.main(["export", str(run), "--hf", str(tmp_path / "hf")]) == 0
    conf = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert conf["architectures"] == ["LlamaForCausalLM"] and conf["num_key_value_heads"] == 2
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", local_files_only=True).eval()
    assert type(hf).__name__ == "LlamaForCausalLM"
    ours = trainer.strategy.model.eval()
    idx = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(hf(idx).logits, ours(idx), atol=1e-5, rtol=0)


def test_llama_preset_sets_the_arch_and_keys_override_it():
    cfg = config.load(None, ["model.preset=llama-small", "model.n_kv_heads=4", "model.rope_theta=500000"])
    cfg = config.validate(cfg, 2)
    assert cfg.model.arch == "llama"
    m = resolve_model_config(cfg.model, cfg.train.seq_len)
    assert (m.n_kv_heads, m.rope_theta, m.ffn_hidden) == (4, 500000.0, 704)
    custom = config.load(None, ["model.preset=custom", "model.arch=llama", "model.n_layer=2", "model.n_head=4",
                                "model.d_model=64", "model.ffn_multiple_of=16", "model.ffn_dim_multiplier=1.5"])
    custom = config.validate(custom, 1)
    assert resolve_model_config(custom.model, 128).ffn_hidden == ffn_hidden(64, 16, 1.5) == 256


@pytest.mark.parametrize("args,needle", [
    (["model.arch=mamba"], "model.arch='mamba': must be one of gpt2, llama"),
    (["model.arch=llama"], "model.preset=small (a gpt2 preset)"),
    (["model.n_kv_heads=2"], "applies to the llama family only"),
    (["model.preset=llama-tiny", "model.n_kv_heads=3"], "model.n_kv_heads=3 must divide model.n_head=4"),
    (["model.preset=llama-tiny", "model.dropout=0.1"], "trains without dropout"),
    (["model.preset=llama-tiny", "model.rope_theta=-1"], "model.rope_theta=-1.0: must be at least 0"),
    (["model.preset=custom", "model.arch=llama", "model.n_layer=2", "model.n_head=4", "model.d_model=12"],
     "the head size must be even"),
    (["model.preset=llama-tiny", "model.n_kv_heads=4", "parallel.tp=4", "--nproc", "4", "model.d_model=96",
      "model.n_head=4", "model.ffn_multiple_of=30"], "does not divide the MLP width"),
    (["model.preset=custom", "model.arch=llama", "model.n_layer=2", "model.n_head=12", "model.n_kv_heads=4",
      "model.d_model=96", "model.ffn_multiple_of=48", "parallel.tp=6", "--nproc", "6"],
     "parallel.tp=6 is not a multiple of model.n_kv_heads=4"),
    (["model.preset=llama-tiny", "model.n_kv_heads=1", "parallel.tp=2", "parallel.tp_impl=dtensor"],
     "replicated key/value heads are built in the own implementation only"),
])
def test_bad_llama_settings_are_one_line_exit_2(tmp_path, capsys, args, needle):
    nproc = [] if "--nproc" in args else ["--nproc", "2"]
    code = cli.cmd_train([*nproc, *args, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], err
    assert not (tmp_path / "run").exists()


def test_validate_raises_config_error_for_kv_heads_above_heads():
    with pytest.raises(ConfigError, match="must divide model.n_head"):
        config.validate(config.load(None, ["model.preset=llama-tiny", "model.n_kv_heads=8"]), 1)


def test_configs_llama_small_trains_on_stdlib_and_loss_falls(tmp_path):
    """The shipped config as a user runs it (a real process), shortened: the loss falls."""
    run = tmp_path / "run"
    proc = run_cli(["train", "--config", "configs/llama-small.toml", "--nproc", "1", "parallel.strategy=single",
                    "train.steps=15", "train.seq_len=64", "train.micro_batch=4", "train.global_batch=4",
                    "train.warmup_steps=2", "train.log_every=1", "train.eval_every=0", "ckpt.final=false",
                    "--out", str(run)], timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert 'arch = "llama"' in (run / "config.toml").read_text()
    losses = [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()
              if "loss" in json.loads(line)]
    assert len(losses) == 15
    assert sum(losses[-3:]) / 3 < losses[0] - 1.0  # from ln(256) = 5.5 towards the corpus's byte statistics


def test_plan_and_plan_search_accept_the_llama_presets(capsys):
    from shardlab.plan.cli import main

    # layouts that fit (one that does not makes the plan search for fixes: a search of its own)
    for name, layout in (("llama3-8b", ["gpus=8", "strategy=zero3", "recompute=full", "global_batch=64", "seq=8192"]),
                         ("llama3-70b", ["gpus=32", "tp=4", "sp=true", "strategy=zero3", "global_batch=32",
                                         "seq=2048"])):
        assert main([f"model={name}", "cluster=H100-SXM", *layout, "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["model"]["params"] == PUBLISHED[name][1] and d["model"]["arch"] == "llama"
    # the search on the smallest llama shape that still ranks several layouts: the search is per layout
    # what the plan above is, and a 70B model's 80 layers on 64 GPUs take ~20 s per thousand layouts on CPU
    assert main(["search", "model=llama3-8b", "cluster=H100-SXM", "gpus=4", "global_batch=8", "seq=2048",
                 "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "llama3-8b (8.03B params)" in out and "why #1:" in out and "\n  2  " in out


def test_planner_tp_rule_and_traffic_for_grouped_query_attention():
    """tp above n_kv_heads replicates k and v: their parameters stay whole in the per-rank units and one
    all-reduce of their gradients (2 L g h elements) joins the tp traffic; a tp that breaks the rule is
    refused, as training refuses it."""
    from shardlab.plan.comm import tp_pp_collectives, units
    from shardlab.plan.layout import Layout
    from shardlab.plan.train_spec import TrainSpec
    from shardlab.plan.presets import PRESETS as PLAN
    from shardlab.plan.model import ModelSpec

    m = PLAN["llama3-8b"]  # 8 key/value heads of 128
    assert m.tp_ok(8) and m.tp_ok(16) and not m.tp_ok(3)
    g, h = m.kv_width, m.d_model
    block = units(m, 16)[1]  # ln_1, q, k, v, proj, ln_2, gate, up, down
    assert block[2] == block[3] == g * h and block[1] == h * h // 16
    train = TrainSpec(global_batch=8, seq=8192)
    kv = [c for c in tp_pp_collectives(m, train, Layout(tp=16), 1) if "replicated k, v" in c.why]
    assert len(kv) == 1 and kv[0].payload == 2 * 2 * m.n_layer * g * h  # bf16 gradients
    assert not [c for c in tp_pp_collectives(m, train, Layout(tp=8), 1) if "replicated" in c.why]
    odd = ModelSpec("odd", n_layer=2, d_model=768, n_head=12, vocab=256, seq=64, arch="llama", n_kv_heads=4,
                    ffn=3072)  # tp=6 divides heads, width and SwiGLU, but 4 key/value heads neither split nor share
    assert odd.tp_ok(4) and odd.tp_ok(12) and not odd.tp_ok(6)
    with pytest.raises(ValueError, match="n_kv_heads 4 must divide it or be divisible by it"):
        Layout(tp=6).check(odd)
