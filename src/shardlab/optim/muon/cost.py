"""What Muon costs, as formulas of the shapes (torch-free: the planner's cost hook, the registry row's `cost`).

    hidden_matrices   which parameters Muon steps (the blocks' linear weights, by model/anatomy.py's roles)
    exchange_bytes    the bytes one group's exchange records on one rank (exchange.py; exact against comm)
    per_rank          the same, and the Newton-Schulz FLOPs, on one rank of a layout that cuts the matrices
                      at one or two levels (ZeRO's rows of TP's slices), dealt as exchange.deal deals them
    zero_redundancy_flops  the same FLOPs per rank under ZeroRedundancyOptimizer's whole-parameter partition
    plan              the planner's figures for a (ModelSpec, TrainSpec, Layout): the optimizer's state
                      bytes per parameter (Muon's one state on its matrices, AdamW's two on the rest), the
                      exchange's bytes and the orthogonalisations' FLOPs on the busiest rank
"""
from __future__ import annotations

import math

from shardlab.optim.muon.newton_schulz import STEPS, flops

GATHER, SCATTER = "muon.gather", "muon.scatter"


def hidden_matrices(a, fqns, roles: dict | None = None) -> set[str]:
    """The FQNs of `fqns` that are block linear weights `roles` names (by the name inside a block, an expert's
    without its index: anatomy's `linear_roles`, dense or an expert's, not the router; the planner passes its
    model's, which adds a shared expert and latent attention's linears)."""
    roles = a.linear_roles() if roles is None else roles
    out = set()
    for fqn in fqns:
        parts = fqn.split(".")
        if len(parts) >= 4 and parts[0] == a.blocks and parts[-1] == "weight" and _role_key(parts) in roles:
            out.add(fqn)
    return out


def _role_key(parts: list[str]) -> str:
    """A block parameter's name inside its block, an expert's index dropped (blocks.3.mlp.experts.7.up.weight:
    mlp.experts.up)."""
    return ".".join(x for x in parts[2:-1] if not x.isdigit())


