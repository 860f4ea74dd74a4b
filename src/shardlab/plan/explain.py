"""`shardlab explain`'s planner half: a Plan and a run's measured step side by side, component by
component, each gap named with its likely cause, and what `plan search` would try instead.

Pure Python over the planner's objects and plain dicts (the measurement comes from
`observe/components.py` and summary.json through `cli/explain.py`): no torch, no config.

Components (seconds per step; memory in bytes per rank):
  forward, backward, optimizer   the planner's passes (recompute inside backward) and optimizer step;
                                 ZeRO's flat-buffer copies (`zero_copies`) are predicted apart and have no
                                 measured counterpart (they run inside the passes, the step or between them)
  exposed_comm {"op group": s}   collectives not hidden by compute (tp/cp ones: all of them)
  bubble                         the pipeline's idle time, with its point-to-point transfers (measured: the
                                 waits in the `pp` group's sends and receives)
  data, python_overhead          measured apart; the planner has one calibrated per-step trainer cost for
                                 both (`python_overhead`, `data` null on the predicted side)
"""
from __future__ import annotations

from dataclasses import replace

from .search import FIXES_BUDGET_S, args_of, search
from .step import Plan, evaluate

THRESHOLD = 0.15  # a component off by more than this relative to the measurement is named
MIN_SHARE = 0.01  # ... when the gap is at least this share of the measured step (smaller is noise)
TIME_KEYS = ("forward", "backward", "optimizer", "bubble")


def predicted(plan: Plan) -> dict:
    """The plan's step and memory per rank, in explain's components."""
    T = plan.times
    exposed: dict[str, float] = {}
    pp_p2p = 0.0
    for cl in plan.comm:
        if cl.c.group == "pp":
            pp_p2p += cl.exposed
            continue
        key = f"{cl.c.op} {cl.c.group}"
        exposed[key] = exposed.get(key, 0.0) + cl.exposed
    mem = {ln.name: ln.bytes for ln in plan.memory}
    memory = {"params": mem.get("params", 0.0), "grads": mem.get("grads", 0.0),
              "optimizer": mem.get("optimizer", 0.0),
              "activations": mem.get("activations", 0.0) + mem.get("pipeline in-flight", 0.0),
              "buffers": mem.get("comm buffers", 0.0)}
    memory["total"] = sum(memory.values())
    # a launch-bound pass idles the device inside its own span: a run measures the host's wait as forward/backward
    wf, wb = plan.host_waits
    return {"step_time_s": plan.step_time, "forward": T["forward"] + wf, "backward": T["backward"] + wb,
            "optimizer": T["optimizer"], "zero_copies": T["zero_copies"], "bubble": T["bubble"] + pp_p2p,
            "exposed_comm": exposed, "exposed_comm_total": sum(exposed.values()),
            "data": None, "python_overhead": T["trainer"], "memory": memory,
            "tokens_per_s": plan.tokens_per_s, "fits": plan.fits, "capacity_bytes": plan.capacity}


def normalize_group(key: str, lay) -> str:
    """A measured "op group" in the planner's names: comm's `world` group is dp (or tp, pp) when that
    dimension is the whole world."""
    op, _, group = key.rpartition(" ")
    if group == "world":
        group = next((g for g, n in (("dp", lay.dp), ("tp", lay.tp), ("pp", lay.pp), ("cp", lay.cp))
                      if n == lay.world), "world")
    return f"{op} {group}"


def measured(components: dict | None, summary: dict | None, lay) -> dict:
    """The run's step (from its trace when there is one, else summary.json) and memory per rank
    (summary.json: state bytes of the largest rank, the peak; activations and buffers = the peak
    minus the states, when the peak is an allocator's and not the process's RSS)."""
    summary = summary or {}
    out: dict = {"step_time_s": summary.get("step_time_s")}
    if components:
        exposed: dict[str, float] = {}
        for k, v in components["exposed_comm"].items():
            nk = normalize_group(k, lay)
            exposed[nk] = exposed.get(nk, 0.0) + v
        out.update({k: components[k] for k in ("forward", "backward", "optimizer", "bubble", "data",
                                                 "python_overhead")})
        out.update(exposed_comm=exposed, exposed_comm_total=sum(exposed.values()),
                   trace_step_time_s=components["step_s"], trace_steps=components["steps"])
        out["step_time_s"] = out["step_time_s"] or components["step_s"]
    else:
        out.update({k: None for k in ("forward", "backward", "optimizer", "bubble", "data", "python_overhead",
                                      "exposed_comm", "exposed_comm_total")})
    out["memory"] = measured_memory(summary)
    return out


