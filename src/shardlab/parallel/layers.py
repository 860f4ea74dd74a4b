"""The one list of layers shardlab knows: their specs (parallel/spec.py), in the order the composition
applies them.

A layer is discovered by iterating over `LAYERS` (and `DATA`, the data-parallel layer that wraps what they
leave): `compose.build` applies each whose `on(dims)` holds, config validation runs each spec's checks and
the composition rules (parallel/rules.py), `--help-keys` reads each spec's keys, the planner its cost hooks.
A new layer is one spec module and one line below.

Pure data: no torch import, so `shardlab.config` can read it cheaply. The tables by name
(`DATA_PARALLEL`, `TENSOR_PARALLEL`, ...) are views of the specs kept for the code that reads one layer's
entries; an entry is "module:attribute", imported on demand so one layer's import cost never hits
another's run. A mesh dimension whose table is empty is accepted by the mesh but has no layer yet:
`not_built` names it, and both `config.validate` and `compose.build` refuse such a layout in one line.
"""
from __future__ import annotations

from shardlab.parallel import compile_spec, fp8_spec, recompute_spec
from shardlab.parallel.cp import spec as cp_spec
from shardlab.parallel.dp import spec as dp_spec
from shardlab.parallel.ep import spec as ep_spec
from shardlab.parallel.pp import spec as pp_spec
from shardlab.parallel.spec import Spec, load  # noqa: F401 - `layers.load`, the entries' importer
from shardlab.parallel.tp import spec as tp_spec

# Per part, in this order: the pipeline split first (it makes the parts), the float8 converter (on whole
# linears, before TP splits them), then innermost first; compile after recompute (the checkpoint is traced).
LAYERS: tuple[Spec, ...] = (pp_spec.SPEC, fp8_spec.SPEC, tp_spec.SPEC, cp_spec.SPEC, ep_spec.SPEC,
                            recompute_spec.SPEC, compile_spec.SPEC)
DATA: Spec = dp_spec.SPEC  # the data-parallel layer, over what the layers leave (parallel/dp/apply.py)
SPECS: tuple[Spec, ...] = LAYERS + (DATA,)
BY_NAME: dict[str, Spec] = {s.name: s for s in SPECS}
# The order config validation runs their checks in (the first problem found is the one reported)
CHECKED: tuple[Spec, ...] = tuple(sorted(SPECS, key=lambda s: s.checks_last))

# name -> {implementation: "module:attribute"}: the tables the composition loads from (one dict per layer,
# so a test that swaps an entry swaps it for the composition too)
TABLES: dict[str, dict[str, str]] = {s.name: s.table() for s in SPECS}
DATA_PARALLEL = TABLES["dp"]  # parallel.dp (alias parallel.strategy): the classes of shardlab.parallel.dp
TENSOR_PARALLEL = TABLES["tp"]
PIPELINE_PARALLEL = TABLES["pp"]  # every schedule of parallel/pp/registry.py -> the split
CONTEXT_PARALLEL = TABLES["cp"]
EXPERT_PARALLEL = TABLES["ep"]
# Layers that keep a whole replica per data-parallel rank: they fill `dp_replicate`; the others shard
# (parameters, gradients or optimizer state) and fill `dp_shard`.
REPLICATING = DATA.with_tag("replicating")
# Sharding layers that also replicate their shards over `dp_replicate` (HSDP); the others need
# dp_replicate == 1.
HSDP = DATA.with_tag("hsdp")
# Layers that allocate their shards themselves from a meta-built part (parallel/materialize.py)
BUILDS_ON_META = DATA.with_tag("meta")


def builds_on_meta(pcfg, dims) -> bool:
    """Whether the data-parallel layer the run gets allocates its own storage (the run's name, or `single`
    where every rank is busy with other dimensions: parallel/dp/apply.py)."""
    if dims.size("dp_cp") == 1 and dims.world_size > 1:
        return False
    return dp_name(pcfg) in BUILDS_ON_META


def dp_name(pcfg) -> str:
    """The data-parallel layer of a `[parallel]` section."""
    return pcfg.strategy


def key_help() -> dict[str, tuple[str, str]]:
    """Every spec's config keys: name -> (help line, allowed values), as `--help-keys` shows them."""
    return {k.name: (k.help, k.allowed) for s in SPECS for k in s.keys}


def not_built(degrees: dict) -> str | None:
    """One line naming the first dimension with degree > 1 that has no layer yet, or None."""
    for spec in LAYERS:
        dim = spec.dim
        if dim and degrees.get(dim, 1) > 1 and not TABLES[spec.name]:
            return (f"parallel.{dim}={degrees[dim]}: {spec.title} is not implemented yet in this version "
                    f"(the mesh accepts the degree, no layer applies it); set parallel.{dim}=1")
    return None
