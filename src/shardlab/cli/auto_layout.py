"""`parallel.layout=auto` for `shardlab train`: the planner's choice (plan/auto.py) written into the config's
layout keys before anything launches, so the run directory's config.toml names the concrete layout (and
`layout = "manual"`: a resume or a rank reading it trains that layout, not a new choice).

It sits in cli/ because it composes the config (which candidates the trainer runs: `config.validate`) with
the planner and this machine's profile.
"""
from __future__ import annotations

import sys

from shardlab.errors import ConfigError


def runnable(world: int):
    """A check of a candidate config: the trainer's own (config.validate). Returns the resolved copy, or None
    when the trainer refuses the candidate."""
    from shardlab import config

    def check(c):
        try:
            return config.validate(c, world)
        except ConfigError:
            return None
    return check


def fix_global_batch(cfg, world: int) -> None:
    """A global batch derived from the layout (train.global_batch=0) would differ between candidates: fix it
    at what data parallelism over the whole world derives, so every candidate trains the same tokens."""
    t = cfg.train
    if t.global_batch == 0:
        t.global_batch = t.micro_batch * t.grad_accum * world
        t.grad_accum = 1  # derived again from the global batch for each layout


def resolve(cfg, world: int, err=None) -> None:
    """Replace `cfg`'s layout=auto by the chosen layout's keys (in place); print the two lines on `err`.
    Raises ConfigError (one line) when nothing fits or nothing runs."""
    from shardlab import config
    from shardlab.plan import auto

    err = err or sys.stderr
    config.check_layout_keys(cfg.parallel)
    fix_global_batch(cfg, world)
    budget, budget_from = auto.budget_bytes(cfg.parallel.mem_budget_gb, world)
    try:
        cl = auto.machine_cluster(world)
        choice = auto.choose(cfg, world, cl, budget, runnable(world))
    except ValueError as e:
        raise ConfigError(f"{e} (budget: {budget_from})") from None
    auto.apply(cfg, choice.overrides)
    cfg.parallel.layout = "manual"
    for line in auto.lines(choice, cl.source):
        print(line, file=err, flush=True)
