"""What torch.compile (`train.compile`) does to a block's op list on a GPU preset: Inductor's fusion.

torch.compile wraps each transformer block (torchtitan's `apply_compile`: `torch.compile(block, fullgraph=True)`
per TransformerBlock; shardlab's trainer the same), so the embedding, the final norm, the head and the loss stay
eager, and nothing fuses across two blocks. Inside a block TorchDynamo captures the graph, AOTAutograd traces the
forward and the backward into one joint graph and cuts it in two (the min-cut rematerialization partitioner, whose
"recomputable ops" are the pointwise ones: what the backward needs of a pointwise chain it may compute again from
the chain's inputs instead of saving), and Inductor lowers each half: a chain of pointwise ops, and a reduction
with the pointwise ops around it, becomes one generated kernel that reads the chain's external inputs once and
writes its outputs once. The matmuls and SDPA's attention kernels stay library ("extern") kernels: their FLOPs and
bytes do not change, and nothing fuses into them.

On ops.py's op list (bytes per element of the b*s*h activation, e bytes each, unless said):
  norm            one kernel, 2 tensors forward (x in, y out), the planner's fused-norm count (backward 2x);
                  Meta's eager RMSNorm's seven fp32 kernels (EAGER_NORM_BYTES, 36 and 76 B) become that one
  residual + norm the add before a block's second norm and the norm fuse: x and the branch read, x' and y
                  written (the norm's read of x' is gone); backward: the norm's dx and the residual stream's
                  gradient sum in one kernel (x', dy, the stream's gradient read, its sum written, the weight's
                  gradient reduction reading x' and dy again)
  rope            q and k read once, written once: 2 tensors where eager moves 6; the backward (a rotation) the
                  same 2
  swiglu          silu(gate) * up: gate, up read, the product written, 3 tensors of b*s*ffn/t where eager
                  moves 5; backward: gate, up and the product's gradient read, both gradients written, 5 (silu
                  recomputed in the kernel, as the partitioner's recomputation allows)
  the rest        GEMMs, attention, the heads' layout copies (between two extern kernels), the residual at a
                  block's end (its consumer, the next norm, is in the next block's graph), GELU (alone between
                  two GEMMs) and the bias gradients: as eager
Kernels: each op above is one kernel, so launch gaps count fewer (compute.block_kernels).

Float8 (train.fp8) under compile, after torchao's own roofline of its float8 linear (torchao
`torchao/testing/training/roofline_utils.py`, `get_tensor_memory_traffic_ovhd_s`; `benchmarks/float8/
float8_roofline.py`: "assume for float8 activations/gradients that torch.compile will fuse to the preceding
op"): an activation or gradient operand's scaling pass fuses into the kernel that produced it when that kernel is
one Inductor generated in the same graph; here it is not for the attention output (proj's input: SDPA is extern),
llama's v gradient (SDPA's backward writes it) and the block's incoming gradient (down's or mlp_proj's output
gradient comes from the next block's graph). Per operand element (a: activation bytes, w: the weight's):
  tensorwise  x: amax (a, or 0 fused), one cast read (a) writing both layouts (1 + 1), in the forward;
              g: the same in the backward; W: amax (w) + a cast per pass (w + 1 each), none when gathered
              in float8
  rowwise     x: (a, or 0 fused) + 1 + a (the float8 rows and a transposed copy), then a + 1 in the backward;
              g: both in the backward; W: w + 1 forward, a transpose (2w) and w + 1 backward
  mxfp8       x: (a, or 0 fused) + 1 forward, a + 1 backward; g: both backward; W: w + 1 in each pass
Eager keeps shardlab/fp8/cost.py's cast_bytes (each operand read and written once per GEMM it enters).

Memory is not changed: which pointwise outputs the partitioner saves or recomputes depends on its min-cut at
the graph's exact sizes; no published account of it for these blocks was found to count from.
"""
from __future__ import annotations

from dataclasses import replace

# ops whose input (x) or output gradient (g) an extern kernel or another graph produces: no scaling fusion
X_UNFUSED = frozenset({"proj"})
G_UNFUSED_LLAMA = frozenset({"v", "down"})
G_UNFUSED_GPT = frozenset({"mlp_proj"})
FUSED_RESIDUAL = "residual+ln_2"


