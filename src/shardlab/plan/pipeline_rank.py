"""What one pipeline rank holds, for the memory lines (plan/memory.py): its blocks (the planner's split, Megatron-
DeepSpeed's ends-as-blocks cut, or Megatron-Core's pipeline layout rank by rank), the MoE blocks among them, its
ends (embedding, final norm and output layer, MTP depths) as parameter lists, and the micro batches whose
activations it holds at its position in the schedule."""
from __future__ import annotations

from dataclasses import dataclass

from shardlab.parallel.pp import registry

from .geometry import rank_units, units
from .layout import Layout, ends_as_blocks, pp_layout_moe_blocks, pp_layout_ranks
from .model import ModelSpec

# the memory lines' note naming the pipeline rank they are for under a layout (memory_lines; the report heads with it)
PEAK_RANK = "pipeline rank"


@dataclass(frozen=True)
class RankLayout(Layout):
    """A layout as one pipeline rank holds it: under a pipeline layout (`pp_layout`) every rank's blocks, ends and
    micro batches in flight differ, so `memory_lines` counts each rank's and shows the largest."""
    pp_rank: int = 0


def layout_rank(lay: Layout) -> tuple[int, int, int, int] | None:
    """(blocks, embedding, mtp depths, loss) of the rank the lines are for under a pipeline layout, else None."""
    if lay.pp > 1 and lay.pp_layout:
        return pp_layout_ranks(lay.pp_layout, lay.pp)[getattr(lay, "pp_rank", 0)]
    return None


def split_blocks(model: ModelSpec, lay: Layout) -> int | None:
    """Blocks on the pipeline rank the memory lines are for, where a split other than the planner's own places
    them: under `pp_split=ends-as-blocks` the first rank's (Megatron-DeepSpeed's 'type:transformer|embedding':
    DeepSpeed's PipelineModule `_partition_layers` weighs each transformer layer and each embedding 1, so the first
    stage holds the embedding and one block fewer than a middle stage; BLOOM's 82 layers on 12 stages: 6), under a
    pipeline layout (`pp_layout`) the rank's own (its virtual stages r, r + pp, ...); None for the planner's
    cost-balanced cut (`first_rank_layers`). Without a layout memory is the first rank's (the embedding, the most
    micro batches in flight), so its blocks are that split's."""
    if (own := layout_rank(lay)) is not None:
        return own[0]
    if lay.pp > 1 and lay.pp_split == "ends-as-blocks":
        return ends_as_blocks(model.n_layer, lay.pp, lay.v)[0][0]
    return None


def rank_moe_blocks(model: ModelSpec, lay: Layout) -> int | None:
    """The MoE blocks among the rank's own under a pipeline layout (DeepSeek-V3's leading dense blocks sit on
    the first stage), None where a rank's blocks are taken in order from the first (`units`)."""
    if layout_rank(lay) is not None and model.moe_experts:
        return pp_layout_moe_blocks(lay.pp_layout, lay.pp, model.is_moe)[getattr(lay, "pp_rank", 0)]
    return None


def rank_note(lay: Layout, blocks: int, short: bool = False) -> str:
    """--explain's words for whose blocks a line counts, where a split other than the planner's own places them."""
    if (own := layout_rank(lay)) is None:
        return " (the first rank of pp_split=ends-as-blocks" + ("" if short else f": the embedding + {blocks} blocks") + ")"
    _b, embed, mtp, loss = own
    ends = [w for w, on in (("the embedding", embed), (f"{mtp} MTP depth{'s' if mtp > 1 else ''}", mtp),
                            ("the final norm and output layer", loss)) if on]
    return (f" (pipeline rank {getattr(lay, 'pp_rank', 0)} of pp_layout {lay.pp_layout}"
            + ("" if short else f": {blocks} blocks" + "".join(", " + x for x in ends)) + ")")


def first_rank_numels(model: ModelSpec, lay: Layout) -> list[int]:
    """Each parameter's elements as the rank the lines are for holds it (TP-local; the split's blocks; under a
    pipeline layout the rank's own dense and MoE blocks and ends: embedding, final norm and output, MTP depths)."""
    if (own := layout_rank(lay)) is not None:
        blocks, embed, mtp, loss = own
        moe = rank_moe_blocks(model, lay) or 0
        return [x for u in rank_units(model, lay.tp, blocks - moe, moe, bool(embed), bool(loss), mtp) for x in u]
    us = units(model, lay.tp, lay.pp, lay.v)
    blocks = split_blocks(model, lay)
    return [x for u in (us if blocks is None else us[:1 + blocks]) for x in u]


def in_flight(lay: Layout, m: int) -> float:
    """Micro batches whose activations the first pipeline stage holds at peak, in units of one
    micro batch through L/p layers. GPipe: all m. 1F1B: min(m, p). Interleaved (Narayanan et al.
    2021; Korthikanti et al. 2022 Sec. 4.2.3): p * (1 + (p-1)/(p*v))."""
    if lay.pp == 1:
        return 1.0
    first = registry.in_flight(lay.schedule, lay.pp, m, lay.v)  # the schedule's row says which
    r, p, v = getattr(lay, "pp_rank", 0), lay.pp, lay.v
    if not r:
        return first
    f = registry.spec(lay.schedule).in_flight
    if f == "min(m,p)" and v == 1:  # 1F1B: rank r warms up p - r - 1 micro batches, then holds one more
        return float(min(m, p - r))
    if f == "p(1+(p-1)/(pv))" and v > 1:  # Megatron-Core's interleaved warm-up on rank r (schedules.py
        # get_num_warmup_microbatches: (p - r - 1) x 2 + (v - 1) x p chunks), one more in steady state, in units
        # of the rank's v chunks; rank 0 gives the first stage's p(1 + (p-1)/(pv))
        return min(m * v, (p - r - 1) * 2 + (v - 1) * p + 1) / v
    return first  # the V schedules and GPipe: the first stage's count for every rank
