"""Replica consistency: do the ranks that should hold identical parameters actually hold them?

Data-parallel replicas are bit-identical when everything works (same initial weights, same reduced
gradients, same optimizer). So each rank computes two exact integer checksums per parameter over the
raw bits (a plain sum and a position-weighted sum, so swapped elements are caught too), the small
table is all-gathered through comm, and every rank compares. Cost: one pass over the parameters and
one all-gather of 16 bytes per parameter per rank.

Only what is replicated is compared, and which copies those are the layers declare as replica sets
(doctor/replicas.py): the data-parallel layer's `replicated_parameters()` (plain tensors and fully replicated
DTensors; a DTensor sharded across ranks by FSDP2 differs per rank by design, own ZeRO-3's flat shards too),
TP's whole parameters within a TP group, EP's experts within an edp group, local SGD's fragments.
"""
from __future__ import annotations

from collections import Counter

import torch

from shardlab import comm

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_CHUNK = 1 << 22  # elements per pass: bounds the int64 temporaries for big parameters


def replicated_parameters(strategy) -> list[tuple[str, torch.Tensor]]:
    """What the data-parallel layer `strategy` (seen through the layers' views) holds equal on every
    data-parallel rank: its declared `replicated_parameters()` (parallel/dp/base.py)."""
    return list(strategy.replicated_parameters())


def tensor_checksum(t: torch.Tensor) -> tuple[int, int]:
    """Exact checksums of the raw bits: (sum, position-weighted sum), int64 with wrap-around."""
    flat = t.detach().contiguous().view(-1)
    bits = flat.view(_INT_VIEW[flat.element_size()])
    s1 = torch.zeros((), dtype=torch.int64, device=t.device)
    s2 = torch.zeros((), dtype=torch.int64, device=t.device)
    for start in range(0, bits.numel(), _CHUNK):
        chunk = bits[start:start + _CHUNK].to(torch.int64)
        pos = torch.arange(start, start + chunk.numel(), device=t.device, dtype=torch.int64) % 65521 + 1
        s1 += chunk.sum()
        s2 += (chunk * pos).sum()
    return int(s1), int(s2)


def local_table(named: list[tuple[str, torch.Tensor]], device: torch.device) -> torch.Tensor:
    return torch.tensor([tensor_checksum(p) for _, p in named], dtype=torch.int64, device=device).view(-1, 2)


def compare(names: list[str], tables: list[list[tuple[int, int]]], ranks: list[int] | None = None) -> dict:
    """Compare per-rank checksum tables. The reference value of a parameter is what most ranks hold
    (ties: the lowest rank's value, so with two replicas rank 0 is the reference). `ranks`: the global
    rank of each table (default 0, 1, ...); the result names global ranks."""
    ranks = ranks or list(range(len(tables)))
    diverged: dict[int, list[str]] = {}
    first = None
    for i, name in enumerate(names):
        values = [tuple(t[i]) for t in tables]
        counts = Counter(values)
        ref = max(counts, key=lambda v: (counts[v], -values.index(v)))
        bad = [ranks[k] for k, v in enumerate(values) if v != ref]
        if bad:
            first = first or {"param": name, "ranks": bad, "reference_rank": ranks[values.index(ref)]}
            for r in bad:
                diverged.setdefault(r, []).append(name)
    return {"consistent": not diverged, "first": first,
            "ranks": {str(r): {"n_params": len(p), "first_param": p[0], "params": p[:10]}
                      for r, p in sorted(diverged.items())}}


def check_replicas(named: list[tuple[str, torch.Tensor]], step: int, device: torch.device, group=None,
                   ranks: list[int] | None = None) -> dict:
    """Collective over `group` (the true replicas: the data-parallel ranks, whose tensor/pipeline
    coordinates are equal; `ranks` are their global ranks in group order): compare `named`, what one
    replica set declares equal across them (doctor/replicas.py); on divergence also measure how far the
    first diverged parameter is from the reference (max |diff|, elements that differ)."""
    names = [n for n, _ in named]
    world = comm.world_size(group)
    ranks = ranks or list(range(world))
    if not named:
        return {"step": step, "consistent": True, "compared": 0, "note": "no replicated parameters to compare"}
    mine = local_table(named, device).view(-1)
    out = torch.empty(world * mine.numel(), dtype=torch.int64, device=device)
    comm.all_gather(out, mine, group=group, tag="doctor checksum")
    tables = [[tuple(row) for row in t.view(-1, 2).tolist()] for t in out.view(world, -1)]
    result = {"step": step, "compared": len(names), **compare(names, tables, ranks)}
    if not result["consistent"]:
        first = result["first"]
        p = dict(named)[first["param"]].detach().clone()
        # (comm.broadcast takes the group-local rank; reference_rank is global)
        comm.broadcast(p, src=ranks.index(first["reference_rank"]), group=group, tag="doctor checksum")
        mine_p = dict(named)[first["param"]].detach()
        diff = (mine_p.float() - p.float()).abs()
        stats = comm.all_gather_object({"max_abs_diff": float(diff.max()), "n_diff": int((diff > 0).sum()),
                                        "numel": diff.numel()}, group=group)
        first["detail"] = {str(r): stats[ranks.index(r)] for r in first["ranks"]}
    return result


