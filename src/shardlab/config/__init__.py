"""Configuration: a dataclass tree (schema.py), TOML files, `key=value` overrides, validation with clear errors
(checks.py; the per-key help in help.py).

Every user mistake becomes a `ConfigError` with one sentence saying what is wrong and what to do;
the CLI prints it and exits with code 2 before anything is written.
"""
from __future__ import annotations

import copy
import dataclasses
import tomllib
from dataclasses import fields
from pathlib import Path

from shardlab.config.checks import LLAMA_KEYS, _check_ranges, _validate_arch
from shardlab.config import init_from
from shardlab.errors import choice as _choice
from shardlab.parallel.dp.checks import (check_offload as _check_offload, validate_async as _validate_async,
                                         validate_fault_tolerant as _validate_fault_tolerant, validate_sync as _validate_sync)
from shardlab.config.schema import (  # noqa: F401 - the public names: `config.Config`, `config.ConfigError`, ...
    STRATEGIES, CkptConfig, Config, ConfigError, DataConfig, DebugConfig, DoctorConfig, ModelConfig, ParallelConfig,
    TraceConfig, TrainConfig, _public_name, all_keys, get_key, set_key)
from shardlab import precision
from shardlab.optim import registry as optim_registry, serving as optim_serving
from shardlab.parallel import layers, rules

__all__ = ["LLAMA_KEYS", "STRATEGIES", "CkptConfig", "Config", "ConfigError", "DataConfig", "DebugConfig",
           "DoctorConfig", "ModelConfig", "ParallelConfig", "TraceConfig", "TrainConfig", "all_keys", "get_key",
           "set_key", "load", "to_dict", "to_toml", "validate", "help_keys"]


def help_keys() -> str:
    """`shardlab train --help-keys` (the text lives in help.py, beside nothing else)."""
    from shardlab.config.help import help_text
    return help_text()


def load(path: str | Path | None = None, overrides: list[str] = (), base: Config | None = None) -> Config:
    """Build a Config from `base` (default: the defaults), an optional TOML file and `key=value` overrides
    (overrides win)."""
    cfg = base if base is not None else Config()
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} does not exist")
        try:
            data = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {str(p)!r} is not valid TOML: {e}") from None
        for section, values in data.items():
            if not isinstance(values, dict):
                raise ConfigError(f"config file {str(p)!r}: top-level key {section!r} must be a [section]")
            for name, value in values.items():
                set_key(cfg, f"{section}.{name}", value)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"override {item!r} must look like key=value, e.g. train.steps=100")
        set_key(cfg, key.strip(), value)
    return cfg


def to_dict(cfg: Config) -> dict:
    return {s.name: {_public_name(k): v for k, v in dataclasses.asdict(getattr(cfg, s.name)).items()}
            for s in fields(cfg)}


def to_toml(cfg: Config) -> str:
    """The config as TOML. A [model] key left to the preset (0, auto) keeps its value, so the file loads back to
    the same config (a preset and explicit values never both set a key), and says in a comment what it resolved
    to: `n_layer = 0  # resolved: 12`."""
    resolved = _resolved_model(cfg)
    lines = []
    for section, values in to_dict(cfg).items():
        lines.append(f"[{section}]")
        for k, v in values.items():
            if isinstance(v, bool):
                text = "true" if v else "false"
            elif isinstance(v, str):
                text = _toml_string(v)
            else:
                text = repr(v)
            note = resolved.get(k) if section == "model" else None
            lines.append(f"{k} = {text}" + (f"  # {note}" if note else ""))
        lines.append("")
    return "\n".join(lines)


# [model] keys whose resolved value has another name in the model's config (model/configs.py)
_RESOLVED_AS = {"norm_eps": ("norm_eps", "layer_norm_eps"), "intermediate_size": ("ffn_hidden",)}


