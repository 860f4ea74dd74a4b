"""`parallel.layout=auto`: the fastest layout shardlab can run at this world that fits the memory budget.

The candidates are the every-step layouts shardlab's trainer runs (not every layout `plan search` models):
each dp layer (ddp, zero1/2/3, torch-fsdp2) over the whole world, tp=2, pp=2 under 1f1b and zb, and their
2-D mixes where the world allows (world 4: dp 2 x tp 2, dp 2 x pp 2, tp 2 x pp 2), and for a sequence long
enough to matter (parallel/cp/cost.py: `worth_splitting`) context parallelism over what is left: the ring,
Ulysses and the hybrid (plan/search.py: `cp_layouts`). The run's own
micro batch, global batch, precision and recompute stay as set: only the layout is chosen, so the choice
trains the tokens the user asked for. A candidate the trainer would refuse (the config's checks: tp must
divide the heads, pp needs two microbatches, a dp layer that does not compose) is dropped before it is
planned, through the `runnable` check the caller passes (the config is a floor above the planner).

Two candidates of one layout are one choice: the first in the order above is kept, so it goes to the own layer.
torch-fsdp2 is zero3's layout in torch's layer; it is planned with FSDP2's own kernels (plan/fsdp2_kernels.py,
GPU presets only; on a calibrated profile it moves zero3's bytes), but the choice does not search
implementations (as `plan search` does not): it is kept only where the trainer refuses the own zero3. A schedule
planned as another (plan/layout.py) is one prediction too.
"""
from __future__ import annotations

import copy
import os
import sys
from dataclasses import dataclass, replace
from typing import Callable

from shardlab.parallel.pp import registry

from .from_config import from_config
from .hardware import Cluster, meminfo
from .search import why
from .step import Plan, evaluate

DP_LAYERS = ("ddp", "zero1", "zero2", "zero3", "torch-fsdp2")
PP_SCHEDULES = tuple(n for n, v in registry.SEARCHED if v == 1)  # the searched ones that need no pp_virtual
GiB = 2**30


@dataclass
class Choice:
    overrides: dict  # config key -> value that select the layout (parallel.*)
    plan: Plan
    runner_up: tuple[dict, Plan] | None
    runnable: int  # candidates the trainer runs at this world
    distinct: int  # of them, distinct predictions (ties dropped: the module's docstring)
    fit: int  # of those, the ones that fit the budget


