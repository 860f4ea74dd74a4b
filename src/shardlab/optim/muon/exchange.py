"""Muon's step on sharded matrices: each matrix gathered whole on one rank, orthogonalised there once,
and the result scattered back to the pieces (as torchtitan's DistMuon, Dion and Megatron's dist_muon do).

The layers that hand the optimizer pieces describe them (`optim.serving.Pieces`: per parameter a `Split`,
the group holding its pieces, the dimension they are cut along, the assembled length), outermost layer
first: own ZeRO's (or FSDP2's) dim-0 row shards of what it was handed, then own TP's (or DTensor TP's) column
or row slices of the matrix (the DTensor layers' read from the placements: optim/dtensor_pieces.py; a
DTensor's local tensor is exchanged). Undone in that order, level by level:

    gather   level by level, one all-to-all per level's group (tag muon.gather): every rank sends its piece
             of each matrix (a DTensor's short last piece padded to ceil(length / N)) to the matrix's owner
             at that level, which concatenates the pieces (and drops the padding); at the next level only
             the ranks that own the assembled tensors take part
    compute  the rank that owns a matrix at every level orthogonalises it (newton_schulz.py)
    scatter  the same levels backwards (tag muon.scatter): the owner cuts the result into the pieces
             (padding again with zero rows) and sends each rank its own

Owners are dealt out round-robin over the matrices sorted by size (largest first), so each rank of a group
orthogonalises about 1/N of the matrices' elements. Only the Nesterov momentum update crosses the wire: the
momentum buffer and the parameter stay on their pieces (the state is sharded like AdamW's). Matrices a
layer holds whole (ddp, pipeline stages, EP's experts, TP's replicated key/value heads) skip the exchange.
`exchange_bytes` is the bytes per step as a formula of the matrices' shapes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from shardlab import comm
from shardlab.optim.muon.cost import GATHER, SCATTER, exchange_bytes  # noqa: F401 - the formula, torch-free
from shardlab.optim.muon.newton_schulz import newton_schulz


@dataclass(eq=False)
class Matrix:
    fqn: str
    param: torch.Tensor  # what this rank steps: a piece or the whole (a DTensor's local tensor is stepped)
    levels: list  # [(layer index, Split)], outermost layer first
    shape: tuple  # the whole matrix's
    owner: tuple = ()  # per level, the group rank of the rank that assembles it there
    pieces: list = field(default_factory=list)  # per level, the piece shape each rank sends (ceil: padded)
    held: list = field(default_factory=list)  # per level, the shape this rank holds there (DTensor's last
    # pieces may be shorter than the rest, or empty: padded to `pieces` to send, cut back when received)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def matrices(named, pieces) -> list[Matrix]:
    """The matrices of `named` ((fqn, tensor stepped)) and how the layers' `pieces` cut them; owners dealt."""
    out = []
    for fqn, p in named:
        levels = [(i, s) for i, h in enumerate(pieces) if (s := h.split(fqn)) is not None
                  and comm.world_size(s.group) > 1]
        shape, held, cuts = list(_local(p).shape), [], []
        for _, s in levels:
            held.append(tuple(shape))
            shape[s.dim] = math.ceil(s.length / comm.world_size(s.group))
            cuts.append(tuple(shape))
            shape[s.dim] = s.length
        out.append(Matrix(fqn, p, levels, tuple(shape), pieces=cuts, held=held))
    deal(out)
    return out


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local tensor (FSDP2's, DTensor TP's pieces: stepped in place), else t."""
    return t.to_local() if hasattr(t, "to_local") else t


def deal(mats: list[Matrix]) -> None:
    """Round-robin by size: within the matrices cut by the same layers, largest first, the k-th goes to the
    k-th rank of the product of those layers' groups (last layer fastest)."""
    classes: dict[tuple, list[Matrix]] = {}
    for m in mats:
        classes.setdefault(tuple(i for i, _ in m.levels), []).append(m)
    for ms in classes.values():
        sizes = [comm.world_size(s.group) for _, s in ms[0].levels]
        for k, m in enumerate(sorted(ms, key=lambda m: -m.numel)):
            m.owner = _coords(k % math.prod(sizes), sizes)


def _coords(index: int, sizes: list[int]) -> tuple:
    coords = []
    for n in reversed(sizes):
        coords.append(index % n)
        index //= n
    return tuple(reversed(coords))


def _taking_part(m: Matrix, j: int) -> bool:
    """Whether this rank holds m's level-j piece: it owns m at every level before j."""
    return all(comm.rank(s.group) == m.owner[i] for i, (_, s) in enumerate(m.levels[:j]))


