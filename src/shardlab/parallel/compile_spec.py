"""Compile's declaration (parallel/spec.py): a feature layer, applied to every part after recompute (the
checkpoint is traced). Pure data: no torch import."""
from __future__ import annotations

from shardlab.parallel.spec import Impl, Key, Spec

SPEC = Spec(
    "compile", "compile", (Impl("inductor", "shardlab.parallel.compile:apply"),),
    inference=None,  # training only
    keys=(
        Key("train.compile",
            'torch.compile (inductor) each block, after tp/recompute, under data parallelism; a compile error '
            'falls back to eager with one warning; docs/training.md',
            'bool'),
    ),
)
