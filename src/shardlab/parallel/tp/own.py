"""Tensor parallelism, own implementation (Megatron-LM style), applied to the single-device GPT from outside.

    model = apply_tp(build_model(cfg, seed), tp_group_or_mesh, sp=False)
    logits = model(idx)                                   # this rank's slice of the vocabulary
    loss = model.tp.loss_fn(logits, targets, "sum")       # vocab-parallel cross-entropy
    loss.backward(); model.tp.finish_backward()           # SP: reduce the replicated parameters' gradients

What is split (N = TP degree; see docs/tp.md):
- attention by heads: q, k, v column-parallel (rows of their (d, d) weights = whole heads), proj
  row-parallel. q, k and v share one region entry (a pre-hook on the attention module), so the attention
  costs one collective forward and one backward, not three;
- MLP: fc column-parallel, proj row-parallel (llama's SwiGLU: gate and up column-parallel, down row-parallel);
- grouped-query attention (llama): with n_kv_heads >= N (and divisible by N) k and v are column-parallel like
  q, each rank holding the key/value heads its query heads use; with fewer key/value heads than ranks (N a
  multiple of n_kv_heads) k and v are replicated and each rank runs only the one head its query heads share
  (`KVHeadLinear`), the weights' gradients summed across TP after backward;
- the embedding and the head by vocabulary rows, padded to a multiple of N (the padding rows are zero, never
  looked up, and masked out of the loss); tied (GPT-2) they are one parameter, untied (llama) two;
- with sequence parallelism (`sp`), LayerNorm, dropout, residual and the position embedding work on 1/N of the
  sequence; their parameters are replicated and their gradients summed across TP after backward.

The modules (ColumnParallelLinear, RowParallelLinear, ...) and the dropout streams are in parallel/tp/modules.py;
this file applies them and offers `OwnTP`. Parameters keep the bare model's FQNs; `model.tp` gives their full values, DTensor state dicts for DCP,
the loss and the gradient norm. Every collective goes through `shardlab.comm` (tags "tp.<module>").
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn as nn

from shardlab import comm
from shardlab.model import anatomy
from shardlab.model.anatomy import COLUMN, KV, ROW
from shardlab.optim.serving import HANDS, Pieces, Split
from shardlab.parallel.layer import Layer
from shardlab.parallel.tp import ops as tp_ops
from shardlab.parallel.tp.loss import vocab_parallel_cross_entropy
# The modules live in parallel/tp/modules.py; imported here too so that `shardlab.parallel.tp.own` keeps offering them.
from shardlab.parallel.tp.modules import (ColumnParallelLinear, KVHeadLinear, RowParallelLinear,
                                          SequenceParallelPositions, ShardedRegionRNG, VocabParallelEmbedding,
                                          VocabParallelHead)


# --- applying it -----------------------------------------------------------------------------------------

@dataclass
class ShardSpec:
    """How one parameter is split: `dim` (0: rows, 1: columns, None: replicated), the bare model's shape,
    and how many of this rank's rows along `dim` are real (the rest is vocabulary padding)."""
    dim: int | None
    full_shape: tuple
    real: int = 0


def resolve_group(tp):
    """A process group, a 1-D DeviceMesh, or a mesh with a "tp" dimension -> (group, mesh or None)."""
    from torch.distributed.device_mesh import DeviceMesh

    if isinstance(tp, DeviceMesh):
        mesh = tp["tp"] if tp.ndim > 1 else tp
        return mesh.get_group(), mesh
    return tp, None


