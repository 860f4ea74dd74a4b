"""Rendering a Plan: a human table (formulas with --explain) or JSON."""
from __future__ import annotations

from dataclasses import asdict

from . import anchors
from .pipeline_rank import PEAK_RANK
from .step import Plan, bubble_units

GiB = 2**30


def _b(x: float) -> str:
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(x) >= div:
            return f"{x / div:,.2f} {unit}"
    return f"{x:,.0f} B"


def _t(s: float) -> str:
    return f"{s * 1e3:,.3f} ms" if s < 10 else f"{s:,.2f} s"


def mfu_flag(p: Plan) -> dict | None:
    """The plan's MFU against the highest cited measurement on its GPU generation (plan/anchors.py)."""
    return anchors.check(p.mfu, p.cluster.peak_flops, p.train.mixed)


def to_dict(p: Plan) -> dict:
    return {
        "fits": p.fits,
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
        "mfu_ceiling": mfu_flag(p),  # null: no cited anchor for this GPU and precision
        "bubble_fraction": bubble_units(p.layout, p.m) / p.m,
        "bound": p.bound(),
    }


def _moe_words(m) -> str:
    """The header's MoE blocks: experts and top-k, every n-th block, the experts' own width, the shared expert,
    the leading dense blocks."""
    return (f" E={m.moe_experts} k={m.moe_top_k}" + (f" every {m.moe_every}" if m.moe_every > 1 else "")
            + (f" f_e={m.moe_ffn}" if m.moe_ffn else "") + (f" shared={m.moe_shared_ffn}" if m.moe_shared_ffn else "")
            + (f" first {m.moe_first_dense} dense" if m.moe_first_dense else ""))


def render(p: Plan, explain: bool = False) -> str:
    m, lay, c = p.model, p.layout, p.cluster
    out = [f"shardlab plan: {m.name} ({m.params / 1e6:,.1f}M params, L={m.n_layer} h={m.d_model} "
           f"a={m.n_head}{f' d={m.head_dim}' if m.head_dim else ''}"
           f"{f' kv={m.n_kv_heads} f={m.ffn} llama' if m.llama else ''}"
           f"{_moe_words(m) if m.moe_experts else ''}"
           f" s={p.train.seq or m.seq} v={m.vocab}) on {c.name} "
           f"({lay.world} of {c.num_gpus} GPUs, {c.gpus_per_node}/node)",
           f"layout: {lay.describe()}{f' (edp {lay.edp})' if lay.ep > 1 else ''}   precision {p.train.precision}, {p.train.optimizer}, "
           f"global batch {p.train.global_batch} seq = {p.tokens_per_step:,} tokens, "
           f"micro batch {p.train.micro_batch} x {p.m} per rank", ""]
    w = 28
    # under a pipeline layout the lines are one rank's, the largest (memory.memory_lines): its note heads them
    rank = next((ln for ln in p.memory if ln.name == PEAK_RANK), None)
    out.append(f"{'memory per GPU':<{w}}{'':>14}" + (f"   {rank.formula}" if rank else ""))
    for ln in p.memory:
        if ln is not rank:
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
    for k in ("forward", "backward", "tp_pp_comm", "host_wait", "bubble", "comm_total", "exposed_comm", "comm_sm_cost",
              "optimizer", "zero_copies", "trainer", "step"):
        out.append(f"  {k:<{w - 2}}{_t(p.times[k]):>14}" + (f"   {p.explain[k]}" if explain else ""))
    out.append("")
    out.append(f"step {_t(p.step_time)}   {p.tokens_per_s:,.0f} tokens/s   MFU {p.mfu:.1%}   "
               f"bound by {p.bound()}" if p.fits else
               f"(if it fitted: step {_t(p.step_time)}, {p.tokens_per_s:,.0f} tokens/s, MFU {p.mfu:.1%}; "
               f"it does not, see the top)")
    warn = anchors.warning(mfu_flag(p), p.mfu)
    if warn:
        out.append(warn)
    if explain:
        out.append("MFU = model FLOPs (3 x forward, no recompute) / (step x GPUs x peak "
                   f"{(c.peak_flops if p.train.mixed else c.peak_flops_fp32):.3g} FLOP/s)")
    return "\n".join(out)


def shortfall(p: Plan) -> str:
    """One sentence: by how much the layout misses, and its largest memory lines."""
    big = sorted(p.memory, key=lambda ln: -ln.bytes)[:2]
    return (f"does not fit: {_b(p.mem_total)} per GPU needed, {_b(p.capacity)} usable on {p.cluster.name} "
            f"(largest: {', '.join(f'{ln.name} {_b(ln.bytes)}' for ln in big)})")


def render_fixes(p: Plan, near: list, found: list, counts: dict | None = None) -> str:
    """What would make a non-fitting plan fit: printed first, before the plan itself (`counts`: the search's,
    to say where its budget cut it)."""
    from .search import args_of, sp_hint
    out = [f"{p.layout.describe()}, micro batch {p.train.micro_batch}: {shortfall(p)}"]
    hint = sp_hint(p)
    if hint:
        out.append(f"sequence parallelism is off: sp=true splits the activations tp={p.layout.tp} ranks replicate, "
                   f"{_b(hint['activations'])} -> {_b(hint['activations_sp'])} of activations (saves "
                   f"{_b(hint['saves'])}; {_b(hint['mem_total_sp'])} per GPU: "
                   f"{'fits' if hint['fits_sp'] else 'still does not fit'})")
    out.append("")
    if near:
        out.append("fits with (same layout):")
        for what, q in near:
            out.append(f"  {what:<40}{_b(q.mem_total):>12}  {q.tokens_per_s:>14,.0f} tokens/s   {args_of(q)}")
    cut = (f"{counts['tried']:,} of {counts['candidates']:,} layouts searched before the search's budget ran out; "
           f"`shardlab plan search --budget 0` tries them all") if counts and counts.get("truncated") else ""
    if found:
        out.append(f"best fitting layouts on {p.layout.world} GPUs (plan search{': ' + cut if cut else ''}):")
        for q in found:
            out.append(f"  {q.layout.describe():<40}{_b(q.mem_total):>12}  {q.tokens_per_s:>14,.0f} tokens/s   "
                       f"{args_of(q)}")
    if not near and not found and cut:
        out.append(f"no fitting layout found ({cut})")
    elif not near and not found:
        out.append(f"no layout of {p.model.name} fits on {p.layout.world} x {p.cluster.name} at global batch "
                   f"{p.train.global_batch}: more GPUs (gpus=...), offload=optimizer, or a smaller model")
    out += ["", "the plan as asked (it does not fit):", ""]
    return "\n".join(out)


def fixes_dict(near: list, found: list) -> list[dict]:
    from .search import args_of
    return ([{"kind": "same layout", "change": what, "args": args_of(q), "mem_total": q.mem_total,
              "tokens_per_s": q.tokens_per_s} for what, q in near]
            + [{"kind": "search", "change": q.layout.describe(), "args": args_of(q), "mem_total": q.mem_total,
                "tokens_per_s": q.tokens_per_s} for q in found])
