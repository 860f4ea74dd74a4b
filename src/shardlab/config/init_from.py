"""`ckpt.init_from=PATH`: the model's dimensions come from that checkpoint.

A run that starts from a checkpoint's weights (an imported Hugging Face model, or another run's) must build
exactly that model, so the checkpoint's `train_state.json` (its `model` record: the GPTConfig or LlamaConfig
it was saved with) fills the `[model]` section before anything else is validated, and config.toml records
the model that ran. A `model.*` key the user set to something else contradicts the weights: one line. The
training keys (`model.dropout`, the MoE loss weights) stay the user's.

The checkpoint's tokenizer (its tokenizer/ folder) comes with the weights: an embedding row means the token
that tokenizer gave its id, so a run left at the default `data.tokenizer=bytes` trains with the checkpoint's
(config.toml records the folder). A different tokenizer the user names, or a `tokens:` source prepared with
another, is refused where the corpus is opened (the CLI's data check: `check_tokenizer`).

The path is resolved here from the files alone (config sits below checkpoint/ and may not import it): a step
directory has a train_state.json; a run or checkpoints/ directory names its newest in `latest`.
"""
from __future__ import annotations

import json
from pathlib import Path

from dataclasses import asdict, fields

from shardlab.config.schema import ModelConfig
from shardlab.data import tokenizer as tk
from shardlab.errors import ConfigError

STATE_FILE = "train_state.json"  # checkpoint/state.py's name for it
# What a run may choose for itself: training settings, not the shape of the weights.
TRAINING_KEYS = ("dropout", "moe_capacity", "moe_aux_weight", "moe_z_weight", "moe_bias_update",
                 "moe_router_lr_scale")
ROPE_KEYS = {"rope_factor": "factor", "rope_low_freq_factor": "low_freq_factor",
             "rope_high_freq_factor": "high_freq_factor", "rope_original_max_seq": "original_max_position_embeddings"}


def is_hf_dir(p: Path) -> bool:
    """A Hugging Face model directory (config.json and safetensors weights), not a shardlab checkpoint."""
    p = Path(p)
    return ((p / "config.json").is_file() and not (p / STATE_FILE).is_file()
            and any(q.suffix == ".safetensors" for q in p.iterdir()))


def step_dir(path: str) -> Path:
    """The checkpoint PATH names: a step directory (or a Hugging Face model directory) itself, else the one
    its run's `latest` names."""
    p = Path(path)
    if (p / STATE_FILE).is_file() or (p.is_dir() and is_hf_dir(p)):
        return p
    for ckpts in (p / "checkpoints", p):
        try:
            name = (ckpts / "latest").read_text().strip()
        except (OSError, UnicodeDecodeError):
            continue
        if name and Path(name).name == name and (ckpts / name / STATE_FILE).is_file():
            return ckpts / name
    what = "does not exist" if not p.exists() else "is neither a checkpoint nor a run with a latest checkpoint"
    raise ConfigError(f"ckpt.init_from={path}: {what}; give a checkpoint (step_NNNNNN/), a run directory, or what "
                      "`shardlab ckpt import --hf` wrote")


def model_keys(model: dict) -> dict:
    """A checkpoint's `model` record -> the `[model]` keys that build it again."""
    keys = {k: v for k, v in model.items() if k in _MODEL_FIELDS and k not in TRAINING_KEYS}
    keys["arch"] = model.get("arch", "gpt2")
    keys["preset"] = "custom"
    if "layer_norm_eps" in model:  # GPT's name for it
        keys["norm_eps"] = model["layer_norm_eps"]
    if "tie_embeddings" in model:
        keys["tie_embeddings"] = "true" if model["tie_embeddings"] else "false"
    scaling = model.get("rope_scaling")
    if keys["arch"] == "llama":
        keys["rope_scaling"] = scaling["rope_type"] if scaling else "none"
    for key, name in ROPE_KEYS.items():
        if scaling:
            keys[key] = scaling[name]
    return keys


