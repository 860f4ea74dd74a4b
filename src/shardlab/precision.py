"""The precisions shardlab knows, defined once, one row each, and the roles each row may play:

    compute  how `train.dtype=name` computes: "none" (the parameters' own dtype, fp32), "autocast"
             (torch.autocast over fp32 weights, gradients and optimizer state: the step enters it,
             parallel/step.py) or "converter" (a module converter rewrites the single-device model before
             any parallel layer splits it: `CONVERTERS`, applied by `convert` in the composition)
    wire     what `parallel.comm_dtype=name` sends gradients in: "own" (the gradient's own dtype, never
             narrowed), "cast" (cast to this dtype for the collective), None (not a wire format)
    outer    whether `parallel.outer_dtype=name` may carry DiLoCo's pseudo-gradients
    loss_scaled  a dynamic loss scaler guards it (train/scaler.py): fp16's 5-bit exponent underflows
             small gradients

The config's choices, the step's autocast, the doctor's replay, the loss scaler, the layers' wire formats
and the planner all read these rows: a new precision is a row here, and where torch has no autocast for it a
converter (a function nn.Module -> nn.Module, registered by name in `CONVERTERS`).

Pure data at import (torch loads on the first dtype asked): `shardlab.config` reads the names at start-up.
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Precision:
    name: str
    bytes: int  # bytes an element (the planner's traffic formulas)
    torch: str  # the torch dtype's name
    compute: str  # "none" | "autocast" | "converter"
    planned_as: str  # how the planner models it as a training dtype (plan/layout.py PRECISIONS)
    wire: str | None = "cast"  # "own" | "cast" | None
    outer: bool = True
    loss_scaled: bool = False
    converter: str = ""  # the `CONVERTERS` key, for compute="converter"


ROWS = (
    Precision("fp32", 4, "float32", compute="none", planned_as="fp32", wire="own"),
    # autocast keeps fp32 weights and states: the planner's *-autocast
    Precision("bf16", 2, "bfloat16", compute="autocast", planned_as="bf16-autocast"),
    Precision("fp16", 2, "float16", compute="autocast", planned_as="fp16-autocast", loss_scaled=True),
)
ROW = {r.name: r for r in ROWS}
NAMES = tuple(ROW)  # `train.dtype`'s choices: every row computes one way or another
WIRE_NAMES = tuple(r.name for r in ROWS if r.wire is not None)  # `parallel.comm_dtype`'s choices
OUTER_NAMES = tuple(r.name for r in ROWS if r.outer)  # `parallel.outer_dtype`'s choices
BYTES = {r.name: r.bytes for r in ROWS}
PLANNED_AS = {r.name: r.planned_as for r in ROWS}
LOSS_SCALED = tuple(r.name for r in ROWS if r.loss_scaled)

# Module converters: name -> "module:function", the function nn.Module -> nn.Module (it may convert in
# place and return its argument), imported on first use. They run on the single-device model, before tensor
# parallelism: own TP's modules take their matmul from the linear they wrap (parallel/tp/modules.py), so a
# converted linear stays converted under TP.
CONVERTERS: dict[str, str] = {}


def register(row: Precision, converter: str = "") -> Precision:
    """Add a row at run time (and its converter, "module:function", under `row.converter`): the tests' toy
    precisions. A precision of shardlab's own is a line in `ROWS` (the config's choices are read from it)."""
    ROW[row.name] = row
    if converter:
        CONVERTERS[row.converter] = converter
    return row


def torch_dtype(name: str):
    import torch

    return getattr(torch, ROW[name].torch)


def autocast_dtype(name: str):
    """What torch.autocast computes in for `train.dtype=name`; None where the row computes otherwise (fp32:
    no autocast; a converter's row: the converted modules)."""
    return torch_dtype(name) if ROW[name].compute == "autocast" else None


def wire_dtype(name: str):
    """What a gradient travels in for `parallel.comm_dtype=name`; None for the gradient's own dtype (fp32:
    fp32, or float64 for a float64 model: widening never narrows)."""
    return None if ROW[name].wire == "own" else torch_dtype(name)


def convert(model, name: str):
    """The single-device model as `train.dtype=name` computes it: its row's converter applied (the
    composition calls this before any parallel layer); the model itself for autocast and fp32 rows."""
    row = ROW[name]
    if row.compute != "converter":
        return model
    module, _, attr = CONVERTERS[row.converter].partition(":")
    return getattr(importlib.import_module(module), attr)(model)


# Advice: fp16 on CPU is correct but an order of magnitude slower than fp32. CPUs have no fast fp16 matrix
# kernels: autocast to float16 falls back to slow paths, while bfloat16 has native kernels (AVX-512 BF16/AMX) or
# at least fast conversions. Measured on the small model, one rank, 2-core machine: fp16 6.3 s/step, fp32
# 0.62 s, bf16 0.71 s (loaded machine); an earlier quiet run 4.3 s, 0.28 s and 0.14 s.
_warned = False


def warn_if_slow(dtype: str, device_type: str, is_main: bool, file=None) -> bool:
    """Say once per process (rank 0) that train.dtype=fp16 on CPU is slow, and what to use instead."""
    global _warned
    if dtype != "fp16" or device_type != "cpu" or not is_main or _warned:
        return False
    _warned = True
    print("shardlab: warning: train.dtype=fp16 on CPU is ~10-15x slower than fp32 and up to ~30x slower than bf16 "
          "(CPUs have no fast fp16 kernels; measured on the small model: 4.3 s vs 0.28 s fp32 and 0.14 s bf16 per "
          "step); use train.dtype=bf16 on CPU, fp16 on GPUs", file=file or sys.stderr, flush=True)
    return True
