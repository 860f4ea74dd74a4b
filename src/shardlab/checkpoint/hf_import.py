"""`shardlab ckpt import --hf DIR --out CK`: a Hugging Face `GPT2LMHeadModel` or `LlamaForCausalLM`
directory -> an ordinary shardlab checkpoint (CK/checkpoints/step_000000, `latest` naming it).

What maps to what (docs/models.md, "Import and export"; export, hf.py, is the same table read backwards):
- config.json -> GPTConfig / LlamaConfig, field by field (`gpt2_config`, `llama_config`). A field whose
  value the model here does not compute (exact GELU, biases on Llama, yarn rope scaling, ...) is refused in
  one line naming it: the import never builds a model that computes something else;
- the weights, from `model.safetensors` or the shards a `model.safetensors.index.json` names: renamed
  (model/anatomy.py's tables; GPT-2's Conv1D weights transposed and its fused c_attn split into q, k, v), in the dtype
  they are stored in (bf16 stays bf16; a run casts them to its own precision when it loads them). Every
  tensor is accounted for: one the model has no place for, a missing one or a wrong shape is one line;
- the tokenizer files (tokenizer.json, tokenizer_config.json, special_tokens_map.json) are copied into the
  checkpoint's `tokenizer/` directory, listed in its manifest like every other file.

The checkpoint is built in a hidden directory beside CK and renamed to CK only when complete, so an error or
an interrupt leaves no CK behind (and no half-written one). It has no optimizer state and is at step 0:
`ckpt.init_from=CK` starts a run from it (`ckpt.resume` refuses it in one line); generate, export, verify,
ls and inspect read it as any other checkpoint.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch

from shardlab.checkpoint import manifest as mf
from shardlab.checkpoint import state as st
from shardlab.model import anatomy
from shardlab.model.gpt import build_model
from shardlab.model.hf_config import (ARCHITECTURES, HFImportError, LlamaConfig, gpt2_config,  # noqa: F401 (re-exported)
                                      llama_config, model_config, read_config)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
INDEX = "model.safetensors.index.json"
FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def read_tensors(hf_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of model.safetensors, or of the shards model.safetensors.index.json maps them to."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    hf_dir = Path(hf_dir)
    if (hf_dir / INDEX).is_file():
        try:
            weight_map = json.loads((hf_dir / INDEX).read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise HFImportError(f"{hf_dir / INDEX} has no readable weight_map ({type(e).__name__})") from None
        files = sorted(set(weight_map.values()))
    elif (hf_dir / "model.safetensors").is_file():
        weight_map, files = None, ["model.safetensors"]
    else:
        raise HFImportError(f"{hf_dir} has neither model.safetensors nor {INDEX}; import reads safetensors "
                            "(save_pretrained(..., safe_serialization=True))")
    sd = {}
    for name in files:
        if Path(name).name != name or not (hf_dir / name).is_file():
            raise HFImportError(f"{hf_dir / INDEX} names the shard {name!r}, which is not a file in {hf_dir}")
        try:
            part = load_file(str(hf_dir / name))
        except (SafetensorError, OSError) as e:
            raise HFImportError(f"{hf_dir / name} is not a readable safetensors file: {e}") from None
        sd.update(part if weight_map is None else {k: v for k, v in part.items() if weight_map.get(k) == name})
    missing = sorted(set(weight_map or ()) - set(sd))
    if missing:
        raise HFImportError(f"{hf_dir / INDEX} maps {missing[0]!r} to {weight_map[missing[0]]}, which does not hold it")
    return sd


# Buffers older transformers versions saved beside the weights (GPT-2's causal mask, Llama's rotary
# frequencies): recomputed by the model, so they are skipped, not imported.
BUFFERS = tuple(suffix for a in anatomy.ANATOMIES.values() for suffix in a.hf_buffers)


class _Take:
    """Pops named tensors off a Hugging Face state dict, remembering which shardlab name each became."""

    def __init__(self, sd: dict):
        self.left, self.origin = dict(sd), {}

    def __call__(self, theirs: str, ours: str | None = None) -> torch.Tensor:
        if theirs not in self.left:
            raise HFImportError(f"the weights have no tensor {theirs!r} (config.json's model needs it)")
        if ours is not None:
            self.origin[ours] = theirs
        return self.left.pop(theirs)


def from_hf(take: _Take, anat, n_layer: int) -> dict[str, torch.Tensor]:
    """The family's HF names (the anatomy's table; GPT-2's with or without the `transformer.` prefix) ->
    shardlab's: weights HF stores (in, out) transposed to nn.Linear's (out, in), fused ones (GPT-2's c_attn)
    cut into their parts (equal thirds, in order). The head is `to_shardlab`'s."""
    head = anat.weight(anat.head)
    out = {ours: take(theirs.removeprefix(anat.hf_prefix), ours) for ours, theirs in anat.hf_top.items()
           if ours != head}
    kinds = ("weight", "bias") if anat.bias else ("weight",)
    for i in range(n_layer):
        h, b = f"{anat.hf_block_prefix}.{i}.".removeprefix(anat.hf_prefix), anat.block(i)
        for ours, theirs in anat.hf_block.items():
            if ours in anat.fused:
                continue
            for kind in kinds:
                v = take(h + theirs + "." + kind, f"{b}.{ours}.{kind}")
                transpose = kind == "weight" and anat.hf_transposed and not anat.is_norm(ours)
                out[f"{b}.{ours}.{kind}"] = v.t().contiguous() if transpose else v
        for fused, parts in anat.fused.items():
            theirs = h + anat.hf_block[fused]
            w = take(theirs + ".weight")
            w = w.t() if anat.hf_transposed else w
            biases = take(theirs + ".bias").chunk(len(parts)) if anat.bias else [None] * len(parts)
            for z, wz, bz in zip(parts, w.chunk(len(parts)), biases):
                out[f"{b}.{z}.weight"] = wz.contiguous()
                if bz is not None:
                    out[f"{b}.{z}.bias"] = bz.contiguous()
                take.origin[f"{b}.{z}.weight"] = theirs + ".weight"
    return out


def to_shardlab(sd: dict[str, torch.Tensor], cfg) -> dict[str, torch.Tensor]:
    """The model's state dict, exactly the keys and shapes `build_model(cfg).state_dict()` has (a tied head
    under its own name too, as a training checkpoint stores it), in the dtype the weights were stored in."""
    llama = isinstance(cfg, LlamaConfig)
    anat = anatomy.of(cfg)
    sd = {k.removeprefix(anat.hf_prefix): v for k, v in sd.items() if not k.endswith(BUFFERS)}
    take = _Take(sd)
    out = from_hf(take, anat, cfg.n_layer)
    ours, wte = anat.weight(anat.head), anat.weight(anat.embedding)
    theirs = anat.hf_top[ours]
    head = take.left.pop(theirs, None)
    if not cfg.tie_embeddings:
        if head is None:
            raise HFImportError(f"the weights have no tensor {theirs!r}, and config.json says "
                                "tie_word_embeddings=false (the head is its own matrix)")
        out[ours], take.origin[ours] = head, theirs
    elif head is not None and not torch.equal(head, out[wte]):
        raise HFImportError(f"{theirs} differs from the token embedding, but config.json says "
                            "tie_word_embeddings=true; set it to false to import an untied head")
    else:
        out[ours] = out[wte]
    if take.left:
        raise HFImportError(f"the weights hold {sorted(take.left)[0]!r} (and {len(take.left) - 1} more), which "
                            f"shardlab's {'llama' if llama else 'GPT-2'} has no place for")
    _check_shapes(out, cfg, take.origin)
    return out


def _check_shapes(out: dict, cfg, origin: dict) -> None:
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        want = build_model(cfg, 0).state_dict()
    for name, w in want.items():
        got = out[name]
        if tuple(got.shape) != tuple(w.shape) and name in origin:
            raise HFImportError(f"tensor {origin[name]!r} has shape {list(got.shape)}, but config.json's model "
                                f"needs {list(w.shape)} for it")
        if got.dtype not in FLOATS:
            raise HFImportError(f"tensor {origin.get(name, name)!r} is {str(got.dtype).removeprefix('torch.')}; "
                                "import reads floating-point weights (not quantized ones)")


def import_hf(hf_dir: Path, out: Path) -> tuple[Path, dict]:
    """Import `hf_dir` as the checkpoint `out`/checkpoints/step_000000. Returns (its step dir, its
    `imported` record). HFImportError: bad input, nothing written."""
    hf_dir, out = Path(hf_dir), Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise HFImportError(f"--out {out} exists and is not empty; give a new directory")
    c = read_config(hf_dir)
    cfg = model_config(hf_dir, c)
    tensors = to_shardlab(read_tensors(hf_dir), cfg)
    dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in tensors.values()})
    record = {"from": str(hf_dir.resolve()), "architecture": c["architectures"][0], "dtype": ",".join(dtypes),
              "tokenizer": [n for n in TOKENIZER_FILES if (hf_dir / n).is_file()],
              "token_ids": {k: c.get(k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}}
    step = _write(out, tensors, _train_state(cfg, record), hf_dir, record["tokenizer"])
    return step, record


def _train_state(cfg, record: dict) -> dict:
    """train_state.json of an imported model: step 0, one process, no sampler, scaler or scheduler."""
    import platform

    import shardlab
    return {"step": 0, "sampler": None, "shares": None, "scaler": None, "scheduler": None, "world_size": 1,
            "layout": dict.fromkeys(st.DEGREES, 1), "strategy": "single", "seed": 0,
            "model": dataclasses.asdict(cfg), "config": None, "imported": record,
            "versions": {"shardlab": getattr(shardlab, "__version__", "0"), "torch": torch.__version__,
                         "python": platform.python_version()}}


def _write(out: Path, tensors: dict, meta: dict, hf_dir: Path, tokenizer: list[str]) -> Path:
    """Build the checkpoint in a hidden directory beside `out`, then rename it to `out` (atomic: an error
    or an interrupt removes the hidden one, and `out` never exists half-written)."""
    import torch.distributed.checkpoint as dcp

    from shardlab.checkpoint.storage import Writer

    tmp = out.parent / f".{out.name}.importing"
    shutil.rmtree(tmp, ignore_errors=True)  # a killed import's leftover
    try:
        step = tmp / "checkpoints" / mf.step_dirname(0)
        step.mkdir(parents=True)
        writer = Writer(step, fail=False)
        dcp.save({"model": tensors}, storage_writer=writer, no_dist=True)
        files = dict(writer.fs.entries)  # the shard file, hashed as written
        mf.write_json_atomic(step / st.STATE_FILE, meta)
        if tokenizer:
            (step / "tokenizer").mkdir()
            for name in tokenizer:
                shutil.copyfile(hf_dir / name, step / "tokenizer" / name)
        for name in sorted(mf.entry_names(step)):
            if name not in files:
                files[name] = mf.file_entry(step / name)
        mf.write_manifest(step, files, step=0, world_size=1, layout=meta["layout"], strategy=meta["strategy"],
                          created=time.time(), imported=meta["imported"]["from"])
        mf.write_latest(step.parent, step)
        if out.exists():
            out.rmdir()  # (empty: checked before anything was read)
        os.replace(tmp, out)
        mf.fsync_dir(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out / "checkpoints" / mf.step_dirname(0)


def note_no_tokenizer(hf_dir: Path) -> None:
    print(f"shardlab ckpt: note: {hf_dir} has no tokenizer files ({', '.join(TOKENIZER_FILES)}): the checkpoint "
          "is imported without a tokenizer", file=sys.stderr)
