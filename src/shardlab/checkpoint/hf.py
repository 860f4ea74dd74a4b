"""Export a checkpoint's model as a Hugging Face GPT-2 or `LlamaForCausalLM` (`model.safetensors` +
`config.json`), with the tokenizer it was trained with (`tokenizer.json` + `tokenizer_config.json`), or
the files an imported model brought, as they are. The tensors keep the dtype the checkpoint stores them in
(a training checkpoint's fp32, an imported bf16 model's bf16), so import -> export gives back the same
tensors bit for bit. The import is hf_import.py: this table read backwards.

The llama family (model/llama.py) is written in Hugging Face's layout already (separate q/k/v/o, rotary
"rotate half" pairing, untied head), so its export is a rename table (model/anatomy.py's `hf_top` and `hf_block`) and nothing else.

shardlab's GPT is GPT-2 with different names and separate q, k, v projections (HF fuses them into
`c_attn`, concatenated in that order; checkpoints written before the split hold the fused `attn.qkv`
and export as they are), and one layout difference: HF GPT-2 uses `Conv1D`,
whose weight is stored (in, out), the transpose of `nn.Linear`'s (out, in). So every linear weight
is transposed; embeddings, LayerNorms and biases are copied. A head tied to `wte` (GPT-2's) is not
stored; an untied one (`tie_embeddings=False`) is `lm_head.weight`, in both families. Works offline
and without a process group: DCP reads the shards of any world size.

The tokenizer is the checkpoint's own (`write_tokenizer`): a BPE run's `tokenizer.json` as it is; for a
bytes run GPT-2's byte-level BPE with no merges (each UTF-8 byte one token whose id is the byte's value,
exactly `shardlab.data.tokenizer`'s bytes). `transformers.AutoTokenizer.from_pretrained(DIR)` loads either.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from shardlab.checkpoint.state import STATE_FILE
from shardlab.model import anatomy
from shardlab.data.tokenizer import VOCAB_SIZE, byte_alphabet as byte_to_unicode  # GPT-2's byte alphabet


def load_model_tensors(step_dir: Path) -> dict[str, torch.Tensor]:
    """The full (unsharded) model tensors of a checkpoint, keyed by shardlab FQN, in one process."""
    reader = dcp.FileSystemReader(str(step_dir))
    md = reader.read_metadata()
    sd = {k: torch.empty(tuple(v.size), dtype=v.properties.dtype) for k, v in md.state_dict_metadata.items()
          if k.startswith("model.") and isinstance(v, TensorStorageMetadata)}
    dcp.load(sd, storage_reader=reader, no_dist=True)
    return {k[len("model."):]: v for k, v in sd.items()}


def to_hf(sd: dict[str, torch.Tensor], n_layer: int, tied: bool = True) -> dict[str, torch.Tensor]:
    """GPT-2's export (GPT2LMHeadModel's names)."""
    return export_tensors(sd, anatomy.GPT2, n_layer, tied)


def llama_to_hf(sd: dict[str, torch.Tensor], n_layer: int, tied: bool = False) -> dict[str, torch.Tensor]:
    """Llama's export (LlamaForCausalLM's names)."""
    return export_tensors(sd, anatomy.LLAMA, n_layer, tied)


def export_tensors(sd: dict[str, torch.Tensor], anat, n_layer: int, tied: bool) -> dict[str, torch.Tensor]:
    """shardlab's state dict -> the family's HF names (the anatomy's `hf_top` and, per block, `hf_block`):
    fused parts concatenated (GPT-2's c_attn), linear weights transposed where HF stores them (in, out)."""
    head = anat.weight(anat.head)
    out = {theirs: sd[ours] for ours, theirs in anat.hf_top.items() if not (tied and ours == head)}
    kinds = ("weight", "bias") if anat.bias else ("weight",)
    sd = dict(sd)
    for i in range(n_layer):
        b = anat.block(i)
        for fused, parts in anat.fused.items():
            if f"{b}.{parts[0]}.weight" in sd:  # fused in the export, in that order
                for kind in kinds:
                    sd[f"{b}.{fused}.{kind}"] = torch.cat([sd[f"{b}.{z}.{kind}"] for z in parts])
        for ours, theirs in anat.hf_block.items():
            for kind in kinds:
                v = sd[f"{b}.{ours}.{kind}"]
                transpose = kind == "weight" and anat.hf_transposed and not anat.is_norm(ours)
                out[f"{anat.hf_block_prefix}.{i}.{theirs}.{kind}"] = v.t() if transpose else v  # Conv1D: (in, out)
    return {k: v.detach().contiguous() for k, v in out.items()}


def llama_hf_config(model: dict) -> dict:
    from shardlab.model.llama import ffn_hidden

    scaling = model.get("rope_scaling")
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": model["vocab_size"], "hidden_size": model["d_model"],
        "intermediate_size": model.get("intermediate_size") or ffn_hidden(
            model["d_model"], model["ffn_multiple_of"], model["ffn_dim_multiplier"]),
        "num_hidden_layers": model["n_layer"], "num_attention_heads": model["n_head"],
        "num_key_value_heads": model["n_kv_heads"], "head_dim": model["d_model"] // model["n_head"],
        "hidden_act": "silu", "max_position_embeddings": model["max_seq_len"], "rms_norm_eps": model["norm_eps"],
        # transformers 4's spelling (rope_theta + rope_scaling), which 5 reads too
        "rope_theta": model["rope_theta"], "rope_scaling": dict(scaling) if scaling else None,
        "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0, "initializer_range": 0.02,
        "tie_word_embeddings": bool(model.get("tie_embeddings", False)),
        "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32",
    }


def hf_config(model: dict) -> dict:
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": model["vocab_size"], "n_positions": model["max_seq_len"], "n_ctx": model["max_seq_len"],
        "n_embd": model["d_model"], "n_layer": model["n_layer"], "n_head": model["n_head"], "n_inner": None,
        "activation_function": "gelu_new",  # GELU, tanh approximation: what shardlab's MLP uses
        "layer_norm_epsilon": model.get("layer_norm_eps", 1e-5),
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        "initializer_range": 0.02, "scale_attn_weights": True,
        "tie_word_embeddings": bool(model.get("tie_embeddings", True)),
        # byte-level vocabulary: no special tokens; 0 keeps generate() in range
        "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32",
    }