def measured_memory(summary: dict) -> dict:
    ranks = summary.get("state_bytes_by_rank") or ([summary["state_bytes"]] if summary.get("state_bytes") else [])
    mem: dict = {k: (max(r.get(k, 0) for r in ranks) if ranks else None) for k in ("params", "grads", "optimizer")}
    per_rank = summary.get("peak_mem_bytes_per_rank")  # written by newer trainers; else the max over ranks
    peak = max(per_rank) if per_rank else summary.get("peak_mem_bytes")
    mem["peak"] = peak
    mem["peak_kind"] = summary.get("peak_mem_kind")
    states = sum(v for k, v in mem.items() if k in ("params", "grads", "optimizer") and v is not None)
    allocator = (mem["peak_kind"] or "").startswith("cuda")
    mem["activations_and_buffers"] = max(0, peak - states) if peak is not None and allocator else None
    return mem


def _rel(p: float | None, m: float | None) -> float | None:
    if p is None or m is None:
        return None
    if m == 0:
        return 0.0 if p == 0 else float("inf")
    return p / m - 1


def rows(pred: dict, meas: dict) -> list[dict]:
    """Component rows: name, predicted, measured (seconds), error = predicted / measured - 1."""
    out = [{"component": k, "predicted": pred[k], "measured": meas[k]} for k in TIME_KEYS]
    for k in sorted(set(pred["exposed_comm"]) | set(meas["exposed_comm"] or {})):
        out.append({"component": f"exposed {k}", "predicted": pred["exposed_comm"].get(k, 0.0),
                    "measured": None if meas["exposed_comm"] is None else meas["exposed_comm"].get(k, 0.0)})
    both = None if meas["data"] is None else meas["data"] + meas["python_overhead"]
    out.append({"component": "data + python overhead", "predicted": pred["python_overhead"], "measured": both})
    out.append({"component": "zero_copies", "predicted": pred["zero_copies"], "measured": None})
    step = meas["step_time_s"] or 0.0
    for r in out:
        r["error"] = _rel(r["predicted"], r["measured"])
        gap = abs((r["predicted"] or 0.0) - (r["measured"] or 0.0))
        r["off"] = r["error"] is not None and abs(r["error"]) > THRESHOLD and gap >= MIN_SHARE * step
        if r["error"] == float("inf"):  # predicted, never measured (0): no ratio; JSON has no infinity
            r["error"] = None
    return out


def cause(row: dict, plan: Plan, how: str, ctx: dict) -> str:
    """The likely cause of a component's gap, in a sentence."""
    name, lay = row["component"], plan.layout
    over = (row["predicted"] or 0.0) > (row["measured"] or 0.0)
    if name in ("forward", "backward"):
        why = {"in situ": "this model and micro batch were calibrated in situ, so the gap is the machine: the "
                          "core share the prediction assumes vs. what the ranks got during the run",
               "interpolated": "this model was calibrated at other micro batches (a line through them)",
               "scaled": "another model shape: the per-op estimate x the calibrated models' measured/estimated "
                         "ratio, which need not hold at this shape"}.get(how, "")
        if how == "roofline":
            split = [f"tp={lay.tp}"] * (lay.tp > 1) + [f"pp={lay.pp}"] * (lay.pp > 1)
            why = ("per-op roofline: " + (" and ".join(split) + " shards were never run in situ, so the "
                   "remainder (autograd, Python, the f/g operators' copies) is the miniature's estimate"
                   if split else "no in-situ calibration applies (precision or attention differ)"))
        if lay.recompute != "none" and name == "backward":
            why += f"; recompute={lay.recompute} is modelled as the forward ops again"
        if name == "backward" and lay.health_check:
            why += "; the doctor's gradient hooks are in the backward"
        return why + f" (core share {ctx.get('share', 1):.2f})"
    if name == "optimizer":
        return ("AdamW calibrated as a·tensors + b·parameters on this rank's shard"
                + ("; ZeRO-1/2's post-step all-gather copies and flat-buffer packing run in the optimizer span"
                   if lay.strategy in ("zero1", "zero2") else ""))
    if name == "bubble":
        return ("(p-1)/v x t_mb assumes equal stages; the first holds the embedding, the last the head and "
                "loss, and every wait on a late stage (skew on shared cores) is counted as bubble")
    if name.startswith("exposed"):
        skew = ctx.get("skew_ms")
        if over:
            return (f"more hid behind compute than the calibrated overlap efficiency "
                    f"({plan.cluster.overlap_efficiency:.2f}) allows, or the α-β fit at world "
                    f"{plan.cluster.measured_world} is slow for these sizes")
        return ("ranks reach the collective apart (median skew "
                f"{skew:.2f} ms): the wait is counted as communication" if skew else
                "waiting on the other ranks or gloo competing with compute for the cores") + \
            (f"; α-β fitted at world {plan.cluster.measured_world}, latency scaled by ring steps to {lay.world}"
             if lay.world != plan.cluster.measured_world else "")
    if name.startswith("data"):
        if ctx.get("trainer_overhead", {}).get("from", "").startswith("a miniature"):
            return ("the trainer's per-step cost is the residual of a miniature of this very layout (1 dim per head, "
                    "8 positions): its Python, hooks and each collective's latency and skew, which in the run land "
                    "in several measured components (exposed comm above all), not in data + Python alone")
        worlds = ", ".join(sorted(plan.cluster.step_overhead)) or "none"
        return (f"the trainer's per-step cost is the residual of a miniature run (ddp/single at world {worlds}): "
                "whatever the profile does not predict of a near-empty step (Python inside and between the "
                "spans, each sync's skew), so in a run it lands in several measured components; "
                f"{lay.strategy} at world {lay.world} reuses it")
    return "ZeRO's flat-buffer copies run inside the passes and the step: not measured apart"