def _resolved_model(cfg: Config) -> dict:
    """{[model] key: "resolved: VALUE"} for each key left to the preset (or to train.seq_len) whose resolved
    value differs from what is written; {} when the model does not resolve (an invalid config shows nothing)."""
    from shardlab.model.configs import resolve_model_config

    try:
        m = resolve_model_config(cfg.model, cfg.train.seq_len)
    except (ConfigError, KeyError, TypeError, ValueError):
        return {}
    out = {}
    for k, v in to_dict(cfg)["model"].items():
        if not (v in (0, 0.0, "auto") or (k == "arch" and v != getattr(m, "arch", "gpt2"))):
            continue
        for name in _RESOLVED_AS.get(k, (k,)):
            if hasattr(m, name):
                got = getattr(m, name)
                if got != v and not isinstance(got, dict):
                    out[k] = "resolved: " + (("true" if got else "false") if isinstance(got, bool)
                                             else _toml_string(got) if isinstance(got, str) else repr(got))
                break
    return out


def _toml_string(s: str) -> str:
    """A TOML basic string: backslash and quote escaped, and every control character (U+0000-U+001F, U+007F),
    which TOML forbids raw, as \\uXXXX: a value typed on the command line must survive config.toml."""
    out = []
    for ch in s:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def validate(cfg: Config, world_size: int) -> Config:
    """Check combinations that only make sense together, and return a copy of `cfg` with the derived values
    resolved (the model family, a checkpoint's model keys, train.grad_accum and train.global_batch): `cfg`
    itself is not changed, so call it as `cfg = config.validate(cfg, world)`. The checks run in a fixed order
    (the first problem found is the one reported); each layer's run as its spec lists them."""
    from shardlab.model.configs import resolve_model_config
    from shardlab.parallel.mesh import resolve_run

    cfg = copy.deepcopy(cfg)
    t, p, m = cfg.train, cfg.parallel, cfg.model
    init_from.apply(cfg)  # ckpt.init_from: the checkpoint's model fills [model] before it is checked
    _validate_arch(m)
    _check_parallel_choices(cfg, world_size)
    # parallel.sync=async: every rank holds the whole model and each gradient is one global batch, so the
    # layout and batch checks are those of one process (resolve_run knows it)
    _check_train(cfg, 1 if p.sync == "async" else world_size)
    run = resolve_run(cfg, world_size)  # the degrees and the batch, or a one-line ConfigError
    t.grad_accum, t.global_batch = run.grad_accum, run.global_batch
    for spec in layers.CHECKED:  # each layer's own conditions and its composition rules (parallel/rules.py)
        for check in spec.checks:
            layers.load(check)(cfg, run.dims)
    rules.check(cfg, run.dims)  # every row of the table, those no layer's checks placed among its own too
    optim_serving.check(cfg, run.dims)  # train.optimizer against the layers' serving declarations
    model_cfg = resolve_model_config(m, t.seq_len)  # raises ConfigError on bad dimensions
    if p.fragments > model_cfg.n_layer + 2:  # fragments are whole units: embedding, each block, head
        raise ConfigError(f"parallel.fragments={p.fragments}: the model has {model_cfg.n_layer} blocks, so at most "
                          f"{model_cfg.n_layer + 2} fragments (embedding, blocks, head); use fewer")
    from shardlab.data import shares  # deferred: shardlab.data loads torch, and `shardlab --help` must not

    shares.validate(cfg, run.dims)  # data.shares, debug.slow_factor
    if cfg.doctor.on_anomaly == "rollback" and not cfg.ckpt.every:
        raise ConfigError("doctor.on_anomaly=rollback needs checkpoints: set ckpt.every")
    if cfg.doctor.on_anomaly == "rollback" and cfg.ckpt.format == "hf":
        raise ConfigError("doctor.on_anomaly=rollback needs resumable checkpoints: ckpt.format=hf saves the model "
                          "alone; use ckpt.format=dcp")
    _check_ranges(cfg, world_size)
    return cfg


