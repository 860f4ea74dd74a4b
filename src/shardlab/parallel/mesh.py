"""The named device mesh: `pp`, `dp_replicate`, `dp_shard`, `cp`, `tp` (outermost to innermost).

Rank r sits at one coordinate per dimension, row-major in that order: `tp` varies fastest, so the ranks
of a tensor-parallel group are neighbours (one node, the fastest links), and `pp` slowest. Every layer
takes its process group from here by name; nothing assumes that the world is the data-parallel group:

    dims.group("tp")      the ranks that differ only in their tp coordinate (None when tp == 1)
    dims.group("dp")      dp_replicate x dp_shard flattened: the ranks that see different data
    dims.group("dp_cp")   dp x cp: the ranks over which the loss's token count is summed
    dims.group("ep")      expert parallelism (`parallel.ep`): ep consecutive data-parallel ranks that split
                          the experts; it borrows its ranks from dp (not a factor of the world)
    dims.group("edp")     the data-parallel ranks holding the same experts (dp / ep of them)
    dims.dp_rank, dims.dp_size, dims.coord("pp")

A dimension of size one has no group (`group` returns None and callers skip the collective): None never
stands for "the world". A dimension that spans the whole world returns the world group, explicitly.
The arithmetic (`coords`, `ranks`) is pure, so layouts can be checked without processes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from shardlab.degrees import DIM_NAMES, Degrees
from shardlab.errors import ConfigError
from shardlab.parallel import layers
# Flattened groups: name -> the dimensions they span.
FLATTENED = {"dp": ("dp_replicate", "dp_shard"), "dp_cp": ("dp_replicate", "dp_shard", "cp")}
# Expert parallelism splits the flattened dp dimension (as DeepSpeed and torchtitan borrow it): dp rank i
# sits at ep coordinate i % ep and edp coordinate i // ep.
EP_GROUPS = ("ep", "edp")


@dataclass
class ParallelDims(Degrees):
    """The layout (shardlab/degrees.py) as one rank of a training run sees it: its coordinates and groups."""
    rank: int = 0
    mesh: object = field(default=None, repr=False)
    _groups: dict = field(default_factory=dict, repr=False)
    _flat: dict = field(default_factory=dict, repr=False)  # dimensions spanned -> flattened DeviceMesh

    # --- sizes and coordinates (pure arithmetic) -------------------------------------------------------
    @property
    def world_size(self) -> int:
        return math.prod(getattr(self, n) for n in DIM_NAMES)

    def dims_of(self, name: str) -> tuple[str, ...]:
        if name in FLATTENED:
            return FLATTENED[name]
        if name not in DIM_NAMES:
            raise KeyError(f"unknown mesh dimension {name!r}; known: {', '.join(DIM_NAMES + tuple(FLATTENED))}")
        return (name,)

    def size(self, name: str) -> int:
        if name in EP_GROUPS:
            return self.ep if name == "ep" else self.dp_size // self.ep
        return math.prod(getattr(self, d) for d in self.dims_of(name))

    def coords(self, rank: int | None = None) -> dict[str, int]:
        """This rank's (or `rank`'s) coordinate along every dimension."""
        r = self.rank if rank is None else rank
        out = {}
        for name in reversed(DIM_NAMES):  # innermost first: tp varies fastest
            size = getattr(self, name)
            out[name] = r % size
            r //= size
        return {n: out[n] for n in DIM_NAMES}

    def coord(self, name: str, rank: int | None = None) -> int:
        """Coordinate along one dimension or a flattened one (row-major over its dimensions)."""
        if name in EP_GROUPS:
            dp = self.coord("dp", rank)
            return dp % self.ep if name == "ep" else dp // self.ep
        c = self.coords(rank)
        idx = 0
        for d in self.dims_of(name):
            idx = idx * getattr(self, d) + c[d]
        return idx

    def rank_of(self, coords: dict[str, int]) -> int:
        r = 0
        for name in DIM_NAMES:
            r = r * getattr(self, name) + coords.get(name, 0)
        return r

    def ranks(self, name: str, rank: int | None = None) -> list[int]:
        """The global ranks of `rank`'s group along `name`, in group-rank order."""
        if name in EP_GROUPS:
            dp, i = self.ranks("dp", rank), self.coord("dp", rank)
            start = i - i % self.ep
            return dp[start:start + self.ep] if name == "ep" else dp[i % self.ep::self.ep]
        base = self.coords(rank)
        spans = self.dims_of(name)
        out = []
        for i in range(self.size(name)):
            c, rest = dict(base), i
            for d in reversed(spans):
                c[d], rest = rest % getattr(self, d), rest // getattr(self, d)
            out.append(self.rank_of(c))
        return out

    @property
    def dp_size(self) -> int:
        return self.size("dp")

    @property
    def dp_rank(self) -> int:
        return self.coord("dp")

    @property
    def degrees(self) -> dict[str, int]:
        return {n: getattr(self, n) for n in DIM_NAMES}

    # --- the DeviceMesh and its groups -----------------------------------------------------------------
    def build_mesh(self, device_type: str):
        """Create the DeviceMesh over the dimensions larger than one (as torchtitan does), plus the
        flattened groups; a no-op without a process group or with one rank."""
        from shardlab import comm

        if comm.is_initialized():
            self.rank = comm.rank()
        names = [n for n in DIM_NAMES if getattr(self, n) > 1]
        if self.mesh is not None or not names or not comm.is_initialized():
            return self.mesh
        from torch.distributed.device_mesh import init_device_mesh

        self.mesh = init_device_mesh(device_type, tuple(getattr(self, n) for n in names),
                                     mesh_dim_names=tuple(names))
        for flat, spans in FLATTENED.items():
            present = tuple(d for d in spans if getattr(self, d) > 1)
            if len(present) > 1 and present not in self._flat:  # dp_cp with cp == 1 is dp: one group
                self._flat[present] = self.mesh[present]._flatten(flat)
        self._build_ep_groups()
        return self.mesh

    def _build_ep_groups(self) -> None:
        """ep and edp split the dp dimension, which a DeviceMesh cannot reshape: plain process groups,
        each created by every rank in the same order (torch's rule for new_group)."""
        from shardlab import comm

        for name in EP_GROUPS:
            if self.size(name) in (1, self.world_size):
                continue  # none, or the world group (`group` says so)
            for members in sorted({tuple(self.ranks(name, r)) for r in range(self.world_size)}):
                pg = comm.new_group(list(members), name=name)
                if self.rank in members:
                    self._groups[name] = pg

    def submesh(self, name: str):
        """The DeviceMesh of one (or one flattened) dimension; None when it has size one."""
        if self.mesh is None or self.size(name) == 1:
            return None
        present = tuple(d for d in self.dims_of(name) if getattr(self, d) > 1)
        return self.mesh[present[0]] if len(present) == 1 else self._flat[present]

    def group(self, name: str):
        """The process group of one dimension (or flattened one); None when its size is one."""
        if self.size(name) == 1:
            return None
        if name not in self._groups:
            if self.size(name) == self.world_size:
                import torch.distributed as dist
                self._groups[name] = dist.group.WORLD  # spans the world: say so, never rely on None
            else:
                if self.mesh is None:
                    raise RuntimeError(f"mesh dimension {name!r} has size {self.size(name)} but the mesh is not "
                                       "built; call build_mesh() after the process group is initialised")
                self._groups[name] = self.submesh(name).get_group()
        return self._groups[name]


