"""The optimizers shardlab knows, one row each, and what each declares to the layers and the planner.

A row says what the rest of shardlab must know about an optimizer without running it:

    states        state tensors kept per parameter, each `state_bytes` an element (AdamW: m and v; SGD:
                  the momentum buffer): the planner's optimizer bytes and step traffic read them
    whole_matrix  whether the update of a matrix needs all of it (an orthogonalisation, as Muon's), or is
                  elementwise (AdamW, SGD: any shard of a tensor is updated alone, bitwise alike). A sharding
                  layer serves a whole-matrix optimizer only if it hands it whole matrices (optim/serving.py)
    factory       "module:function", (cfg, no_decay, routers) -> factory(named_params) -> torch optimizer,
                  imported on first use (this table is pure data: config and the planner read it torch-free)
    planned_as    the planner's name for it (`shardlab plan ... optimizer=adam`)

A new optimizer is a module with its factory and one `register(...)` line (or a row below).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

# What a run uses when nothing names another (the training config has no key for it yet)
DEFAULT = "adamw"


@dataclass(frozen=True)
class OptimizerRow:
    name: str
    states: int
    factory: str
    whole_matrix: bool = False
    state_bytes: int = 4  # fp32 states, whatever the compute precision (autocast keeps fp32 weights)
    planned_as: str = ""

    @property
    def bytes_per_param(self) -> int:
        """Optimizer state bytes per parameter (the K of the planner's (2 + 2 + K)Psi, without a master copy)."""
        return self.states * self.state_bytes

    @property
    def step_bytes(self) -> int:
        """Bytes a memory-bound step moves per fp32 parameter: reads the parameter, its gradient and every
        state; writes the parameter and every state (AdamW 28, SGD with momentum 20)."""
        return 4 * (2 + self.states) + 4 * (1 + self.states)

    def load(self):
        module, _, attr = self.factory.partition(":")
        return getattr(importlib.import_module(module), attr)


OPTIMIZERS: dict[str, OptimizerRow] = {}


def register(row: OptimizerRow) -> OptimizerRow:
    """Add (or replace) a row; returns it. Tests register toy rows and remove them with `unregister`."""
    OPTIMIZERS[row.name] = row
    return row


def unregister(name: str) -> None:
    OPTIMIZERS.pop(name, None)


register(OptimizerRow("adamw", states=2, factory="shardlab.optim.adamw:adamw_factory", planned_as="adam"))
register(OptimizerRow("sgd", states=1, factory="shardlab.optim.sgd:sgd_factory", planned_as="sgd"))


def get(name: str) -> OptimizerRow:
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer {name!r}: must be one of {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name]


def planned() -> dict[str, OptimizerRow]:
    """The rows the planner models, by the planner's name."""
    return {row.planned_as: row for row in OPTIMIZERS.values() if row.planned_as}


def training_name(cfg) -> str:
    """The optimizer a run uses: `train.optimizer` where a config has one, else the default."""
    return getattr(cfg.train, "optimizer", DEFAULT)
