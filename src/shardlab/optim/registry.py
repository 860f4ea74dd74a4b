"""The optimizers shardlab knows, one row each, and what each declares to the layers and the planner.

A row says what the rest of shardlab must know about an optimizer without running it:

    states        state tensors kept per parameter, each `state_bytes` an element (AdamW: m and v; SGD:
                  the momentum buffer): the planner's optimizer bytes and step traffic read them
    whole_matrix  whether the update of a matrix needs all of it (an orthogonalisation, as Muon's), or is
                  elementwise (AdamW, SGD: any shard of a tensor is updated alone, bitwise alike). A sharding
                  layer serves a whole-matrix optimizer only if it hands it whole matrices (optim/serving.py)
    gathers       a whole-matrix optimizer that assembles each matrix itself from the pieces a sharding layer
                  describes (`serving.Pieces`): such layers serve it, and its factory's build takes `pieces=`
    factory       "module:function", (cfg, no_decay, routers) -> factory(named_params) -> torch optimizer,
                  imported on first use (this table is pure data: config and the planner read it torch-free)
    planned_as    the planner's name for it (`shardlab plan ... optimizer=adam`)

A new optimizer is a module with its factory and one `register(...)` line (or a row below).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

# What a run uses when nothing names another (`train.optimizer`'s default)
DEFAULT = "adamw"
# train.optim_dtype -> bytes per optimizer state element (bf16: stochastically rounded, optim/bf16_state.py)
STATE_BYTES = {"fp32": 4, "bf16": 2}


@dataclass(frozen=True)
class OptimizerRow:
    name: str
    states: int
    factory: str
    whole_matrix: bool = False
    gathers: bool = False
    state_bytes: int = 4  # fp32 states, whatever the compute precision (autocast keeps fp32 weights)
    planned_as: str = ""
    state_dtypes: tuple = ("fp32",)  # the train.optim_dtype values it keeps its states in (STATE_BYTES)
    cost: str = ""  # "module:function": the planner's model of what the row adds (plan/ reads it; "": nothing)

    @property
    def bytes_per_param(self) -> int:
        """Optimizer state bytes per parameter (the K of the planner's (2 + 2 + K)Psi, without a master copy)."""
        return self.states * self.state_bytes

    def bytes_per_param_in(self, optim_dtype: str) -> int:
        """The same with the states kept in `optim_dtype` (train.optim_dtype): bytes per element x states."""
        return self.states * STATE_BYTES[optim_dtype]

    @property
    def step_bytes(self) -> int:
        """Bytes a memory-bound step moves per fp32 parameter: reads the parameter, its gradient and every
        state; writes the parameter and every state (AdamW 28, SGD with momentum 20)."""
        return self.step_bytes_in("fp32")

    def step_bytes_in(self, optim_dtype: str) -> int:
        """The same with the states in `optim_dtype` (AdamW with bf16 states: 4 x 2 + 2 x 2 + 4 + 2 x 2 = 20)."""
        e = STATE_BYTES[optim_dtype]
        return 4 * 2 + e * self.states + 4 + e * self.states

    def load(self):
        module, _, attr = self.factory.partition(":")
        return getattr(importlib.import_module(module), attr)

    def plan_cost(self, model, train, lay) -> dict | None:
        """The row's cost hook on a plan (model, train, layout): {"state_bytes_per_param", "ns_flops",
        "muon.gather", "muon.scatter", ...} (optim/muon/cost.py), or None for an elementwise optimizer."""
        if not self.cost:
            return None
        module, _, attr = self.cost.partition(":")
        return getattr(importlib.import_module(module), attr)(model, train, lay)


OPTIMIZERS: dict[str, OptimizerRow] = {}


def register(row: OptimizerRow) -> OptimizerRow:
    """Add (or replace) a row; returns it. Tests register toy rows and remove them with `unregister`."""
    OPTIMIZERS[row.name] = row
    return row


def unregister(name: str) -> None:
    OPTIMIZERS.pop(name, None)


register(OptimizerRow("adamw", states=2, factory="shardlab.optim.adamw:adamw_factory", planned_as="adam",
                      state_dtypes=("fp32", "bf16")))
register(OptimizerRow("sgd", states=1, factory="shardlab.optim.sgd:sgd_factory", planned_as="sgd"))
# Muon on the blocks' matrices (one momentum buffer), AdamW on the rest (optim/muon/: docs/optim.md)
register(OptimizerRow("muon", states=1, factory="shardlab.optim.muon.optimizer:muon_factory", whole_matrix=True,
                      gathers=True, state_dtypes=("fp32", "bf16"), planned_as="muon",
                      cost="shardlab.optim.muon.cost:plan"))


SCHEDULES = ("cosine", "wsd")  # optim/schedule.py
# The [train] keys of the optimizers and the schedule: help line and allowed values (config/help.py reads them)
KEYS: dict[str, tuple[str, str]] = {
    "train.optimizer": ("adamw (every parameter), sgd (momentum train.beta1), muon (Muon on the blocks' "
                        "matrices, AdamW on the rest: docs/optim.md); muon needs layers that keep or gather "
                        "whole matrices", " | ".join(OPTIMIZERS)),
    "train.muon_lr": ("muon: the matrices' peak learning rate, on train.lr_schedule (the update is scaled by "
                      "0.2 sqrt(max(m, n)) to AdamW's RMS, as Moonlight); 0 = train.lr", "float >= 0"),
    "train.lr_schedule": ("after the linear warm-up: cosine decay to min_lr, or wsd (warm-up, stable at lr, "
                          "then linear decay to min_lr over the last train.decay_fraction of the steps)",
                          " | ".join(SCHEDULES)),
    "train.decay_fraction": ("wsd: the share of train.steps spent decaying to min_lr", "0 < float <= 1"),
    "train.optim_dtype": ("the optimizer's state (AdamW's m and v, Muon's momentum): fp32, or bf16 with "
                          "stochastic rounding, seeded by train.seed (docs/optim.md)", " | ".join(STATE_BYTES)),
}


def check(t) -> None:
    """The keys above on a config's [train] section (config validation calls it)."""
    from shardlab.errors import ConfigError, choice

    choice("train.optimizer", t.optimizer, tuple(OPTIMIZERS))
    choice("train.lr_schedule", t.lr_schedule, SCHEDULES)
    if not t.muon_lr >= 0:
        raise ConfigError(f"train.muon_lr={t.muon_lr}: must be at least 0 (0 = train.lr)")
    if not 0 < t.decay_fraction <= 1:
        raise ConfigError(f"train.decay_fraction={t.decay_fraction}: must be in (0, 1]")
    optim_dtype = getattr(t, "optim_dtype", "fp32")
    choice("train.optim_dtype", optim_dtype, tuple(STATE_BYTES))
    if optim_dtype not in OPTIMIZERS[t.optimizer].state_dtypes:
        able = ", ".join(n for n, r in OPTIMIZERS.items() if optim_dtype in r.state_dtypes)
        raise ConfigError(f"train.optim_dtype={optim_dtype}: train.optimizer={t.optimizer} keeps its states in "
                          f"{' | '.join(OPTIMIZERS[t.optimizer].state_dtypes)} only; use one of {able}")


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
