"""Rendering a Plan: a human table (formulas with --explain) or JSON."""
from __future__ import annotations

from dataclasses import asdict

from .step import Plan

GiB = 2**30


def _b(x: float) -> str:
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(x) >= div:
            return f"{x / div:,.2f} {unit}"
    return f"{x:,.0f} B"


def _t(s: float) -> str:
    return f"{s * 1e3:,.3f} ms" if s < 10 else f"{s:,.2f} s"


def to_dict(p: Plan) -> dict:
    return {
        "model": asdict(p.model) | {"params": p.model.params},
        "train": asdict(p.train),
        "layout": asdict(p.layout) | {"world": p.layout.world, "describe": p.layout.describe()},
        "cluster": {"name": p.cluster.name, "num_gpus": p.cluster.num_gpus,
                    "gpus_per_node": p.cluster.gpus_per_node, "source": p.cluster.source},
        "micro_batches": p.m,
        "memory": {"lines": {ln.name: ln.bytes for ln in p.memory}, "total": p.mem_total,
                   "capacity": p.capacity, "fits": p.fits,
                   "formulas": {ln.name: ln.formula for ln in p.memory}},
        "comm": {
            "bytes_per_step": p.bytes_per_step(),
            "collectives": [{"op": cl.c.op, "group": cl.c.group, "n": cl.c.n, "payload": cl.c.payload,
                             "wire": cl.c.wire, "calls": cl.c.calls, "wire_intra": cl.intra,
                             "wire_inter": cl.inter, "time_s": cl.time, "exposed_s": cl.exposed,
                             "formula": cl.c.why} for cl in p.comm],
            "wire_by_tier": {"intra": sum(cl.intra for cl in p.comm),
                             "inter": sum(cl.inter for cl in p.comm)},
        },
        "time_s": dict(p.times),
        "formulas": dict(p.explain),
        "step_time_s": p.step_time,
        "tokens_per_step": p.tokens_per_step,
        "tokens_per_s": p.tokens_per_s,
        "mfu": p.mfu,
        "bubble_fraction": (p.layout.pp - 1) / ((p.layout.v if p.layout.schedule == "interleaved" else 1) * p.m),
        "bound": p.bound(),
    }


def render(p: Plan, explain: bool = False) -> str:
    m, lay, c = p.model, p.layout, p.cluster
    out = [f"shardlab plan: {m.name} ({m.params / 1e6:,.1f}M params, L={m.n_layer} h={m.d_model} "
           f"a={m.n_head} s={p.train.seq or m.seq} v={m.vocab}) on {c.name} "
           f"({lay.world} of {c.num_gpus} GPUs, {c.gpus_per_node}/node)",
           f"layout: {lay.describe()}   precision {p.train.precision}, {p.train.optimizer}, "
           f"global batch {p.train.global_batch} seq = {p.tokens_per_step:,} tokens, "
           f"micro batch {p.train.micro_batch} x {p.m} per rank", ""]
    w = 28
    out.append(f"{'memory per GPU':<{w}}{'':>14}")
    for ln in p.memory:
        out.append(f"  {ln.name:<{w - 2}}{_b(ln.bytes):>14}" + (f"   {ln.formula}" if explain else ""))
    verdict = "fits" if p.fits else "DOES NOT FIT"
    out.append(f"  {'total':<{w - 2}}{_b(p.mem_total):>14}   of {_b(p.capacity)} usable: {verdict}")
    out.append("")
    out.append(f"{'communication per rank/step':<{w}}{'payload':>14}{'wire intra':>14}{'wire inter':>14}"
               f"{'calls':>8}{'time':>14}{'exposed':>14}")
    for cl in p.comm:
        name = f"{cl.c.op} {cl.c.group}({cl.c.n})"
        out.append(f"  {name:<{w - 2}}{_b(cl.c.payload):>14}{_b(cl.intra):>14}{_b(cl.inter):>14}"
                   f"{cl.c.calls:>8}{_t(cl.time):>14}{_t(cl.exposed):>14}"
                   + (f"   {cl.c.why}" if explain else ""))
    if not p.comm:
        out.append("  (none: a single rank)")
    out.append("")
    out.append(f"{'time per step':<{w}}")
    for k in ("forward", "backward", "tp_pp_comm", "bubble", "comm_total", "exposed_comm", "optimizer",
              "zero_copies", "trainer", "step"):
        out.append(f"  {k:<{w - 2}}{_t(p.times[k]):>14}" + (f"   {p.explain[k]}" if explain else ""))
    out.append("")
    out.append(f"step {_t(p.step_time)}   {p.tokens_per_s:,.0f} tokens/s   MFU {p.mfu:.1%}   "
               f"bound by {p.bound()}")
    if explain:
        out.append("MFU = model FLOPs (3 x forward, no recompute) / (step x GPUs x peak "
                   f"{(c.peak_flops if p.train.mixed else c.peak_flops_fp32):.3g} FLOP/s)")
    return "\n".join(out)
