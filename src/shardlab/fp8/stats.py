"""The float8 casts' numerics, read from the converted layers: per layer and operand the amax, the scale,
and the sampled fractions of elements that underflow (cast to 0) or saturate (clamped at the format's
largest value). Reading them syncs the device once per call: metrics decide how often."""
from __future__ import annotations

import math

import torch.nn as nn

from shardlab.fp8.linear import Float8Linear


def collect(model: nn.Module) -> dict[str, dict[str, dict[str, float]]]:
    """{layer name: {"input"|"weight"|"grad": {"amax", "scale", "underflow", "saturated"}}} for every
    converted layer that has run (the gradient's once a backward has)."""
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, Float8Linear) and m.fp8_stats:
            out[name] = {op: {k: float(v) for k, v in s.items()} for op, s in m.fp8_stats.items()}
    return out


def first_nonfinite(model: nn.Module) -> str | None:
    """'layer operand' of the first cast, in the order the step made them, whose last scale is not a finite
    positive number (an inf/nan amax makes it 0 or nan), or None: the forward's operands (input, weight) in
    the model's order, then the gradients in the backward's order (the model's, reversed). A non-finite
    value spreads to every later cast; the first one is where it entered the float8 layers."""
    layers = list(collect(model).items())
    order = [(n, op) for n, ops in layers for op in ("input", "weight") if op in ops]
    order += [(n, "grad") for n, ops in reversed(layers) if "grad" in ops]
    for name, op in order:
        s = dict(layers)[name][op]
        if not (math.isfinite(s["scale"]) and s["scale"] > 0 and math.isfinite(s["amax"])):
            return f"{name} {op}"
    return None
