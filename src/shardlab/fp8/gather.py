"""The float8 all-gather of a converted linear's weight under sharded data parallelism (own zero3, HSDP): the
weight's gather encoding (parallel/dp/shard.py's `GatherEncoding`), so a unit gathering for compute sends
one byte an element instead of the fp32 master's four (bf16's two).

Numerics (tensorwise only): every rank takes the amax of its shard, the unit max-reduces them over the shard
group (4 bytes a weight: the scale's share of fp8/cost.py's `all_gather_bytes`), so every rank casts its
shard with the scale of the whole weight, scale = fmax / amax, exactly as one rank holding the whole weight
casts it; the gathered float8 rows are then that rank's float8 weight, bit for bit. The linear's GEMMs take
them as they are (`gathered`) instead of casting the weight again; the full fp32 storage the parameter
views holds their dequantized values (what the rank has of the weight while it is gathered). Nothing else
changes: the gradient still lands on the fp32 parameter and is reduce-scattered in fp32.

Under own tensor parallelism the same holds for each rank's piece of a weight (`Float8Linear.adopt_piece`):
the amax agreed over the shard group is max-reduced over the TP group as well (`agree_also`; one more small
all-reduce a unit, 4 bytes a weight), which is the amax of the whole logical weight the forward agrees on.

Rowwise and MXFP8 gather the weight as it is: rowwise casts the weight twice (per row for the forward, per
column for the input gradient), and the per-column scales cross the row shards, so a float8 gather would
cast twice (torchao's float8 all-gather is tensorwise only too).
"""
from __future__ import annotations

import torch

from shardlab.fp8.scaling import FORMATS, Quantized, fmax, sample_stats, scale_of


class Float8WeightGather:
    """A tensorwise float8 linear's weight gather encoding; `gathered` is the whole float8 weight (a
    `Quantized`, unpadded rows) from the last encoded gather until the unit reshards."""
    label = "fp8"

    def __init__(self, fmt: str = "e4m3", agree_also=None):
        self.fmt = fmt
        # a TP piece: the agreed amax is max-reduced over the TP group too (the whole logical weight's)
        self.agree_also = agree_also
        self.gathered: Quantized | None = None
        self._scale: torch.Tensor | None = None
        self._stats: dict = {}

    def agree(self, shard: torch.Tensor) -> torch.Tensor:
        return shard.detach().abs().amax().float().reshape(1)

    def nbytes(self, numel: int) -> int:
        return numel

    def encode(self, shard: torch.Tensor, agreed: torch.Tensor) -> torch.Tensor:
        """This rank's shard in float8 with the scale of the whole weight (`agreed`: its amax), as bytes.
        The cast is scaling.quantize's tensorwise one, so the bits equal one rank's."""
        amax = agreed.reshape(())
        scale = scale_of(amax, self.fmt, False)
        rows = shard.reshape(shard.shape[0], -1)
        scaled = rows.float() * scale
        data = scaled.clamp(-fmax(self.fmt), fmax(self.fmt)).to(FORMATS[self.fmt])
        self._scale = scale
        # the weight's sampled statistics come from this rank's shard (one rank's: from the whole weight)
        self._stats = sample_stats(rows, scaled, data, amax, scale, self.fmt) if rows.numel() else {}
        return data.view(torch.uint8)

    def decode(self, rows: torch.Tensor, full: torch.Tensor) -> None:
        """`rows` (world, shard bytes): every rank's float8 shard; into `full` (the padded fp32 storage)
        their dequantized values, and `gathered`: the float8 weight as the GEMMs take it."""
        data = rows.view(FORMATS[self.fmt]).reshape(full.shape)
        inv = self._scale.reciprocal()
        full.copy_(data.float() * inv)
        self.gathered = Quantized(data, inv, self._stats)

    def release(self) -> None:
        self.gathered = None


def gathered_weight(weight: torch.Tensor) -> Quantized | None:
    """The float8 weight the gather encoding of parameter `weight` (the linear's whole weight, or own TP's
    piece of it) holds now, unpadded; None when no encoded gather holds it (the GEMMs cast the weight). A
    view of a parameter (a replicated key/value head's rows) carries no encoding."""
    enc = getattr(weight, "gather_encoding", None)
    q = enc.gathered if enc is not None else None
    if q is None:
        return None
    rows = weight.shape[0]
    return Quantized(q.data[:rows].reshape(weight.shape), q.inv_scale, q.stats)