def resolve(pcfg, world_size: int) -> ParallelDims:
    """The degrees of a `[parallel]` section at `world_size`, or a one-line ConfigError.

    `dp_replicate`/`dp_shard` = 0 let the data-parallel layer choose: a replicating layer fills
    `dp_replicate`, a sharding one `dp_shard` (so `parallel.strategy=NAME` alone fills the world with
    that layer, as before). -1 fills the world explicitly; at most one degree may be -1."""
    name = layers.dp_name(pcfg)
    if name not in layers.DATA_PARALLEL:
        raise ConfigError(f"parallel.dp={name!r}: must be one of {', '.join(layers.DATA_PARALLEL)}")
    replicating = name in layers.REPLICATING
    deg = {n: getattr(pcfg, n) for n in DIM_NAMES}
    for n, v in deg.items():
        if v < -1 or (v == 0 and n not in ("dp_replicate", "dp_shard")):
            raise ConfigError(f"parallel.{n}={v}: must be a positive degree or -1 (fill the world)")
    auto_fill = "dp_replicate" if replicating else "dp_shard"
    for n in ("dp_replicate", "dp_shard"):
        if deg[n] == 0:
            deg[n] = -1 if n == auto_fill and -1 not in deg.values() else 1
    fill = [n for n, v in deg.items() if v == -1]
    if len(fill) > 1:
        raise ConfigError(f"parallel.{fill[0]} and parallel.{fill[1]} are both -1: at most one degree may fill "
                          "the world")
    fixed = math.prod(v for v in deg.values() if v != -1)
    shown = " x ".join(f"{n}={v}" for n, v in deg.items() if v != 1 and v != -1) or "1"
    if fill:
        if world_size % fixed:
            raise ConfigError(f"world size {world_size} is not divisible by {shown} = {fixed}; "
                              f"change --nproc or the parallel.* degrees")
        deg[fill[0]] = world_size // fixed
    elif fixed != world_size:
        raise ConfigError(f"the parallel degrees multiply to {shown} = {fixed}, but the world size is "
                          f"{world_size}; their product must equal the world (or set one of them to -1)")
    if replicating and deg["dp_shard"] > 1:
        raise ConfigError(f"parallel.dp={name} keeps a full replica per rank: parallel.dp_shard must be 1 "
                          f"(got {deg['dp_shard']}); use a sharding layer (zero1/2/3, torch-fsdp2, torch-zero1)")
    if not replicating and deg["dp_replicate"] > 1 and deg["dp_shard"] == 1:
        raise ConfigError(f"parallel.dp={name} with parallel.dp_replicate={deg['dp_replicate']} leaves dp_shard=1: it "
                          f"would shard nothing; use ddp, or a dp_replicate that leaves dp_shard > 1")
    if not replicating and deg["dp_replicate"] > 1 and name not in layers.HSDP:
        raise ConfigError(f"parallel.dp={name} with parallel.dp_replicate={deg['dp_replicate']} (HSDP: shards "
                          f"replicated across groups) is not implemented yet; set parallel.dp_replicate=1")
    dims = ParallelDims(**deg)
    dims.ep = getattr(pcfg, "ep", 1)
    if dims.ep > 1 and dims.dp_size % dims.ep:
        raise ConfigError(f"parallel.ep={dims.ep} must divide the data-parallel size {dims.dp_size} (expert "
                          "parallelism borrows its ranks from the data-parallel ranks)")
    return dims


