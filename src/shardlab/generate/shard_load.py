"""What one generating rank reads: the values of the part it holds, straight from the checkpoint.

Under tp or pp > 1 `shardlab generate` builds the model on the meta device (compose.build_inference: the
pipeline stage, then tensor parallelism cut it there) and gives storage only to this rank's part. This fills
it, reading nothing the rank does not hold:

- a shardlab checkpoint through DCP, with the reader a resume uses (checkpoint/reader.py): the part's state
  dict in the bare model's names and global shapes (own TP's DTensors over tp: this rank's rows or columns;
  a pipeline stage's parameters whole) asks for the byte ranges its pieces cover, from whatever layout wrote
  them. A stored chunk larger than the piece is read, then narrowed: one stored chunk at a time;
- a Hugging Face directory through safetensors, one tensor at a time (`safe_open`, `get_slice`): this
  rank's rows or columns of each tensor its part holds, transposed or cut out of a fused tensor as the
  import does (checkpoint/hf_import.py, read from the family's anatomy), and nothing else.

A tied head is the embedding: where the checkpoint holds no tensor under the head's own name (older
checkpoints, Hugging Face exports) it is read from the embedding's.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import torch

from shardlab.generate.load import LoadError, is_hf_dir, step_dir
from shardlab.model import anatomy


def load_part(path, cfg, part, tp) -> None:
    """Read this rank's values of `part` (built by compose.build_inference from `cfg`, allocated, not yet
    initialised; `tp` the tensor-parallel layer's object or None) from the checkpoint or HF dir `path`."""
    targets = _targets(part, tp)
    p = Path(path)
    if is_hf_dir(p):
        _read_hf(p, cfg, targets)
    else:
        _read_dcp(step_dir(p), cfg, targets)
    if tp is not None:  # the pieces were read in place; this zeroes the vocabulary's padding rows
        tp.load_state_dict(targets)


def _targets(part, tp) -> dict:
    """fqn -> the tensor to read this rank's values into, in the bare model's names and global shape: own
    TP's state dict (its DTensors share the shards' storage), else the part's parameters themselves."""
    if tp is not None:
        return tp.state_dict()
    params = dict(part.named_parameters())
    anat = anatomy.of(part)
    out = {}
    for fqn in part.state_dict(keep_vars=True):
        key = fqn if fqn in params else anat.tied_key(fqn)
        if key in params:
            out[fqn] = params[key].detach()
    return out


def _tied_away(targets: dict, present, anat) -> dict:
    """{name to read under: target}: a tied head the checkpoint does not hold under its own name is read
    from the embedding's (or dropped when the embedding is read on this rank anyway: the same storage)."""
    out = {}
    for fqn, t in targets.items():
        key = anat.tied_key(fqn)
        if fqn not in present and key != fqn:
            if key in targets:
                continue
            fqn = key
        out[fqn] = t
    return out


def _read_dcp(step: Path, cfg, targets: dict) -> None:
    """Through DCP, as a resume reads (checkpoint/loading.py): every rank plans its own reads."""
    import torch.distributed.checkpoint as dcp

    from shardlab.checkpoint.reader import Reader

    reader = Reader(step)
    stored = {k[len("model."):] for k in reader.read_metadata().state_dict_metadata if k.startswith("model.")}
    anat = anatomy.of(cfg)
    if any(f".{name}.weight" in k for k in stored for name in anat.fused):
        _read_fused(step, cfg, targets, stored)
        return
    reads = _tied_away(targets, stored, anat)
    missing = sorted(set(reads) - stored)
    if missing:
        raise LoadError(f"{step}: weights do not match the model (missing {missing[:3]})")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load({"model": reads}, storage_reader=reader, no_dist=True)


def _read_fused(step: Path, cfg, targets: dict, stored: set) -> None:
    """A checkpoint written before q, k, v were split (attn.qkv, the same rows): each fused tensor of the
    blocks this rank holds is read whole, one at a time, and cut to this rank's piece of q, k or v."""
    import torch.distributed.checkpoint as dcp

    from shardlab.checkpoint.reader import Reader

    anat = anatomy.of(cfg)
    parts = {f".{z}.": (f".{fused}.", k, len(zs)) for fused, zs in anat.fused.items() for k, z in enumerate(zs)}
    reads = _tied_away(targets, stored, anat)
    for fqn, target in reads.items():
        name, k, n = fqn, 0, 1
        for z, (fused, k_, n_) in parts.items():
            if z in fqn and fqn.replace(z, fused) in stored:
                name, k, n = fqn.replace(z, fused), k_, n_
        shape = tuple(target.shape)  # global (a DTensor's)
        whole = {name: torch.empty((shape[0] * n, *shape[1:]), dtype=target.dtype)}
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load({"model": whole}, storage_reader=Reader(step), no_dist=True)
        value = whole[name].chunk(n)[k]
        _copy_piece(target, value)


