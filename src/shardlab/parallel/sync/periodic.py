"""Synchronising replicas less often than every step: local SGD and DiLoCo (`parallel.sync`, docs/sync.md).

Put in front of a replicating data-parallel layer (`single`, `ddp`), or of an HSDP zero layer (below), by
the composition. Between two synchronisations each replica steps alone on its own share of the batch: the
layer is told never to synchronise gradients across replicas, so the inner optimizer sees this replica's
gradient only. Every H
(`parallel.sync_every`) inner steps, across the data-parallel group:

- **local SGD** (Stich 2019; Lin et al. 2020, "post-local SGD"): the parameters are averaged.
- **DiLoCo** (Douillard et al. 2023): the pseudo-gradient Δ = θ_start − θ_end is averaged (optionally in
  bf16/fp16, `parallel.outer_dtype`) and an outer Nesterov SGD (`parallel.outer_lr`,
  `parallel.outer_momentum`) steps θ_start with it; every replica starts the next period there.
  With outer lr 1 and no momentum, θ_start − mean(Δ) = mean(θ_end): DiLoCo is then local SGD.

One all-reduce of the whole model per H steps instead of one of the gradients per step: 1/H of the bytes.
The inner optimizer's state stays per replica (as in DiLoCo), so with AdamW even H = 1 is not ddp (Adam
of an average is not the average of Adams); with SGD it is.

**Streaming fragments** (`parallel.fragments=F`, Douillard et al. 2025, "Streaming DiLoCo"): the parameters,
in model order, are cut into F contiguous groups of whole blocks (the embedding and the head count as blocks
of their own), balanced by size; fragment f is synchronised after the inner steps s with (s − o_f) % H == 0,
o_f = ⌊f·H/F⌋, each with its own θ_start slice and outer momentum. The bytes per H steps are unchanged, but
each burst is one fragment (≈ 1/F of the model) instead of the whole of it. F = 1 is plain DiLoCo.

**HSDP layout** (zero1/2/3 with `parallel.dp_replicate` R > 1): a replica is a group of ranks sharding one
model copy. Inside it the per-step gradient reduce-scatter runs as usual (averaged over the shard group);
the per-step all-reduce across replicas goes (`replicas_step_alone`), and the periodic synchronisation runs
over the `dp_replicate` group on what each rank's optimizer steps: its shards.

Between synchronisations the replicas differ by design: `synced_fragments` tells the doctor what it can
compare (the fragments whose outer step just ran), and
`sync_state_dict` gives checkpoints what exact resume mid-period needs: the step within the period,
DiLoCo's θ_start and outer momentum (the same on every replica), and each replica's own parameters and
inner optimizer state (keyed by replica, like the RNG streams).
"""
from __future__ import annotations

import re

import torch

from shardlab import comm, precision
from shardlab.doctor.replicas import ReplicaSet
from shardlab.errors import ConfigError
from shardlab.parallel.dp.view import DPView

_BLOCK = re.compile(r"^(blocks|layers)\.(\d+)\.")  # a transformer block's parameters (GPT, Llama)


def _unit(fqn: str, first_block_seen: bool) -> str:
    """The fragment unit a parameter belongs to: its block, or the embedding (before the first block) and
    the head (after the last), each a unit of its own."""
    m = _BLOCK.match(fqn)
    if m:
        return f"block{int(m.group(2)):06d}"
    return "head" if first_block_seen else "embed"


def cut_fragments(sizes: list[int], f: int) -> list[int]:
    """Boundaries [0, b_1, ..., b_{F-1}, len(sizes)] cutting units of `sizes` (in order) into F contiguous
    non-empty fragments: cut k sits at the unit boundary nearest k/F of the total, so every fragment is
    within one unit of 1/F of the model."""
    if not 1 <= f <= len(sizes):
        raise ConfigError(f"parallel.fragments={f}: the model has {len(sizes)} units (embedding, blocks, head) "
                          "to cut into fragments; use at most that many")
    cum = [0]
    for s in sizes:
        cum.append(cum[-1] + s)
    cuts = [0]
    for k in range(1, f):
        target = cum[-1] * k / f
        lo, hi = cuts[-1] + 1, len(sizes) - (f - k)  # leave at least one unit for each later fragment
        cuts.append(min(range(lo, hi + 1), key=lambda b: (abs(cum[b] - target), b)))
    return cuts + [len(sizes)]