def check_divisible(n_head: int, d_model: int, tp: int, n_kv_heads: int | None = None,
                    ffn_hidden: int | None = None) -> None:
    """What a degree must divide: heads (q, k, v split by whole heads) and the hidden sizes. Grouped-query
    attention (`n_kv_heads`): split when there are at least as many key/value heads as ranks (then the
    degree divides them), replicated otherwise (then they divide the degree, so each rank's query heads
    share one key/value head)."""
    if n_head % tp:
        raise ValueError(f"parallel.tp={tp} does not divide model.n_head={n_head}: attention is split by heads")
    if d_model % tp:
        raise ValueError(f"parallel.tp={tp} does not divide model.d_model={d_model}")
    if n_kv_heads and n_kv_heads >= tp and n_kv_heads % tp:
        raise ValueError(f"parallel.tp={tp} does not divide model.n_kv_heads={n_kv_heads}: key/value heads are "
                         "split by whole heads when there are at least as many as ranks")
    if n_kv_heads and n_kv_heads < tp and tp % n_kv_heads:
        raise ValueError(f"parallel.tp={tp} is not a multiple of model.n_kv_heads={n_kv_heads}: with fewer "
                         "key/value heads than ranks each rank's query heads must share one of them")
    if ffn_hidden and ffn_hidden % tp:
        raise ValueError(f"parallel.tp={tp} does not divide the MLP width {ffn_hidden}")