@dataclass(frozen=True)
class Run:
    """A run's layout, resolved once from its config: the degrees (`dims`) and the batch they imply. Config
    validation, the composition, the dry run and the planner all take it from `resolve_run`."""
    dims: ParallelDims
    world: int  # processes one layout spans (1 under parallel.sync=async: every rank holds the whole model)
    grad_accum: int  # microbatches per step on each rank (the pipeline's, with parallel.pp_microbatches)
    global_batch: int  # sequences per optimizer step over all data-parallel ranks


def resolve_run(cfg, world_size: int) -> Run:
    """The layout of the run `cfg` describes at `world_size` processes, or a one-line ConfigError: the degrees
    (`resolve`), a dimension no layer builds yet, the microbatches and the global batch. `cfg` is read, not
    changed; it is idempotent on a config it resolved (`config.validate` writes its values into a copy)."""
    p, t = cfg.parallel, cfg.train
    world = 1 if p.sync == "async" else world_size  # the parameter server and each worker: one process's layout
    dims = resolve(p, world)
    missing = layers.not_built(dims.degrees)
    if missing:
        raise ConfigError(missing)
    accum = t.grad_accum
    if dims.pp > 1 and p.pp_microbatches:
        if accum not in (1, p.pp_microbatches):
            raise ConfigError(f"parallel.pp_microbatches={p.pp_microbatches} contradicts train.grad_accum="
                              f"{accum}: a step's microbatches are the pipeline's; set only one of them")
        accum = p.pp_microbatches
    accum, global_batch = _batch(t.micro_batch, accum, t.global_batch, dims, world)
    return Run(dims, world, accum, global_batch)


def _batch(micro_batch: int, accum: int, global_batch: int, dims: ParallelDims, world: int) -> tuple[int, int]:
    """(grad_accum, global_batch), each derived from the other and the layout's data-parallel size."""
    per_step = micro_batch * dims.dp_size  # ranks of one tp/pp/cp group share their batch
    if not global_batch:
        return accum, per_step * accum
    if per_step < 1 or global_batch % per_step:
        what = "world size" if dims.dp_size == world else "data-parallel size"
        raise ConfigError(f"train.global_batch={global_batch} is not divisible by {what} x micro batch "
                          f"= {dims.dp_size} x {micro_batch} = {per_step}: this layout cannot train that batch; "
                          f"pick a --nproc or train.micro_batch that divides it, or another train.global_batch")
    implied = global_batch // per_step
    if accum not in (1, implied):
        raise ConfigError(f"train.grad_accum={accum} contradicts train.global_batch={global_batch} "
                          f"(which implies grad_accum={implied}); set only one of them")
    return implied, global_batch