class PeriodicSync(DPView):
    """The dp layer with its gradient all-reduce replaced by a periodic model synchronisation."""

    group = None  # the group the outer step runs over (its own, not the dp layer's): set per instance

    def __init__(self, dp, pcfg, group, optimizer):
        super().__init__(dp)
        self.__dict__.update(mode=pcfg.sync, every=int(pcfg.sync_every), group=group,
                             optimizer=optimizer, inner_step=0, wire_dtype=precision.torch_dtype(pcfg.outer_dtype))
        # HSDP: the replica is a shard group; what is synchronised is this rank's shards (what its optimizer
        # steps), and gradients stay reduced inside the replica.
        sharded = dp.shards_within_replica
        named = dp.replicas_step_alone()
        params = [p for _, p in named]
        # Fragments: contiguous units (embedding, each block, head) of the model order, cut by size.
        units, seen_block = [], False
        for i, (fqn, p) in enumerate(named):
            u = _unit(fqn, seen_block)
            seen_block = seen_block or u.startswith("block")
            if not units or units[-1][0] != u:
                units.append([u, i, 0])  # name, first param index, numel
            units[-1][2] += p.numel()
        n_frag = int(getattr(pcfg, "fragments", 1))
        cuts = cut_fragments([u[2] for u in units], n_frag)
        bounds, offset = [], 0  # (first, last) element of each fragment in the flat order
        for a, b in zip(cuts, cuts[1:]):
            numel = sum(u[2] for u in units[a:b])
            bounds.append((offset, offset + numel))
            offset += numel
        firsts = [units[a][1] for a in cuts[:-1]] + [len(named)]  # each fragment's first parameter index
        self.__dict__.update(params=params, sharded=sharded, bounds=bounds, names=[n for n, _ in named],
                             fragment_params=list(zip(firsts, firsts[1:])),
                             offsets=[f * self.every // n_frag for f in range(n_frag)],
                             fragment_units=[[u[0] for u in units[a:b]] for a, b in zip(cuts, cuts[1:])])
        self.__dict__["replica"] = comm.rank(group)
        # Checkpoint keys: under HSDP the ranks of one replica hold different shards (keyed by shard)
        self.__dict__["shard_key"] = f"shard{dp.dims.coord('dp_shard')}" if sharded else None
        if self.mode == "diloco":
            # θ_start, one flat fp32 tensor, is what the outer optimizer updates; torch's SGD does the maths,
            # one parameter per fragment (a view of θ_start): a step moves only fragments given a gradient.
            start = self._flat().float()
            views = [start[a:b] for a, b in bounds]
            momentum = float(pcfg.outer_momentum)
            outer = torch.optim.SGD(views, lr=float(pcfg.outer_lr), momentum=momentum,
                                    nesterov=momentum > 0, foreach=False)
            if momentum > 0:
                # A zero buffer is what SGD's first step would start from (buf = g with no dampening);
                # allocated now so a checkpoint has it before the first outer step.
                for v in views:
                    outer.state[v]["momentum_buffer"] = torch.zeros_like(v)
            self.__dict__.update(start=start, views=views, outer=outer)

    # --- the step ---------------------------------------------------------------------------------------
    def set_requires_gradient_sync(self, requires: bool) -> None:
        # a whole replica steps on its own gradient; a sharded one reduces inside itself as usual
        self.dp.set_requires_gradient_sync(requires if self.sharded else False)

    # --- what the doctor compares across replicas (docs/doctor.md "Replica consistency") ------------------
    @property
    def n_fragments(self) -> int:
        return len(self.bounds)

    def synced_fragments(self) -> list[int]:
        """The fragments every replica holds bitwise equal now: those whose outer step ended the last inner
        step (the all-reduced average, or θ_start after the same outer step everywhere); all of them before
        the first step. The others are mid-period and differ by design."""
        return list(range(len(self.bounds))) if self.inner_step == 0 else self.due(self.inner_step)

    def fragment_parameters(self, f: int) -> list[tuple[str, torch.Tensor]]:
        """(name, tensor) of what fragment `f` synchronises on this rank: whole parameters, or under HSDP
        this rank's shards of them (equal across the replicate group, not within a replica)."""
        a, b = self.fragment_params[f]
        return list(zip(self.names[a:b], self.params[a:b]))

    def replica_group(self) -> tuple[object, list[int]]:
        """The group the outer step runs over and its members' global ranks, in group order."""
        return self.group, list(comm.group_info(self.group)[1])

    def outer_state(self) -> list[tuple[str, torch.Tensor]]:
        """Per parameter, the state every replica must hold equal *between* outer steps: DiLoCo's θ_start
        (views into it). Local SGD keeps none: a parameter's next value is an average of the replicas'."""
        if self.mode != "diloco":
            return []
        out, offset = [], 0
        for name, p in zip(self.names, self.params):
            out.append((name, self.start[offset:offset + p.numel()]))
            offset += p.numel()
        return out

    def replica_sets(self, seen=None) -> list[ReplicaSet]:
        """The replicas of the outer step's group, equal only right after an outer step, fragment by
        fragment (instead of the dp layer's every-step set); the other layers' sets as they were."""
        def parameters(fragments=None):
            return [pair for f in (range(self.n_fragments) if fragments is None else fragments)
                    for pair in self.fragment_parameters(f)]

        diloco = self.mode == "diloco"  # its outer state θ_start is what a replica must keep equal between
        group, ranks = self.replica_group()
        mine = ReplicaSet("dp", ranks, group, parameters=parameters, fragments=self.n_fragments,
                          synced=self.synced_fragments, held=self.outer_state if diloco else None,
                          held_label="its DiLoCo outer state θ_start" if diloco else "",
                          note="one replica in this process group: nothing to compare")
        return [mine] + self.dp.replica_sets(seen or self)[1:]

    def due(self, step: int) -> list[int]:
        """The fragments synchronised after inner step `step` (1-based)."""
        return [f for f, o in enumerate(self.offsets) if step >= max(o, 1) and (step - o) % self.every == 0]

    def optimizer_step(self, optimizer) -> None:
        self.dp.optimizer_step(optimizer)
        self.__dict__["inner_step"] = self.inner_step + 1
        frags = self.due(self.inner_step)
        if frags:
            self.synchronise(frags)

    @torch.no_grad()
    def synchronise(self, fragments: list[int] | None = None) -> None:
        """The outer step of `fragments` (all by default), one all-reduce each: average their parameters
        (local SGD) or their pseudo-gradient (DiLoCo)."""
        n = comm.world_size(self.group)
        flat = self._flat()
        for f in range(len(self.bounds)) if fragments is None else fragments:
            a, b = self.bounds[f]
            if self.mode == "local_sgd":
                piece = flat[a:b]
                if n > 1:
                    comm.all_reduce(piece, group=self.group, tag="local_sgd average")
                    piece.div_(n)
                continue
            view = self.views[f]
            delta = (view - flat[a:b].float()).to(self.wire_dtype)  # Δ = θ_start − θ_end
            if n > 1:
                comm.all_reduce(delta, group=self.group, tag="diloco pseudo-gradient")
            view.grad = delta.float().div_(n)
            self.outer.step()  # only this fragment has a gradient: the others stay
            view.grad = None
            flat[a:b].copy_(view)
        self._unflatten(flat)
        self.dp.params_updated()

    def _flat(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.params])

    def _unflatten(self, flat: torch.Tensor) -> None:
        offset = 0
        for p in self.params:
            p.data.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()

    # --- checkpoint state -------------------------------------------------------------------------------
    def _keys(self) -> tuple[str | None, str]:
        """(where the shared entries live: None = top level, the own entry's key). Under HSDP the ranks of
        one replica hold different shards: both are keyed by shard."""
        own = f"replica{self.replica}"
        return (None, own) if self.shard_key is None else (self.shard_key, f"{own}_{self.shard_key}")

    def sync_state_dict(self) -> dict:
        """Tensors for DCP. Shared (equal on every replica): the step within the period, DiLoCo's θ_start
        and momentum (the fragments' slices, concatenated in flat order). Per replica (`replica<r>`: only
        that replica writes it): its parameters and inner optimizer state, which differ from the others'
        mid-period. Copies, so a load into them never aliases the live tensors the `model`/`optim` entries
        load into."""
        sd = {"inner_step": torch.tensor(self.inner_step, dtype=torch.int64)}
        shared_key, own_key = self._keys()
        shared = sd if shared_key is None else sd.setdefault(shared_key, {})
        if self.mode == "diloco":
            shared["start"] = self.start.detach().clone()
            bufs = [self.outer.state[v].get("momentum_buffer") for v in self.views]
            if all(b is not None for b in bufs):
                shared["momentum"] = torch.cat(bufs)
        opt = {str(i): {k: v.detach().clone() for k, v in self.optimizer.state[p].items() if torch.is_tensor(v)}
               for i, p in enumerate(self.params) if p in self.optimizer.state}
        opt = {i: st for i, st in opt.items() if st}  # no empty entries (plain SGD keeps no tensor state)
        sd[own_key] = {"params": self._flat().clone(), "optim": opt}
        return sd

    @torch.no_grad()
    def load_sync_state_dict(self, sd: dict) -> None:
        """After the model and optimizer were loaded: what a checkpoint had of this state (a checkpoint
        of another run keeps the loaded model as θ_start and starts a fresh period)."""
        self.__dict__["inner_step"] = int(sd["inner_step"]) if "inner_step" in sd else 0
        shared_key, own_key = self._keys()
        shared = sd if shared_key is None else sd.get(shared_key, {})
        mine = sd.get(own_key)
        if mine is not None:  # this replica's own mid-period parameters and inner optimizer state
            self._unflatten(mine["params"])
            for i, p in enumerate(self.params):
                for k, v in mine.get("optim", {}).get(str(i), {}).items():
                    if k in self.optimizer.state.get(p, {}):
                        self.optimizer.state[p][k].copy_(v)
            self.dp.params_updated()
        if self.mode == "diloco":
            self.start.copy_(shared["start"] if "start" in shared else self._flat().float())
            if "momentum" in shared:
                for v, (a, b) in zip(self.views, self.bounds):
                    buf = self.outer.state[v].get("momentum_buffer")
                    if buf is not None:
                        buf.copy_(shared["momentum"][a:b])
