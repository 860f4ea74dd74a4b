"""`shardlab explain RUN [--json]`: the planner's prediction of a run's exact config beside what the run
measured, component by component (docs/explain.md).

    shardlab explain runs/x                  # tables: step components, memory per rank, what is off, what to try
    shardlab explain runs/x --json           # one object: {"predicted": {...}, "measured": {...}, ...}
    shardlab explain runs/x --share 0.8      # the core share the prediction assumes (default: the run's)

The prediction uses this machine's calibrated profile (`cluster=this`, ~/.cache/shardlab/this.toml,
written once by `shardlab plan calibrate` or, when missing, by explain itself on the planner bench's
calibration set). The measurement is the run's summary.json and, when it was trained with
trace.enabled=true, its trace (observe/components.py). It sits in cli/ because it composes the config,
the planner and the trace analysis.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from shardlab.errors import OneLineParser, fail

GiB = 2**30


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:,.2f} ms"


def _bytes(x) -> str:
    if x is None:
        return "-"
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(x) >= div:
            return f"{x / div:,.2f} {unit}"
    return f"{x:,.0f} B"


def _err(e) -> str:
    return "-" if e is None else ("new" if e == float("inf") else f"{e:+.0%}")


def _cluster(name: str):
    """The planner's cluster; `this` without a profile is calibrated once, on the bench's calibration set."""
    from shardlab.plan.hardware import default_profile_path, load_cluster
    if name == "this" and not default_profile_path().exists():
        from shardlab.plan.calibrate import calibrate
        from shardlab.plan.validate import CALIBRATION, MODELS
        print(f"shardlab explain: no profile of this machine yet: calibrating once ({CALIBRATION['models']} at "
              f"micro batches {CALIBRATION['micro_batches']}, about a minute)...", file=sys.stderr, flush=True)
        calibrate([MODELS[m] for m in CALIBRATION["models"]], micro_batches=CALIBRATION["micro_batches"],
                  quick=True, world=CALIBRATION["world"])
    return load_cluster(name)


def _plan_of(run_dir: Path, cluster, share: float | None):
    """(plan, model, train, lay) of a run directory on `cluster` at core share `share` (None: as is)."""
    from shardlab import config
    from shardlab.plan.from_config import from_config
    from shardlab.plan.step import evaluate

    summary = json.loads((run_dir / "summary.json").read_text())
    world = int(summary["world_size"])
    model, train, lay = from_config(config.load(run_dir / "config.toml"), world)
    # fused SDPA attention and the doctor's per-step check come with from_config (the trainer's defaults)
    train = replace(train, moe_load=measured_load(summary, lay))
    if share is not None:
        cluster = replace(cluster, cpu_share=share, cpu_share_solo=share)
    cluster = replace(cluster, num_gpus=max(cluster.num_gpus, world))
    return evaluate(model, train, lay, cluster), model, train, lay


def measured_load(summary: dict, lay) -> float:
    """The routing's load on the busiest expert-parallel rank as the run measured it (summary.json
    moe.load_imbalance_ep, train/moe_log.py): the plan's moe_load; 1.0 without ep or where the run predates it."""
    load = (summary.get("moe") or {}).get("load_imbalance_ep")
    return max(1.0, float(load)) if lay.ep > 1 and load else 1.0


def schedule_note(run_dir: Path, lay) -> str | None:
    """One sentence when the planner models the run's pipeline schedule as another one (None otherwise)."""
    from shardlab import config
    from shardlab.parallel.pp import registry

    name = config.load(run_dir / "config.toml").parallel.pp_schedule
    if lay.pp == 1 or name == lay.schedule:
        return None
    planned = registry.PLANNED
    return (f"parallel.pp_schedule={name} is planned as {lay.schedule}: the planner models "
            f"{', '.join(planned[:-1])} and {planned[-1]} ({', '.join(planned)}); its bubble and memory are "
            f"{lay.schedule}'s")


