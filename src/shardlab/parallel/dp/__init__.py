"""The data-parallel layers behind one interface (see `base.Strategy` and docs/strategies.md).

`shardlab.parallel` applies them (parallel/dp/apply.py); they are declared once, in `spec.py` (their
names, keys, checks and costs), which `shardlab.parallel.layers` lists.
"""
from __future__ import annotations

from shardlab.parallel.dp.spec import SPEC

REGISTRY = SPEC.table()  # name -> "module:Class"
__all__ = ["REGISTRY", "SPEC"]  # `base.Strategy` is imported where it is used: config validation reads
# dp/checks.py through this package, and the launcher must not load torch for that
