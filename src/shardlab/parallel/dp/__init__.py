"""The data-parallel layers behind one interface (see `base.Strategy` and docs/strategies.md).

`shardlab.parallel` applies them (parallel/dp/apply.py); their names are listed once, in
`shardlab.parallel.layers.DATA_PARALLEL`.
"""
from __future__ import annotations

from shardlab.parallel.layers import DATA_PARALLEL as REGISTRY

__all__ = ["REGISTRY"]  # `base.Strategy` is imported where it is used: config validation reads
# dp/checks.py through this package, and the launcher must not load torch for that
