"""`shardlab plan search`: enumerate layouts, keep those that fit, rank by predicted tokens/s.
And, for a layout that does not fit, the nearest changes that make it fit (`fixes`)."""
from __future__ import annotations

import itertools
import time
from dataclasses import replace

from shardlab.parallel.pp import registry

from .hardware import Cluster
from .layout import Layout, training_strategy
from .train_spec import TrainSpec
from .model import ModelSpec
from .step import Plan, evaluate, memory_fits


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def cp_layouts(seq: int, ranks: int) -> list[dict]:
    """Context-parallel choices over `ranks` (what tp x pp leave) for a `seq`-token sequence: cp = 1, and
    where the sequence is long enough to matter (parallel/cp/cost.py: `worth_splitting`) each power of two
    cp >= 2 dividing `ranks` under the ring, Ulysses and the hybrid at every U between (a head count that
    does not divide is refused by `Layout.check` as training refuses it)."""
    from shardlab.parallel.cp.cost import worth_splitting

    out = [{}]
    cp = 2
    while cp <= ranks and ranks % cp == 0 and worth_splitting(seq, cp):
        out += [{"cp": cp, "cp_impl": "own"}, {"cp": cp, "cp_impl": "ulysses"}]
        out += [{"cp": cp, "cp_impl": "hybrid", "cp_ulysses": u} for u in _divisors(cp) if 1 < u < cp]
        cp *= 2
    return out


