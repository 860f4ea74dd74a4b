"""The named device mesh: `dp_replicate`, `dp_shard`, `tp`, `pp`.

Only data parallelism is implemented today, but every strategy takes its process group from a named
mesh dimension, so tensor/pipeline parallelism and HSDP (replicate x shard) plug in here later
without touching the strategies' callers.
"""
from __future__ import annotations

from dataclasses import dataclass

from shardlab import comm

DIM_NAMES = ("pp", "dp_replicate", "dp_shard", "tp")  # outermost to innermost, as torchtitan orders them


@dataclass
class ParallelDims:
    dp_replicate: int
    dp_shard: int
    tp: int = 1
    pp: int = 1

    def __post_init__(self):
        self.mesh = None

    @property
    def world_size(self) -> int:
        return self.dp_replicate * self.dp_shard * self.tp * self.pp

    @property
    def dp_size(self) -> int:
        return self.dp_replicate * self.dp_shard

    def build_mesh(self, device_type: str):
        """Create the DeviceMesh over the dimensions larger than one (like torchtitan)."""
        from torch.distributed.device_mesh import init_device_mesh

        names = [n for n in DIM_NAMES if getattr(self, n) > 1]
        if names and comm.is_initialized():
            self.mesh = init_device_mesh(device_type, tuple(getattr(self, n) for n in names),
                                         mesh_dim_names=tuple(names))
        return self.mesh

    def group(self, name: str):
        """The process group of one mesh dimension; None (world) for the data-parallel group when the
        mesh is one-dimensional, so collectives use the default group."""
        if self.mesh is None or getattr(self, name) == 1:
            return None
        if self.mesh.ndim == 1:
            return None  # the only dimension spans the world: use the default group
        return self.mesh.get_group(name)


def dims_for(strategy: str, world_size: int, dp_replicate: int = 0) -> ParallelDims:
    """Replicating strategies put every rank on `dp_replicate`; sharding ones on `dp_shard`."""
    if strategy in ("single", "ddp", "torch-ddp"):
        return ParallelDims(dp_replicate=world_size, dp_shard=1)
    if dp_replicate and dp_replicate != 1:
        return ParallelDims(dp_replicate=dp_replicate, dp_shard=world_size // dp_replicate)  # HSDP, later
    return ParallelDims(dp_replicate=1, dp_shard=world_size)
