"""What FP8 training (train.fp8) changes in a plan, through the float8 layer's cost hooks (its spec,
parallel/fp8_spec.py, names them; their formulas are shardlab/fp8/cost.py):

- compute: the converted linears' GEMMs (the block linears: q, k, v, proj and the MLP's) at the cluster's FP8
  dense peak (`peak_flops_fp8`; none, e.g. a CPU: the 16-bit rate) times the fraction an FP8 GEMM sustains
  (`gemm_efficiency_fp8`; 0: the 16-bit GEMMs' `gemm_efficiency`) plus their casts at memory bandwidth;
  attention, the head and everything elementwise as before;
- the zero3 all-gather: the converted weights in float8 plus one fp32 scale each, for tensorwise (the float8
  all-gather of own zero3 / HSDP and torchao under torch-fsdp2); rowwise and MXFP8 gather as before;
- memory: the scales of one micro batch's casts (a line of its own).
"""
from __future__ import annotations

import functools
import importlib

from shardlab.fp8.cost import cast_bytes

from . import attention, fp8_rowwise, moe
from .attention import generation
from .layout import stage_layers

CONVERTED = frozenset({"q", "k", "v", "proj", "fc", "mlp_proj", "gate", "up", "down",  # ops.py's op names
                       "shared_gate", "shared_up", "shared_down",  # an MoE block's shared expert
                       "q_down", "q_up", "kv_down", "kv_up"})  # latent attention's
# MXFP8's block-scaled GEMM kernels against tensorwise FP8's on the same GPU, the operands quantized beforehand:
# 6.812 ms against 7.161 ms of GEMMs per layer of a 5B model (h 4,096, 24 layers, 15,872 tokens; Fprop, Dgrad and
# Wgrad) on a B300 (Transformer Engine docs/examples/gemm_profiling/gemm_profiling.rst, "Autocast vs
# Pre-quantized", at d0067d0da). The casts are the float8 layer's either way (cast_bytes)
MXFP8_KERNEL = round(6.812 / 7.161, 3)
# Transformer Engine's MXFP8 quantization against its current scaling's, the same tensors: the same profile's autocast
# time less its pre-quantized time per layer, 8.984 - 7.161 = 1.823 ms against 9.147 - 6.812 = 2.335 ms (current
# scaling reads each tensor twice, once for its amax; MXFP8's block scales come out of the one pass)
TE_MXFP8_CAST = round(1.823 / 2.335, 3)


