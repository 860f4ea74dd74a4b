"""Sharding geometry: how a model's parameters group into the units and buckets a strategy reduces or gathers
together, and how each is padded and split under tensor parallelism.

  units         FSDP/ZeRO wrap units on the first pipeline rank: the root (embeddings, final norm) and one
                per block, each parameter as one TP rank holds it
  padded        elements of a gathered buffer once each of n ranks holds an equal share (per parameter rows,
                FSDP2's Shard(0), or one flat buffer)
  ddp_buckets   DDP's gradient buckets in ready order
"""
from __future__ import annotations

import functools

from shardlab.model import anatomy
from shardlab.model.anatomy import KV, ROW
from .layout import first_rank_layers, stage_layers
from .model import MLA_WHOLE, MTP_WHOLE, SHARED, ModelSpec


def padded(numels: list[int], n: int, padding: str) -> int:
    """Elements of the gathered (unsharded, padded) buffer: each rank holds padded/n.
    per_param: torch.chunk on dim 0, every rank stores ceil(rows/n) whole rows of each parameter
    (FSDP2, DTensor Shard(0), shardlab's zero); flat: one buffer padded to a multiple of n."""
    if n <= 1 or padding == "none":
        return sum(numels)
    if padding == "flat":
        return -(-sum(numels) // n) * n
    return sum(-(-getattr(x, "rows", x) // n) * n * getattr(x, "row", 1) for x in numels)


def ddp_buckets(sizes: list[int], first: int, cap: int, last: int = 0) -> list[int]:
    """Bucket byte sizes for gradients in ready order (reverse registration), the rule of torch DDP
    and shardlab's ddp: a bucket closes as soon as it reaches its limit; the first limit is `first`.
    last > 0 (shardlab's ddp, `last_bucket_mb`): a geometric tail, buckets of at most last, 2 x last,
    ... bytes counted from the end, after the first bucket, while the limit stays under `cap`
    (parallel/dp/buckets.py `assign`)."""
    front = 0
    while front < len(sizes) and sum(sizes[:front]) < first:
        front += 1
    head, sizes, tail, limit = list(sizes[:front]), list(sizes[front:]), [], last
    while last > 0 and sizes and limit < cap:
        total = sizes.pop()
        while sizes and total + sizes[-1] <= limit:
            total += sizes.pop()
        tail.insert(0, total)
        limit *= 2
    out, cur = [], 0
    for size in head + sizes:
        cur += size
        if cur >= (first if not out else cap):
            out.append(cur)
            cur = 0
    return out + ([cur] if cur else []) + tail


def _tp_tables() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Name pieces, from model/anatomy.py (every family): what TP leaves whole on every rank (Megatron, and
    shardlab's own TP: the norms, the row-parallel layers' biases, added after the reduction, and the position
    table), the row-parallel weights (they split their input features, dim 1; every other matrix splits
    rows, dim 0), and the key/value weights (whole on every rank with fewer key/value heads than TP ranks)."""
    replicated, rows, kv = [], [], []
    for a in anatomy.ANATOMIES.values():
        replicated += [f"{n}." for n in (*a.norms, a.final_norm)] + ([f"{a.positions}."] if a.positions else [])
        for name, role in a.linear_names():
            if role == ROW:
                rows.append(f"{name}.weight")
                replicated += [f"{name}.bias"] if a.bias else []
            elif role == KV:
                kv.append(f"{name}.weight")
        # an MoE block's shared expert (model.SHARED): a dense MLP, split as the MLP is
        rows += [f"{a.mlp}.{SHARED}.{n}.weight" for n, role in a.mlp_linears if role == ROW]
        # latent attention (ModelSpec.mla): the down-projections and their norms whole on every rank (Megatron-Core's
        # linear_q_down_proj and linear_kv_down_proj are not split), the up-projections by heads, proj by rows
        replicated += [f"{a.attention}.{n}." for n in MLA_WHOLE] + [f"{n}." for n in MTP_WHOLE]
    return tuple(dict.fromkeys(replicated)), tuple(dict.fromkeys(rows)), tuple(dict.fromkeys(kv))


TP_REPLICATED, TP_ROW_WEIGHTS, TP_KV = _tp_tables()
_MOE_PARTS = tuple(dict.fromkeys(f".{a.mlp}.{p}." for a in anatomy.ANATOMIES.values() for p in (a.experts, a.router)))


_EXPERT_PARTS = tuple(dict.fromkeys(f".{a.mlp}.{a.experts}." for a in anatomy.ANATOMIES.values()))


def _in_moe(name: str) -> bool:
    return any(p in name for p in _MOE_PARTS)


def is_expert(name: str) -> bool:
    """An expert's parameter (not the router's): its gradients and states belong to the expert-data-parallel
    group, the ranks that hold the same experts (Megatron-Core's expert_data_parallel group)."""
    return any(p in name for p in _EXPERT_PARTS)


def tp_local(name: str, n, tp: int, kv_whole: bool = False):
    """One TP rank's piece of parameter `name` (a `Param`): replicated ones whole, column-parallel
    weights and biases and the vocabulary rows ceil(rows/tp) (the vocabulary is padded to a multiple
    of tp), row-parallel weights 1/tp of each row."""
    from .model import Param
    # an expert is never split by tensor parallelism (anatomy's EXPERT role: expert parallelism spreads whole
    # experts; Megatron's expert_tensor_parallel_size 1), nor is the router
    if tp == 1 or any(k in name for k in TP_REPLICATED) or (kv_whole and name.endswith(TP_KV)) or _in_moe(name):
        return n
    rows, row = getattr(n, "rows", n), getattr(n, "row", 1)
    if any(name.endswith(k) for k in TP_ROW_WEIGHTS):
        return Param(rows, row // tp)
    return Param(-(-rows // tp), row)


@functools.lru_cache(maxsize=256)
def units(model: ModelSpec, tp: int = 1, pp: int = 1, v: int = 1, part: str = "all") -> tuple[tuple[int, ...], ...]:
    """FSDP units on the first pipeline rank: the root (embeddings, final LN) then one per block, as
    many blocks as the composition puts on that rank (`first_rank_layers`: the pipeline's cost-balanced
    split). Each parameter as one TP rank holds it (`tp_local`). `part`: all of them, only the experts'
    (`is_expert`) or all but the experts' ("dense")."""
    layers = first_rank_layers(model.n_layer, pp, v, model.d_model, model.vocab, model.seq)
    root, kinds = _unit_parts(model, tp, part, pp == 1)
    return (root,) + tuple(kinds[model.is_moe(i)] for i in range(layers))


def rank_units(model: ModelSpec, tp: int, dense: int, moe: int, embed: bool = True, head: bool = False,
               mtp: int = 0) -> tuple[tuple[int, ...], ...]:
    """The parameters of a pipeline rank under Megatron-Core's pipeline layout (`Layout.pp_layout`), as FSDP-style
    units: the rank's ends first (the embedding where it holds it, the final norm and output layer where it holds
    the loss, its multi-token-prediction depths), then one unit per block, `dense` dense and `moe` MoE ones."""
    _root, kinds = _unit_parts(model, tp, "all", False)
    ends = _top_parts(model, tp)
    root = (ends["embed"] if embed else ()) + (ends["head"] if head else ()) + sum(ends["mtp"][:mtp], ())
    return (root,) + (kinds[False],) * dense + (kinds[True],) * moe


@functools.lru_cache(maxsize=64)
def _top_parts(model: ModelSpec, tp: int) -> dict:
    """The top-level parameters as one TP rank holds them, by the pipeline stage that holds them: "embed" (the
    embeddings: the first stage), "head" (the final norm and the output layer: the loss's stage), "mtp" (one tuple
    per multi-token-prediction depth: the stages the layout's m sits on)."""
    anat = anatomy.by_arch(model.arch)
    first = {anat.weight(m) for m in (anat.embedding, anat.positions) if m}
    kv_whole = model.llama and model.n_kv_heads < tp
    embed, head, mtp = [], [], [[] for _ in range(model.mtp_layers)]
    for name, n in model.param_shapes(frozenset()):
        if name.startswith(anat.blocks + "."):
            continue
        n = tp_local(name, n, tp, kv_whole=kv_whole)
        if name in first:
            embed.append(n)
        elif name.startswith("mtp."):
            mtp[int(name.split(".", 2)[1])].append(n)
        else:
            head.append(n)
    return {"embed": tuple(embed), "head": tuple(head), "mtp": tuple(tuple(d) for d in mtp)}


@functools.lru_cache(maxsize=256)
def _unit_parts(model: ModelSpec, tp: int, part: str, whole_root: bool) -> tuple[tuple[int, ...], dict]:
    """(the root unit, {False: a dense block's unit, True: an MoE block's}) as one TP rank holds them. Every block
    of a kind holds the same parameters, so one of each is read: DeepSeek-V3 has 46,000 parameters, and a search
    asks for thousands of layouts' units. `whole_root`: no pipeline, the root holds every top-level parameter (with
    one, the embeddings only: the final norm is on the last stage)."""
    anat = anatomy.by_arch(model.arch)
    first_stage = {anat.weight(m) for m in (anat.embedding, anat.positions) if m}
    kind_of = {}
    for i in range(model.n_layer):
        kind_of.setdefault(model.is_moe(i), i)
        if len(kind_of) == 2 or not model.moe_experts:
            break
    read = {f"{anat.blocks}.{i}.": kind for kind, i in kind_of.items()}  # the blocks read, one of each kind
    in_blocks = anat.blocks + "."
    kv_whole = model.llama and model.n_kv_heads < tp
    root: list[int] = []
    kinds: dict = {kind: [] for kind in kind_of}
    # only the blocks read are listed: a model of 10^7 blocks (a typo the launcher's memory check meets) is as
    # quick as one of 10
    for name, n in model.param_shapes(frozenset(kind_of.values())):
        kind = None
        if name.startswith(in_blocks):
            kind = next((k for prefix, k in read.items() if name.startswith(prefix)), None)
            if kind is None:
                continue
        elif not (whole_root or name in first_stage):
            continue
        if part != "all" and is_expert(name) != (part == "experts"):
            continue
        n = tp_local(name, n, tp, kv_whole=kv_whole)
        (root if kind is None else kinds[kind]).append(n)
    return tuple(root), {kind: tuple(u) for kind, u in kinds.items()}


def tp_replicated_params(model: ModelSpec, pp: int = 1) -> list[int]:
    """The parameters TP leaves whole on the first stage (LayerNorms, row biases, positions), as `Param`s:
    with sequence parallelism their gradients are partial per rank and summed over tp after backward."""
    return list(_tp_replicated(model, pp))


@functools.lru_cache(maxsize=256)  # (a search asks it for every layout of one model)
def _tp_replicated(model: ModelSpec, pp: int) -> tuple:
    layers = stage_layers(model.n_layer, pp)
    anat = anatomy.by_arch(model.arch)
    out = [n for name, n in model.param_shapes() if any(k in name for k in TP_REPLICATED)
            and (_block_index(anat, name) is None or _block_index(anat, name) < layers)
            and (pp == 1 or not name.startswith(anat.final_norm + "."))]
    return tuple(out)


def _block_index(anat, name: str) -> int | None:
    """The block a parameter name belongs to (blocks.i.*), None for a top-level one."""
    if not name.startswith(anat.blocks + "."):
        return None
    return int(name.split(".", 2)[1])


@functools.lru_cache(maxsize=1024)
def padded_units(model: ModelSpec, tp: int, pp: int, v: int, n: int, padding: str,
                 part: str = "all") -> tuple[int, tuple[int, ...]]:
    """`padded` of all of `units(model, tp, pp, v, part)` together, and of each unit: the same few layouts come
    back for every layout a search evaluates, and an 80-layer model has ~700 parameters to pad each time."""
    us = units(model, tp, pp, v, part)
    return padded([x for u in us for x in u], n, padding), tuple(padded(list(u), n, padding) for u in us)


def local_params(model: ModelSpec, tp: int = 1, pp: int = 1, v: int = 1) -> int:
    return sum(sum(u) for u in units(model, tp, pp, v))
