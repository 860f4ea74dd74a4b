"""Activation recompute's declaration (parallel/spec.py): a feature layer, applied to every part.

Pure data: no torch import (recompute.py itself loads torch.utils.checkpoint).
"""
from __future__ import annotations

from shardlab.parallel.spec import Impl, Key, Spec

MODES = ("none", "full", "selective")  # train.recompute (recompute.py MODES)

SPEC = Spec(
    "recompute", "activation recompute", (Impl("blocks", "shardlab.parallel.recompute:apply"),),
    keys=(
        Key("train.recompute",
            'activation recompute per block: none, full (keep the block input only) or selective (keep matmul '
            'outputs, recompute the cheap ops); docs/memory.md',
            " | ".join(MODES)),
        Key("train.recompute_every",
            'recompute every K-th block (1 = all)',
            'int >= 1'),
    ),
    inference=None,  # training only
    cost={"memory": "shardlab.plan.memory:activation_lines", "flops": "shardlab.plan.compute:micro_batch_time"},
)
