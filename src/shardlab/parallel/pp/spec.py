"""Pipeline parallelism's declaration (parallel/spec.py): one implementation per schedule of the registry.

Every schedule splits the model the same way (parallel/pp/pipeline.py `split`); the schedule itself is a
row of parallel/pp/registry.py, run by the own engine or by torch. Pure data: no torch import.
"""
from __future__ import annotations

from shardlab.parallel.pp import registry
from shardlab.parallel.spec import Impl, Key, Spec, load

_IMPLS = tuple(Impl(name, "shardlab.parallel.pp.pipeline:split") for name in registry.NAMES)


def check(cfg, dims) -> None:
    """Before launch: the schedule exists for this many microbatches and the stages fit the model's blocks
    (parallel/pp/pipeline.py `validate`, which loads torch: only when there are stages)."""
    if dims.pp == 1:
        return
    from shardlab.model.configs import resolve_model_config

    # by name, as the composition loads every entry: the split's module sits above the mesh this list feeds
    validate = load("shardlab.parallel.pp.pipeline:validate")
    validate(cfg, dims, resolve_model_config(cfg.model, cfg.train.seq_len).n_layer)


SPEC = Spec(
    "pp", "pipeline parallelism", _IMPLS, choose="parallel.pp_schedule", dim="pp",
    keys=(
        Key("parallel.pp",
            'mesh degree: pipeline stages (times parallel.pp_virtual); -1 = fill the world',
            '-1 | int >= 1'),
        Key("parallel.pp_schedule",
            "pipeline schedule (docs/pipeline.md): own "
            + "/".join(n + (f" ({registry.SPECS[n].note})" if registry.SPECS[n].note else "") for n in registry.OWN)
            + ", or torch.distributed.pipelining's; file:PATH: a table of actions per rank",
            " | ".join(registry.FILE + "PATH" if registry.spec(n).runner == "file" else n for n in registry.NAMES)),
        Key("parallel.pp_microbatches",
            'microbatches per step through the pipeline; 0 = train.grad_accum (they are the same '
            'microbatches)',
            '0 | int >= 1'),
        Key("parallel.pp_virtual",
            "stages per pipeline rank (interleaved schedules; "
            + " and ".join(n for n, s in registry.SPECS.items() if s.virtual == (2, None)) + " need >= 2, "
            + " and ".join(n for n, s in registry.SPECS.items() if s.virtual == (2, 2)) + " exactly 2)",
            'int >= 1'),
        Key("parallel.pp_split",
            'first block of pipeline stages 1, 2, ... (e.g. 3,7); "" = balanced by FLOP cost; auto = balanced '
            'by measured per-layer forward+backward times',
            '"" | auto | increasing block indices'),
    ),
    checks=("shardlab.parallel.pp.spec:check",), checks_last=True,
    inference="shardlab.parallel.pp.stage:split_for_inference",  # this rank's stage, no schedule
    cost={"bytes": "shardlab.plan.comm:tp_pp_collectives", "memory": "shardlab.plan.memory:in_flight",
          "bubble": "shardlab.parallel.pp.schedule:analytic_bubble"},
)
