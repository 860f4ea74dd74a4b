"""The data-parallel layers behind one interface (see `base.Strategy` and docs/strategies.md).

`shardlab.parallel` applies them (parallel/data_parallel.py); their names are listed once, in
`shardlab.parallel.layers.DATA_PARALLEL`.
"""
from __future__ import annotations

from shardlab.parallel.layers import DATA_PARALLEL as REGISTRY
from shardlab.strategies.base import Strategy

__all__ = ["Strategy", "REGISTRY"]
