"""Expert parallelism: each MoE layer's experts split over `parallel.ep` ranks, tokens sent to their
expert's rank and back by all-to-all (GShard; DeepSpeed-MoE and torchtitan borrow the ranks as here).

EP borrows its ranks from data parallelism: the batch is split over all dp ranks as without it, dense
parameters stay replicated (the dp layer reduces them over every dp rank), and dp rank i holds the experts
of ep coordinate i % ep: experts [c * E/ep, (c+1) * E/ep) of every MoE layer, under their own names
(`blocks.1.mlp.experts.5.fc.weight`), so checkpoints keep one key per expert and reshard like the rest.

The model's MoE (model/moe.py) routes, sorts its kept token-slots by expert and calls `run_experts`; this
layer replaces only that method, on each MoE module:

    1. counts exchange: all-to-all of the per-expert counts (E int64 per rank), so every rank knows
       how many rows it will receive from each peer for each of its experts;
    2. dispatch: all-to-all with uneven splits, rows to the rank of their expert;
    3. the local experts, each on its rows (regrouped expert-major: rows from every source together);
    4. combine: the reverse all-to-all; the module un-sorts and weights the rows.

The all-to-alls are autograd Functions whose backward is the reverse all-to-all, so the gradient of each
row goes back to the rank that sent it. Every transfer goes through comm (`all_to_all_single`).

Gradients: an expert's gradient on its holder already sums the tokens of its whole ep group; the dp ranks
holding the same experts (`edp`) sum theirs (`ExpertParallelDP.finish_backward`). Dense parameters are the
dp layer's, over all dp ranks. The dp layer never sees the experts (they are hidden while it wraps): own `ddp`
and `torch-ddp` in this version (zero's and FSDP's optimizers would hold the dense shards only). Under
own tensor parallelism (no SP) the MoE layers stay whole on every tp rank (replicated like a LayerNorm,
computed alike) and each tp coordinate has its own ep groups.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn as nn

from shardlab import comm
from shardlab.doctor.replicas import ReplicaSet
from shardlab.model.moe import MoE, moe_layers
from shardlab.parallel.dp.base import norm_dtype
from shardlab.parallel.dp.view import DPView
from shardlab.parallel.layer import Layer



class _AllToAll(torch.autograd.Function):
    """Rows to peers with uneven splits; backward sends each row's gradient back the way it came."""

    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group, tag):
        ctx.splits, ctx.group, ctx.tag = (out_splits, in_splits), group, tag
        out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
        comm.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group, tag=tag)
        return out

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        back = grad.new_empty((sum(in_splits),) + tuple(grad.shape[1:]))
        comm.all_to_all_single(back, grad.contiguous(), in_splits, out_splits, group=ctx.group, tag=ctx.tag)
        return back, None, None, None, None


class ExpertDispatch:
    """Replaces one MoE module's `run_experts`: the local experts, the all-to-all around them."""

    def __init__(self, module: MoE, name: str, ep: int, group):
        self.ep, self.group, self.name = ep, group, name
        self.n_local = module.n_experts // ep
        self.experts = module.experts  # this rank's: {str(global index): expert}, in index order

    def __call__(self, x_sorted: torch.Tensor, counts) -> torch.Tensor:
        ep, n = self.ep, self.n_local
        if isinstance(counts, list):  # the fixed-shape dispatch: every expert gets the same rows from
            return self._static(x_sorted, counts)  # every rank, so no counts need exchanging
        send = counts.view(ep, n)  # [peer, its local expert]: rows this rank sends
        recv = torch.empty_like(send)  # [source, my local expert]: rows this rank receives
        comm.all_to_all_single(recv, send.contiguous(), group=self.group, tag=f"ep.{self.name}.counts")
        send_splits, recv_splits = send.sum(1).tolist(), recv.sum(1).tolist()
        rows = _AllToAll.apply(x_sorted, recv_splits, send_splits, self.group, f"ep.{self.name}.dispatch")
        # received rows are source-major (each source's rows sorted by expert); run each expert once on
        # all its rows: regroup expert-major, compute, and put the results back in source-major order
        sizes = recv.flatten().tolist()  # chunk (source s, expert j) at s * n + j
        order = [s * n + j for j in range(n) for s in range(ep)]
        chunks = rows.split(sizes)
        by_expert = torch.cat([chunks[i] for i in order])
        per_expert = recv.sum(0).tolist()
        outs = [expert(c) for expert, c in zip(self.experts.values(), by_expert.split(per_expert))]
        y = torch.cat(outs)
        y_chunks = y.split([sizes[i] for i in order])
        back = [None] * len(order)
        for pos, i in enumerate(order):
            back[i] = y_chunks[pos]
        y = torch.cat(back)
        return _AllToAll.apply(y, send_splits, recv_splits, self.group, f"ep.{self.name}.combine")

    def _static(self, x_sorted: torch.Tensor, counts: list) -> torch.Tensor:
        """Equal rows per expert (model/moe.py `_dispatch_static`): equal all-to-all splits, no counts."""
        ep, n, rows = self.ep, self.n_local, counts[0]
        splits = [n * rows] * ep
        got = _AllToAll.apply(x_sorted, splits, splits, self.group, f"ep.{self.name}.dispatch")
        by_expert = got.view(ep, n, rows, -1).transpose(0, 1).reshape(n, ep * rows, -1)  # expert-major
        y = torch.stack([expert(c) for expert, c in zip(self.experts.values(), by_expert)])
        y = y.view(n, ep, rows, -1).transpose(0, 1).reshape(ep * n * rows, -1)  # back to source-major
        return _AllToAll.apply(y, splits, splits, self.group, f"ep.{self.name}.combine")