def _vocab_rows(weight: torch.Tensor, rank: int, size: int) -> tuple[torch.Tensor, int]:
    """This rank's rows of a (vocabulary, d) matrix padded to a multiple of `size` (padding rows zero),
    and how many of them are real: the split of VocabParallelEmbedding."""
    per = -(-weight.shape[0] // size)
    real = max(0, min(per, weight.shape[0] - rank * per))
    local = weight.detach().new_zeros(per, weight.shape[1])
    local[:real] = weight.detach()[rank * per:rank * per + real]
    return local, real


def apply_tp(model: nn.Module, tp, sp: bool = False) -> "OwnTP":
    """Split the GPT across the TP group in place (every rank passes the same initial model); returns the
    layer's object (`.model` is the split model). `tp` is a process group, a 1-D DeviceMesh or a mesh with a
    "tp" dimension. What is split and how is read from the model's anatomy (model/anatomy.py): its linear
    layers by role, the embedding and the head by vocabulary rows."""
    group, mesh = resolve_group(tp)
    rank, size = comm.rank(group), comm.world_size(group)
    cfg = model.cfg
    anat = anatomy.of(model)
    n_kv = getattr(cfg, "n_kv_heads", cfg.n_head)
    check_divisible(cfg.n_head, cfg.d_model, size, n_kv_heads=n_kv, ffn_hidden=getattr(cfg, "ffn_hidden", None))

    full_shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    _split_vocab(model, anat, group, rank, size, sp)
    for i, block in anat.named_blocks(model):  # a ModuleDict: a pipeline stage keeps its blocks' names
        tag = f"tp.{anat.block(i)}"
        _split_attention(anat, anat.attention_of(block), f"{tag}.{anat.attention}", group, rank, size, sp, n_kv)
        mlp = anat.mlp_of(block)
        if not anat.is_moe(mlp):  # a routed MLP stays whole on every tp rank: replicated, like a LayerNorm
            _split_mlp(anat, mlp, f"{tag}.{anat.mlp}", group, rank, size, sp)
    if getattr(cfg, "dropout", 0.0) > 0:
        rng = ShardedRegionRNG(rank)
        for _, block in anat.named_blocks(model):
            rng.install(anat.attention_of(block))  # dropout on this rank's heads
            if sp and anat.residual_dropout:
                rng.install(getattr(block, anat.residual_dropout))  # sequence-split residual branches
        if sp and anat.embed_dropout:
            rng.install(getattr(model, anat.embed_dropout))
    return OwnTP(model, group, mesh, rank, size, sp, _shard_specs(model, full_shapes))


def _split_vocab(model: nn.Module, anat, group, rank: int, size: int, sp: bool) -> None:
    """The embedding and the head by vocabulary rows; under SP the position table by sequence."""
    # A pipeline stage may lack some of these (anatomy.stage_drops): the middle stages hold neither the
    # embedding nor the head, a tied last stage holds the embedding only as its head's weight.
    wte, head = anat.get(model, anat.embedding), anat.get(model, anat.head)
    if wte is not None:
        wte = VocabParallelEmbedding(wte, group, rank, size, sp, tag=f"tp.{anat.embedding}")
        anat.set(model, anat.embedding, wte)
    if head is not None:
        if anat.tied(model):
            anat.set(model, anat.head, VocabParallelHead(wte.weight, group, sp, tag=f"tp.{anat.head}"))  # tied: the same Parameter
        else:
            local, real = _vocab_rows(head.weight, rank, size)
            anat.set(model, anat.head, VocabParallelHead(nn.Parameter(local, head.weight.requires_grad), group, sp,
                                                          tag=f"tp.{anat.head}", real_rows=real))
    positions = anat.get(model, anat.positions)
    if sp and positions is not None:
        anat.set(model, anat.positions, SequenceParallelPositions(positions, rank, size))


def _split_attention(anat, attn: nn.Module, tag: str, group, rank: int, size: int, sp: bool, n_kv: int) -> None:
    """Column-parallel projections by whole heads (replicated key/value heads when there are fewer than
    ranks), the output projection row-parallel; f (enter) before the block's attention."""
    for name, role in anat.attention_linears:
        lin = getattr(attn, name)
        if role == ROW:
            setattr(attn, name, RowParallelLinear(lin, group, rank, size, sp, tag))
        elif role == KV and n_kv < size:  # this rank's query heads all use key/value head rank // (size / n_kv)
            setattr(attn, name, KVHeadLinear(lin, rank // (size // n_kv), attn.head_dim))
        else:
            setattr(attn, name, ColumnParallelLinear(lin, group, rank, size, sp, tag, enter=False))
    attn.register_forward_pre_hook(lambda mod, args, tag=tag: (tp_ops.enter(args[0], group, sp, tag), *args[1:]))


def _split_mlp(anat, mlp: nn.Module, tag: str, group, rank: int, size: int, sp: bool) -> None:
    """Column-parallel in, row-parallel out. One column-parallel linear (GPT's fc) enters the region itself;
    several (Llama's SwiGLU gate and up: silu(gate) * up is elementwise) share one f, a pre-hook on the MLP."""
    columns = anat.mlp_role_names(COLUMN)
    shared = len(columns) > 1
    for name, role in anat.mlp_linears:
        lin = getattr(mlp, name)
        if role == ROW:
            setattr(mlp, name, RowParallelLinear(lin, group, rank, size, sp, tag))
        else:
            setattr(mlp, name, ColumnParallelLinear(lin, group, rank, size, sp, tag, enter=not shared))
    if shared:
        mlp.register_forward_pre_hook(lambda mod, args, tag=tag: (tp_ops.enter(args[0], group, sp, tag), *args[1:]))


def _shard_specs(model: nn.Module, full_shapes: dict) -> dict:
    """How each parameter is split: rows (column-parallel layers, the vocabulary), columns (row-parallel
    weights) or not at all, with the bare model's shape and the real (unpadded) size of its split dim."""
    specs = {}
    for fqn, p in model.named_parameters():
        owner = model.get_submodule(fqn.rsplit(".", 1)[0])
        dim = None
        if isinstance(owner, (ColumnParallelLinear, VocabParallelEmbedding, VocabParallelHead)):
            dim = 0
        elif isinstance(owner, RowParallelLinear) and fqn.endswith("weight"):
            dim = 1
        vocab = isinstance(owner, (VocabParallelEmbedding, VocabParallelHead))
        real = owner.real_rows if vocab else (p.shape[dim] if dim is not None else 0)
        specs[fqn] = ShardSpec(dim, full_shapes[fqn], real)
    return specs


def seed_alike(cfg) -> None:
    """Seed the default generator with `train.seed` on every rank. Dropout where activations are
    replicated across TP draws from it and must draw the same mask on every rank of a TP group
    (ShardedRegionRNG derives the per-rank streams from it); `build_model` already leaves it alike, but
    a model handed to the composition may not come from there."""
    torch.manual_seed(cfg.train.seed)


def apply_tensor_parallel(part: nn.Module, cfg, dims) -> Layer:
    """The composition's tensor-parallel layer (`layers.TENSOR_PARALLEL["own"]`): split `part` over the
    mesh's `tp` dimension, with sequence parallelism when `parallel.sp`."""
    seed_alike(cfg)
    return tp_layer(apply_tp(part, dims.submesh("tp"), sp=cfg.parallel.sp), dims)


def tp_layer(tp, dims) -> Layer:
    """What tensor parallelism (own or DTensor: `tp` is OwnTP or DTensorTP) contributes: the vocab-parallel
    loss and its context, the tp group in the gradient norm, and the dp layer seen through TP (SP's gradient
    sum after the dp layer's, the norm counting copies once, the bare model's full values and state dicts)."""
    from shardlab.parallel.tp.dp_view import TensorParallelDP

    return Layer("tp", tp.model, loss_fn=tp.loss_fn, loss_context=tp.loss_context, norm_groups=("tp",),
                 dp_view=lambda dp: TensorParallelDP(dp, tp, dims.group("tp"), dims.ranks("tp")),
                 optimizer_hands=tp.optimizer_hands, impl=tp)


def _sp_partial(fqn: str, owner: nn.Module) -> bool:
    """Under SP, the replicated parameters used on sequence shards: their per-rank gradients are partial."""
    return isinstance(owner, (nn.LayerNorm, nn.RMSNorm, SequenceParallelPositions)) or (
        isinstance(owner, RowParallelLinear) and fqn.endswith("bias"))


class OwnTP:
    """What a TP model offers the composition (the same interface as tp_dtensor.DTensorTP)."""

    impl = "own"
    # what the optimizer steps of a split matrix (optim/serving.py refuses a whole-matrix optimizer with it)
    optimizer_hands = HANDS["tp:own"].phrase

    def __init__(self, model, group, mesh, rank, size, sp, specs):
        self.model, self.group, self._mesh = model, group, mesh
        self.rank, self.size, self.sp, self.specs = rank, size, sp, specs
        # each split matrix's slices, described (optim/serving.py): whole-matrix optimizers gather them
        self.optimizer_hands = Pieces(OwnTP.optimizer_hands, lambda fqn: None if specs.get(fqn) is None or
                                      specs[fqn].dim is None else
                                      Split(group, specs[fqn].dim, specs[fqn].full_shape[specs[fqn].dim]))
        self.vocab_size = model.cfg.vocab_size  # a middle pipeline stage has no wte to ask
        # this rank's first vocabulary row, as VocabParallelEmbedding and _vocab_rows split it: the last
        # stage of an untied (llama) pipeline holds the head but no embedding to ask
        self.vocab_start = rank * -(-self.vocab_size // size)
        owner = {fqn: model.get_submodule(fqn.rsplit(".", 1)[0]) for fqn in specs}
        # Replicated parameters whose per-rank gradients are partial sums: SP's, and the key/value heads
        # replicated under grouped-query attention (each rank's gradient covers its query heads only).
        self.sp_params = [fqn for fqn in specs if (sp and _sp_partial(fqn, owner[fqn]))
                          or isinstance(owner[fqn], KVHeadLinear)]

    # --- step ---
    def loss_context(self):
        """Nothing to enter (DTensorTP's is loss_parallel): the loss is an ordinary autograd function."""
        return nullcontext()

    def loss_fn(self, logits: torch.Tensor, targets: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        """Replaces shardlab.model.loss.cross_entropy: the logits are this rank's vocabulary slice."""
        return vocab_parallel_cross_entropy(logits, targets, self.group, self.vocab_size,
                                            vocab_start=self.vocab_start, reduction=reduction)

    def is_sharded(self, fqn: str) -> bool:
        """Whether parameter `fqn` is split across TP (else every TP rank holds the same value)."""
        return self.specs[fqn].dim is not None

    def finish_backward(self, grads: dict | None = None) -> None:
        """SP: sum the partial gradients of LayerNorm, row-parallel biases and positions across TP, as one
        flat all-reduce (Megatron does the same after backward); the replicated key/value heads of
        grouped-query attention join it. Otherwise there is nothing to do.
        `grads`: {fqn: gradient} as the data-parallel layer holds them (zero: this rank's shards, laid out
        alike on every TP rank since their parameters have equal shapes); default the parameters' .grad."""
        if grads is None:
            grads = {n: p.grad for n, p in self.model.named_parameters()}
        grads = [grads[n] for n in self.sp_params if grads.get(n) is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        comm.all_reduce(flat, group=self.group, tag="tp.sp_grads")
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    def grad_norm(self) -> torch.Tensor:
        """The single-device gradient 2-norm: squares of sharded gradients summed across TP, replicated
        ones counted once (call after finish_backward)."""
        # summed where the gradients are (one host read, by the caller, instead of one per parameter)
        sharded = torch.zeros((), dtype=torch.float64, device=comm.device())
        replicated = torch.zeros((), dtype=torch.float64, device=comm.device())
        for fqn, p in self.model.named_parameters():
            if p.grad is None:
                continue
            sq = p.grad.detach().double().pow(2).sum()
            if self.specs[fqn].dim is None:
                replicated += sq
            else:
                sharded += sq
        comm.all_reduce(sharded, group=self.group, tag="tp.grad_norm")
        return (sharded + replicated).sqrt()

    def gather_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Full logits (padding columns dropped) from every rank's slice: for evaluation and tests only."""
        return self._gather(logits.detach(), logits.dim() - 1)[..., :self.vocab_size]

    # --- full values and state dicts ---
    def full(self, fqn: str, local: torch.Tensor) -> torch.Tensor:
        """The bare model's value of a tensor shaped like parameter `fqn`'s shard (the parameter, its
        gradient, an optimizer state); every rank gets it."""
        spec = self.specs[fqn]
        if spec.dim is None:
            return local.detach().clone()
        return self._gather(local.detach(), spec.dim).narrow(spec.dim, 0, spec.full_shape[spec.dim])

    def _gather(self, local: torch.Tensor, dim: int) -> torch.Tensor:
        shard = local.movedim(dim, 0).contiguous()
        out = shard.new_empty((self.size * shard.shape[0], *shard.shape[1:]))
        comm.all_gather(out, shard, group=self.group, tag="tp.full")
        return out.movedim(0, dim).contiguous()

    def full_parameters(self) -> dict[str, torch.Tensor]:
        return {n: self.full(n, p) for n, p in self.model.named_parameters()}

    def full_values(self, values: dict) -> dict[str, torch.Tensor]:
        """{fqn: the bare model's value} from {fqn: this TP rank's value} (what a dp layer's
        full_parameters gives under TP). A collective: every TP rank calls it with the same keys."""
        return {n: self.full(n, v) for n, v in values.items()}

    def full_grads(self) -> dict[str, torch.Tensor]:
        return {n: self.full(n, p.grad) for n, p in self.model.named_parameters() if p.grad is not None}

    @property
    def mesh(self):
        """The 1-D "tp" DeviceMesh (built from the group when `apply_tp` was given a group)."""
        if self._mesh is None:
            from torch.distributed.device_mesh import DeviceMesh

            group = self.group if self.group is not None else torch.distributed.group.WORLD
            self._mesh = DeviceMesh.from_group(group, comm.device().type, mesh_dim_names=("tp",))
        return self._mesh

    def to_dtensor(self, fqn: str, local: torch.Tensor):
        """A DTensor on the tp mesh for a tensor shaped like `fqn`'s shard: Shard(dim) with the bare model's
        global shape (vocabulary padding excluded: the last shards are shorter, as torch.chunk splits), or
        the plain tensor for a replicated one. It shares storage with `local` (DCP loads in place)."""
        from torch.distributed.tensor import DTensor, Shard

        spec = self.specs[fqn]
        if spec.dim is None:
            return local
        real = local.narrow(spec.dim, 0, spec.real)
        return DTensor.from_local(real, self.mesh, [Shard(spec.dim)], run_check=False,
                                  shape=torch.Size(spec.full_shape), stride=_contiguous_stride(spec.full_shape))

    def state_dict(self) -> dict:
        """The model state for DCP, keyed by the bare model's FQNs (the tied head under its own name too,
        like torch's state_dict), sharded parameters as DTensors over tp: loads at any tp degree."""
        params = dict(self.model.named_parameters())
        anat = anatomy.of(self.model)
        out = {}
        for fqn in self.model.state_dict(keep_vars=True):
            key = fqn if fqn in params else anat.tied_key(fqn)  # a tied head is registered once, as the embedding's
            out[fqn] = self.to_dtensor(key, params[key].detach())
        return out

    def local_value(self, fqn: str, value) -> torch.Tensor:
        """This rank's shard (padding rows zero) of parameter `fqn`'s value given as a DTensor (after
        dcp.load into `state_dict()`'s) or as the full tensor."""
        spec = self.specs[fqn]
        if spec.dim is None:
            return value.full_tensor() if hasattr(value, "full_tensor") else value
        if hasattr(value, "to_local"):
            real = value.to_local()
        else:
            per = dict(self.model.named_parameters())[fqn].shape[spec.dim]
            real = value.narrow(spec.dim, self.rank * per, spec.real)
        shape = list(spec.full_shape)
        shape[spec.dim] = dict(self.model.named_parameters())[fqn].shape[spec.dim]
        out = real.new_zeros(shape)
        out.narrow(spec.dim, 0, spec.real).copy_(real)
        return out

    def load_state_dict(self, sd: dict) -> None:
        """Copy a state dict (DTensors from `state_dict()` after dcp.load, or full tensors) into the shards."""
        with torch.no_grad():
            for fqn, p in self.model.named_parameters():
                p.copy_(self.local_value(fqn, sd[fqn]))

    def optim_state_dict(self, optimizer) -> dict:
        """{"state": {fqn: {"step": t, "exp_avg": DTensor, ...}}, "param_groups": [{..., "params": [fqn]}]}:
        per-element optimizer states placed like their parameters, so DCP reshards them too."""
        fqn_of = {id(p): n for n, p in self.model.named_parameters()}
        order = [fqn_of[id(p)] for g in optimizer.param_groups for p in g["params"]]
        raw = optimizer.state_dict()
        local = dict(self.model.named_parameters())
        state = {}
        for i, st in raw["state"].items():
            fqn = order[i]
            state[fqn] = {k: self.to_dtensor(fqn, v) if torch.is_tensor(v) and v.shape == local[fqn].shape else v
                          for k, v in st.items()}
        groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [order[i] for i in g["params"]]}
                  for g in raw["param_groups"]]
        return {"state": state, "param_groups": groups}

    def load_optim_state_dict(self, optimizer, sd: dict) -> None:
        fqn_of = {id(p): n for n, p in self.model.named_parameters()}
        order = [fqn_of[id(p)] for g in optimizer.param_groups for p in g["params"]]
        index = {fqn: i for i, fqn in enumerate(order)}
        state = {index[fqn]: {k: self.local_value(fqn, v) if torch.is_tensor(v) and v.dim() > 0 else v
                              for k, v in st.items()} for fqn, st in sd["state"].items()}
        # The groups' parameter lists are this rank's own; the saved ones only give the hyperparameters. A
        # checkpoint stores one rank's `param_groups` (DCP keeps one copy of a non-tensor value), and under
        # expert parallelism they list that rank's experts, not this one's.
        local = optimizer.state_dict()["param_groups"]
        if len(local) != len(sd["param_groups"]):
            raise ValueError(f"the checkpoint's optimizer has {len(sd['param_groups'])} param groups, this model's "
                             f"{len(local)}: it was written for another model")
        groups = [{**{k: v for k, v in saved.items() if k != "params"}, "params": mine["params"]}
                  for mine, saved in zip(local, sd["param_groups"])]
        optimizer.load_state_dict({"state": state, "param_groups": groups})


def _contiguous_stride(shape: tuple) -> tuple:
    stride, acc = [], 1
    for s in reversed(shape):
        stride.append(acc)
        acc *= s
    return tuple(reversed(stride))


__all__ = ["apply_tp", "apply_tensor_parallel", "ColumnParallelLinear", "RowParallelLinear", "VocabParallelEmbedding",
           "VocabParallelHead", "KVHeadLinear", "SequenceParallelPositions", "ShardedRegionRNG", "OwnTP",
           "vocab_parallel_cross_entropy", "check_divisible"]