def _at_level(mats, layer: int):
    """(matrix, its level index) for the matrices this rank exchanges at `layer`'s group, in one order."""
    out = []
    for m in mats:
        j = next((j for j, (i, _) in enumerate(m.levels) if i == layer), None)
        if j is not None and _taking_part(m, j):
            out.append((m, j))
    return out


def orthogonalise(mats: list[Matrix], updates: dict, ns_dtype=None) -> dict:
    """{matrix: this rank's piece of NS(the whole update)} from {matrix: this rank's piece of the update}."""
    cur = dict(updates)
    layers = sorted({i for m in mats for i, _ in m.levels})
    for layer in layers:
        _gather(_at_level(mats, layer), cur)
    for m in mats:
        if all(comm.rank(s.group) == m.owner[j] for j, (_, s) in enumerate(m.levels)):
            cur[m] = newton_schulz(cur[m], dtype=ns_dtype).to(cur[m].dtype)
    for layer in reversed(layers):
        _scatter(_at_level(mats, layer), cur)
    return cur


def _gather(part, cur: dict) -> None:
    if not part:
        return
    group = part[0][0].levels[part[0][1]][1].group
    n, me = comm.world_size(group), comm.rank(group)
    sends = [[(m, j) for m, j in part if m.owner[j] == d] for d in range(n)]
    for m, j in part:  # a DTensor's short last pieces, padded to the others' length
        cur[m] = _pad(cur[m], m.pieces[j], m.levels[j][1].dim)
    inp = torch.cat([cur[m].reshape(-1) for dest in sends for m, _ in dest])
    in_splits = [sum(cur[m].numel() for m, _ in dest) for dest in sends]
    mine = sends[me]
    out = inp.new_empty(n * in_splits[me])
    comm.all_to_all_single(out, inp, [in_splits[me]] * n, in_splits, group=group, tag=GATHER)
    chunks = out.view(n, -1) if n * in_splits[me] else [out[:0]] * n
    offset = 0
    for m, j in mine:
        shape, split = m.pieces[j], m.levels[j][1]
        k = math.prod(shape)
        whole = torch.cat([chunks[s][offset: offset + k].view(shape) for s in range(n)], dim=split.dim)
        cur[m] = whole.narrow(split.dim, 0, split.length)
        offset += k


def _scatter(part, cur: dict) -> None:
    if not part:
        return
    group = part[0][0].levels[part[0][1]][1].group
    n, me = comm.world_size(group), comm.rank(group)
    mine = [(m, j) for m, j in part if m.owner[j] == me]
    cuts = [_cut(cur[m], m.pieces[j], m.levels[j][1].dim, n) for m, j in mine]
    inp = torch.cat([c[d].reshape(-1) for d in range(n) for c in cuts]) if cuts else \
        next(iter(cur.values())).new_empty(0)
    in_splits = [sum(math.prod(m.pieces[j]) for m, j in mine)] * n
    out_splits = [sum(math.prod(m.pieces[j]) for m, j in part if m.owner[j] == s) for s in range(n)]
    out = inp.new_empty(sum(out_splits))
    comm.all_to_all_single(out, inp, out_splits, in_splits, group=group, tag=SCATTER)
    offsets = [sum(out_splits[:s]) for s in range(n)]
    for m, j in part:
        s, k = m.owner[j], math.prod(m.pieces[j])
        cur[m] = out[offsets[s]: offsets[s] + k].view(m.pieces[j]).narrow(m.levels[j][1].dim, 0,
                                                                           m.held[j][m.levels[j][1].dim])
        offsets[s] += k


def _pad(t: torch.Tensor, shape: tuple, dim: int) -> torch.Tensor:
    """t, zero-padded along `dim` to `shape` (as it is when it has that shape already: ZeRO's, own TP's)."""
    if t.shape[dim] == shape[dim]:
        return t
    size = list(t.shape)
    size[dim] = shape[dim] - t.shape[dim]
    return torch.cat([t, t.new_zeros(size)], dim=dim)


def _cut(whole: torch.Tensor, piece: tuple, dim: int, n: int) -> list[torch.Tensor]:
    """The n pieces of `whole` along `dim`, each `piece[dim]` long: zero padding past its end (ZeRO's rows)."""
    size = list(whole.shape)
    size[dim] = n * piece[dim] - whole.shape[dim]
    if size[dim]:
        whole = torch.cat([whole, whole.new_zeros(size)], dim=dim)
    return list(whole.split(piece[dim], dim=dim))
