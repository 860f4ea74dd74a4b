"""Fault injection: the `debug.*` knobs that make every failure the doctor diagnoses reproducible.

    debug.inject_nan=STEP:RANK:MODULE   the output of MODULE on RANK at STEP becomes NaN (a forward hook)
    debug.hang_rank=R@STEP              rank R stops forever in data loading at STEP (the watchdog ends it)
    debug.mismatch_rank=R@STEP          rank R issues a collective of a different size at STEP
    debug.corrupt_rank=R@STEP           rank R perturbs one parameter of its replica after STEP (DiLoCo: its θ_start;
                                        debug.corrupt_expert=true: an expert, under parallel.ep)
    debug.uneven_rank=R@STEP            rank R has no data from STEP on (uneven inputs)

Steps are the trainer's 0-based step index (the one the flight recorder and anomaly reports use).
Every fault fires once: a rolled-back run that replays the step does not meet it again.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardlab.errors import ConfigError

if TYPE_CHECKING:
    import torch
    import torch.nn as nn

# torch and comm are imported inside the three functions that touch tensors or ranks: config validation
# parses the fault specs (Faults.parse) in the launcher, which must not load torch for that.


def _rank_at_step(key: str, text: str, world: int) -> tuple[int, int] | None:
    if not text:
        return None
    r, sep, s = text.partition("@")
    try:
        rank, step = int(r), int(s)
    except ValueError:
        raise ConfigError(f"{key}={text!r}: expected RANK@STEP, e.g. {key}=1@5") from None
    if not sep or not 0 <= rank < world or step < 0:
        raise ConfigError(f"{key}={text!r}: expected RANK@STEP with 0 <= RANK < world size {world} and STEP >= 0")
    return rank, step


@dataclass
class Faults:
    nan: tuple[int, int, str] | None = None  # (step, rank, module)
    hang: tuple[int, int] | None = None  # (rank, step)
    mismatch: tuple[int, int] | None = None
    corrupt: tuple[int, int] | None = None
    uneven: tuple[int, int] | None = None

    @classmethod
    def parse(cls, debug, world: int) -> "Faults":
        f = cls()
        if debug.inject_nan:
            parts = debug.inject_nan.split(":", 2)
            try:
                step, rank, module = int(parts[0]), int(parts[1]), parts[2]
            except (ValueError, IndexError):
                raise ConfigError(f"debug.inject_nan={debug.inject_nan!r}: expected STEP:RANK:MODULE, "
                                  "e.g. debug.inject_nan=7:1:blocks.2.mlp") from None
            if not 0 <= rank < world or step < 0 or not module:
                raise ConfigError(f"debug.inject_nan={debug.inject_nan!r}: need STEP >= 0, 0 <= RANK < {world} "
                                  "and a module name")
            f.nan = (step, rank, module)
        f.hang = _rank_at_step("debug.hang_rank", debug.hang_rank, world)
        f.mismatch = _rank_at_step("debug.mismatch_rank", debug.mismatch_rank, world)
        f.corrupt = _rank_at_step("debug.corrupt_rank", debug.corrupt_rank, world)
        f.uneven = _rank_at_step("debug.uneven_rank", getattr(debug, "uneven_rank", ""), world)
        return f

    def check_module(self, model: nn.Module, placement=None) -> None:
        """Fail before training if the NaN target does not exist (with the nearest names as a hint). Under a
        pipeline (`placement`: parallel/pp/placement.py) the whole model's names count, and the target
        rank must hold the stage that runs the module."""
        if self.nan is None:
            return
        names = [n for n, _ in model.named_modules() if n] if placement is None else sorted(placement.names)
        where = placement.locate(self.nan[2], self.nan[1]) if placement is not None and self.nan[2] in names else None
        if where is not None and where["stage_rank"] != self.nan[1]:
            raise ConfigError(f"debug.inject_nan: module {self.nan[2]!r} runs on pipeline stage {where['stage']}, "
                              f"held by rank {where['stage_rank']}, not by rank {self.nan[1]}")
        if self.nan[2] not in names:
            import difflib
            hint = difflib.get_close_matches(self.nan[2], names, n=3)
            raise ConfigError(f"debug.inject_nan: the model has no module {self.nan[2]!r}"
                              + (f" (did you mean {', '.join(hint)}?)" if hint else "")
                              + f"; modules look like {names[min(4, len(names) - 1)]}")

    def nan_here(self, step: int, rank: int) -> bool:
        return self.nan is not None and self.nan[:2] == (step, rank)

    def fires(self, which: str, step: int, rank: int) -> bool:
        """True once, at the target (rank, step); a rolled-back replay of that step runs clean."""
        if getattr(self, which) != (rank, step):
            return False
        setattr(self, which, None)
        return True


def attach_nan(model: nn.Module, module_name: str):
    """A forward hook that turns the module's output into NaN. Returns the hook handle (remove() it)."""
    import torch

    def poison(_mod, _inp, out):
        # A new tensor rather than an in-place fill: the autograd graph stays valid.
        return out + float("nan") if torch.is_tensor(out) else out
    return model.get_submodule(module_name).register_forward_hook(poison)


def hang_forever(rank: int, step: int) -> None:
    """The injected hang: this rank stops in data loading; its peers will wait in the next collective."""
    from shardlab import comm

    comm.set_phase("data loading")
    print(f"[shardlab doctor] rank {rank}: injected hang at step {step} (debug.hang_rank)", flush=True)
    while True:  # sleep in short pieces so signals are handled promptly
        time.sleep(0.5)


def corrupt_parameter(named_params: list[tuple[str, torch.Tensor]]) -> str:
    """Perturb one element of one replicated parameter (the middle one, so it is not a trivial first/last)."""
    import torch

    name, p = named_params[len(named_params) // 2]
    with torch.no_grad():
        flat = p.view(-1) if p.is_contiguous() else p.reshape(-1)
        flat[0] += 1e-3
    return name