def apply(cfg) -> None:
    """Fill cfg.model from ckpt.init_from's checkpoint (in place); ConfigError on a contradiction."""
    path = cfg.ckpt.init_from
    if not path:
        return
    step = step_dir(path)
    model = _hf_model(path, step) if is_hf_dir(step) else _record(step)
    if not isinstance(model, dict):
        raise ConfigError(f"ckpt.init_from={path}: {step / STATE_FILE} has no model record; cannot build its model")
    default, m = ModelConfig(), cfg.model
    for key, value in model_keys(model).items():
        ours, theirs = getattr(m, key), _coerce(getattr(default, key), value)
        if ours != getattr(default, key) and ours != theirs and not (key == "preset" and ours == "custom"):
            raise ConfigError(f"model.{key}={ours} contradicts ckpt.init_from={path}, whose model has {key}={theirs}: "
                              f"the weights fix the model's shape; drop model.{key}")
        setattr(m, key, theirs)
    d, kind = checkpoint_tokenizer(step)
    if kind not in (None, "bytes") and cfg.data.tokenizer == "bytes" and not cfg.data.source.startswith("tokens:"):
        cfg.data.tokenizer = str(d)


def _record(step: Path) -> dict | None:
    try:
        return json.loads((step / STATE_FILE).read_text()).get("model")
    except (OSError, ValueError, AttributeError):
        return None


def _hf_model(path: str, hf_dir: Path) -> dict:
    """The model record of a Hugging Face directory's config.json (what its import would record)."""
    from shardlab.model.hf_config import HFImportError, model_config

    try:
        return asdict(model_config(hf_dir))
    except HFImportError as e:
        raise ConfigError(f"ckpt.init_from={path}: {e}") from None


def checkpoint_tokenizer(step: Path) -> tuple[Path | None, str | None]:
    """The checkpoint's tokenizer folder and its kind ("hf" for HF tokenizer files only); (None, None) when
    it has none (an HF import without tokenizer files: which one wrote its ids is unknown). A Hugging Face
    directory holds its tokenizer files beside the weights."""
    d = step if is_hf_dir(step) else step / "tokenizer"
    try:
        return d, json.loads((d / tk.META_FILE).read_text()).get("kind")
    except (OSError, ValueError, AttributeError):
        return (d, "hf") if (d / tk.HF_FILE).is_file() else (None, None)


def check_tokenizer(cfg, tok) -> None:
    """ConfigError when the run's tokenizer `tok` is not the one ckpt.init_from's weights were trained with."""
    if not cfg.ckpt.init_from:
        return
    d, _ = checkpoint_tokenizer(step_dir(cfg.ckpt.init_from))
    if d is None:
        return
    theirs = tk.load(d)
    if theirs.fingerprint() == tok.fingerprint():
        return
    ck, source = cfg.ckpt.init_from, cfg.data.source
    why = (f"ckpt.init_from={ck} was trained with {theirs.spec} (vocabulary {theirs.vocab_size}), and its "
           "embedding's rows mean that tokenizer's ids")
    if source.startswith("tokens:"):  # the prepared data carries its tokenizer: what to redo is the prepare
        prepared = Path(source[len("tokens:"):])
        try:
            src = json.loads((prepared / "meta.json").read_text())["source"]
        except (OSError, ValueError, KeyError, TypeError):
            src = "SRC"
        raise ConfigError(f"data.source={source} was prepared with {tok.spec} (vocabulary {tok.vocab_size}), but "
                          f"{why}: prepare the data again with the checkpoint's tokenizer, `shardlab data prepare "
                          f"{src} --tokenizer {d} --out {prepared}-ck`, and train with data.source=tokens:"
                          f"{prepared}-ck")
    if cfg.data.tokenizer not in ("bytes", str(d)):  # the user named a tokenizer; left alone it is the checkpoint's
        raise ConfigError(f"data.tokenizer={cfg.data.tokenizer} is not the tokenizer {why}: drop data.tokenizer "
                          "(a run from a checkpoint trains with the checkpoint's tokenizer)")
    raise ConfigError(f"the run's tokenizer ({tok.spec}, vocabulary {tok.vocab_size}) is not the one {why}")


def _coerce(default, value):
    """A JSON value as the [model] key's type (ints stored for a float key, say)."""
    return type(default)(value) if isinstance(default, (int, float)) and not isinstance(default, bool) else value


_MODEL_FIELDS = {f.name for f in fields(ModelConfig)}
