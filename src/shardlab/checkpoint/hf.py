"""Export a checkpoint's model as a Hugging Face GPT-2 (`model.safetensors` + `config.json`).

shardlab's GPT is GPT-2 with different names and separate q, k, v projections (HF fuses them into
`c_attn`, concatenated in that order; checkpoints written before the split hold the fused `attn.qkv`
and export as they are), and one layout difference: HF GPT-2 uses `Conv1D`,
whose weight is stored (in, out), the transpose of `nn.Linear`'s (out, in). So every linear weight
is transposed; embeddings, LayerNorms and biases are copied. The head is tied to `wte` in both, so
it is not stored. Works offline and without a process group: DCP reads the shards of any world size.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from shardlab.checkpoint.state import STATE_FILE


def load_model_tensors(step_dir: Path) -> dict[str, torch.Tensor]:
    """The full (unsharded) model tensors of a checkpoint, keyed by shardlab FQN, in one process."""
    reader = dcp.FileSystemReader(str(step_dir))
    md = reader.read_metadata()
    sd = {k: torch.empty(tuple(v.size), dtype=v.properties.dtype) for k, v in md.state_dict_metadata.items()
          if k.startswith("model.") and isinstance(v, TensorStorageMetadata)}
    dcp.load(sd, storage_reader=reader, no_dist=True)
    return {k[len("model."):]: v for k, v in sd.items()}


def to_hf(sd: dict[str, torch.Tensor], n_layer: int) -> dict[str, torch.Tensor]:
    out = {"transformer.wte.weight": sd["wte.weight"], "transformer.wpe.weight": sd["wpe.weight"],
           "transformer.ln_f.weight": sd["ln_f.weight"], "transformer.ln_f.bias": sd["ln_f.bias"]}
    ours_to_hf = {"ln_1": "ln_1", "attn.qkv": "attn.c_attn", "attn.proj": "attn.c_proj", "ln_2": "ln_2",
                  "mlp.fc": "mlp.c_fc", "mlp.proj": "mlp.c_proj"}
    sd = dict(sd)
    for i in range(n_layer):
        p = f"blocks.{i}.attn."
        if p + "q.weight" in sd:  # HF fuses q, k, v into one c_attn, in that order
            for kind in ("weight", "bias"):
                sd[p + "qkv." + kind] = torch.cat([sd[p + z + "." + kind] for z in "qkv"])
        for ours, theirs in ours_to_hf.items():
            w, b = sd[f"blocks.{i}.{ours}.weight"], sd[f"blocks.{i}.{ours}.bias"]
            is_linear = not ours.startswith("ln")
            out[f"transformer.h.{i}.{theirs}.weight"] = w.t() if is_linear else w  # Conv1D is (in, out)
            out[f"transformer.h.{i}.{theirs}.bias"] = b
    return {k: v.detach().float().contiguous() for k, v in out.items()}


def hf_config(model: dict) -> dict:
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": model["vocab_size"], "n_positions": model["max_seq_len"], "n_ctx": model["max_seq_len"],
        "n_embd": model["d_model"], "n_layer": model["n_layer"], "n_head": model["n_head"], "n_inner": None,
        "activation_function": "gelu_new",  # GELU, tanh approximation: what shardlab's MLP uses
        "layer_norm_epsilon": model.get("layer_norm_eps", 1e-5),
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        "initializer_range": 0.02, "scale_attn_weights": True, "tie_word_embeddings": True,
        # byte-level vocabulary: no special tokens; 0 keeps generate() in range
        "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32",
    }


def export_hf(step_dir: Path, out_dir: Path) -> Path:
    from safetensors.torch import save_file

    meta = json.loads((Path(step_dir) / STATE_FILE).read_text())
    model = meta["model"]
    if model is None:
        raise ValueError(f"{step_dir} has no model dimensions in {STATE_FILE}; cannot build a GPT-2 config")
    tensors = to_hf(load_model_tensors(step_dir), model["n_layer"])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(hf_config(model), indent=2) + "\n")
    return out_dir
