"""`parallel.layout=auto` for `shardlab train`: the planner's choice (plan/auto.py) written into the config's
layout keys before anything launches, so the run directory's config.toml names the concrete layout (and
`layout = "manual"`: a resume or a rank reading it trains that layout, not a new choice).

It sits in cli/ because it composes the config (which candidates the trainer runs: `config.validate`) with
the planner and this machine's profile.
"""
from __future__ import annotations

import sys

from shardlab.errors import ConfigError


def budget_bytes(cfg, world: int) -> tuple[float, str]:
    """Memory per rank a layout must fit, and where the figure came from."""
    gb = cfg.parallel.mem_budget_gb
    if gb > 0:
        return gb * 1e9, f"parallel.mem_budget_gb={gb:g}"
    import torch  # deferred: only a run that asks for layout=auto pays for it here

    if torch.cuda.is_available():
        return float(torch.cuda.get_device_properties(0).total_memory), "the GPU's memory"
    avail = _mem_available()
    return avail / world, f"available memory {avail / 1e9:.1f} GB / {world} ranks"


def _mem_available() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024.0
    except OSError:
        pass
    import os
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def cluster():
    """The planner's cluster for this machine: the GPU's spec preset, or on CPU the calibrated profile
    (calibrated once when missing, as `shardlab explain` does)."""
    import torch

    from shardlab.plan.hardware import PRESETS
    from shardlab.plan.peak import gpu_preset

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        preset = gpu_preset(name)
        if preset is None:
            raise ConfigError(f"parallel.layout=auto: no spec of {name!r} in plan/hardware.py to plan with; "
                              "set the layout by hand")
        return PRESETS[preset]
    from shardlab.cli.explain import _cluster
    return _cluster("this")


def resolve(cfg, world: int, err=None) -> None:
    """Replace `cfg`'s layout=auto by the chosen layout's keys (in place); print the two lines on `err`.
    Raises ConfigError (one line) when nothing fits or nothing runs."""
    from shardlab import config
    from shardlab.plan import auto

    err = err or sys.stderr
    config.check_layout_keys(cfg.parallel)
    t = cfg.train
    if t.global_batch == 0:  # derived from the layout otherwise: every candidate must train the same tokens
        t.global_batch = t.micro_batch * t.grad_accum * world
        t.grad_accum = 1  # derived again from the global batch for each layout

    def runnable(c) -> bool:
        try:
            config.validate(c, world)
            return True
        except ConfigError:
            return False

    budget, budget_from = budget_bytes(cfg, world)
    cl = cluster()
    try:
        choice = auto.choose(cfg, world, cl, budget, runnable)
    except ValueError as e:
        raise ConfigError(f"{e} (budget: {budget_from})") from None
    auto.apply(cfg, choice.overrides)
    cfg.parallel.layout = "manual"
    for line in auto.lines(choice, cl.source):
        print(line, file=err, flush=True)