def describe(result: dict) -> str:
    """One human paragraph for a checksum result."""
    tp = result.get("tp")
    frags = result.get("fragments")  # parallel.sync: only the fragments just synchronised were compared
    after = "" if frags is None else f" after the outer step of fragment{'s' if len(frags) > 1 else ''} " \
                                     f"{', '.join(map(str, frags))}"
    if result["consistent"]:
        within = "" if not tp else f"; {tp['compared']} TP-replicated parameters compared within tensor-parallel groups"
        return f"step {result['step']}: replicas consistent ({result['compared']} parameters compared{after}{within})"
    if result.get("diverged_set") == "tp":
        return _describe_tp(result["step"], tp)
    if result.get("diverged_set") == "experts":
        return _describe_experts(result["step"], result["experts"])
    first = result["first"]
    ranks = ", ".join(map(str, first["ranks"]))
    many = len(first["ranks"]) > 1
    # (several replica groups, one per tp/pp/cp coordinate or HSDP shard: name the one that diverged)
    group = "" if "group_ranks" not in result else f" of the replica group {result['group_ranks']}"
    lines = [f"step {result['step']}: REPLICAS DIVERGED{after}: rank{'s' if many else ''} {ranks} "
             f"differ{'' if many else 's'} from rank {first['reference_rank']} (the majority/reference{group}); "
             "first diverged parameter: "
             f"{first['param']}" + ("" if "fragment" not in first else f" (fragment {first['fragment']})")]
    lines += _detail_lines(first)
    for r, info in result["ranks"].items():
        lines.append(f"  rank {r}: {info['n_params']} parameter(s) differ, first {info['first_param']}")
    if frags is not None:
        lines.append("  Every replica must leave an outer step with this fragment bitwise equal: that rank's outer "
                     "state (DiLoCo's θ_start or momentum) or its outer step differed (corrupted memory, a different "
                     "all-reduce, an outer step skipped there). Roll back to the last checkpoint "
                     "(doctor.on_anomaly=rollback) and look for what differs on that rank.")
    else:
        lines.append("  A replica drifted: a rank applied a different update (non-deterministic kernel, a skipped "
                     "step on one rank only, corrupted memory). Roll back to the last checkpoint "
                     "(doctor.on_anomaly=rollback) and look for what differs on that rank.")
    return "\n".join(lines)


def _detail_lines(first: dict) -> list[str]:
    """Per rank, how many elements of the first diverged parameter differ, and by how much."""
    return [f"  rank {r}: {d['n_diff']} of {d['numel']} elements differ, max |diff| {d['max_abs_diff']:.3g}"
            for r, d in (first.get("detail") or {}).items()]


def _describe_group(step: int, found: dict, title: str, group: str, reference: str, param: str,
                    advice: str) -> str:
    """A divergence within one named group of copies (an edp group's experts, a TP group's whole parameters)."""
    first = found["first"]
    ranks = ", ".join(map(str, first["ranks"]))
    return "\n".join([f"step {step}: {title} within the {group} {found['group_ranks']}: rank(s) {ranks} differ from "
                      f"rank {first['reference_rank']}{reference}; first diverged parameter: {first['param']} ({param})",
                      *_detail_lines(first), advice])


def _describe_experts(step: int, ex: dict) -> str:
    """A divergence within an expert-data-parallel group: an expert differs between the dp ranks holding it."""
    return _describe_group(
        step, ex, "EXPERT REPLICAS DIVERGED", "expert-data-parallel group", " (the majority/reference)",
        "an expert that every rank of its edp group holds",
        "  The ranks holding the same experts sum their gradients over edp and step alike: one applied a "
        "different update (the edp all-reduce skipped, corrupted memory). Roll back to the last checkpoint "
        "(doctor.on_anomaly=rollback) and look for what differs on that rank.")


def _describe_tp(step: int, tp: dict) -> str:
    """A divergence within a tensor-parallel group: a parameter TP leaves whole differs between TP ranks."""
    return _describe_group(step, tp, "TP COPIES DIVERGED", "tensor-parallel group", "",
                           "one that tensor parallelism keeps whole on every TP rank",
                           "  Its gradient differed between TP ranks: with sequence parallelism it must be summed over "
                           "tp after backward (finish_backward); without, the activations feeding it must be identical "
                           "on every TP rank (dropout on the replicated stream drawing different masks, a "
                           "non-deterministic kernel). Roll back to the last checkpoint (doctor.on_anomaly=rollback) "
                           "and look for what differs on that rank.")
