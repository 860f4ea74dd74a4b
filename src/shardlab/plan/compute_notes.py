"""--explain's words for the kernels a micro batch's block runs beside shardlab's own op list: torchtitan's llama
kernels, torch's ring-attention merge, the dropout kernels (plan/compute.py times them; these say what they cost)."""
from __future__ import annotations

from .ops import Op


def titan_note(block: list[Op], head: list[Op], ops_time) -> str:
    """--explain's words for torchtitan's llama kernels (TrainSpec.llama_impl, plan/ops.py)."""
    # torchtitan's kernels replace the head-merge copy: a block with one ran shardlab's (compiled: fusion.py's count)
    ours = [] if any(o.name == "merge_heads" for o in block) else [o for o in block if o.name in ("rope", "repeat_kv")]
    up = [o for o in head if o.name == "logits_float"]

    def words(ops, where):
        return [f"{o.name} {ops_time([o], False) * 1e3:.3f} / {ops_time([o], True) * 1e3:.3f} ms {where}" for o in ops]
    said = words(ours, "per block") + words(up, "in the head (once)")
    if not said:
        return ""
    return ("; torchtitan's llama kernels (llama_impl=torchtitan: rope in complex fp32, repeat_kv's copies of k "
            "and v, no head-merge copy; the logits cast to fp32 before the loss), forward / backward: "
            + ", ".join(said))


def z_loss_note(head: list[Op], ops_time) -> str:
    """--explain's words for the eager z-loss's passes over the fp32 logits (TrainSpec.z_loss), "" without it."""
    z = [o for o in head if o.name == "z_loss"]
    if not z:
        return ""
    return (f"; the eager z-loss (logsumexp of the fp32 logits, squared: {z[0].bytes / 1e9:.2f} GB forward, "
            f"{z[0].bwd_bytes / 1e9:.2f} GB backward) {ops_time(z, False) * 1e3:.3f} / {ops_time(z, True) * 1e3:.3f} "
            "ms in the head (once)")


def ring_note(block: list[Op], ops_time, compiled: bool = False) -> str:
    """--explain's words for torch's ring attention merge kernels (cp_impl=torch), "" without them."""
    merge = [o for o in block if o.name == "cp_merge"]
    if not merge:
        return ""
    return (f"; torch's ring attention (cp_impl=torch): its merge and fp32 accumulation kernels"
            f"{' (compiled: fused by Inductor, k/v cats after the first step dropped as dead code)' if compiled else ''} "
            f"{ops_time(merge, False) * 1e3:.3f} ms forward, {ops_time(merge, True) * 1e3:.3f} ms backward per "
            f"block ({merge[0].bytes / 1e9:.2f} / {merge[0].bwd_bytes / 1e9:.2f} GB)")


def dropout_note(block: list[Op], ops_time) -> str:
    """--explain's words for the dropout kernels of a block (attention probabilities, the residuals' masks)."""
    drop = [o for o in block if o.name == "attn_dropout"]
    res = [o for o in block if o.name == "residual"]
    if not drop and not res:
        return ""
    f, b = ops_time(drop, False), ops_time(drop, True)
    return ("; dropout kernels (TrainSpec.dropout): " + (f"attention probabilities {f * 1e3:.3f} ms forward, "
            f"{b * 1e3:.3f} ms backward per block (native_dropout over b*a*s*s: 2e + 1 B each way), " if drop else "")
            + "1-byte masks in the bias-dropout-adds")
