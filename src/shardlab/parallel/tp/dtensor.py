"""Tensor parallelism, torch-native: a `parallelize_module` plan for the same GPT (DTensor).

    model = apply_tp(build_model(cfg, seed), tp_mesh, sp=False)
    with model.tp.loss_context():                         # loss_parallel: forward loss *and* backward
        loss = model.tp.loss_fn(model(idx), targets, "sum")
        loss.backward()

The split is the own implementation's (shardlab.parallel.tp.own): q, k, v and mlp.fc (llama: mlp.gate and
mlp.up) colwise, the projections rowwise (grouped-query attention: key/value heads split, so at least as
many of them as ranks), the tied embedding/head by vocabulary rows (the head's logits stay a DTensor sharded on the
vocabulary, scored by `loss_parallel`). The attention and MLP inputs are made DTensors once per module
(`PrepareModuleInput`) so q, k and v share one redistribution. With sequence parallelism the LayerNorms
are `SequenceParallel`, the embedding's output and the projections' outputs are sharded on the sequence,
and the position embedding looks up its rank's positions. DTensor's collectives are torch's own (not
recorded by shardlab.comm), like DDP's and FSDP2's.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from shardlab.model import anatomy
from shardlab.optim import dtensor_pieces
from shardlab.optim.serving import HANDS
from shardlab.model.anatomy import ROW
from shardlab.parallel.tp.own import check_divisible


def _positions_style():
    """SP: the (replicated) position table looks up this rank's sequence slice, its output a DTensor
    sharded on dim 0 (the sequence), so it adds to the token embedding's Shard(1) output without a
    collective. The table's gradient is Partial (each rank saw its positions): finish_backward sums it."""
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module, distribute_tensor
    from torch.distributed.tensor.parallel import ParallelStyle

    class PositionsSequenceParallel(ParallelStyle):
        def _apply(self, module: nn.Module, mesh) -> nn.Module:
            def replicate(name, mod, mesh):
                for pname, p in list(mod.named_parameters(recurse=False)):
                    mod.register_parameter(pname, nn.Parameter(distribute_tensor(p, mesh, [Replicate()]),
                                                               p.requires_grad))

            def shard_positions(mod, inputs, mesh):
                pos = DTensor.from_local(inputs[0], mesh, [Replicate()], run_check=False)
                return (pos.redistribute(mesh, [Shard(0)]),)  # a local slice: no communication

            return distribute_module(module, mesh, replicate, shard_positions)

    return PositionsSequenceParallel()


def tp_plan(model: nn.Module, sp: bool) -> dict:
    """The parallelize_module plan: module FQN -> ParallelStyle, from the model's anatomy (model/anatomy.py):
    column- and key/value-role linears colwise, row-role rowwise, the embedding and the head by vocabulary."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)

    anat = anatomy.of(model)
    between = Shard(1) if sp else Replicate()  # the residual stream's layout between TP regions

    def style(role):
        if role == ROW:
            return RowwiseParallel(output_layouts=between, use_local_output=not sp)
        return ColwiseParallel()

    plan = {
        anat.embedding: RowwiseParallel(input_layouts=Replicate(), output_layouts=between, use_local_output=not sp),
        anat.head: ColwiseParallel(input_layouts=between, output_layouts=Shard(-1), use_local_output=False),
    }
    if sp:
        if anat.get(model, anat.positions) is not None:
            plan[anat.positions] = _positions_style()
        plan[anat.final_norm] = SequenceParallel()
    for i, block in anat.named_blocks(model):
        b = anat.block(i)
        enter = PrepareModuleInput(input_layouts=(between,), desired_input_layouts=(Replicate(),),
                                   use_local_output=False)
        plan[f"{b}.{anat.attention}"] = enter
        plan.update({f"{b}.{anat.attention}.{name}": style(role) for name, role in anat.attention_linears})
        plan[f"{b}.{anat.mlp}"] = enter
        if not anat.is_moe(anat.mlp_of(block)):
            plan.update({f"{b}.{anat.mlp}.{name}": style(role) for name, role in anat.mlp_linears})
        if sp:
            plan.update({f"{b}.{norm}": SequenceParallel() for norm in anat.norms})
    return plan


def apply_tp(model: nn.Module, tp_mesh, sp: bool = False) -> "DTensorTP":
    """Parallelize the GPT over a 1-D DeviceMesh (or a mesh with a "tp" dimension); returns the layer's object
    (`.model` is the parallelized model). The
    tied head is re-tied to the embedding's DTensor after the plan (both are Shard(0) on the vocabulary)."""
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = tp_mesh["tp"] if tp_mesh.ndim > 1 else tp_mesh
    cfg = model.cfg
    n_kv = getattr(cfg, "n_kv_heads", cfg.n_head)
    check_divisible(cfg.n_head, cfg.d_model, mesh.size(), n_kv_heads=n_kv, ffn_hidden=getattr(cfg, "ffn_hidden", None))
    if n_kv < mesh.size():
        raise ValueError(f"parallel.tp_impl=dtensor with model.n_kv_heads={n_kv} < parallel.tp={mesh.size()}: "
                         "replicated key/value heads are built in the own implementation only; use "
                         "parallel.tp_impl=own or parallel.tp <= model.n_kv_heads")
    parallelize_module(model, mesh, tp_plan(model, sp))
    anat = anatomy.of(model)
    if anat.tied(model):
        anat.get(model, anat.head).weight = anat.get(model, anat.embedding).weight
    return DTensorTP(model, mesh, sp)