def hook(kind: str):
    """The float8 layer's declared cost function for `kind` (flops | bytes | memory)."""
    from shardlab.parallel.fp8_spec import SPEC

    module, _, name = SPEC.cost[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def on(train) -> bool:
    return getattr(train, "fp8", "none") != "none"


def gathered_in_float8(train, lay) -> bool:
    return on(train) and train.fp8 == "tensorwise" and lay.strategy == "zero3" and lay.dp > 1


def weights_cast_per_step(train) -> bool:
    """Whether a micro batch's GEMMs take float8 weights made once a step, not cast again each micro batch:
    Transformer Engine's layers (llama_impl=te). Megatron-Core tells them the first micro batch of each step
    (schedules.py `set_is_first_microbatch`), and TE then caches the weights' FP8 copies until the next step
    (te.Linear's `is_first_microbatch`: "it allows caching of the FP8 versions of the weights"); with
    `fp8_param_gather` the parameters are FP8 tensors already, cast once a step from the optimizer's shard. Either
    way a step's weight casts are one micro batch's or less, not counted (the float8 layer casts W each forward)."""
    return on(train) and train.llama_impl == "te"


def gemm_seconds(op, seconds: float, backward: bool, c, train, lay, compiled_casts=None) -> float:
    """An op's seconds with FP8 on: a converted linear's GEMMs at the FP8 peak plus its casts (eager: the
    layer's cast_bytes; under torch.compile `compiled_casts`, plan/fusion.py's cast_bytes)."""
    if op.name == "attention" and getattr(train, "fp8_attention", False) and c.attention and on(train) \
            and not attention.calibrated(op, c):
        return attention.kernel_time(op.flops, c, backward, seq=op.shape[1], window=op.window, fp8=train.fp8,
                                     head_dim=op.shape[2])  # FP8 attention: cuDNN's measured FP8 rates
    if not on(train) or op.kind != "gemm" or op.name not in CONVERTED:
        return seconds
    m, n, k = op.shape  # (tokens, out, in)
    if fp8_rowwise.applies(train, c, compiled_casts is not None):  # torchao's measured table (plan/fp8_rowwise.py)
        return seconds / fp8_rowwise.speedup(m, k, n)
    if compiled_casts is not None:
        cast = compiled_casts(op, train.fp8, a=2, w=train.param_bytes, gathered=gathered_in_float8(train, lay),
                              backward=backward)
    else:
        te = weights_cast_per_step(train)
        # (a batched GEMM, an MoE block's experts: each of its `count` GEMMs casts its own operands)
        cast = op.count * cast_bytes(m, k, n, "backward" if backward else "forward",
                                     gathered_in_float8(train, lay) or te)
        if train.fp8 == "mxfp8" and te:
            cast *= TE_MXFP8_CAST  # TE's one-pass MXFP8 quantization (its measured time against current scaling's)
    peak8 = sustained_fp8_peak(c) * (MXFP8_KERNEL if train.fp8 == "mxfp8" else 1.0)
    if train.fp8 == "mxfp8" and not mxfp8_native(c):
        peak8 = 0.0  # emulated, as the float8 layer runs it there: quantize-dequantize and a 16-bit GEMM
    return hook("flops")(seconds, c.peak_flops, peak8, cast, c.elementwise_bw or c.hbm_bw)


def cast_note(train) -> str:
    """--explain's words for the casts where they are not the float8 layer's (Transformer Engine's layers)."""
    if not weights_cast_per_step(train):
        return ""
    return ("; float8 casts of activations and gradients each micro batch, of weights once a step (Transformer "
            "Engine's FP8 weight cache, is_first_microbatch)"
            + (f", MXFP8's at {TE_MXFP8_CAST:g} of current scaling's (TE's GEMM profile)" if train.fp8 == "mxfp8"
               else ""))


def mxfp8_native(c) -> bool:
    """Whether the cluster's GPUs run MXFP8 GEMMs on block-scaled tensor cores: Blackwell's (Transformer Engine's GEMM
    profile: "On Hopper (H100/H200), skip MXFP8 and NVFP4 which require Blackwell"); elsewhere MXFP8 is emulated."""
    return bool(c.peak_flops_fp8) and generation(c.peak_flops) == "blackwell"


def sustained_fp8_peak(c) -> float:
    """The FP8 peak the 16-bit GEMM time is scaled by: the dense FP8 peak times what an FP8 GEMM sustains of it
    relative to what a 16-bit GEMM sustains of its own (the 16-bit seconds already carry `gemm_efficiency`);
    no `gemm_efficiency_fp8`: the same fraction, so FP8 runs at peak_fp8 / peak_16 times the 16-bit rate."""
    if not c.peak_flops_fp8 or not c.gemm_efficiency_fp8:
        return c.peak_flops_fp8
    return c.peak_flops_fp8 * c.gemm_efficiency_fp8 / c.gemm_efficiency


def converted_shapes(model, tp: int = 1, pp: int = 1, v: int = 1, experts: bool | None = None) -> tuple[tuple[int, int], ...]:
    """(out, in) of the converted block weights one rank holds: block 0's linears whose dimensions are
    multiples of 16, times the busiest pipeline stage's layers; tensor parallelism splits each by rows here
    (the all-gather sees a smaller weight either way), but an MoE block's experts, which it never splits.
    `experts` True / False: only the experts' linears / only the others (None: all)."""
    return block_shapes(model, tp, experts) * stage_layers(model.n_layer, pp, v)


@functools.lru_cache(maxsize=1024)  # a search asks it for every layout of one model; DeepSeek-V3 has 46k parameters
def block_shapes(model, tp: int = 1, experts: bool | None = None) -> tuple[tuple[int, int], ...]:
    """`converted_shapes` of one block (the first MoE block's: block 0 unless leading dense blocks come first)."""
    layer = []
    first = str(next((i for i in range(model.n_layer) if model.is_moe(i)), 0))
    for name, p in model.param_shapes():
        parts = name.split(".")
        if parts[:2] == ["blocks", first] and parts[-1] == "weight" and parts[-2] in CONVERTED:
            expert = "experts" in parts
            if p.rows % 16 == 0 and p.row % 16 == 0 and experts in (None, expert):
                layer.append((p.rows // (1 if expert else tp), p.row))
    return tuple(layer)


def all_gather_saving(model, train, lay, param_bytes: int) -> float:
    """Bytes one gather of every unit saves (the converted weights at 1 B plus a 4 B scale, against
    `param_bytes` an element); 0 where the weights are not gathered in float8."""
    if not gathered_in_float8(train, lay):
        return 0.0
    shapes = converted_shapes(model, lay.tp, lay.pp, lay.v)
    f8, _ = hook("bytes")(shapes, "tensorwise", param_bytes, lay.tp)
    return sum(r * c for r, c in shapes) * param_bytes - f8


def scale_line_bytes(model, train, lay) -> float:
    """Bytes of one micro batch's float8 scales on a rank."""
    if not on(train):
        return 0.0
    tokens = train.micro_batch * (train.seq or model.seq) // lay.cp
    layers = stage_layers(model.n_layer, lay.pp, lay.v)  # every block's scales alike: one block's, times the stage's
    if not model.moe_experts:
        return hook("memory")(block_shapes(model, lay.tp), tokens, train.fp8) * layers
    # an expert's casts see its own rows: the rank's tokens (its sequence-parallel share) x k over its E / ep experts
    rows = moe.rank_tokens(model, train, lay) * model.moe_top_k // model.experts_held
    return (hook("memory")(block_shapes(model, lay.tp, experts=False), tokens, train.fp8) * layers
            + hook("memory")(block_shapes(model, lay.tp, experts=True), rows, train.fp8) * layers)
