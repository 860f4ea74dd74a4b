"""What tensor parallelism sends, as formulas: the one place the planner (plan/comm.py), the bench and the
tests take TP's bytes from (docs/tp.md).

Megatron's f/g pairs: each block enters and leaves its attention and its MLP with one (tokens, d_model)
activation, an all-reduce each way (g forward, f backward), or under sequence parallelism an all-gather in
and a reduce-scatter out; the vocab-parallel embedding adds one forward and the head one backward. The
vocab-parallel loss sends 3 fp32 numbers per token (max; target logit and sum of exp), not tokens x vocab.
"""
from __future__ import annotations

LOSS_BYTES_PER_TOKEN = 3 * 4  # max, then the target logit and the sum of exp, stacked: fp32
GRAD_NORM_BYTES = 8  # the clipped norm's partial sums (split, copied) in one float64 or two fp32


def region_calls(layers: int, micro_batches: int = 1, recompute: bool = False) -> int:
    """Region collectives per step: 4 per block (2 forward, 2 backward), +2 when recomputation reruns the
    forward's (own TP's go through comm, outside the recompute policy's cache), and the embedding's forward
    and the head's backward, per micro batch."""
    return (layers * (4 + (2 if recompute else 0)) + 2) * micro_batches


def sp_replicated_numel(n_layer: int, d_model: int, max_seq_len: int, arch: str = "gpt2") -> int:
    """Elements of what TP keeps whole and SP makes partial per rank (summed over tp after backward):
    GPT-2's LayerNorm gains and biases, the row-parallel biases, the position table; Llama's RMSNorm gains."""
    if arch == "llama":
        return (2 * n_layer + 1) * d_model
    return 6 * n_layer * d_model + 2 * d_model + max_seq_len * d_model


def comm_bytes_per_step(n_layer: int, d_model: int, max_seq_len: int, tokens: int, sp: bool,
                        elem_bytes: int = 4, grad_norm: bool = False, arch: str = "gpt2",
                        kv_replicated: int = 0) -> dict[str, int]:
    """Payload bytes (comm's convention) own TP sends per rank for `tokens` = batch x sequence tokens through
    one forward, backward and finish_backward, by op: the region collectives, the loss's max and stacked
    sums, SP's flat gradient all-reduce, and `grad_norm()`'s float64 scalar. `kv_replicated` elements of
    replicated key/value weights (grouped-query attention with fewer key/value heads than ranks) join the
    flat all-reduce after backward. SwiGLU and GQA change no region: each still enters and leaves with one
    (tokens, d_model) activation."""
    regions = region_calls(n_layer) * tokens * d_model * elem_bytes
    loss = LOSS_BYTES_PER_TOKEN * tokens
    norm = GRAD_NORM_BYTES if grad_norm else 0
    kv = kv_replicated * elem_bytes
    if not sp:
        return {"all_reduce": regions + loss + norm + kv}
    sp_grads = sp_replicated_numel(n_layer, d_model, max_seq_len, arch) * elem_bytes
    return {"all_reduce": loss + sp_grads + kv + norm, "all_gather": regions, "reduce_scatter": regions}