def candidates(model: ModelSpec, train: TrainSpec, cluster: Cluster, gpus: int, impl: dict | None = None):
    g = cluster.gpus_per_node
    impl = impl or {}
    for tp, pp, ctx in ((t, p, c) for t in _divisors(gpus) if t <= g and model.tp_ok(t)
                        for p in _divisors(gpus // t) if p <= min(16, model.n_layer)  # uneven splits too
                        for c in cp_layouts(train.seq or model.seq, gpus // (t * p))):
        dp = gpus // (tp * pp * ctx.get("cp", 1))
        if train.global_batch % dp:
            continue
        per_rank = train.global_batch // dp
        mbs = [b for b in (1, 2, 4, 8, 16, 32) if per_rank % b == 0 and per_rank // b >= pp]
        scheds = [(registry.DEFAULT, 1)] if pp == 1 else list(registry.SEARCHED)
        scheds = [(s, v) for s, v in scheds if pp * v <= model.n_layer]
        strategies = ["ddp", "zero1", "zero2", "zero3"] if dp > 1 else ["ddp"]
        # an MoE model's expert parallelism: every ep that divides the experts and a stage's tp x cp x dp ranks
        eps = [e for e in _divisors(model.moe_experts) if (tp * ctx.get("cp", 1) * dp) % e == 0] \
            if model.moe_experts else [1]
        for strat, (sched, v), rec, sp, b, ep in itertools.product(
                strategies, scheds, ("none", "selective", "full"),
                (False, True) if tp > 1 else (False,), mbs, eps):
            shards = [None]
            if strat == "zero3" and not ctx and dp * tp > g and g % tp == 0 and dp % (g // tp) == 0:
                shards.append(g // tp)  # HSDP: shard inside a node, replicate across nodes
            for dsh in shards:
                lay = Layout(dp=dp, strategy=strat, dp_shard=dsh, tp=tp, sp=sp, pp=pp, ep=ep,
                             schedule=sched, v=v, recompute=rec, **ctx, **_impl_for(impl, strat, tp))
                yield lay, TrainSpec(**{**train.__dict__, "micro_batch": b})


def _impl_for(impl: dict, strategy: str, tp: int) -> dict:
    """The user's implementations that apply to a candidate: tp_impl where it has tensor parallelism, the
    strategy's own way (torch-fsdp2, torch-zero1) on candidates of that strategy."""
    out = {"tp_impl": impl["tp_impl"]} if tp > 1 and "tp_impl" in impl else {}
    if strategy == "zero3" and "zero3_impl" in impl:
        out["zero3_impl"] = impl["zero3_impl"]
    if strategy == "zero1" and "zero_partition" in impl:
        out["zero_partition"] = impl["zero_partition"]
    return out


def impl_of(lay: Layout) -> dict:
    """`lay`'s implementations where they are not shardlab's own (what `search` keeps for its candidates)."""
    own = Layout()
    return {k: getattr(lay, k) for k in ("tp_impl", "zero3_impl", "zero_partition")
            if getattr(lay, k) != getattr(own, k)}


def search(model: ModelSpec, train: TrainSpec, cluster: Cluster, gpus: int | None = None, impl: dict | None = None,
           fitting_only: bool = False, counts: dict | None = None, budget_s: float | None = None):
    """All evaluated plans (fitting first, by tokens/s); `fitting_only`: only the layouts that fit, the others
    never timed (their memory says so first). `counts` (a dict) receives `tried`: the layouts whose memory was
    planned, fitting or not, `candidates` and `truncated`. The candidates run shardlab's own layers unless `impl`
    fixes one (tp_impl, zero3_impl, zero_partition: the user's tp_impl or torch strategy): then the candidates it
    applies to run it; the search does not choose implementations.

    `budget_s`: stop after that many seconds. A large MoE model on hundreds of GPUs has hundreds of thousands of
    candidates (DeepSeek-V3 on 256: ~370,000, every ep, schedule, recompute and micro batch), hours of planning; a
    budgeted search visits them in a fixed spread order (`_spread`), so what it finds in its time covers every
    part of the space, not the first tp's, and says it was cut (`counts["truncated"]`). Ties rank in the
    enumeration's order, so a search the budget does not cut returns what an unbudgeted one does."""
    gpus = gpus or cluster.num_gpus
    train.check()
    impl = impl or {}
    Layout(**impl).check(model)  # a bad value is the user's (one line), not every candidate's refusal
    cands = list(candidates(model, train, cluster, gpus, impl))
    deadline = None if not budget_s else time.monotonic() + budget_s
    found: list[tuple[int, Plan]] = []
    tried, truncated = 0, False
    for i in (_spread(len(cands)) if deadline else range(len(cands))):
        if deadline and time.monotonic() > deadline:
            truncated = True
            break
        lay, tr = cands[i]
        try:
            if not fitting_only or memory_fits(model, tr, lay, cluster):
                found.append((i, evaluate(model, tr, lay, cluster)))
        except ValueError:
            continue
        tried += 1
    if counts is not None:
        counts.update(tried=tried, candidates=len(cands), truncated=truncated)
    found.sort(key=lambda ip: (not ip[1].fits, -ip[1].tokens_per_s, ip[0]))
    return [p for _, p in found]


def _spread(n: int) -> list[int]:
    """0..n-1 in a fixed pseudo-random order (seeded: the same every run), for a search cut by its budget."""
    import random
    order = list(range(n))
    random.Random(0).shuffle(order)
    return order


def why(best: Plan, nxt: Plan) -> str:
    """One sentence on why `best` beats `nxt`: the largest per-step difference."""
    gain = best.tokens_per_s / nxt.tokens_per_s - 1
    if not nxt.fits:
        return f"the next layout does not fit ({nxt.mem_total / 2**30:.1f} GiB > {nxt.capacity / 2**30:.1f})"
    diffs = {k: nxt.times[k] - best.times[k] for k in ("compute", "exposed_comm", "tp_pp_comm", "host_wait",
                                                        "bubble", "optimizer", "zero_copies")}
    k = max(diffs, key=diffs.get)
    label = {"compute": "compute (recomputation or GEMM size)", "exposed_comm": "exposed data-parallel "
             "communication", "tp_pp_comm": "tensor/pipeline-parallel communication",
             "bubble": "pipeline bubble", "optimizer": "optimizer step",
             "zero_copies": "ZeRO buffer copies", "host_wait": "the device waiting on the host's kernel launches"}[k]
    kind = "comm bound" if k in ("exposed_comm", "tp_pp_comm") else (
        "memory bound" if k == "compute" and nxt.layout.recompute != best.layout.recompute else "")
    mem = ""
    if nxt.mem_total < best.mem_total:
        mem = f"; it saves {(best.mem_total - nxt.mem_total) / 2**30:.1f} GiB per GPU"
    note = f" [{kind}]" if kind else ""
    return (f"{gain:+.1%} tokens/s: the runner-up ({nxt.layout.describe()}, mb={nxt.train.micro_batch}) "
            f"spends {diffs[k] * 1e3:,.1f} ms more per step on {label}{note}{mem}")


def args_of(p: Plan) -> str:
    """The key=value arguments that select this plan's layout and micro batch (for `shardlab plan`)."""
    lay, out = p.layout, [f"dp={p.layout.dp}", f"strategy={training_strategy(p.layout)}"]
    if lay.dp_shard and lay.dp_shard != lay.dp and lay.strategy != "ddp":
        out.append(f"dp_shard={lay.dp_shard}")
    if lay.tp > 1:
        out += [f"tp={lay.tp}"] + (["sp=true"] if lay.sp else []) + ([f"tp_impl={lay.tp_impl}"]
                                                                     if lay.tp_impl != "own" else [])
    if lay.cp > 1:
        out += [f"cp={lay.cp}", f"cp_impl={lay.cp_impl}"] + ([f"cp_ulysses={lay.cp_ulysses}"]
                                                            if lay.cp_impl == "hybrid" else [])
    if lay.pp > 1:
        out += [f"pp={lay.pp}", f"schedule={lay.schedule}"] + ([f"v={lay.v}"] if lay.v > 1 else [])
    if lay.ep > 1:
        out.append(f"ep={lay.ep}")
    if lay.recompute != "none":
        out.append(f"recompute={lay.recompute}")
    if lay.offload != "none":
        out.append(f"offload={lay.offload}")
    out.append(f"micro_batch={p.train.micro_batch}")
    return " ".join(out)


def _one_knob(p: Plan):
    """(what changed, layout, train) for single changes a user makes first: recompute, a smaller
    micro batch (same global batch, more accumulation), a higher ZeRO stage, and their combinations."""
    lay, tr = p.layout, p.train
    recs = [r for r in ("selective", "full") if r != lay.recompute and lay.recompute != "full"]
    mbs = []
    b = tr.micro_batch // 2
    while b >= 1:
        mbs.append(b)
        b //= 2
    stages = ("ddp", "zero1", "zero2", "zero3")
    zs = [z for z in stages[stages.index(lay.strategy) + 1:]] if lay.dp > 1 else []
    if lay.tp > 1 and not lay.sp:  # sequence parallelism: the replicated activations split t ways
        yield "sp=true", replace(lay, sp=True), tr
        for r in recs:
            yield f"sp=true recompute={r}", replace(lay, sp=True, recompute=r), tr
    for r in recs:
        yield f"recompute={r}", replace(lay, recompute=r), tr
    for b in mbs:
        yield f"micro_batch={b}", lay, replace(tr, micro_batch=b)
    for z in zs:
        yield f"strategy={z}", replace(lay, strategy=z), tr
        for r in recs:
            yield f"strategy={z} recompute={r}", replace(lay, strategy=z, recompute=r), tr
    for r in recs:
        for b in mbs:
            yield f"recompute={r} micro_batch={b}", replace(lay, recompute=r), replace(tr, micro_batch=b)


def sp_hint(p: Plan) -> dict | None:
    """What sequence parallelism would save, for a tensor-parallel plan with it off: the activations the
    tensor-parallel ranks replicate (norms, dropout, residuals; with full recompute the whole block
    input) become 1/t each (Korthikanti et al. 2022, Table 2)."""
    if p.layout.tp <= 1 or p.layout.sp:
        return None
    try:
        q = evaluate(p.model, p.train, replace(p.layout, sp=True), p.cluster)
    except ValueError:
        return None
    a, a_sp = (sum(ln.bytes for ln in pl.memory if ln.name in ("activations", "pipeline in-flight")) for pl in (p, q))
    return {"activations": a, "activations_sp": a_sp, "saves": p.mem_total - q.mem_total,
            "mem_total_sp": q.mem_total, "fits_sp": q.fits, "tokens_per_s_sp": q.tokens_per_s}


FIXES_BUDGET_S = 30.0  # how long a plan that does not fit searches for fitting layouts (`search`'s budget)


def fixes(p: Plan, top: int = 3, counts: dict | None = None) -> tuple[list[tuple[str, Plan]], list[Plan]]:
    """For a plan that does not fit: (the same layout with one or two knobs changed, fastest first;
    the best fitting layouts `plan search` finds on the same GPUs and global batch, in FIXES_BUDGET_S)."""
    near = []
    for what, lay, tr in _one_knob(p):
        try:
            q = evaluate(p.model, tr, lay, p.cluster)
        except ValueError:
            continue
        if q.fits:
            near.append((what, q))
    near.sort(key=lambda x: -x[1].tokens_per_s)
    try:
        found = search(p.model, p.train, p.cluster, p.layout.world, impl_of(p.layout), fitting_only=True,
                       counts=counts, budget_s=FIXES_BUDGET_S)[:top]
    except ValueError:
        found = []
    return near[:top], found
