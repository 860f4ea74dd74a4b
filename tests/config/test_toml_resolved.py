"""A run's config.toml shows the model it trains: keys left to the preset keep their 0 / auto (so the file
loads back to the same config, presets and explicit values never both setting a key) with the resolved value in
a comment; loading the file gives the same model, for GPT-2 and Llama presets and for explicit (imported-style)
dimensions."""
import dataclasses

import pytest

from shardlab import config
from shardlab.model.configs import resolve_model_config


@pytest.mark.parametrize("overrides", [
    ["model.preset=gpt2"],
    ["model.preset=llama3-8b", "train.seq_len=256"],
    # an HF import's shape: every dimension explicit, the preset a name only
    ["model.preset=llama-tiny", "model.n_layer=3", "model.d_model=96", "model.n_head=6", "model.n_kv_heads=2",
     "model.intermediate_size=200", "model.norm_eps=1e-6", "model.tie_embeddings=true", "model.vocab_size=300"],
])
def test_config_toml_shows_the_resolved_model_and_loads_back_to_it(tmp_path, overrides):
    cfg = config.load(overrides=overrides)
    text = config.to_toml(cfg)
    path = tmp_path / "config.toml"
    path.write_text(text)
    back = config.load(path)
    assert config.to_dict(back) == config.to_dict(cfg)
    want = resolve_model_config(cfg.model, cfg.train.seq_len)
    assert dataclasses.asdict(resolve_model_config(back.model, back.train.seq_len)) == dataclasses.asdict(want)
    lines = dict(ln.split(" = ", 1) for ln in text.split("[data]")[0].splitlines()[1:] if " = " in ln)
    if cfg.model.n_layer == 0:  # left to the preset: the value stays, the comment tells the real one
        assert lines["n_layer"] == f"0  # resolved: {want.n_layer}"
        assert lines["d_model"] == f"0  # resolved: {want.d_model}"
    else:  # given: written as given, nothing to add
        assert lines["n_layer"] == str(cfg.model.n_layer) and lines["intermediate_size"] == "200"


def test_gpt2_preset_comments():
    text = config.to_toml(config.load(overrides=["model.preset=gpt2"]))
    assert "n_layer = 0  # resolved: 12" in text and "vocab_size = 0  # resolved: 50257" in text
    assert 'tie_embeddings = "auto"  # resolved: true' in text
    llama = config.to_toml(config.load(overrides=["model.preset=llama3-8b"]))
    assert 'arch = "gpt2"  # resolved: "llama"' in llama and "intermediate_size = 0  # resolved: 14336" in llama
