"""The three GEMMs of a float8 linear as one autograd Function, each through torch._scaled_mm (CPU and CUDA
alike) or, for an emulated recipe (MXFP8), through quantize-dequantize and an fp32 matmul.

For y = x W^T (x: (M, K) tokens by in-features, W: (N, K)) with output gradient g (M, N):
    forward      y  = x   @ W^T   contraction over K
    grad input   dx = g   @ W     contraction over N
    grad weight  dW = g^T @ x     contraction over M (the tokens)
Every operand is scaled along the contraction dimension of its GEMM (rowwise: per row of the left operand,
per column of the right one), so the rowwise recipe casts W twice (per row of W for y, per column for dx)
and x and g twice, as torchao does; tensorwise casts are the same for both uses of an operand.
torch._scaled_mm wants the left operand row-major and the right one column-major (cuBLAS's TN layout);
on CUDA the contraction dimension must be a multiple of 16 (the tokens of dW are padded with zeros, which
change nothing) and rowwise scaling returns bf16 (cast afterwards).
"""
from __future__ import annotations

import contextlib

import torch

from shardlab.fp8.recipes import Recipe
from shardlab.fp8.scaling import Quantized, mx_qdq, quantize, tensor_amax


@contextlib.contextmanager
def _cpu_scaled_mm():
    """torch 2.13 sends a CPU _scaled_mm with equal float8 operand dtypes to oneDNN whenever the CPU has
    AMX-INT8; without float8 hardware oneDNN runs a reference kernel, measured ~300x slower than the
    dequantize-and-matmul path it takes otherwise (a 2048x256x1024 GEMM: 17 s against 0.06 s), with
    bitwise-equal results. Disabling oneDNN for the call picks the fast path; CUDA is not affected."""
    prev = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(prev)


def _pad_contraction(a: torch.Tensor, b: torch.Tensor, multiple: int = 16):
    """Zero-pad K of a (M, K) row-major and b (K, N) column-major to a multiple of `multiple` (CUDA)."""
    k = a.shape[1]
    extra = -k % multiple
    if not extra:
        return a, b
    a2 = torch.zeros(a.shape[0], k + extra, dtype=a.dtype, device=a.device)
    a2[:, :k] = a
    bt = torch.zeros(b.shape[1], k + extra, dtype=b.dtype, device=b.device)
    bt[:, :k] = b.t()
    return a2, bt.t()


def scaled_mm(qa: Quantized, qb: Quantized, out_dtype: torch.dtype, rowwise: bool) -> torch.Tensor:
    a, b = qa.data.contiguous(), qb.data.t().contiguous().t()  # row-major left, column-major right
    if a.device.type == "cpu":
        with _cpu_scaled_mm():
            return torch._scaled_mm(a, b, scale_a=qa.inv_scale, scale_b=qb.inv_scale, out_dtype=out_dtype)
    a, b = _pad_contraction(a, b)
    mm_dtype = torch.bfloat16 if rowwise else out_dtype  # the CUTLASS rowwise kernel writes bf16
    y = torch._scaled_mm(a, b, scale_a=qa.inv_scale, scale_b=qb.inv_scale, out_dtype=mm_dtype)
    return y.to(out_dtype)


