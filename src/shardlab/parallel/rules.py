"""What composes with what in this version: one table of rules and one checker.

Each row names the layer whose check reports it, when it refuses a layout (a predicate over the run's
facts: degrees and implementations) and the one line the user sees. The lists of partners ("tensor
parallelism's own implementation composes with these data-parallel layers") are not written here: each
layer's spec declares them (`composes_with`, parallel/spec.py) and `allows` asks it, so a new
implementation that composes with more is one entry in its spec, and a new "not implemented yet" pair is
one row below.

A layer's checks call `check(cfg, dims, layer)` where its refusals belong among its other conditions (the
first problem found is the one reported); `refusals(cfg, dims)` lists every refusal of a layout at once (the
layout search). Pure data and arithmetic: no torch import.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from shardlab.errors import ConfigError


def facts(cfg, dims) -> dict:
    """What the rules read of a run: the degrees, the implementations and the few keys that decide."""
    from shardlab.parallel import layers

    p = cfg.parallel
    f = dict(dims.degrees, ep=dims.ep, dp=layers.dp_name(p), tp_impl=p.tp_impl, cp_impl=p.cp_impl, sp=bool(p.sp),
             experts=cfg.model.moe_experts, compress=p.compress, sync=p.sync)
    f["dp1"] = f["dp"] if dims.dp_size > 1 else "single"  # the dp layer a TP group meets (dp = 1: none)
    # the dp layer a pipeline stage meets: it reduces over dp x cp, cp ranks hold replicas too
    f["dp_cp1"] = f["dp"] if dims.size("dp_cp") > 1 else "single"
    f["pp_virtual"] = getattr(p, "pp_virtual", 1)
    f["replicating"] = f["dp"] in layers.REPLICATING
    f["tp_other"] = "dtensor" if p.tp_impl == "own" else "own"
    for name in ("tp", "cp", "ep"):  # "{tp_with_dp}": the data-parallel layers the chosen implementation takes
        spec = layers.BY_NAME[name]
        f[f"{name}_with_dp"] = ", ".join(spec.partners(spec.chosen(cfg), "dp") or ())
    return f


def allows(f: dict, layer: str, dp: str) -> bool:
    """Whether the chosen implementation of `layer` composes with the data-parallel layer `dp` (its spec)."""
    from shardlab.parallel import layers

    spec = layers.BY_NAME[layer]
    return spec.allows(f[f"{layer}_impl"] if f"{layer}_impl" in f else spec.names[0], "dp", dp)


@dataclass(frozen=True)
class Rule:
    layer: str  # whose checks report it: "tp", "cp", "ep", "pp", "moe" (model.moe_experts), "powersgd"
    when: Callable[[dict], bool]  # facts -> refused
    says: str  # the one line, formatted with the facts


RULES: tuple[Rule, ...] = (
    # tensor parallelism and the data-parallel layer
    Rule("tp", lambda f: f["tp"] > 1 and not allows(f, "tp", f["dp1"]),
         "parallel.tp_impl={tp_impl} does not compose with parallel.dp={dp1} in this version; use one of "
         "{tp_with_dp} (or parallel.tp_impl={tp_other})"),
    # context parallelism: the dp layers over dp_cp, then the pairs not built yet
    Rule("cp", lambda f: f["cp"] > 1 and not allows(f, "cp", f["dp"]),
         "parallel.cp={cp} does not compose with parallel.dp={dp} in this version; use one of {cp_with_dp}"),
    Rule("cp", lambda f: f["cp"] > 1 and f["dp_replicate"] > 1 and not f["replicating"],
         "parallel.cp={cp} with HSDP (parallel.dp={dp}, parallel.dp_replicate={dp_replicate}) is not implemented "
         "yet; set parallel.dp_replicate=1 or use ddp"),
    # DTensor parameters: the own dp layers over dp_cp take plain tensors
    Rule("cp", lambda f: f["cp"] > 1 and f["tp"] > 1 and f["tp_impl"] != "own",
         "parallel.cp={cp} with parallel.tp_impl={tp_impl} is not implemented yet; use parallel.tp_impl=own"),
    Rule("cp", lambda f: f["cp"] > 1 and f["tp"] > 1 and not f["replicating"],
         "parallel.cp={cp} with parallel.tp={tp} composes with parallel.dp=ddp only in this version (got {dp})"),
    # mixture-of-experts models and the layers
    Rule("moe", lambda f: f["experts"] and max(f["pp"], f["cp"]) > 1,
         "model.moe_experts={experts} with parallel.pp={pp} parallel.cp={cp}: this version runs MoE models under "
         "data, expert and tensor parallelism only; set pp=cp=1"),
    Rule("moe", lambda f: f["experts"] and f["tp"] > 1 and (f["tp_impl"] != "own" or f["sp"]),
         "model.moe_experts={experts} with parallel.tp={tp}: MoE layers compose with own tensor parallelism "
         "without SP only (they stay whole per tp rank); use parallel.tp_impl=own parallel.sp=false"),
    # expert parallelism: the experts are hidden from the dp layer, which must all-reduce the rest plainly
    Rule("ep", lambda f: f["ep"] > 1 and not allows(f, "ep", f["dp"]),
         "parallel.ep={ep} with parallel.dp={dp}: expert parallelism composes with {ep_with_dp} in this version"),
    Rule("ep", lambda f: f["ep"] > 1 and (f["compress"] != "none" or f["sync"] != "every_step"),
         "parallel.ep={ep} with parallel.compress={compress} parallel.sync={sync}: expert parallelism needs plain "
         "per-step gradient reduction; use the defaults"),
    # pipeline stages and the layers around them
    Rule("pp", lambda f: f["pp"] > 1 and f["dp_cp1"] in ("torch-ddp", "torch-zero1"),
         "parallel.dp={dp} with parallel.pp={pp}: torch DDP cannot have several microbatches' forwards in flight; "
         "use ddp, zero1, zero2, zero3 or torch-fsdp2"),
    Rule("pp", lambda f: f["pp"] > 1 and f["tp"] > 1 and f["tp_impl"] != "own",
         "parallel.pp={pp} with parallel.tp_impl={tp_impl}: DTensor's plan shards an embedding and head a pipeline "
         "stage may not hold, and its loss_parallel must span a backward the schedule runs later; use "
         "parallel.tp_impl=own"),
    Rule("pp", lambda f: f["pp"] > 1 and f["pp_virtual"] > 1 and f["dp_cp1"] == "zero3",
         "parallel.pp_virtual={pp_virtual} with parallel.dp=zero3: zero3 gathers, prefetches and reshards its units "
         "in the order of one forward through the rank's part, and virtual stages interleave several; use ddp, "
         "zero1 or zero2, or parallel.pp_virtual=1"),
    Rule("pp", lambda f: f["pp"] > 1 and f["pp_virtual"] > 1 and f["dp_cp1"] == "torch-fsdp2",
         "parallel.pp_virtual={pp_virtual} with parallel.dp=torch-fsdp2: FSDP2 makes the rank's whole part its root "
         "unit, which virtual stages cannot share; use ddp, zero1 or zero2, or parallel.pp_virtual=1"),
    # PowerSGD replaces the all-reduce of pure data parallelism
    Rule("powersgd", lambda f: f["compress"] != "none" and f["tp"] * f["pp"] * f["cp"] > 1,
         "parallel.compress={compress} with tp/pp/cp > 1: this version compresses pure data parallelism only; "
         "set parallel.tp=parallel.pp=parallel.cp=1"),
)


def refusals(cfg, dims, layer: str | None = None) -> list[str]:
    """Every line the rules (of `layer`, or all) refuse this layout with, in table order."""
    f = facts(cfg, dims)
    return [r.says.format(**f) for r in RULES if (layer is None or r.layer == layer) and r.when(f)]


def check(cfg, dims, layer: str | None = None) -> None:
    """The first refusal of the rules of `layer` (or of all), as a one-line ConfigError; None when none."""
    found = refusals(cfg, dims, layer)
    if found:
        raise ConfigError(found[0])
