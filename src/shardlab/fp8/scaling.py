"""Casting a high-precision tensor to float8 with a dynamic scale, and the sampled statistics of that cast.

The scale maps the largest magnitude of a slice (its amax) onto the format's largest finite value:
scale = fmax / amax (fmax: 448 for e4m3, 57344 for e5m2), the float8 value is saturate(x * scale) rounded to
nearest-even, and the GEMM multiplies its result back by 1/scale (`inv_scale`, what torch._scaled_mm takes).
A slice is the whole tensor (tensorwise) or one row/column along the GEMM's contraction dimension
(rowwise); `pow2` rounds the scale down to a power of two (exact in binary, and amax then lands in
(fmax/2, fmax]). MX blocks (`mx_qdq`) take a power-of-two scale per 32 elements, OCP MX's rule.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
EPS = 1e-12  # amax floor: an all-zero slice gets a large finite scale instead of a division by zero
SAMPLE = 64  # statistics read at most SAMPLE x SAMPLE elements of an operand (a strided grid)
# Beyond these magnitudes the clamp changes a value by more than rounding to nearest would (fmax plus half
# an ulp of the top binade): a scaled amax a rounding error past fmax is not counted as saturating
SATURATES_ABOVE = {"e4m3": 464.0, "e5m2": 61440.0}
E4M3_EMAX = 8  # 448 = 1.75 * 2^8: the exponent of e4m3's largest normal (OCP MX's emax_elem)


@dataclass
class Quantized:
    data: torch.Tensor  # float8, the operand's shape and layout
    inv_scale: torch.Tensor  # fp32: 0-dim (tensorwise), or keepdim-shaped along the contraction dim
    stats: dict = field(default_factory=dict)  # tensors (no host sync): amax, scale, underflow, saturated


def fmax(fmt: str) -> float:
    return torch.finfo(FORMATS[fmt]).max


def tensor_amax(t: torch.Tensor) -> torch.Tensor:
    return t.detach().abs().amax().float()


def scale_of(amax: torch.Tensor, fmt: str, pow2: bool) -> torch.Tensor:
    """fmax / amax in float64 (so eager and compiled agree), then fp32; rounded down to 2^k when `pow2`."""
    s = (fmax(fmt) / amax.double().clamp(min=EPS)).float()
    return torch.exp2(torch.floor(torch.log2(s))) if pow2 else s


def quantize(t: torch.Tensor, fmt: str, dim: int | None, pow2: bool = False, stats: bool = False,
             amax: torch.Tensor | None = None) -> Quantized:
    """`t` (2-D) in float8 format `fmt`: one scale for the whole tensor (dim=None) or one per slice along
    `dim` (the amax is taken over `dim`, keepdim: a (M, K) operand with dim=1 gets (M, 1) scales). `amax`
    given: the tensorwise amax of the whole tensor `t` is a piece of (tensor parallelism: reduced over the
    group, so every rank casts with the scale one rank holding the whole tensor would)."""
    a = amax if amax is not None else t.abs().amax() if dim is None else t.abs().amax(dim=dim, keepdim=True)
    scale = scale_of(a.float(), fmt, pow2)
    scaled = t.float() * scale
    data = scaled.clamp(-fmax(fmt), fmax(fmt)).to(FORMATS[fmt])
    q = Quantized(data, scale.reciprocal())
    if stats:
        q.stats = sample_stats(t, scaled, data, a, scale, fmt)
    return q


@torch.no_grad()
def sample_stats(t, scaled, data, amax, scale, fmt: str) -> dict:
    """amax and scale of the cast (the smallest scale: the slice nearest saturation), and on a strided grid of
    at most SAMPLE x SAMPLE elements the fraction of elements that underflow (non-zero, cast to 0) and that
    saturate (clamped by more than rounding would move them). Tensors: reading them (a host sync) is the caller's choice."""
    r, c = max(1, -(-t.shape[0] // SAMPLE)), max(1, -(-t.shape[1] // SAMPLE))
    x, xs, q = t[::r, ::c], scaled[::r, ::c], data[::r, ::c].float()
    return {"amax": amax.max().float(), "scale": scale.min(),
            "underflow": ((q == 0) & (x != 0)).float().mean(),
            "saturated": (xs.abs() > SATURATES_ABOVE[fmt]).float().mean()}


def mx_qdq(t: torch.Tensor, dim: int, block: int = 32, stats: bool = False):
    """OCP MX (MXFP8, e4m3 elements) quantize-dequantize of 2-D `t` along `dim` in blocks of `block`: each
    block's scale is 2^(floor(log2 amax) - 8), stored as an e8m0 exponent (torch.float8_e8m0fnu), elements
    saturate to +-448. Returns the dequantized fp32 tensor and the statistics dict (None unless `stats`)."""
    x = t.float().movedim(dim, -1)
    n = x.shape[-1]
    pad = -n % block
    if pad:
        x = torch.nn.functional.pad(x, (0, pad))
    xb = x.reshape(*x.shape[:-1], -1, block)
    amax = xb.abs().amax(dim=-1, keepdim=True)
    exp = torch.floor(torch.log2(amax.clamp(min=2.0 ** -127))) - E4M3_EMAX
    scale_e8m0 = torch.exp2(exp.clamp(-127, 127)).to(torch.float8_e8m0fnu)  # exact: a power of two
    inv = scale_e8m0.float()
    scaled = xb / inv
    q = scaled.clamp(-fmax("e4m3"), fmax("e4m3")).to(torch.float8_e4m3fn)
    deq = (q.float() * inv).reshape(x.shape)[..., :n].movedim(-1, dim)
    if not stats:
        return deq, None
    flat = lambda v: v.reshape(x.shape)[..., :n]  # noqa: E731 (blocks back to the 2-D operand)
    return deq, sample_stats(flat(xb), flat(scaled), flat(q), amax, inv.reciprocal(), "e4m3")