def apply_tensor_parallel(part: nn.Module, cfg, dims):
    """The composition's tensor-parallel layer (`layers.TENSOR_PARALLEL["dtensor"]`): the plan over the
    mesh's `tp` dimension (a slice of the root mesh, so FSDP2 can shard the DTensors over dp_shard)."""
    from shardlab.parallel.tp.own import seed_alike, tp_layer

    seed_alike(cfg)
    return tp_layer(apply_tp(part, dims.submesh("tp"), sp=cfg.parallel.sp), dims)


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


class DTensorTP:
    """The same interface as tp.OwnTP."""

    impl = "dtensor"
    optimizer_hands = HANDS["tp:dtensor"].phrase  # optim/serving.py

    def __init__(self, model, mesh, sp):
        self.model, self.mesh, self.sp = model, mesh, sp
        # its DTensor shards, described from their placements when the optimizer is built (FSDP2 may have
        # added its own over dp_shard by then): optim/dtensor_pieces.py
        self.optimizer_hands = dtensor_pieces.pieces(DTensorTP.optimizer_hands, model, ("tp",))
        # Read before data parallelism wraps the parameters (FSDP2 adds its own Shard over dp_shard).
        self._sharded = {n for n, p in model.named_parameters()
                         if any(pl.is_shard() for pl in getattr(p, "placements", ()))}

    def is_sharded(self, fqn: str) -> bool:
        """Whether parameter `fqn` is split across TP (else every TP rank holds the same value)."""
        return fqn in self._sharded

    def loss_context(self):
        """`loss_parallel`: cross-entropy on vocabulary-sharded logits; the backward must run inside it too."""
        from torch.distributed.tensor.parallel import loss_parallel
        return loss_parallel()

    def loss_fn(self, logits, targets: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        """shardlab.model.loss.cross_entropy on the vocabulary-sharded DTensor logits (in at least fp32,
        like the own vocab-parallel loss: float64 stays float64)."""
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction=reduction)

    def finish_backward(self, grads: dict | None = None) -> None:
        """With SP, DTensor leaves the gradients of the replicated parameters used on sequence shards
        (LayerNorms, positions) Partial: sum them across TP now (one all-reduce each), so every gradient is
        placed like its parameter, as the optimizer, clipping and data parallelism expect."""
        for p in self.model.parameters():
            g = p.grad
            if g is not None and hasattr(g, "placements") and g.placements != p.placements:
                p.grad = g.redistribute(p.device_mesh, p.placements)

    def grad_norm(self) -> torch.Tensor:
        """The single-device gradient 2-norm (call after finish_backward): squares of the local shards of
        sharded gradients summed across TP in one all-reduce, replicated ones (DTensor or plain) once."""
        from shardlab import comm

        # summed where the gradients are (one host read, by the caller, instead of one per parameter)
        sharded = torch.zeros((), dtype=torch.float64, device=comm.device())
        replicated = torch.zeros((), dtype=torch.float64, device=comm.device())
        for p in self.model.parameters():
            g = p.grad
            if g is None:
                continue
            split = hasattr(g, "placements") and any(pl.is_shard() for pl in g.placements)
            sq = (g.to_local() if hasattr(g, "to_local") else g).detach().double().pow(2).sum()
            if split:
                sharded += sq
            else:
                replicated += sq
        comm.all_reduce(sharded, group=self.mesh.get_group(), tag="tp.grad_norm")
        return (sharded + replicated).sqrt()

    def gather_logits(self, logits) -> torch.Tensor:
        return _full(logits.detach())

    def full_parameters(self) -> dict[str, torch.Tensor]:
        return {n: _full(p.detach()) for n, p in self.model.named_parameters()}

    def full_values(self, values: dict) -> dict[str, torch.Tensor]:
        """{fqn: the bare model's value} from the values a dp layer holds (DTensors are gathered)."""
        return {n: _full(v) for n, v in values.items()}

    def full_grads(self) -> dict[str, torch.Tensor]:
        return {n: _full(p.grad) for n, p in self.model.named_parameters() if p.grad is not None}

    def state_dict(self) -> dict:
        return {k: v.detach() for k, v in self.model.state_dict(keep_vars=True).items()}

    def load_state_dict(self, sd: dict) -> None:
        from torch.distributed.tensor import distribute_tensor

        with torch.no_grad():
            for fqn, p in self.model.named_parameters():
                value = sd[fqn]
                if hasattr(p, "device_mesh") and not hasattr(value, "device_mesh"):
                    value = distribute_tensor(value, p.device_mesh, p.placements)
                p.copy_(value)