def _copy_piece(target, whole: torch.Tensor) -> None:
    """Copy this rank's piece of `whole` (the bare model's tensor) into `target` (a plain tensor: all of it;
    a DTensor: the piece its local tensor holds)."""
    if not hasattr(target, "to_local"):
        target.copy_(whole)
        return
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    local = target.to_local()
    shape, offset = compute_local_shape_and_global_offset(target.shape, target.device_mesh, target.placements)
    src = whole
    for dim, (off, n) in enumerate(zip(offset, shape)):
        src = src.narrow(dim, off, n)
    local.copy_(src)


def _read_hf(hf_dir: Path, cfg, targets: dict) -> None:
    """From safetensors, each tensor's slice this rank holds (`hf_slices`), one at a time."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    anat = anatomy.of(cfg)
    sources = hf_sources(anat, cfg.n_layer, cfg.tie_embeddings)
    files = _hf_files(hf_dir, anat)
    for fqn, target in targets.items():
        if fqn not in sources or sources[fqn][0] not in files:
            raise LoadError(f"{hf_dir}: the weights have no tensor for {fqn!r} "
                            f"({sources.get(fqn, ('?',))[0]!r})")
        if hasattr(target, "to_local"):
            local = target.to_local()
            shape, offset = compute_local_shape_and_global_offset(target.shape, target.device_mesh,
                                                                  target.placements)
        else:
            local, shape, offset = target, tuple(target.shape), (0,) * target.dim()
        if local.numel():
            local.copy_(hf_slice(files, sources[fqn], tuple(target.shape), offset, shape))


def hf_sources(anat, n_layer: int, tied: bool) -> dict[str, tuple[str, int, int, bool]]:
    """Our name -> (the HF tensor's name without the family's optional prefix, which part of a fused tensor
    it is, of how many, whether HF stores it transposed): hf_import.py's `from_hf` as a table."""
    out = {ours: (theirs.removeprefix(anat.hf_prefix), 0, 1, False) for ours, theirs in anat.hf_top.items()}
    if tied:
        out[anat.weight(anat.head)] = out[anat.weight(anat.embedding)]
    kinds = ("weight", "bias") if anat.bias else ("weight",)
    for i in range(n_layer):
        h = f"{anat.hf_block_prefix}.{i}.".removeprefix(anat.hf_prefix)
        for ours, theirs in anat.hf_block.items():
            zs = anat.fused.get(ours, (ours,))
            for k, z in enumerate(zs):
                for kind in kinds:
                    transposed = kind == "weight" and anat.hf_transposed and not anat.is_norm(ours)
                    out[f"{anat.block(i)}.{z}.{kind}"] = (f"{h}{theirs}.{kind}", k, len(zs), transposed)
    return out


def _hf_files(hf_dir: Path, anat) -> dict[str, tuple[Path, str]]:
    """HF tensor name (prefix removed) -> (its safetensors file, its name there): the headers only."""
    import json

    from safetensors import safe_open

    from shardlab.checkpoint.hf_import import INDEX

    if (hf_dir / INDEX).is_file():
        weight_map = json.loads((hf_dir / INDEX).read_text())["weight_map"]
    else:
        with safe_open(str(hf_dir / "model.safetensors"), "pt") as f:
            weight_map = {k: "model.safetensors" for k in f.keys()}
    return {k.removeprefix(anat.hf_prefix): (hf_dir / v, k) for k, v in weight_map.items()}


def hf_slice(files: dict, source: tuple, full_shape: tuple, offset, shape) -> torch.Tensor:
    """Our tensor's block [offset, offset + shape) (`full_shape`: our whole tensor's) read from the HF file:
    shifted to its part of a fused tensor (rows k * full_shape[0] on), transposed where HF stores (in, out)."""
    from safetensors import safe_open

    name, k, _, transposed = source
    path, theirs = files[name]
    index = [slice(o, o + n) for o, n in zip(offset, shape)]
    index[0] = slice(index[0].start + k * full_shape[0], index[0].stop + k * full_shape[0])
    if transposed:
        index = index[::-1]
    with safe_open(str(path), "pt") as f:
        value = f.get_slice(theirs)[tuple(index)]
    return value.t() if transposed else value
