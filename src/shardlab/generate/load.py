"""What `shardlab generate` reads: a run, its checkpoints/ directory, one step directory, or an exported
Hugging Face GPT-2 or LlamaForCausalLM directory -> the model's dimensions and its full (unsharded) tensors.
The family comes from the checkpoint's metadata (`model.arch`, gpt2 when absent: older checkpoints) or the
export's `architectures`; a Hugging Face directory is read exactly as `shardlab ckpt import` reads it.

A checkpoint of any training layout loads the same way: DCP keeps every tensor's global shape and reads
the shards of whatever world wrote them (the reshard path, `checkpoint.hf.load_model_tensors`); each rank
then cuts its own tensor-parallel slice or pipeline stage from the full model, exactly as training does.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from shardlab.checkpoint import manifest as mf
from shardlab.checkpoint.hf import load_model_tensors
from shardlab.checkpoint.hf_import import (INDEX, HFImportError, model_config as hf_model_config, read_tensors,
                                           to_shardlab)
from shardlab.checkpoint.state import STATE_FILE
from shardlab.model import anatomy
from shardlab.model.gpt import GPTConfig, build_model
from shardlab.model.llama import LlamaConfig
from shardlab.model.moe import MOE_KEYS


class LoadError(ValueError):
    """Bad input: the path is not something generate can load (one line, exit 2)."""


def is_hf_dir(p: Path) -> bool:
    return (p / "config.json").is_file() and ((p / "model.safetensors").is_file() or (p / INDEX).is_file())


def step_dir(path: str | Path) -> Path:
    """The checkpoint a RUN_OR_CHECKPOINT names: a step directory as it is, else the latest committed one."""
    try:
        p, kind = mf.resolve(path)
    except FileNotFoundError as e:
        raise LoadError(str(e)) from None
    if kind == "step":
        return p
    latest = mf.read_latest(p)
    candidates = mf.resume_candidates(p)
    if latest is None and not candidates:
        raise LoadError(f"{path}: no committed checkpoint in {p}")
    return latest if latest is not None else candidates[0]


def model_config(path: str | Path) -> GPTConfig | LlamaConfig:
    """The dimensions alone (cheap: the launcher validates with them before starting ranks)."""
    p = Path(path)
    if is_hf_dir(p):  # the import's reading of config.json (checkpoint/hf_import.py): the same model
        try:
            return hf_model_config(p)
        except HFImportError as e:
            raise LoadError(str(e)) from None
    step = step_dir(p)
    try:
        meta = json.loads((step / STATE_FILE).read_text())
    except (OSError, ValueError):
        raise LoadError(f"{step} has no readable {STATE_FILE}: not a complete checkpoint "
                        f"(`shardlab ckpt verify {step}`)") from None
    m = meta.get("model")
    if not m:
        raise LoadError(f"{step}/{STATE_FILE} has no model dimensions; cannot build the model")
    if m.get("arch", "gpt2") == "llama":
        fields = LlamaConfig.__dataclass_fields__
        return LlamaConfig(**{k: v for k, v in m.items() if k in fields})
    return GPTConfig(**{k: m[k] for k in ("n_layer", "n_head", "d_model", "vocab_size", "max_seq_len",
                                          "layer_norm_eps", "tie_embeddings", *MOE_KEYS) if k in m})


def load_model(path: str | Path):
    """The bare single-device model (GPT or Llama) with the checkpoint's (or export's) weights, in eval mode."""
    p = Path(path)
    cfg = model_config(p)
    if is_hf_dir(p):
        try:
            sd = to_shardlab(read_tensors(p), cfg)
        except HFImportError as e:
            raise LoadError(str(e)) from None
    else:
        sd = _unfused(load_model_tensors(step_dir(p)), cfg)
    anat = anatomy.of(cfg)
    if cfg.tie_embeddings:  # a tied head is the embedding (older checkpoints omit it)
        sd.setdefault(anat.weight(anat.head), sd[anat.weight(anat.embedding)])
    model = build_model(cfg, 0)
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    if missing or unexpected:
        raise LoadError(f"{path}: weights do not match the model (missing {missing[:3]}, unexpected {unexpected[:3]})")
    return model.eval()


def _unfused(sd: dict, cfg) -> dict:
    """A checkpoint written before q, k, v were split holds them fused (the same rows): cut them apart."""
    anat = anatomy.of(cfg)
    for fused, parts in anat.fused.items():
        if f"{anat.block(0)}.{fused}.weight" not in sd:
            continue
        for i in range(cfg.n_layer):
            for kind in ("weight", "bias"):
                for z, part in zip(parts, sd.pop(f"{anat.block(i)}.{fused}.{kind}").chunk(len(parts))):
                    sd[f"{anat.block(i)}.{z}.{kind}"] = part
    return sd