def hf_tokenizer(max_seq_len: int) -> dict[str, dict]:
    """`tokenizer.json` and `tokenizer_config.json`: byte-level, vocabulary 256, id = byte value."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    vocab = {ch: b for b, ch in byte_to_unicode().items()}
    assert len(vocab) == VOCAB_SIZE
    tokenizer = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
                 "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
                 "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                           "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                           "ignore_merges": False, "vocab": vocab, "merges": []}}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_seq_len,
              "clean_up_tokenization_spaces": False}
    return {"tokenizer.json": tokenizer, "tokenizer_config.json": config}


def _readable(path: Path) -> None:
    """safetensors writes 0600; an exported model is meant to be shared: the usual mode under the umask."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def export_hf(step_dir: Path, out_dir: Path) -> Path:
    from safetensors.torch import save_file

    meta = json.loads((Path(step_dir) / STATE_FILE).read_text())
    model = meta["model"]
    if model is None:
        raise ValueError(f"{step_dir} has no model dimensions in {STATE_FILE}; cannot build a GPT-2 config")
    llama = model.get("arch") == "llama"
    tied = bool(model.get("tie_embeddings", not llama))
    tensors = export_tensors(load_model_tensors(step_dir), anatomy.by_arch(model.get("arch")), model["n_layer"], tied)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    _readable(out_dir / "model.safetensors")
    config = llama_hf_config(model) if llama else hf_config(model)
    config["torch_dtype"] = str(tensors[next(iter(tensors))].dtype).removeprefix("torch.")  # as stored
    imported = meta.get("imported") or {}
    if imported:  # an imported model's own tokenizer files, as they are (none if it brought none)
        for name in imported.get("tokenizer") or ():
            shutil.copyfile(Path(step_dir) / "tokenizer" / name, out_dir / name)
    else:
        write_tokenizer(Path(step_dir), out_dir, model, config)
    # an imported model's own token ids (its tokenizer's), where it brought them
    config.update({k: v for k, v in (imported.get("token_ids") or {}).items() if v is not None})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out_dir


def write_tokenizer(step_dir: Path, out_dir: Path, model: dict, config: dict) -> None:
    """The checkpoint's tokenizer (its tokenizer/, else its run's; bytes for checkpoints from before) as HF
    files, and config.json's bos/eos ids set to its EOS. A tiktoken file becomes the same BPE in
    `tokenizers`' form (data.tokenizer.tiktoken_to_hf)."""
    from shardlab.data import tokenizer as tk

    where = [d for d in (step_dir / "tokenizer", step_dir.parent.parent / "tokenizer") if d.is_dir()]
    tok = tk.load(where[0]) if where else tk.BYTES
    if tok.vocab_size > model["vocab_size"]:
        raise ValueError(f"{step_dir}: the tokenizer has {tok.vocab_size} tokens, more than the model's vocabulary "
                         f"{model['vocab_size']}")
    if tok.kind == "bytes":
        files = {name: json.dumps(doc, indent=1, ensure_ascii=False) for name, doc in
                 hf_tokenizer(model["max_seq_len"]).items()}
    else:
        tok = tk.tiktoken_to_hf(tok) if tok.kind == "tiktoken" else tok
        tok.config["model_max_length"] = model["max_seq_len"]
        with tempfile.TemporaryDirectory() as t:
            tok.save(Path(t) / "tok")
            files = {name: (Path(t) / "tok" / name).read_text(encoding="utf-8") for name in (tk.HF_FILE, tk.HF_CONFIG)}
    for name, text in files.items():
        (out_dir / name).write_text(text.rstrip("\n") + "\n", encoding="utf-8")
    config["bos_token_id"] = config["eos_token_id"] = tok.eos_id