def exchange_bytes(shapes: list[tuple], n: int, rank: int, dim: int = 0, elem: int = 4) -> dict:
    """The bytes comm records on group rank `rank` for one Muon step when a group of n ranks holds every matrix
    of `shapes` (whole shapes) in n pieces along `dim`, ceil(length / n) long (ZeRO's padded rows; TP's
    equal slices): it sends its piece of every matrix (gather), and each matrix it owns (round-robin by size)
    cut in n pieces, padding included (scatter). Both count the piece a rank keeps, as comm's all-to-all
    records do (its wire bytes leave it out)."""
    piece = [math.ceil(s[dim] / n) * (math.prod(s) // s[dim]) for s in shapes]
    order = sorted(range(len(shapes)), key=lambda i: -math.prod(shapes[i]))
    owned = [i for k, i in enumerate(order) if k % n == rank]
    return {GATHER: sum(piece) * elem, SCATTER: sum(n * piece[i] for i in owned) * elem}


def per_rank(mats: list[tuple], sizes: tuple, coords: tuple, elem: int = 4, steps: int = STEPS) -> dict:
    """{gather, scatter bytes, ns_flops} on the rank at `coords` of groups of `sizes` (outermost level first).
    `mats`: (whole shape, [dim cut at each level, or None where that level holds it whole]). Each level cuts
    what the level inside it holds into ceil(length / n)-long pieces; matrices cut by the same levels are
    dealt round-robin by size (largest first) over those levels' ranks, last level fastest (exchange.deal)."""
    out = {GATHER: 0, SCATTER: 0, "ns_flops": 0}
    classes: dict[tuple, list] = {}
    for shape, dims in mats:
        classes.setdefault(tuple(d is not None and n > 1 for d, n in zip(dims, sizes)), []).append((shape, dims))
    for cut, ms in classes.items():
        lv = [j for j, c in enumerate(cut) if c]
        group = [sizes[j] for j in lv]
        for k, (shape, dims) in enumerate(sorted(ms, key=lambda m: -math.prod(m[0]))):
            owner, rest = [], k % math.prod(group)
            for n in reversed(group):
                owner.insert(0, rest % n)
                rest //= n
            held = list(shape)  # what the innermost level holds, then each level outwards
            pieces = []
            for j in reversed(lv):
                held[dims[j]] = math.ceil(held[dims[j]] / sizes[j])
                pieces.insert(0, math.prod(held))
            for i, j in enumerate(lv):  # outermost first
                if any(coords[lv[q]] != owner[q] for q in range(i)):
                    break  # not an owner at an outer level: takes no part from here in
                out[GATHER] += pieces[i] * elem
                if coords[j] == owner[i]:
                    out[SCATTER] += sizes[j] * pieces[i] * elem
            if all(coords[j] == owner[i] for i, j in enumerate(lv)):
                out["ns_flops"] += flops(shape, steps)
    return out


def matrices_of(model, tp: int = 1, pp: int = 1) -> list[tuple]:
    """(shape, [zero's dim, TP's dim]) of the Muon matrices one pipeline stage holds (the first: ceil(L / pp)
    blocks), from the planner's ModelSpec (its param_shapes are the model's FQNs and (out, in) shapes). Own TP
    cuts column linears along dim 0 (q, k, v, fc), row linears along dim 1 (proj), and leaves key/value
    heads whole where there are fewer of them than TP ranks (replicated); ZeRO cuts dim 0 of what it holds."""
    from shardlab.model import anatomy
    from shardlab.model.anatomy import COLUMN, KV, ROW

    a = anatomy.by_arch(model.arch)
    shapes = dict(model.param_shapes())
    role = model.linear_roles()  # the planner's names: experts, a shared expert, latent attention's linears too
    blocks = math.ceil(model.n_layer / pp)
    out = []
    for fqn in sorted(hidden_matrices(a, shapes, role)):
        parts = fqn.split(".")
        if int(parts[1]) >= blocks:
            continue
        p, r = shapes[fqn], role[_role_key(parts)]
        kv_whole = r == KV and getattr(model, "n_kv_heads", 0) and model.n_kv_heads < tp
        dim = None if tp == 1 or kv_whole else (1 if r == ROW else 0 if r in (COLUMN, KV) else None)
        out.append(((p.rows, p.row), [0, dim]))
    return out


def zero_redundancy_flops(model, n: int, pp: int = 1, steps: int = STEPS, experts_over: int = 0) -> list[int]:
    """Newton-Schulz FLOPs per rank when ZeroRedundancyOptimizer (torch-zero1) partitions whole parameters
    over n ranks: torch's greedy partition (`_partition_parameters`: the groups in order, each largest first,
    every parameter to the rank holding the fewest elements so far, the first such on a tie) over the groups
    the muon factory builds (decayed matrices, the 1-D rest, then Muon's) of one pipeline stage (the first:
    its embeddings and ceil(L / pp) blocks). Each rank orthogonalises its whole matrices: no exchange.
    `experts_over`: an MoE model's experts dealt over their own expert-data-parallel group of that many ranks
    (Megatron-Core's LayerWiseDistributedOptimizer deals expert parameters over expt_dp, the rest over dp):
    every rank then is planned as the busiest of both deals (an upper bound the balanced deals come near)."""
    from shardlab.model import anatomy

    a = anatomy.by_arch(model.arch)
    blocks = math.ceil(model.n_layer / pp)
    stage, past = [], False  # past: after the first block (the final norm, an untied head: the last stage's)
    for fqn, p in model.param_shapes():
        parts = fqn.split(".")
        in_block = parts[0] == a.blocks
        past |= in_block
        if (in_block and int(parts[1]) >= blocks) or (not in_block and past and pp > 1):
            continue
        stage.append((fqn, p))
    role = model.linear_roles()
    hidden = hidden_matrices(a, [f for f, _ in stage], role)
    if experts_over:  # the experts' whole matrices dealt apart, over their own group (busiest rank: both busiest)
        expert = {f for f in hidden if role[_role_key(f.split("."))] == anatomy.EXPERT}
        rest = [(f, p) for f, p in stage if f not in expert]
        own = [(f, p) for f, p in stage if f in expert]
        return [max(_greedy_flops(rest, hidden, n, steps)) + max(_greedy_flops(own, hidden, experts_over, steps))] * n
    return _greedy_flops(stage, hidden, n, steps)


def _greedy_flops(stage: list, hidden: set, n: int, steps: int) -> list[int]:
    """torch's greedy partition of `stage`'s parameters over n ranks (the factory's groups in order, each largest
    first, to the rank holding the fewest elements so far): each rank's Newton-Schulz FLOPs."""
    groups = [[p for f, p in stage if f not in hidden and p.row > 1], [p for f, p in stage if p.row == 1],
              [p for f, p in stage if f in hidden]]
    sizes, out = [0] * n, [0] * n
    for k, group in enumerate(groups):
        for p in sorted(group, key=lambda p: -int(p)):
            r = sizes.index(min(sizes))
            sizes[r] += int(p)
            if k == 2:
                out[r] += flops((p.rows, p.row), steps)
    return out


def plan(model, train, lay) -> dict:
    """The planner's figures for Muon on `lay`: state bytes per parameter in train.optim_dtype, and the busiest
    rank's exchange bytes (the update U crosses in the parameters' dtype: fp32) and Newton-Schulz FLOPs.
    torch-zero1 (`lay.zero_partition == "params"`) steps whole matrices: no exchange, its partition's FLOPs."""
    from shardlab.optim.registry import STATE_BYTES

    mats = matrices_of(model, lay.tp, lay.pp)
    n = lay.shard if lay.strategy != "ddp" else 1
    sizes = (n, lay.tp)
    psi = sum(int(p) for _, p in model.param_shapes())  # the model as this rank's view holds it (E / ep experts)
    muon = sum(math.prod(s) for s, _ in matrices_of(model))
    e = STATE_BYTES[getattr(train, "optim_dtype", "fp32")]
    figures = {"state_bytes_per_param": e * (muon + 2 * (psi - muon)) / psi, "muon_params": muon,
               "ns_flops_total": sum(flops(s) for s, _ in mats)}
    if getattr(lay, "zero_partition", "rows") == "params" and lay.strategy == "zero1" and lay.tp == 1:
        over = lay.edp if getattr(model, "moe_experts", 0) and getattr(lay, "ep", 1) > 1 else 0
        return {**figures, "ns_flops": max(zero_redundancy_flops(model, n, lay.pp, experts_over=over)), GATHER: 0,
                SCATTER: 0}
    ranks = [per_rank(mats, sizes, (i, j)) for i in range(n) for j in range(lay.tp)]
    busiest = max(ranks, key=lambda r: (r["ns_flops"], r[SCATTER]))
    return {**figures, "ns_flops": busiest["ns_flops"], GATHER: busiest[GATHER], SCATTER: busiest[SCATTER]}
