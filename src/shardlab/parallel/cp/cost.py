"""What context parallelism sends, as formulas: the one place the planner (plan/comm.py), the bench and the
tests take its bytes from (docs/context.md). Pure arithmetic: no torch import.

Ring (parallel/cp/ring.py), per rank, layer and microbatch: forward cp-1 K/V blocks, backward cp-1 blocks and
cp dK/dV accumulators (fp32 or wider), a block being 2 x b x (s/cp) x (K/V width) elements; a full recompute
repeats the forward ring.

Ulysses (parallel/cp/ulysses.py), per rank, layer and microbatch, on comm's convention (an all-to-all's
`bytes` is its whole input, this rank's own piece included; the wire carries (U-1)/U of it): forward q, k, v
and the output, each (b, heads, s/cp, d) locally; backward the same four; a full recompute repeats the
forward's. q and the output carry h = n_head/tp heads, k and v g = max(n_kv_heads/tp, 1) heads, or U when
g < U (replicated). Constant in U for a fixed s/cp: the family's point.

The hybrid: Ulysses over U ranks (the formula above with U) and the ring over R = cp/U groups on h/U query
heads and kv_heads(g, U)/U key/value heads of the group's s/R tokens.

Memory (`a2a_buffer_bytes`): what Ulysses holds beyond the model's own activations. Transient, one layer at a
time: the all-to-all's send and receive copies of q, k and v. Saved for backward, every layer: the replicated
K/V heads' extra copies (g' = U > g heads gathered instead of g).

Where a split is worth planning (`worth_splitting`): the planner's search and `layout=auto` consider cp > 1
only for sequences of at least LONG_SEQ tokens that leave every rank at least MIN_LOCAL of them (shorter ones
fit one rank's memory, and their per-rank attention is too small to hide the exchanges behind).
"""
from __future__ import annotations


def kv_heads(kv: int, degree: int) -> int:
    """K/V heads that enter the all-to-all: `kv` when the degree divides it, else `degree` (replicated)."""
    return kv if kv % degree == 0 else degree


def a2a_bytes(batch: int, seq: int, heads: int, kv: int, head_dim: int, degree: int, cp: int, elem: int,
              layers: int, recompute: bool = False) -> dict[str, int]:
    """Payload bytes per rank per microbatch of Ulysses' all-to-alls by tag (`cp.a2a` forward, `cp.a2a_bwd`
    backward): `heads`, `kv` per tensor-parallel rank, `degree` = U, `cp` ranks share each sequence."""
    per = batch * (seq // cp) * head_dim * elem * (2 * heads + 2 * kv_heads(kv, degree))
    return {"cp.a2a": per * layers * (2 if recompute else 1), "cp.a2a_bwd": per * layers}


def ring_bytes(batch: int, seq: int, kv_width: int, ring: int, elem: int, layers: int, recompute: bool = False,
               acc_elem: int = 4) -> dict[str, int]:
    """Send bytes per rank per microbatch of the ring over `ring` ranks by tag, each holding seq/ring tokens
    (`kv_width` = K/V heads x head_dim it carries): forward cp.kv, backward cp.kv_bwd and cp.dkv."""
    block = 2 * batch * (seq // ring) * kv_width
    fwd = (ring - 1) * block * elem * layers
    return {"cp.kv": fwd * (2 if recompute else 1), "cp.kv_bwd": fwd,
            "cp.dkv": ring * block * max(acc_elem, elem) * layers}


def hybrid_bytes(batch: int, seq: int, heads: int, kv: int, head_dim: int, cp: int, u: int, elem: int,
                 layers: int, recompute: bool = False) -> dict[str, int]:
    """Ulysses over `u` ranks plus the ring over cp/u groups, by tag (sends and all-to-all payloads)."""
    out = a2a_bytes(batch, seq, heads, kv, head_dim, u, cp, elem, layers, recompute)
    if cp // u > 1:
        out |= ring_bytes(batch, seq, kv_heads(kv, u) // u * head_dim, cp // u, elem, layers, recompute)
    return out


def comm_bytes(impl: str, batch: int, seq: int, heads: int, kv: int, head_dim: int, cp: int, u: int, elem: int,
               layers: int, recompute: bool = False) -> dict[str, int]:
    """The spec's cost hook: bytes per rank per microbatch by tag of implementation `impl` (own and torch:
    the ring over cp; ulysses: all-to-all over cp; hybrid: both, Ulysses over `u`)."""
    if impl == "ulysses":
        return a2a_bytes(batch, seq, heads, kv, head_dim, cp, cp, elem, layers, recompute)
    if impl == "hybrid":
        return hybrid_bytes(batch, seq, heads, kv, head_dim, cp, u, elem, layers, recompute)
    return ring_bytes(batch, seq, kv * head_dim, cp, elem, layers, recompute)


def sync_points(impl: str, cp: int, u: int, layers: int, recompute: bool = False) -> dict[str, int]:
    """Waits per rank and microbatch at which a rank blocks on its cp peers after computing, by family
    ("a2a", "ring"): on shared or skewed ranks each such wait absorbs the peers' drift over the compute
    segment before it (the planner's sync wait), where a message's latency is paid per call. Counted from
    the code, not fitted. Ulysses per layer: forward, q, k and v's all-to-alls back to back (one wait: no
    compute between them), then the output's; backward the output gradient's, then dq, dk, dv's back to back
    (one wait): 4 (+2 under full recompute). The ring over R ranks per layer: forward R-1 waits for the next
    K/V block; backward R steps, each waiting for the next block and the dK/dV accumulator together: 2R-1
    (+R-1 under full recompute). The hybrid: both, the ring over R = cp/U inside Ulysses' exchanges."""
    again = 2 if recompute else 1
    r = cp if impl not in ("ulysses", "hybrid") else cp // u if impl == "hybrid" else 1
    out = {"a2a": (2 * again + 2) * layers} if impl in ("ulysses", "hybrid") else {}
    if r > 1:
        out["ring"] = ((r - 1) * again + r) * layers
    return out


LONG_SEQ = 4096  # tokens: below this a sequence is not split in the planner's search
MIN_LOCAL = 512  # tokens each cp rank must keep


def worth_splitting(seq: int, cp: int) -> bool:
    """Whether the planner's search considers splitting a `seq`-token sequence over `cp` ranks."""
    return seq >= LONG_SEQ and seq // cp >= MIN_LOCAL


def a2a_buffer_bytes(batch: int, seq: int, heads: int, kv: int, head_dim: int, degree: int, cp: int, elem: int,
                     layers: int) -> dict[str, int]:
    """Ulysses' memory beyond the model's activations, per rank (the module's docstring): `transient` (one
    layer's send and receive copies of q, k, v) and `saved` (the replicated K/V copies over `layers`)."""
    local = batch * (seq // cp) * head_dim * elem
    g = kv_heads(kv, degree)
    return {"transient": 2 * local * (heads + 2 * g), "saved": 2 * local * (g - kv) * layers}