class ExpertParallel:
    """The layer's handle on a model part (`part.ep`): which experts are local, hiding them from the dp
    layer while it wraps, and their gradients."""

    def __init__(self, part: nn.Module, dims):
        self.dims, self.ep = dims, dims.ep
        self.group, self.edp_group = dims.group("ep"), dims.group("edp")
        rank = dims.coord("ep")
        self.layers: list[MoE] = []
        for name, module in part.named_modules():
            if not isinstance(module, MoE):
                continue
            if module.n_experts % self.ep:
                raise ValueError(f"{name}: {module.n_experts} experts are not divisible by parallel.ep={self.ep}")
            n = module.n_experts // self.ep
            keep = range(rank * n, (rank + 1) * n)
            # a ModuleDict keyed by the global index keeps every name (`experts.5.fc.weight`)
            module.experts = nn.ModuleDict({str(j): module.experts[j] for j in keep})
            module.run_experts = ExpertDispatch(module, name, self.ep, self.group)
            self.layers.append(module)
        # the experts' containers, not their parameters: the composition builds on the meta device and
        # allocation replaces each meta parameter by a new object (parallel/materialize.py), so a list of
        # parameters taken here would name tensors the model no longer holds
        self.expert_dicts = [m.experts for m in self.layers]

    @property
    def expert_params(self) -> list[nn.Parameter]:
        """The experts' parameters as the model holds them now (read through their modules each time)."""
        return [p for d in self.expert_dicts for p in d.parameters()]

    def expert_ids(self) -> set[int]:
        """`id` of each expert parameter now held: a membership test for one pass over the model."""
        return {id(p) for p in self.expert_params}

    def is_expert(self, p: torch.Tensor) -> bool:
        return id(p) in self.expert_ids()

    @contextlib.contextmanager
    def experts_hidden(self):
        """While the dp layer wraps: the MoE modules without experts (the dp layer must not broadcast,
        bucket or compare them: each ep rank holds different ones)."""
        held = [(m, m._modules.pop("experts")) for m in self.layers]
        try:
            yield
        finally:
            for m, experts in held:
                m._modules["experts"] = experts

    def reduce_expert_grads(self, scale: float) -> None:
        """Sum the experts' gradients over the ranks holding the same experts (edp), then scale: with the
        step's loss weight (dp / global tokens) the result is the mean over all tokens."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.expert_params]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        if self.edp_group is not None:
            comm.all_reduce(flat, group=self.edp_group, tag="ep.expert_grads")
        flat.mul_(scale)
        offset = 0
        for p, g in zip(self.expert_params, grads):
            p.grad = flat[offset:offset + g.numel()].view_as(p).clone()
            offset += g.numel()


class ExpertParallelDP(DPView):
    """The dp layer seen through expert parallelism (as `TensorParallelDP` for TP): the step, checkpoints
    and the doctor read the dense parameters from the dp layer and the experts from here."""

    def __init__(self, dp, ep: ExpertParallel):
        super().__init__(dp)
        self.ep = ep

    def finish_backward(self) -> None:
        self.dp.finish_backward()
        self.ep.reduce_expert_grads(1.0 / self.ep.dims.dp_size)

    def clip_grad_norm_(self, max_norm: float, groups: list | None = None, exclude: tuple = (),
                        replicated=None) -> float:
        """The single-device norm. Squares in three sums: dense gradients split across tensor parallelism,
        dense ones copied (the same on every dp rank: counted once; under TP copied over tp as well),
        experts (each on one rank of every ep group: summed over ep; under TP copied over tp). The split and
        copied sums are all-reduced over `groups` (the step's: tp when there is TP), the copies divided back
        by the tp size, as the dp layer's own mixed norm does. `replicated`: (tp group, is_split(fqn)) from
        `TensorParallelDP`."""
        tp_group, is_split = replicated if replicated is not None else (None, lambda fqn: False)
        sq = torch.zeros(3, device=self.dp.device, dtype=norm_dtype(p for p in self.dp.model.parameters()))
        grads, experts = [], self.ep.expert_ids()
        for fqn, p in self.dp.model.named_parameters():
            if p.grad is None:
                continue
            grads.append(p.grad)
            slot = 2 if id(p) in experts else (0 if is_split(fqn) else 1)
            sq[slot] += p.grad.detach().to(sq.dtype).pow(2).sum()
        if self.ep.group is not None:
            experts = sq[2:].clone()
            comm.all_reduce(experts, group=self.ep.group, tag="grad_norm")
            sq[2:] = experts
        for group in groups or []:
            comm.all_reduce(sq, group=group, tag="grad_norm")
        copies = comm.world_size(tp_group) if tp_group is not None else 1
        norm = (sq[0] + (sq[1] + sq[2]) / copies).sqrt()
        if max_norm > 0:
            coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
            for g in grads:
                g.mul_(coef.to(g.dtype))
        return float(norm.item())

    def zero_grad(self, optimizer) -> None:
        self.dp.zero_grad(optimizer)  # the dense buckets
        for p in self.ep.expert_params:
            p.grad = None

    def replicated_parameters(self):
        """What the doctor's replica checksum compares over dp: the dense parameters (experts differ by
        ep rank by design)."""
        experts = self.ep.expert_ids()
        return [(n, p) for n, p in self.dp.model.named_parameters() if id(p) not in experts and p.numel()]

    def expert_parameters(self):
        """The experts this rank holds, under their global names."""
        experts = self.ep.expert_ids()
        return [(n, p) for n, p in self.dp.model.named_parameters() if id(p) in experts and p.numel()]

    def replica_sets(self, seen=None) -> list[ReplicaSet]:
        """The dp layer's sets (over the dense parameters: `replicated_parameters`), and the experts over
        edp: the dp ranks holding the same experts sum their gradients and so must hold bitwise-equal
        copies."""
        dims = self.ep.dims
        experts = ReplicaSet("experts", dims.ranks("edp"), dims.group("edp"),
                             parameters=lambda fragments=None: self.expert_parameters(),
                             note="no expert replicas (parallel.ep equals the data-parallel size: each rank "
                                  "holds different experts)")
        return self.dp.replica_sets(seen or self) + [experts]

    def full_parameters(self) -> dict[str, torch.Tensor]:
        """Every parameter's full value on every rank (a collective over ep): the experts all-gathered."""
        experts = self.ep.expert_ids()
        out = {n: p.detach() for n, p in self.dp.model.named_parameters() if id(p) not in experts}
        prefix = {id(m): n for n, m in self.dp.model.named_modules()}
        for m in self.ep.layers:
            local = list(m.experts.items())  # (global index, expert), the same shapes on every ep rank
            flat = torch.cat([p.detach().reshape(-1) for _, e in local for p in e.parameters()])
            gathered = torch.empty(flat.numel() * self.ep.ep, dtype=flat.dtype, device=flat.device)
            comm.all_gather(gathered, flat, group=self.ep.group, tag="ep.full_parameters")
            n_local = len(local)
            for r, chunk in enumerate(gathered.split(flat.numel())):
                offset = 0
                for j, (_, expert) in enumerate(local):  # ep rank r holds experts r * n_local + j
                    for name, p in expert.named_parameters():
                        out[f"{prefix[id(m)]}.experts.{r * n_local + j}.{name}"] = \
                            chunk[offset:offset + p.numel()].view_as(p)
                        offset += p.numel()
        return out


