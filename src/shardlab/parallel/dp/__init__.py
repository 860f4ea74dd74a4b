"""The data-parallel layers behind one interface (see `base.Strategy` and docs/strategies.md).

`shardlab.parallel` applies them (parallel/dp/apply.py); their names are listed once, in
`shardlab.parallel.layers.DATA_PARALLEL`.
"""
from __future__ import annotations

from shardlab.parallel.layers import DATA_PARALLEL as REGISTRY
from shardlab.parallel.dp.base import Strategy

__all__ = ["Strategy", "REGISTRY"]