def gemm(a: torch.Tensor, b: torch.Tensor, fmt_a: str, fmt_b: str, recipe: Recipe, out_dtype,
         record: tuple = (None, None), stats: dict | None = None, amax: tuple = (None, None),
         qb: Quantized | None = None) -> torch.Tensor:
    """a (M, K) @ b (K, N) with both operands cast per `recipe`; `record` names the operands whose cast
    statistics go into `stats` (None: not recorded); `amax` the tensorwise amaxes agreed over a group
    (None: each operand's own); `qb`: b already cast (tensorwise: a float8 all-gather's weight)."""
    if 0 in (a.shape[0], a.shape[1], b.shape[1]):  # an expert without tokens
        return torch.zeros(a.shape[0], b.shape[1], dtype=out_dtype, device=a.device)
    want_a, want_b = stats is not None and record[0], stats is not None and record[1]
    if recipe.granularity == "block":
        (da, sa), (db, sb) = mx_qdq(a, 1, recipe.block, bool(want_a)), mx_qdq(b, 0, recipe.block, bool(want_b))
        for want, s, name in ((want_a, sa, record[0]), (want_b, sb, record[1])):
            if want:
                stats[name] = s
        return (da @ db).to(out_dtype)
    row = recipe.granularity == "row"
    qa = quantize(a, fmt_a, 1 if row else None, recipe.pow2_scales, bool(want_a), amax[0])
    if qb is None:
        qb = quantize(b, fmt_b, 0 if row else None, recipe.pow2_scales, bool(want_b), amax[1])
    for want, q, name in ((want_a, qa, record[0]), (want_b, qb, record[1])):
        if want:
            stats[name] = q.stats
    return scaled_mm(qa, qb, out_dtype, row)


def agreed_amax(group, *tensors: torch.Tensor) -> tuple:
    """The tensorwise amaxes of `tensors` as one rank holding the whole tensors would find them: each
    rank's amax of its piece, max-reduced over `group` in one collective (tensor parallelism: a weight split
    by rows or columns, an activation or gradient split by features). (None, ...) without a group: each
    GEMM takes its operands' own amax."""
    if group is None:
        return (None,) * len(tensors)
    from shardlab import comm

    amax = torch.stack([tensor_amax(t) for t in tensors])
    comm.all_reduce(amax, op=comm.ReduceOp.MAX, group=group, tag="fp8 amax")
    return tuple(amax.unbind())


class Float8Matmul(torch.autograd.Function):
    """y = x W^T with the forward, input-gradient and weight-gradient GEMMs in float8. x is 2-D; W stays
    the fp32 master (cast afresh in every GEMM: nothing float8 is kept between forward and backward, so
    recompute sees the same casts). Autocast is off inside: the recipe decides every dtype here. `group`
    (tensorwise under tensor parallelism): the amaxes are agreed over it, two collectives a linear (x and W
    in the forward, the output gradient in the backward); rowwise and MX slices never cross a split.
    `held` (tensorwise): a callable giving W already in float8 (a float8 all-gather's, cast with W's
    tensorwise scale: the same bits) or None; asked in the forward and again in the backward, after the
    backward's gather."""

    @staticmethod
    def forward(ctx, x, weight, recipe: Recipe, out_dtype, stats: dict | None, group=None, held=None):
        group = group if recipe.granularity == "tensor" else None
        held = held if recipe.granularity == "tensor" else None
        qw = held() if held is not None else None
        ax, aw = agreed_amax(group, x, weight)  # (a float8 all-gather's weight comes without TP: no group)
        ctx.save_for_backward(x, weight)
        ctx.recipe, ctx.stats, ctx.group, ctx.amax, ctx.held = recipe, stats, group, (ax, aw), held
        with torch.autocast(x.device.type, enabled=False):
            return gemm(x, weight.t(), recipe.input, recipe.weight, recipe, out_dtype, ("input", "weight"), stats,
                        (ax, aw), None if qw is None else Quantized(qw.data.t(), qw.inv_scale, qw.stats))

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        r, dx, dw = ctx.recipe, None, None
        (ag,), (ax, aw) = agreed_amax(ctx.group, g), ctx.amax
        qw = ctx.held() if ctx.held is not None else None
        with torch.autocast(x.device.type, enabled=False):
            if ctx.needs_input_grad[0]:
                dx = gemm(g, weight, r.grad, r.weight, r, x.dtype, ("grad", None), ctx.stats, (ag, aw), qw)
            if ctx.needs_input_grad[1]:  # records g's cast when dx was not asked for
                record = (None if ctx.needs_input_grad[0] else "grad", None)
                dw = gemm(g.t(), x, r.grad, r.input, r, weight.dtype, record, ctx.stats, (ag, ax))
        return dx, dw, None, None, None, None, None
