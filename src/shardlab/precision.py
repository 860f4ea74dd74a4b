"""The precisions shardlab knows, defined once. `train.dtype` names what the step computes in (torch.autocast
over fp32 weights, gradients and Adam state), `parallel.comm_dtype` what the data-parallel layers send
gradients in, `parallel.outer_dtype` what DiLoCo sends pseudo-gradients in. The config's choices, the step's
autocast, the doctor's replay, the loss scaler, the layers' wire formats and the planner all read this table:
a new precision is a row here (and, where torch has no autocast for it, the converter that runs it).

Pure data at import (torch loads on the first dtype asked): `shardlab.config` reads the names at start-up.
"""
from __future__ import annotations

import sys

NAMES = ("fp32", "bf16", "fp16")
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}  # bytes an element (the planner's traffic formulas)
_TORCH = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# How the planner models a training dtype (plan/layout.py PRECISIONS): autocast keeps fp32 weights and states
PLANNED_AS = {"fp32": "fp32", "bf16": "bf16-autocast", "fp16": "fp16-autocast"}
# fp16's 5-bit exponent underflows small gradients: a dynamic loss scaler guards it (train/scaler.py)
LOSS_SCALED = ("fp16",)


def torch_dtype(name: str):
    import torch

    return getattr(torch, _TORCH[name])


def autocast_dtype(name: str):
    """What torch.autocast computes in for `train.dtype=name`; None for fp32 (no autocast)."""
    return None if name == "fp32" else torch_dtype(name)


def wire_dtype(name: str):
    """What a gradient travels in for `parallel.comm_dtype=name`; None for fp32: the gradient's own dtype
    (fp32, or float64 for a float64 model: widening never narrows)."""
    return None if name == "fp32" else torch_dtype(name)


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
