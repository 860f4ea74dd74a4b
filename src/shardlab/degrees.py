"""The one layout type: how many ranks along each dimension of parallelism.

`Degrees` is what every part of shardlab means by a layout: the training mesh (`parallel.mesh.ParallelDims`
adds this rank's coordinate and the process groups), the planner's candidate (`plan.layout.Layout` adds how
the layers do their work: the dp layer, schedule, recompute, buckets, and builds its degrees from here) and
the generator's (`generate.engine.Layout`: replicas, TP and PP stages, no optimizer). The dimensions, in the
mesh's order, outermost first:

    pp             pipeline stages
    dp_replicate   data-parallel replicas (HSDP's outer dimension; plain DDP's only one)
    dp_shard       ranks a sharded dp layer (ZeRO, FSDP) splits its state over
    cp             context parallelism: each sequence split over cp ranks
    tp             tensor parallelism (innermost: neighbours on the fastest links)
    ep             expert parallelism: borrows ep of the dp ranks (not a factor of the world)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

DIM_NAMES = ("pp", "dp_replicate", "dp_shard", "cp", "tp")  # outermost to innermost, as torchtitan orders them


@dataclass
class Degrees:
    dp_replicate: int = 1
    dp_shard: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1  # divides dp_replicate x dp_shard; not a factor of the world size

    @property
    def dp(self) -> int:
        """The ranks that see different data (replicate x shard)."""
        return self.dp_replicate * self.dp_shard

    @property
    def world(self) -> int:
        return math.prod(getattr(self, n) for n in DIM_NAMES)

    def describe(self) -> str:
        """`dp 2 x tp 2`, `dp 4 (2 x 2 shard)`, `single`: the dimensions larger than one."""
        dp = "" if self.dp == 1 else f"dp {self.dp}" + (
            f" ({self.dp_replicate} x {self.dp_shard} shard)" if self.dp_replicate > 1 and self.dp_shard > 1 else "")
        parts = [dp] + [f"{n} {getattr(self, n)}" for n in ("cp", "tp", "pp", "ep") if getattr(self, n) > 1]
        return " x ".join(p for p in parts if p) or "single"
