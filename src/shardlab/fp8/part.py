"""What the float8 layer does to one model part (parallel/fp8_spec.py calls it in the composition, after the
pipeline split and before tensor parallelism): convert the part's block linears by the rule, give each
converted linear the tensor-parallel group its tensorwise amaxes are agreed over and a tensorwise weight
its float8 all-gather encoding, which own zero3 and HSDP use (under TP its piece's, when TP makes it), and say what was done for
the whole model (under a pipeline each rank converts its stages' blocks; the start-up line lists them all).
"""
from __future__ import annotations

import sys

import torch.nn as nn

from shardlab import comm
from shardlab.fp8.gather import Float8WeightGather
from shardlab.fp8.linear import Conversion, Float8Linear, convert
from shardlab.fp8.recipes import recipe as recipe_named


def convert_part(part: nn.Module, name: str, tp_group=None) -> Conversion:
    """Own float8 linears in `part` (recipe `name`); under tensor parallelism (`tp_group`: the TP ranks'
    group, or None) each converted linear agrees its tensorwise amaxes over it: own TP splits its weight and
    its activations or gradients by features, and every rank must cast with the scale of the whole tensor."""
    recipe = recipe_named(name)
    done = convert(part, recipe)
    for m in part.modules():
        if isinstance(m, Float8Linear):
            m.amax_group = tp_group
            if tp_group is None and recipe.granularity == "tensor":
                # sharded data parallelism gathers this weight in float8 (gather.py); under TP the piece
                # own TP makes is another parameter: it gets its encoding then (Float8Linear.adopt_piece)
                m.weight.gather_encoding = Float8WeightGather(recipe.weight)
    return done


def whole(done: Conversion, pp_group=None) -> Conversion:
    """The conversion of the whole model from each pipeline rank's (one object all-gather over the pipeline
    group, at build time); `done` itself without a pipeline."""
    if pp_group is None:
        return done
    parts = comm.all_gather_object((done.converted, done.skipped), group=pp_group)
    out = Conversion(done.recipe)
    for converted, skipped in parts:
        out.converted += [n for n in converted if n not in out.converted]
        out.skipped.update({k: v for k, v in skipped.items() if k not in out.skipped})
    key = lambda n: [int(p) if p.isdigit() else p for p in n.split(".")]  # noqa: E731 - blocks in index order
    out.converted.sort(key=key)
    out.skipped = dict(sorted(out.skipped.items(), key=lambda kv: key(kv[0])))
    return out


def announce(done: Conversion, impl: str, file=None) -> str:
    """The start-up line (rank 0 prints it): recipe, implementation, how many linears, what stayed and why."""
    line = f"shardlab: {done.describe()} [{impl}]"
    if comm.rank() == 0:
        print(line, file=file or sys.stdout, flush=True)
    return line