def train_args(p: Plan) -> str:
    """The same layout as `shardlab train` overrides."""
    lay = p.layout
    strategy = {"ddp": "ddp" if lay.dp > 1 or lay.world > 1 else "single"}.get(lay.strategy, lay.strategy)
    out = [f"parallel.strategy={strategy}"]
    if lay.strategy != "ddp" and lay.replicate > 1:
        out.append(f"parallel.dp_shard={lay.dp // lay.replicate}")
    if lay.tp > 1:
        out += [f"parallel.tp={lay.tp}"] + (["parallel.sp=true"] if lay.sp else [])
    if lay.pp > 1:
        out += [f"parallel.pp={lay.pp}", f"parallel.pp_schedule={lay.schedule}"] + \
            ([f"parallel.pp_virtual={lay.v}"] if lay.v > 1 else [])
    if lay.recompute != "none":
        out.append(f"train.recompute={lay.recompute}")
    out += [f"train.micro_batch={p.train.micro_batch}", f"train.grad_accum={p.m}"]
    return " ".join(out)


def what_to_try(plan: Plan, top: int = 3) -> list[dict]:
    """The `top` fastest fitting layouts `plan search` finds on the same world, global batch and memory that
    are predicted faster than the run's own layout (none: the run's is already the fastest it knows)."""
    cluster = replace(plan.cluster, num_gpus=plan.layout.world)
    try:
        found = search(plan.model, plan.train, cluster, plan.layout.world, fitting_only=True, budget_s=FIXES_BUDGET_S)
    except ValueError:
        return []
    same = args_of(plan)
    # search's layouts are bare; give them this run's doctor check, as the run itself is planned
    found = [evaluate(q.model, q.train, replace(q.layout, health_check=plan.layout.health_check), cluster)
             for q in found]
    faster = sorted((q for q in found if q.step_time < plan.step_time and args_of(q) != same),
                    key=lambda q: q.step_time)
    return [{"layout": q.layout.describe(), "args": args_of(q), "train_args": train_args(q),
             "step_time_s": q.step_time, "tokens_per_s": q.tokens_per_s, "mem_total": q.mem_total,
             "speedup_vs_predicted": plan.step_time / q.step_time} for q in faster[:top]]


def explain(plan: Plan, meas: dict, how: str, ctx: dict, top: int = 3) -> dict:
    """The one object `shardlab explain --json` prints."""
    pred = predicted(plan)
    rs = rows(pred, meas)
    off = [dict(r, cause=cause(r, plan, how, ctx)) for r in rs if r["off"]]
    step_err = _rel(pred["step_time_s"], meas["step_time_s"])
    return {"layout": plan.layout.describe(), "world": plan.layout.world, "compute_from": how,
            "predicted": pred, "measured": meas, "step_time_error": step_err, "components": rs,
            "off": off, "what_to_try": what_to_try(plan, top), "context": ctx,
            "formulas": dict(plan.explain)}