def applies(train, c) -> bool:
    """compile is on and the cluster is a roofline (a GPU preset): a calibrated profile measured the eager
    ops themselves, so there nothing changes (CPU profiles, `cluster=this`)."""
    return bool(getattr(train, "compile", False)) and not (c.gemm_table or c.gemm_fit or c.overhead)


def compiled_block(block: list, model, b: int, s: int, t: int, e: int, sp: bool = False) -> list:
    """The block's ops as Inductor runs them (module docstring): fused groups replace the eager ops."""
    T, h = b * s, model.d_model
    Tn = T // (t if sp else 1)  # sequence parallelism: the norms on s/t tokens
    out = []
    for o in block:
        if o.ew == "ln":
            o = replace(o, bytes=2 * Tn * h * e, bwd_bytes=None)  # one kernel: x in, y out; backward 2x
            if o.name == "ln_2" and out and out[-1].name == "residual":
                res, x = out.pop(), Tn * h * e  # x: the residual's output the norm no longer reads back
                o = replace(o, name=FUSED_RESIDUAL, bytes=res.bytes + o.bytes - x,
                            bwd_bytes=res.bwd_bytes + 2 * o.bytes - 2 * x)
        elif o.name == "rope":  # eager: 6 tensor passes of q and k; fused: read and write each once
            o = replace(o, bytes=o.bytes / 3, bwd_bytes=o.bytes / 3)
        elif o.name == "swiglu":  # eager: 5 passes of b*s*ffn/t; fused: 3 forward, 5 backward
            o = replace(o, bytes=o.bytes * 3 / 5, bwd_bytes=o.bytes)
        out.append(o)
    return out


def _operand(role: str, recipe: str, fused: bool, a: int, w: int, gathered: bool) -> tuple[float, float]:
    """(forward, backward) bytes per element of one operand's float8 scaling and casts under compile."""
    first = 0 if fused else a  # the pass over the operand the producer's kernel absorbs
    if role == "w":
        if gathered:
            return 0.0, 0.0
        return {"tensorwise": (w + w + 1, w + 1), "rowwise": (w + 1, 2 * w + w + 1),
                "mxfp8": (w + 1, w + 1)}[recipe]
    if recipe == "tensorwise":
        both = first + a + 2
        return (both, 0.0) if role == "x" else (0.0, both)
    if recipe == "rowwise":
        k1, k2 = first + 1 + a, a + 1
    else:  # mxfp8
        k1, k2 = first + 1, a + 1
    return (k1, k2) if role == "x" else (0.0, k1 + k2)


def cast_bytes(op, recipe: str, llama: bool, a: int, w: int, gathered: bool, backward: bool) -> float:
    """Bytes one converted linear's float8 scaling and casts move in one pass under compile (module docstring)."""
    m, n, k = op.shape  # (tokens, out, in)
    g_unfused = G_UNFUSED_LLAMA if llama else G_UNFUSED_GPT
    parts = [(m * k, _operand("x", recipe, op.name not in X_UNFUSED, a, w, gathered)),
             (n * k, _operand("w", recipe, False, a, w, gathered)),
             (m * n, _operand("g", recipe, op.name not in g_unfused, a, w, gathered))]
    return float(sum(numel * fb[1 if backward else 0] for numel, fb in parts))


def note(eager: list, compiled: list, f_eager: float, f_comp: float, b_eager: float, b_comp: float,
         kernels: tuple, eager_kernels: tuple) -> str:
    """--explain's line: what compile changed per block, in bytes, kernels and milliseconds."""
    def mb(ops, bw):
        return sum(o.count * ((2 * o.bytes if o.bwd_bytes is None else o.bwd_bytes) if bw else o.bytes)
                   for o in ops if o.kind == "elem") / 1e6
    return (f"; torch.compile per block (Inductor fusion): elementwise {mb(eager, False):.1f} -> "
            f"{mb(compiled, False):.1f} MB forward, {mb(eager, True):.1f} -> {mb(compiled, True):.1f} MB backward, "
            f"kernels {eager_kernels[0]}+{eager_kernels[1]} -> {kernels[0]}+{kernels[1]}, block "
            f"{f_eager * 1e3:.3f} -> {f_comp * 1e3:.3f} ms forward, {b_eager * 1e3:.3f} -> {b_comp * 1e3:.3f} ms "
            f"backward")
