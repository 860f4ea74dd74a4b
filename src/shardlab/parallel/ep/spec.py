"""Expert parallelism's declaration (parallel/spec.py): the experts split over data-parallel ranks.

It borrows its ranks from the data-parallel ones (parallel.ep is not a factor of the world) and hides the
experts from the data-parallel layer, which must then be a replicating one. Pure data: no torch import.
"""
from __future__ import annotations

from shardlab.parallel.spec import Impl, Key, Spec

_IMPLS = (Impl("own", "shardlab.parallel.ep.layer:apply_expert_parallel"),)  # this rank's experts, by all-to-all

SPEC = Spec(
    "ep", "expert parallelism", _IMPLS, dim="ep",
    keys=(
        Key("parallel.ep",
            'expert parallelism: the experts split over this many data-parallel ranks, tokens sent to their '
            "expert's rank by all-to-all (docs/moe.md); must divide model.moe_experts and the data-parallel "
            'size; with ddp or torch-ddp',
            'int >= 1'),
    ),
    checks=("shardlab.parallel.ep.checks:validate_moe",),
    cost={"bytes": "shardlab.plan.moe:expected", "memory": "shardlab.plan.moe:expert_state_bytes",
          "flops": "shardlab.plan.moe:flops_per_token"},
    composes_with={"dp": ("ddp", "torch-ddp")},
    inference=None,  # generation does not split a batch's sequence or tokens' experts across ranks
)
