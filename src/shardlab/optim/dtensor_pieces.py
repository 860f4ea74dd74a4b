"""The pieces the DTensor layers hand the optimizer, described from each parameter's placements as the
`Split`s a gathering optimizer undoes (optim/serving.py `Pieces`; optim/muon/exchange.py): FSDP2's dim-0
shards over dp_shard, DTensor TP's column (Shard(0)) or row (Shard(1)) slices over tp, and both at once
under FSDP2 x TP.

A DTensor's local tensor is a chunk of the whole per cutting mesh dimension, as torch.chunk cuts
(ceil(length / n) a rank, the last ones shorter or empty), applied left to right over the mesh; a
`_StridedShard` (FSDP2 over TP's Shard of the same dimension) is the cut applied after the mesh dimensions
to its right (torch's "right-to-left" sharding: FSDP2 shards what TP left). A layer's level is its mesh
dimension's cut: that dimension's group, the tensor dimension cut, and the length just before the cut.
The optimizer undoes the layers outermost first (FSDP2, then TP), that is the cuts last-applied first:
right for FSDP2 x TP's (_StridedShard(0), Shard(0)) and (Shard(0), Shard(1)), where the two cuts are of
different dimensions and commute. Two plain Shards of one dimension (left to right) would need the other
order; no layer builds them, and they are refused in one line, as is any local shape these rules do not
predict.
"""
from __future__ import annotations

import math

from shardlab.errors import ConfigError
from shardlab.optim.serving import Pieces, Split


def pieces(phrase: str, model, names: tuple[str, ...] | None) -> Pieces:
    """A DTensor layer's `optimizer_hands`: per parameter of `model` (looked up when the optimizer is built,
    after every layer has placed it), the level its mesh dimensions `names` cut (None: any), or None."""
    return Pieces(phrase, lambda fqn: split(model.get_parameter(fqn), names, fqn))


def _cut_dim(placement) -> int | None:
    """The tensor dimension a placement cuts (Shard and _StridedShard), or None (Replicate, Partial)."""
    if placement.is_shard() or _strided(placement):
        return placement.dim
    return None


def _strided(placement) -> bool:
    return hasattr(placement, "split_factor")


def order(p) -> list[int]:
    """The mesh dimensions that cut `p`, in the order their cuts are applied to the whole tensor."""
    pls, mesh = p.placements, p.device_mesh
    plain = [k for k, pl in enumerate(pls) if pl.is_shard()]
    strided = [k for k, pl in enumerate(pls) if _strided(pl)]
    dims = [pls[k].dim for k in plain]
    # split_factor: how many pieces the cuts of its dimension to its right made before it
    odd = [k for k in strided if pls[k].split_factor != math.prod(
        mesh.size(i) for i in plain if i > k and pls[i].dim == pls[k].dim)]
    if odd or len(set(dims)) != len(dims):
        raise ConfigError(f"placements {tuple(pls)}: cuts of one dimension in an order the optimizer cannot "
                          "undo outermost layer first (FSDP2 over TP is _StridedShard, then Shard)")
    return plain + strided


def _chunk(length: int, n: int, coord: int) -> int:
    """torch.chunk's piece `coord` of n of a dimension `length` long (ceil each, the last shorter or empty)."""
    c = math.ceil(length / n)
    return max(0, min(length, (coord + 1) * c) - coord * c)


def split(p, names: tuple[str, ...] | None, fqn: str = "") -> Split | None:
    """The `Split` of DTensor `p` that the mesh dimensions `names` cut (None: a plain tensor, or not cut
    there). Checks the local tensor is the shape the rules above predict."""
    pls = getattr(p, "placements", None)
    if pls is None:
        return None
    mesh = p.device_mesh
    named = mesh.mesh_dim_names or (None,) * mesh.ndim
    mine = [k for k, pl in enumerate(pls) if (names is None or named[k] in names) and _cut_dim(pl) is not None]
    if not mine:
        return None
    coords, size, out = mesh.get_coordinate(), list(p.shape), None
    for k in order(p):
        d = pls[k].dim
        if k == mine[0]:
            out = Split(mesh.get_group(k), d, size[d])
        size[d] = _chunk(size[d], mesh.size(k), coords[k])
    if len(mine) > 1 or tuple(size) != tuple(p.to_local().shape):
        raise ConfigError(f"{fqn or 'a parameter'}: DTensor placements {tuple(pls)} on mesh "
                          f"{mesh.mesh_dim_names} give a local shape {tuple(p.to_local().shape)} that its pieces "
                          "cannot describe (one cut per layer, torch.chunk's)")
    return out
