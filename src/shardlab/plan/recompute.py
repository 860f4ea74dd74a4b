"""Which forward ops of a block the backward runs again, per recompute policy: shardlab's selective, Megatron's
selective-attn, torchtitan's selective-op, full; and torch's non-reentrant checkpoint's early stop, which ends the
recompute before the block's last GEMM (`TrainSpec.recompute_early_stop`). plan/compute.py times what is listed."""
from __future__ import annotations

from . import fusion, torch_tp
from .ops import Op

# the attention core's GEMM-kind ops: never the block's last GEMM
_CORE_GEMMS = ("attention", "scores", "attn_v")


def early_stop_recomputed(block: list[Op]) -> list[Op]:
    """The forward ops torch's non-reentrant checkpoint runs again in the backward (`TrainSpec.recompute_early_stop`).
    The recompute stops once the last tensor the block's forward saved has been packed again (early stop,
    torch/utils/checkpoint.py, `_StopRecomputationError` in `_recomputation_hook`; the default since pytorch#96866,
    torch 2.1). Autograd packs a GEMM's saved inputs when it builds the GEMM's node, before the kernel runs (the
    generated VariableType code: SavedVariable of self and mat2, then the redispatch), and the residual add after
    it saves nothing: so the block's last GEMM (llama's down, GPT-2's mlp_proj) and what follows it are not run
    again. Under torch.compile the min-cut partitioner recomputes only what the backward reads, and no gradient
    reads that GEMM's output: the same ops. Without a trailing GEMM followed by saving-free ops: the whole block.
    (torch's ring merge, listed last, is the attention's and stays.)"""
    gemms = [i for i, o in enumerate(block) if o.kind == "gemm" and o.name not in _CORE_GEMMS]
    tail = block[gemms[-1] + 1:] if gemms else [Op("none", "elem")]
    if any(o.name not in ("residual", "bias_grads", "cp_merge", torch_tp.SCATTER_CAT) for o in tail):
        return block
    return block[:gemms[-1]] + [o for o in tail if o.name == "cp_merge"]


# Megatron-Core's recompute_modules (Layout.recompute_modules): the forward ops each module's checkpoint runs again.
# core_attn: the attention kernel; mla_up_proj: the latents' up-projections, the rotation and q, k assembled per head
# (multi_latent_attention.py's qkv_up_checkpoint); moe_act: the experts' activation and its clamp (an MoE block's:
# it has a router); mlp: a dense block's MLP with its norm (fc1 is TE's LayerNormColumnParallelLinear)
_MODULE_OPS = {"core_attn": ("attention", "scores", "softmax", "attn_dropout", "attn_v"),
               "mla_up_proj": ("q_up", "kv_up", "rope", "mla_cat"),
               "moe_act": ("swiglu", "gelu", "glu_clamp"), "mlp": ("ln_2", "gate", "up", "swiglu", "down")}


def module_ops(block: list[Op], modules: frozenset) -> list[Op]:
    """The forward ops of one block Megatron-Core's selective recompute of `modules` runs again."""
    moe = any(o.name == "router" for o in block)
    names = {n for m in modules if not (m == "moe_act" and not moe or m == "mlp" and moe) for n in _MODULE_OPS[m]}
    return [o for o in block if o.name in names]


def recomputed_ops(block: list[Op], recompute: str, early_stop: bool = False,
                   modules: frozenset = frozenset()) -> list[Op]:
    """The forward ops of one block the backward runs again under `recompute` ([] for none), or under
    Megatron-Core's `modules` (with recompute none)."""
    if modules:
        return module_ops(block, modules)
    if early_stop and recompute in ("full", "selective-op"):
        block = early_stop_recomputed(block)
    if recompute == "full":
        return block
    if recompute == "selective":  # shardlab's policy: the cheap ops between the matmuls again
        return [o for o in block if o.name in ("ln_1", "ln_2", "gelu", "residual", fusion.FUSED_RESIDUAL)]
    if recompute == "selective-op":  # torchtitan's: every op but the odd matmuls and attention again
        return _selective_op_recomputed(block)
    if recompute == "selective-attn":  # Megatron's: the attention core again (its recompute module core_attn)
        return module_ops(block, frozenset({"core_attn"}))
    return []


def early_stop_note(block: list[Op], recompute: str, ops_time) -> str:
    """--explain's words for the recompute's early stop (what it does not run again, per block)."""
    whole, kept = recomputed_ops(block, recompute), recomputed_ops(block, recompute, True)
    skipped = [o for o in whole if not any(o is x for x in kept)]
    if not skipped:
        return ""
    saved = ops_time(skipped, False)
    return (f"; recompute with torch's early stop (non-reentrant checkpoint, the default since torch 2.1, "
            f"pytorch#96866; under compile the partitioner's dead-code elimination): it ends at the pack of the "
            f"block's last saved tensor, the inputs of its last GEMM (saved before the GEMM runs), so "
            f"{', '.join(o.name for o in skipped)} not run again: {saved * 1e3:.3f} ms per block")


def _selective_op_recomputed(block: list[Op]) -> list[Op]:
    """torchtitan's op-level selective checkpointing (its parallelize_llama's policy): it saves the outputs of
    the matmuls, of the attention kernel and of the TP reduce-scatters, except every second matmul of a block
    (counted in forward order: q k v proj gate up down for llama, q k v proj fc mlp_proj for GPT-2); the rest of
    the forward runs again in the backward: the elementwise ops and the even-numbered matmuls. (DTensor's copy
    before a reduce-scatter feeds only that saved output: not run again.)"""
    out, mm = [], 0
    for o in block:
        if o.kind == "gemm" and o.name not in _CORE_GEMMS:
            mm += 1
            if mm % 2 == 0:
                out.append(o)
        elif o.kind == "elem" and o.name != torch_tp.SCATTER_CAT:
            out.append(o)
    return out
