"""The float8 casts' numerics, read from the converted layers: per layer and operand the amax, the scale,
and the sampled fractions of elements that underflow (cast to 0) or saturate (clamped at the format's
largest value). Reading them syncs the device once per call: metrics decide how often.

Under tensor, pipeline or expert parallelism each rank holds other layers or other pieces of them, under
the model's own names (a stage keeps `blocks.5`, an expert-parallel rank `experts.5`), so the figures of
the whole model are every rank's merged: `gather` (one object all-gather, at the logging cadence) for the
metrics, `first_across` over what each rank's `nonfinite_casts` found for the doctor.
"""
from __future__ import annotations

import math
import re

import torch.nn as nn

from shardlab.fp8.linear import Float8Linear

OPS = ("input", "weight", "grad")


def collect(model: nn.Module) -> dict[str, dict[str, dict[str, float]]]:
    """{layer name: {"input"|"weight"|"grad": {"amax", "scale", "underflow", "saturated"}}} for every
    converted layer of this rank that has run (the gradient's once a backward has), by the name the layer
    had when converted (own TP keeps it as the `converted` child of its module)."""
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, Float8Linear) and m.fp8_stats:
            out[getattr(m, "fp8_name", name)] = {op: {k: float(v) for k, v in s.items()} for op, s in m.fp8_stats.items()}
    return out


def _key(name: str, position: int) -> tuple:
    """Where a layer sits in the whole model's forward: its indices (block, then expert: every rank names
    them alike) and, within them, its place in this rank's model (a block's linears live on one rank)."""
    return tuple(int(n) for n in re.findall(r"(?<=\.)\d+(?=\.|$)", name)), position


def _bad(s: dict) -> bool:
    return not (math.isfinite(s["scale"]) and s["scale"] > 0 and math.isfinite(s["amax"]))


def merged(parts: list[dict]) -> dict:
    """Every rank's `collect` (each in its own model's order) as one dict in the whole model's order. A layer
    on several ranks (TP pieces, data-parallel copies) takes the largest amax and the smallest scale (a
    non-finite one wins: it is what went wrong) and the mean of the ranks' sampled fractions (each rank
    samples its own piece or batch: an estimate of the whole's)."""
    keys, out, n = {}, {}, {}
    for part in parts:
        for pos, (name, ops) in enumerate(part.items()):
            keys[name] = min(keys.get(name, _key(name, pos)), _key(name, pos))
            for op, s in ops.items():
                acc = out.setdefault(name, {}).get(op)
                n[name, op] = n.get((name, op), 0) + 1
                if acc is None or _bad(acc) or _bad(s):
                    out[name][op] = dict(acc if acc is not None and _bad(acc) else s)
                    continue
                acc.update(amax=max(acc["amax"], s["amax"]), scale=min(acc["scale"], s["scale"]),
                           **{k: acc[k] + s[k] for k in ("underflow", "saturated") if k in acc and k in s})
    for (name, op), count in n.items():
        s = out[name][op]
        if not _bad(s):
            s.update({k: s[k] / count for k in ("underflow", "saturated") if k in s})
    return {name: {op: out[name][op] for op in OPS if op in out[name]} for name in sorted(out, key=keys.get)}


def gather(model: nn.Module, group=None) -> dict:
    """The figures of every converted layer of the whole model: this rank's `collect` all-gathered over
    `group` (the world by default) in one small object collective and `merged`. Every rank calls it."""
    from shardlab import comm

    return merged(comm.all_gather_object(collect(model), group=group))


def nonfinite_casts(model: nn.Module) -> list[tuple]:
    """This rank's casts whose last scale is not a finite positive number (an inf/nan amax makes it 0 or
    nan), each as (order key, layer, operand): small, for the doctor to all-gather with its report."""
    return [(_key(name, pos), name, op) for pos, (name, ops) in enumerate(collect(model).items())
            for op in OPS if op in ops and _bad(ops[op])]


def first_across(per_rank: dict[int, list], where=None) -> str | None:
    """'layer operand' of the first non-finite cast, in the order the step made them, over every rank's
    `nonfinite_casts` ({rank: list}), or None: the forward's operands (input, weight) in the model's
    order, then the gradients in the backward's order (the model's, reversed); a tie (TP pieces, data-
    parallel copies) goes to the lowest rank. A non-finite value spreads to every later cast; the first one
    is where it entered the float8 layers. `where(layer, rank)`: the words that place it, e.g. " (rank 1,
    pipeline stage 1)" (omitted: none)."""
    fwd = [(key, rank, name, op) for rank, casts in per_rank.items() for key, name, op in casts if op != "grad"]
    bwd = [(key, rank, name, op) for rank, casts in per_rank.items() for key, name, op in casts if op == "grad"]
    fwd.sort(key=lambda c: (c[0], OPS.index(c[3]), c[1]))
    bwd.sort(key=lambda c: c[1])
    bwd.sort(key=lambda c: c[0], reverse=True)  # stable: a tie keeps the lowest rank first
    if not (fwd or bwd):
        return None
    _, rank, name, op = (fwd or bwd)[0]
    return f"{name} {op}" + (where(name, rank) if where is not None else "")


def first_nonfinite(model: nn.Module) -> str | None:
    """The first non-finite cast of one model (`first_across` of this rank alone)."""
    return first_across({0: nonfinite_casts(model)})