def candidates(world: int, seq: int = 0):
    """Config overrides of every every-step layout shardlab runs at `world` (the caller checks each); with a
    `seq` long enough to matter, the context-parallel ones too (the ring, Ulysses, the hybrid: search.py)."""
    from .search import cp_layouts

    for tp in (1, 2):
        for pp in (1, 2):
            if world % (tp * pp):
                continue
            for ctx in cp_layouts(seq, world // (tp * pp)):
                dp = world // (tp * pp * ctx.get("cp", 1))
                cp = {f"parallel.{k}": v for k, v in {"cp": 1, **ctx}.items()}
                for layer in DP_LAYERS if dp > 1 else ("ddp",):
                    for sched in PP_SCHEDULES if pp > 1 else (None,):
                        yield {"parallel.strategy": layer, "parallel.tp": tp, "parallel.pp": pp, **cp,
                               "parallel.dp_replicate": 0, "parallel.dp_shard": 0,
                               **({"parallel.pp_schedule": sched} if sched else {})}


def apply(cfg, overrides: dict) -> None:
    """Write `overrides` (dotted keys) into `cfg` in place."""
    for key, value in overrides.items():
        section, name = key.split(".")
        setattr(getattr(cfg, section), name, value)


def with_budget(cluster: Cluster, budget_bytes: float, world: int) -> Cluster:
    """`cluster` as the choice plans on it: `budget_bytes` per rank all usable, `world` ranks on one node."""
    return replace(cluster, hbm_bytes=budget_bytes, mem_usable_fraction=1.0,
                   num_gpus=max(cluster.num_gpus, world), gpus_per_node=max(cluster.gpus_per_node, world))


def choose(cfg, world: int, cluster: Cluster, budget_bytes: float,
           runnable: Callable[[object], object]) -> Choice:
    """The fastest fitting candidate (and the runner-up). `cfg` is left unchanged; `runnable(c)` validates a
    copy with a candidate written in and returns it resolved (None: the trainer refuses it). Raises ValueError with one
    line when no candidate fits."""
    cluster = with_budget(cluster, budget_bytes, world)
    plans: list[tuple[dict, Plan]] = []
    seen, runs = set(), 0
    for over in candidates(world, cfg.train.seq_len):
        c = copy.deepcopy(cfg)
        c.parallel.layout = "manual"
        apply(c, over)
        c = runnable(c)  # the trainer's resolved copy of the candidate, or None: refused
        if c is None:
            continue
        runs += 1
        try:
            model, train, lay = from_config(c, world)
            plan = evaluate(model, train, lay, cluster)
        except ValueError:  # a feature the planner has no model of
            continue
        key = (replace(lay, zero3_impl="own"), train)  # frozen dataclasses: equal for one layout (docstring)
        if key in seen:
            continue
        seen.add(key)
        plans.append((over, plan))
    if not plans:
        raise ValueError(f"parallel.layout=auto: no layout shardlab runs fits this run at world {world} (every "
                         "candidate was refused by the config's checks); set the layout by hand")
    plans.sort(key=lambda op: (not op[1].fits, -op[1].tokens_per_s))
    fit = sum(p.fits for _, p in plans)
    best = plans[0]
    if not best[1].fits:
        small = min(plans, key=lambda op: op[1].mem_total)[1]
        raise ValueError(f"parallel.layout=auto: no layout fits {budget_bytes / 1e9:.3g} GB per rank at world {world}: "
                         f"the smallest ({small.layout.describe()}) needs {small.mem_total / 1e9:.3g} GB; raise "
                         "parallel.mem_budget_gb, lower train.micro_batch or set train.recompute=full")
    return Choice(best[0], best[1], plans[1] if len(plans) > 1 else None, runs, len(plans), fit)


def _size(b: float) -> str:
    return f"{b / GiB:.2f} GiB" if b >= GiB else f"{b / 2**20:.1f} MiB"


def budget_bytes(mem_budget_gb: float, world: int) -> tuple[float, str]:
    """Memory per rank a layout must fit, and where the figure came from: parallel.mem_budget_gb, else the
    GPU's memory, else (CPU) the machine's available memory shared by the ranks."""
    if mem_budget_gb > 0:
        return mem_budget_gb * 1e9, f"parallel.mem_budget_gb={mem_budget_gb:g}"
    import torch  # deferred: the planner is pure Python everywhere else

    if torch.cuda.is_available():
        return float(torch.cuda.get_device_properties(0).total_memory), "the GPU's memory"
    avail = _mem_available()
    return avail / world, f"available memory {avail / 1e9:.1f} GB / {world} ranks"


def _mem_available() -> float:
    avail = meminfo("MemAvailable")
    return avail if avail is not None else float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def machine_cluster(world: int = 0) -> Cluster:
    """The planner's cluster for this machine: the GPU's spec preset, or on CPU the calibrated profile
    (`cluster=this`), calibrated once when missing as `shardlab explain` does (about a minute), with the
    collectives and the ranks' sync waits measured at `world` ranks (cached; a few seconds the first time:
    plan/calibrate_run.py). Raises ValueError for a GPU the spec table does not have."""
    import torch

    from .hardware import PRESETS, default_profile_path, load_cluster
    from .peak import gpu_preset

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        preset = gpu_preset(name)
        if preset is None:
            raise ValueError(f"parallel.layout=auto: no spec of {name!r} in plan/hardware.py to plan with; "
                             "set the layout by hand")
        return PRESETS[preset]
    if not default_profile_path().exists():
        from .calibrate import calibrate
        from .validate import CALIBRATION, MODELS
        print(f"[layout=auto] no profile of this machine yet: calibrating once ({CALIBRATION['models']} at micro "
              f"batches {CALIBRATION['micro_batches']}, about a minute)...", file=sys.stderr, flush=True)
        calibrate([MODELS[m] for m in CALIBRATION["models"]], micro_batches=CALIBRATION["micro_batches"],
                  quick=True, world=CALIBRATION["world"])
    cluster = load_cluster("this")
    if world >= 2 and cluster.source.startswith("calibrated"):
        from .calibrate_run import collectives_at, sync_wait_at_world
        cluster = sync_wait_at_world(collectives_at(cluster, world), world)
    return cluster


def lines(ch: Choice, cluster_source: str) -> list[str]:
    """The two lines `shardlab train` prints: the choice, then the runner-up and why."""
    p = ch.plan
    keys = " ".join(f"{k}={v}" for k, v in ch.overrides.items()
                    if not (k in ("parallel.dp_replicate", "parallel.dp_shard")
                            or (k in ("parallel.tp", "parallel.pp", "parallel.cp") and v == 1)))
    first = (f"[layout=auto] chose {p.layout.describe()} ({keys}): predicted {p.tokens_per_s:,.0f} tokens/s, "
             f"{_size(p.mem_total)} of {_size(p.capacity)} per rank; {ch.fit} of {ch.distinct} distinct predictions "
             f"({ch.runnable} runnable layouts) fit; planner cluster: {cluster_source}")
    if ch.runner_up is None:
        return [first, "[layout=auto] no runner-up: it is the only layout shardlab runs here"]
    return [first, f"[layout=auto] why: {why(p, ch.runner_up[1])}"]
