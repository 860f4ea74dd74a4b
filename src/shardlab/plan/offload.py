"""Activations offloaded to host memory (`Layout.offload_activations`): what stays on the GPU and the waits the copies
cause, as Transformer Engine's CPU offloading runs them (Megatron-Core's `cpu_offloading_num_layers`).

Transformer Engine's default schedule (transformer_engine.pytorch get_cpu_offload_context; its docs,
docs/features/other_optimizations/cpu_offloading, "Default Offloading Scheduling"), for N of L blocks:
- the first N blocks' saved tensors are copied to host memory on a stream of their own, each copy starting as soon
  as its tensors are saved; the copies run one after another;
- at most L - N blocks' activations are on the GPU at any time: a block's forward waits until enough earlier copies
  have finished, and in the backward a block's reload starts only when a later block's backward has freed a slot;
- a reloaded block's backward waits for its reload.
So the memory is L - N blocks' activations, and the time is the waits: none while a copy takes no longer than the
blocks it has to hide behind. The copy runs at the host link's rate (the cluster's `pcie_bw`: PCIe, or the Grace
superchips' NVLink-C2C). Megatron-Core refuses it with pipeline parallelism and with recomputation
(transformer_config.py), so the planner does too (Layout.check).
"""
from __future__ import annotations


def kept_layers(layers: int, lay) -> int:
    """Blocks whose activations stay on the GPU (TE's limit: at most L - N sets at any time)."""
    return layers - lay.offload_activations


def waits(f: float, b: float, c: float, layers: int, n: int) -> tuple[float, float]:
    """(forward, backward) seconds one micro batch waits on the copies: `f` and `b` a block's forward and backward
    seconds, `c` one block's copy (either way), `n` of `layers` blocks offloaded, on TE's default schedule."""
    if n <= 0:
        return 0.0, 0.0
    k = layers - n  # activation sets the GPU may hold
    t = stream = 0.0
    done = []  # when block i's copy to host ends
    for j in range(layers):
        need = j - (k - 1)  # copies that must have ended before block j may start
        if need >= 1:
            t = max(t, done[need - 1])
        start, t = t, t + f
        if j < n:
            stream = max(start, stream) + c
            done.append(stream)
    fwd_wait = t - layers * f
    t0, reloaded = t, {}
    for i in range(layers - 1, -1, -1):
        if i < n:
            t = max(t, reloaded[i])
        t += b
        r = i - k  # the block whose reload the slot just freed lets start
        if 0 <= r < n:
            stream = max(t, stream) + c
            reloaded[r] = stream
    return max(0.0, fwd_wait), max(0.0, (t - t0) - layers * b)  # (no float residue below zero)


def seconds(per_layer_bytes: float, layers: int, fwd: float, bwd: float, lay, cluster) -> tuple[float, float, str]:
    """(forward wait, backward wait, why) per micro batch: the passes' seconds spread evenly over the blocks."""
    n = lay.offload_activations
    if not n:
        return 0.0, 0.0, ""
    c = per_layer_bytes / cluster.pcie_bw
    wf, wb = waits(fwd / layers, bwd / layers, c, layers, n)
    why = (f"activations of {n} of {layers} blocks offloaded (Transformer Engine's schedule: at most {layers - n} "
           f"blocks' on the GPU): a copy {per_layer_bytes / 1e9:.3f} GB / {cluster.pcie_bw / 1e9:.0f} GB/s = "
           f"{c * 1e3:.3f} ms against a block's {fwd / layers * 1e3:.3f} ms forward, {bwd / layers * 1e3:.3f} ms "
           f"backward: waits {wf * 1e3:.3f} + {wb * 1e3:.3f} ms")
    return wf, wb, why