def build(run_dir: Path, cluster_name: str = "this", share: float | None = None, top: int = 3,
          per_run: bool = True) -> dict:
    """The explain object of one run directory. Raises ValueError (one line) on what cannot be explained.
    per_run: on a calibrated profile, also measure (once, cached) the collectives at the run's world and
    the trainer's cost of the run's layout on a miniature (plan/calibrate_run.py); False: the profile alone."""
    from shardlab.observe import analysis
    from shardlab.observe.components import measured_components
    from shardlab.plan import calibrate_run
    from shardlab.plan import explain as ex
    from shardlab.plan.calibrate_compute import measure_share
    from shardlab.plan.compute import micro_batch_time

    if not (run_dir / "config.toml").is_file():
        raise ValueError(f"{run_dir} has no config.toml: not a shardlab run directory")
    if not (run_dir / "summary.json").is_file():
        raise ValueError(f"{run_dir} has no summary.json: the run has not finished (explain reads its measurement)")
    summary = json.loads((run_dir / "summary.json").read_text())
    world = int(summary["world_size"])
    cluster = _cluster(cluster_name)
    how_share = "given"
    if share is None and cluster.source != "preset" and summary.get("core_share"):
        # what the ranks had while runnable during the timed steps (the scheduler's count, observe/core_share.py)
        share, how_share = float(summary["core_share"]), "recorded during the run"
    if share is None and cluster.source != "preset":  # a run from before core_share, or without /proc
        share, how_share = measure_share(world), "probed at explain time"
    overhead = {"from": "profile (ddp/single miniature)"}
    if per_run and cluster.source.startswith("calibrated"):  # this machine's profile, not a preset or a file
        cluster = calibrate_run.sync_wait_at_world(calibrate_run.collectives_at(cluster, world), world)
        from shardlab import config
        from shardlab.plan.from_config import model_spec
        cfg = config.load(run_dir / "config.toml")
        got = calibrate_run.layout_overhead(run_dir, cfg, model_spec(cfg), world, cluster,
                                            lambda d, c, s: _plan_of(d, c, s)[0])
        if "error" in got:
            overhead["error"] = got["error"]
        else:  # the layout's own per-step cost, at this run's core share
            at_share = got["cpu_s"] / (share or 1.0)
            cluster = replace(cluster, step_overhead={**cluster.step_overhead, str(world): at_share},
                              call_overhead={})
            overhead = {"from": "a miniature of this layout", "cpu_s": got["cpu_s"], "miniature_share": got["share"]}
    plan, model, train, lay = _plan_of(run_dir, cluster, share)
    cluster = plan.cluster
    how = micro_batch_time(model, train, lay, cluster).how
    comps = measured_components(analysis.load(run_dir)) if (run_dir / "trace").is_dir() else None
    ctx = {"run": str(run_dir), "schedule_note": schedule_note(run_dir, lay), "cluster": cluster.source, "share": cluster.cpu_share, "share_from": how_share,
           "load_avg_1m": os.getloadavg()[0], "cores": os.cpu_count(), "skew_ms": summary.get("skew_ms_median"),
           "traced": comps is not None, "model": model.name, "micro_batches": plan.m,
           "collectives_world": cluster.measured_world, "trainer_overhead": overhead}
    return ex.explain(plan, ex.measured(comps, summary, lay), how, ctx, top)


def render(d: dict) -> str:
    p, m, c = d["predicted"], d["measured"], d["context"]
    out = [f"shardlab explain: {c['run']}  ({d['layout']}, world {d['world']}, model {c['model']}, "
           f"{c['micro_batches']} micro batch(es) per step)",
           f"predicted from {c['cluster']} (compute {d['compute_from']}; core share {c['share']:.2f}, "
           f"{c['share_from']}; load average {c['load_avg_1m']:.1f} on {c['cores']} cores)"]
    if c.get("schedule_note"):
        out.append(f"note: {c['schedule_note']}")
    out.append("")
    out.append(f"{'step time':<34}{_ms(p['step_time_s']):>14}{_ms(m['step_time_s']):>14}"
               f"{_err(d['step_time_error']):>8}")
    out.append(f"{'  component':<34}{'predicted':>14}{'measured':>14}{'error':>8}")
    for r in d["components"]:
        flag = "  <- off" if r["off"] else ""
        out.append(f"  {r['component']:<32}{_ms(r['predicted']):>14}{_ms(r['measured']):>14}{_err(r['error']):>8}{flag}")
    if not c["traced"]:
        out.append("  (no trace: train with trace.enabled=true to measure the components)")
    out += ["", f"{'memory per rank':<34}{'predicted':>14}{'measured':>14}"]
    mm = m["memory"]
    for k in ("params", "grads", "optimizer"):
        out.append(f"  {k:<32}{_bytes(p['memory'][k]):>14}{_bytes(mm[k]):>14}")
    out.append(f"  {'activations + buffers':<32}{_bytes(p['memory']['activations'] + p['memory']['buffers']):>14}"
               f"{_bytes(mm['activations_and_buffers']):>14}")
    out.append(f"  {'total / peak':<32}{_bytes(p['memory']['total']):>14}{_bytes(mm['peak']):>14}"
               f"   ({mm['peak_kind'] or 'peak unknown'})")
    out.append("")
    if d["off"]:
        out.append(f"off by more than 15% (and by at least 1% of the step):")
        for r in d["off"]:
            out.append(f"  {r['component']} {_err(r['error'])}: {r['cause']}")
    else:
        out.append("no component off by more than 15% (of those at least 1% of the step)")
    out += ["", f"what to try (plan search, same world {d['world']}, global batch and memory; predicted faster "
                f"than this run's {_ms(p['step_time_s'])}):"]
    for t in d["what_to_try"]:
        out.append(f"  {t['layout']:<44}{_ms(t['step_time_s']):>12}  x{t['speedup_vs_predicted']:.2f}")
        out.append(f"      shardlab train ... {t['train_args']}")
    if not d["what_to_try"]:
        out.append("  (none: no fitting layout is predicted faster than this run's)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="shardlab explain", description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="run directory (trace.enabled=true for the components)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--cluster", default="this", help="planner cluster (default: this machine's profile)")
    ap.add_argument("--share", type=float, default=None,
                    help="core share per rank the prediction assumes (default: the one recorded during the "
                         "run, summary.json core_share; else probed now)")
    ap.add_argument("--top", type=int, default=3, help="at most this many layouts in 'what to try' (those predicted faster than the run)")
    args = ap.parse_args(argv)
    if args.top < 1:
        return fail(f"shardlab explain: --top must be at least 1, got {args.top}")
    if args.share is not None and not 0 < args.share <= 64:
        return fail(f"--share must be in (0, 64], got {args.share}")
    try:
        d = build(args.run, args.cluster, args.share, args.top)
    except (ValueError, OSError) as e:
        return fail(f"shardlab explain: {e}")
    print(json.dumps(d, indent=1, default=str) if args.json else render(d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
