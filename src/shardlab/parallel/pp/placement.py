"""Where the pipeline runs what: the stage of every module of the whole model, the rank of every stage.

The doctor asks it (it knows no layout): a non-finite value replayed on the whole model is named by its
module, and the placement says which pipeline stage runs that module and which rank holds the stage; a
fault planted on one rank's stage is part of every rank's replay of the same pipeline; the replay needs
the whole model's parameters, gathered from the pipeline's ranks.
"""
from __future__ import annotations

from shardlab import comm
from shardlab.parallel.pp.stage import runs_on


class StagePlacement:
    def __init__(self, sched, ranges: list[range], dims, names: list[str], anat):
        """`sched`: the schedule (its stage -> pipeline coordinate map); `ranges`: every stage's blocks;
        `dims`: the mesh (global ranks); `names`: the whole model's module names; `anat`: its anatomy."""
        self.sched, self.ranges, self.dims, self.anat = sched, ranges, dims, anat
        self.names = set(names)
        self.group = dims.group("pp")

    def stage_of(self, module: str) -> int | None:
        """The stage that runs `module` (the first one, for the tied embedding both ends hold); None when
        the whole model has no such module."""
        if module not in self.names:
            return None
        return runs_on(module, self.ranges, self.anat)

    def rank_of(self, stage: int, rank: int) -> int:
        """The global rank holding `stage` in the pipeline `rank` belongs to."""
        return self.dims.rank_of({**self.dims.coords(rank), "pp": self.sched.rank_of(stage)})

    def locate(self, module: str, rank: int) -> dict | None:
        """{"stage", "stage_rank"} of `module` (or of the module holding parameter `module`) in `rank`'s
        pipeline, or None when the whole model has no such module."""
        while module not in self.names and "." in module:
            module = module.rsplit(".", 1)[0]
        stage = self.stage_of(module)
        return None if stage is None else {"stage": stage, "stage_rank": self.rank_of(stage, rank)}

    def ranks(self, rank: int) -> list[int]:
        """The global ranks of `rank`'s pipeline."""
        return sorted({self.rank_of(s, rank) for s in range(self.sched.n_stages)})

    def whole_parameters(self, mine: dict) -> dict:
        """The whole model's parameters from every stage's (`mine`: this rank's part, in full). A
        collective over the pipeline group: every rank of it calls it."""
        out: dict = {}
        for part in comm.all_gather_object({k: v.detach().cpu() for k, v in mine.items()}, group=self.group):
            out.update(part)
        return out
