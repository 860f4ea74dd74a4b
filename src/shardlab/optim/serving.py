"""The one rule between optimizers and the layers that shard parameters: serve or refuse, in one line.

Every layer that decides which tensors the optimizer steps declares what it hands it of each matrix
(`optimizer_hands`: None for whole matrices, else a phrase such as "dim-0 row shards"). Before it builds the
optimizer it asks `serve`. An elementwise optimizer (AdamW, SGD) is served by any layer: each shard is
updated alone, bitwise as the whole. An optimizer whose update needs the whole matrix (its row says
`whole_matrix`) is served where the layer hands whole matrices (or gathers them first and declares None);
anywhere else the run stops here, before any state is allocated, with one line naming both sides.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from shardlab.errors import ConfigError
from shardlab.optim.registry import OptimizerRow


@dataclass
class Factory:
    """An optimizer factory that knows its registry row: `factory(named_params) -> optimizer`."""
    row: OptimizerRow
    build: Callable

    def __call__(self, named_params):
        return self.build(named_params)


def serve(factory, layer: str, hands: str | None) -> None:
    """Refuse, with one line, an optimizer that needs whole matrices from a layer that hands it parts.
    `factory`: a registry `Factory` (a plain callable is taken as elementwise: the tests' own); `layer`:
    the layer's name as the config spells it; `hands`: its `optimizer_hands` declaration."""
    row = getattr(factory, "row", None)
    if row is None or not row.whole_matrix or hands is None:
        return
    raise ConfigError(f"optimizer {row.name} needs whole matrices, and {layer} hands it {hands}: "
                      "choose a layer that keeps whole matrices (ddp, torch-ddp, torch-zero1) or an "
                      "elementwise optimizer")


def factory_for(cfg, no_decay: set[str], routers: set[str] = frozenset(), name: str | None = None) -> Factory:
    """The factory of the optimizer the run names (`registry.training_name`), carrying its row."""
    from shardlab.optim import registry

    row = registry.get(name or registry.training_name(cfg))
    return Factory(row, row.load()(cfg, no_decay, routers))