def _check_parallel_choices(cfg: Config, world_size: int) -> None:
    """The [parallel] keys with a fixed set of values, offload, and the synchronisation modes."""
    p = cfg.parallel
    _choice("parallel.strategy", p.strategy, STRATEGIES)
    _choice("parallel.backend", p.backend, ("auto", "gloo", "nccl"))
    check_layout_keys(p)
    _choice("parallel.comm_dtype", p.comm_dtype, precision.WIRE_NAMES)
    _choice("parallel.compress", p.compress, ("none", "powersgd"))
    _choice("parallel.wrap", p.wrap, ("block", "layer", "whole"))
    # a value KIND:ARGUMENT (file:PATH) is checked by its kind, as the composition picks it (Spec.chosen)
    _choice("parallel.pp_schedule", next(s for s in layers.SPECS if s.name == "pp").chosen(cfg),
            tuple(layers.PIPELINE_PARALLEL))
    _choice("parallel.offload", p.offload, ("none", "optimizer", "params"))
    _choice("parallel.offload_to", p.offload_to, ("host", "disk"))
    _check_offload(p)
    _validate_sync(p)
    _validate_fault_tolerant(cfg, world_size)
    _validate_async(cfg, world_size)


def check_layout_keys(p) -> None:
    """parallel.layout and its budget: checked before layout=auto resolves (cli/auto_layout.py), then with the rest."""
    _choice("parallel.layout", p.layout, ("manual", "auto"))
    if not p.mem_budget_gb >= 0:
        raise ConfigError(f"parallel.mem_budget_gb={p.mem_budget_gb}: must be at least 0 (0 = the device's memory)")
    if p.layout == "auto" and p.sync != "every_step":
        raise ConfigError(f"parallel.layout=auto plans every-step layouts only, not parallel.sync={p.sync}: "
                          "set the layout by hand, or parallel.sync=every_step")


def _check_train(cfg: Config, world_size: int) -> None:
    """[train], [data] and [doctor] keys on their own, buckets, and what one process or one expert needs."""
    t, p = cfg.train, cfg.parallel
    _choice("train.dtype", t.dtype, precision.NAMES)
    _choice("train.recompute", t.recompute, ("none", "full", "selective"))
    optim_registry.check(t)  # train.optimizer, train.lr_schedule and their keys (optim/registry.py)
    _choice("doctor.on_anomaly", cfg.doctor.on_anomaly, ("stop", "skip", "rollback"))
    _choice("data.uneven", cfg.data.uneven, ("error", "join"))
    _choice("ckpt.format", cfg.ckpt.format, ("dcp", "hf"))
    from shardlab.config.trackers import check as check_trackers  # torch-free: finds packages, imports none

    check_trackers(t.tracker)  # a tracker without its package: refused here, before any rank starts
    for key, value in (("train.steps", t.steps), ("train.micro_batch", t.micro_batch),
                       ("train.grad_accum", t.grad_accum), ("train.seq_len", t.seq_len),
                       ("train.log_every", t.log_every), ("train.threads", t.threads),
                       ("train.recompute_every", t.recompute_every)):
        if value < 1:
            raise ConfigError(f"{key}={value}: must be at least 1")
    if not 0.0 < t.lr < 1.0 or t.min_lr < 0 or t.min_lr > t.lr:
        raise ConfigError(f"train.lr={t.lr} / train.min_lr={t.min_lr}: need 0 < min_lr <= lr < 1")
    if not 0.0 < cfg.data.val_fraction < 0.5:
        raise ConfigError(f"data.val_fraction={cfg.data.val_fraction}: must be between 0 and 0.5")
    from shardlab.data.tokenizer import check_spec  # (the syntax only: nothing is read or trained here)
    try:
        check_spec(cfg.data.tokenizer)
    except ValueError as e:  # DataError
        raise ConfigError(str(e)) from None
    if p.bucket_mb <= 0 or p.first_bucket_mb <= 0:
        raise ConfigError("parallel.bucket_mb and parallel.first_bucket_mb must be positive")
    if p.last_bucket_mb < 0:
        raise ConfigError("parallel.last_bucket_mb must be >= 0 (0 = no separate last bucket)")
    if p.strategy == "single" and world_size != 1:
        raise ConfigError(f"parallel.strategy=single runs on one process, but the world size is {world_size}; "
                          "use --nproc 1 or a data-parallel strategy")
    if cfg.debug.corrupt_expert and (p.ep <= 1 or not cfg.debug.corrupt_rank):
        raise ConfigError("debug.corrupt_expert=true perturbs an expert through debug.corrupt_rank under expert "
                          "parallelism: set parallel.ep > 1 and debug.corrupt_rank=R@STEP, or drop it")
