"""`shardlab train --dry-run --world N [--device cuda|cpu] [--ranks all|r,r,...] [--json] [key=value ...]`.

One step of the configured layout as chosen ranks of a world of N, in this process, on fake tensors (the
meta device) and a fake process group (simulate/step.py): nothing is allocated for real, so a 1,024-rank
70B layout is checked on a laptop. Per rank: its mesh coordinates, parameter elements, state bytes
{params, grads, optimizer}, the step's peak memory (activations included, from the allocation trace),
the collectives' bytes by op, the host syncs, and every device-discipline violation. The state bytes are
set beside `shardlab plan`'s for the same layout and precision (`plan_state_err`).

Exit: 0 clean, 6 a violation, 2 bad input.
"""
from __future__ import annotations

import json
import sys
import time

EXIT_VIOLATIONS = 6


def default_ranks(dims) -> list[int]:
    """Rank 0 and one rank of every pipeline stage (its first: coordinate 0 on every other dimension)."""
    out = [0] + [dims.rank_of({"pp": s}) for s in range(dims.pp)]
    return sorted(set(out))


def parse_ranks(text: str | None, dims, world: int) -> list[int]:
    from shardlab.errors import ConfigError

    if text is None:
        return default_ranks(dims)
    if text == "all":
        return list(range(world))
    try:
        ranks = sorted({int(r) for r in text.split(",") if r.strip()})
    except ValueError:
        raise ConfigError(f"--ranks {text!r}: expected all or comma-separated ranks (0,8,16)") from None
    bad = [r for r in ranks if not 0 <= r < world]
    if not ranks or bad:
        raise ConfigError(f"--ranks {text!r}: ranks must lie in 0..{world - 1}")
    return ranks


def plan_state(cfg, world: int) -> dict | None:
    """`shardlab plan`'s state bytes per rank for this layout (the planner models the first pipeline
    stage's rank; None where it has no model of the layout)."""
    from shardlab.plan.from_config import from_config
    from shardlab.plan.memory import state_bytes

    try:
        model, train, layout = from_config(cfg, world)
        layout.check(model)
    except ValueError:
        return None
    return {k: int(v) for k, v in state_bytes(model, train, layout).items()}


def rel_err(a: dict, b: dict) -> float:
    return max((abs(a[k] - b[k]) / b[k] if b[k] else float(a[k] != 0)) for k in b)


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20,
          "gib": 2**30, "tib": 2**40}


def device_memory(text: str | None) -> int | None:
    """`--device-memory`: bytes (with an optional unit: 80GB, 80GiB) or a cluster preset's HBM (H100-SXM)."""
    import re

    from shardlab.errors import ConfigError
    from shardlab.plan import hardware

    if text is None:
        return None
    key = hardware.ALIASES.get(text.lower(), text)
    if key in hardware.PRESETS:
        return int(hardware.PRESETS[key].hbm_bytes)
    m = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if m is None or m.group(2).lower() not in _UNITS:
        raise ConfigError(f"--device-memory {text!r}: bytes (80GB, 80GiB, 85899345920) or a preset "
                          f"({', '.join(hardware.PRESETS)})")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def memory_violations(rep: dict, limit: int | None) -> list[str]:
    """A rank whose build or step peak exceeds the device: one line naming the peak and its largest items
    (the state kinds, and what the step adds on top of what it found: activations and transients)."""
    if not limit:
        return []
    items = dict(rep["state_bytes"])
    items["activations and transients"] = max(0, rep["peak_mem_bytes"] - rep["resident_bytes"])
    largest = ", ".join(f"{k} {_gib(v)}" for k, v in sorted(items.items(), key=lambda kv: -kv[1])[:3])
    out = []
    for what, key in (("build", "build_peak_bytes"), ("step", "peak_mem_bytes")):
        if rep.get(key, 0) > limit:
            out.append(f"memory: the {what} peak {_gib(rep[key])} exceeds the device's {_gib(limit)} "
                       f"(largest: {largest})")
    return out


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def run(cfg, world: int, device: str, ranks_text: str | None, as_json: bool, memory: str | None = None) -> int:
    from shardlab.parallel.mesh import resolve_run
    from shardlab.simulate.step import simulate_rank

    limit = device_memory(memory)
    dims = resolve_run(cfg, world).dims
    ranks = parse_ranks(ranks_text, dims, world)
    reports, errs = [], []
    for r in ranks:
        t0 = time.perf_counter()
        # one step: the optimizer state is created in it, and the allocation trace sees it there
        rep = simulate_rank(cfg, world, r, device=device, steps=1)
        rep["sim_s"] = round(time.perf_counter() - t0, 2)
        rep["violations"] = rep["violations"] + memory_violations(rep, limit)
        planned = plan_state(cfg, world)
        rep["plan_state_bytes"] = planned
        if planned is not None:
            rep["plan_state_err"] = round(rel_err(rep["state_bytes"], planned), 4)
            if dims.coord("pp", r) == 0:  # the planner models the first pipeline stage (docs/dry-run.md)
                errs.append(rep["plan_state_err"])
        reports.append(rep)
        if not as_json:
            _print_rank(rep)
    violations = [f"rank {rep['rank']}: {v}" for rep in reports for v in rep["violations"]]
    out = {"ok": not violations, "world": world, "device": device, "device_memory_bytes": limit, "ranks": reports, "violations": violations,
           "plan_state_err": max(errs) if errs else None}
    if as_json:
        print(json.dumps(out))
    else:
        print(f"dry run: world {world}, device {device}, {len(reports)} rank(s) checked, "
              f"{len(violations)} violation(s); plan_state_err {out['plan_state_err']}")
    return 0 if not violations else EXIT_VIOLATIONS


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _print_rank(rep: dict) -> None:
    coords = " ".join(f"{k}={v}" for k, v in rep["coords"].items()) or "-"
    sb = rep["state_bytes"]
    print(f"rank {rep['rank']}  [{coords}]  param_elems {rep['param_elems']:,}  state params {_mib(sb['params'])} "
          f"grads {_mib(sb['grads'])} optimizer {_mib(sb['optimizer'])}"
          + (f" (off the device: {_mib(rep['offloaded_bytes'])})" if rep.get("offloaded_bytes") else "")
          + f"  peak {_mib(rep['peak_mem_bytes'])} "
          f"(resident before the step {_mib(rep['resident_bytes'])}, build peak {_mib(rep['build_peak_bytes'])})  "
          f"host_syncs {rep['host_syncs']}  ({rep['sim_s']} s)")
    comm = ", ".join(f"{op} {_mib(b)}" for op, b in sorted(rep["comm"]["bytes_per_step"].items()))
    print(f"  comm per step: {comm or 'none'}")
    if rep.get("plan_state_bytes"):
        print(f"  plan: " + " ".join(f"{k} {_mib(v)}" for k, v in rep["plan_state_bytes"].items())
              + f"  (largest relative difference {rep['plan_state_err']})")
    for v in rep["violations"]:
        print(f"  VIOLATION {v}")
    sys.stdout.flush()