def apply_expert_parallel(part: nn.Module, cfg, dims) -> Layer:
    """Keep this rank's experts of every MoE layer and route their tokens by all-to-all. The experts are
    hidden from the data-parallel layer while it wraps the part, and synchronised by this layer (over the
    ranks holding the same experts), seen through `ExpertParallelDP`."""
    if not moe_layers(part):
        raise ValueError(f"parallel.ep={dims.ep}: the model has no MoE layer (set model.moe_experts)")
    ep = ExpertParallel(part, dims)
    # expert parallelism clips the experts' gradients itself: the norm comes back as a float. (Its uneven
    # all-to-all needs the split sizes on the host, three reads per MoE layer a microbatch; the check runs
    # the fixed-shape dispatch, which needs none: that cost is the routing's, not counted here.)
    # the whole model's parameter count: this rank's part, plus the experts the other ep ranks hold
    elsewhere = (ep.ep - 1) * sum(p.numel() for p in ep.expert_params)
    # optimizer_hands stays None: each rank steps its own experts' matrices whole (optim/serving.py)
    return Layer("ep", part, hidden=ep.experts_hidden, dp_view=lambda dp: ExpertParallelDP(dp, ep),
                 host_syncs={"shardlab.parallel.ep": 1}, params_elsewhere=elsewhere, impl=ep)
