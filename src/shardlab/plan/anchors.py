"""The highest MFU anyone we cite has measured, per GPU generation: a plan that predicts more is flagged.

The planner's step time is a roofline with one GEMM-efficiency assumption; nothing in it stops a
prediction from exceeding what any real run of that kind has reached (kernel gaps, power caps and
communication it leaves out make it optimistic; docs/planner.md "H100: why the planner runs above
torchtitan's 405B row"). So the plan says when its MFU is above every cited measurement on the same
generation of GPU, and which measurement is the ceiling. The anchors are published or recorded figures,
each with its source (docs/planner.md, "The MFU ceiling"); none is fitted, and the flag changes no number.

A generation is recognised by the cluster's dense 16-bit peak (a profile file of H100s is Hopper too);
a calibrated CPU profile (`cluster=this`) matches none and is never flagged: the anchors are GPU runs.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Anchor:
    mfu: float  # PaLM's model FLOPs utilisation as the source reports it (no recomputation counted)
    what: str  # the run: model, GPUs, layout
    source: str


# Dense bf16 tensor-core peak per GPU (plan/hardware.py presets) -> generation
GENERATIONS = {2250e12: "Blackwell (B200)", 989e12: "Hopper (H100/H200)", 312e12: "Ampere (A100)"}

ANCHORS: dict[str, tuple[Anchor, ...]] = {
    "Hopper (H100/H200)": (
        Anchor(0.541, "a 1B Llama (Llama 3.2 1B's shape) on one H200, bf16, compiled, micro batch 2 x 8192, "
                      "no communication", "shardlab, docs/cuda.md 'Performance of record'"),
        Anchor(0.47, "Megatron-Core GPT models on H100 clusters (GPT-3 175B-class)",
               "NVIDIA Megatron-LM README: 'up to 47% MFU on H100 clusters'"),
        Anchor(0.39, "Llama 3.1 8B, FSDP on 8 H100 (500 W, HBM2e), local batch 2 x 8192, selective "
                     "checkpointing: 5,762 tokens/s/GPU eager, 6,667 compiled (33-39% MFU)",
               "torchtitan docs/performance.md, Table 1"),
        Anchor(0.29, "Llama 3.1 405B, FSDP 16 x TP 8 on 128 H100, full checkpointing: 109 tokens/s/GPU",
               "torchtitan docs/performance.md"),
    ),
    # the one B200 training figure cited: its power limit is not stated, so it bounds nothing from above; it is the
    # highest measured all the same, and a B200 plan (datasheet and kernel rates only) above it is flagged
    "Blackwell (B200)": (
        Anchor(0.214, "Llama 3 8B, FSDP2 on 8 power-limited B200 (limit not stated), bf16, compiled, per-op "
                      "selective checkpointing, batch 1 x 8192: 8,307.5 tokens/s/GPU",
               "pytorch/ao docs/source/workflows/training.md, 'Training e2e benchmarks on NVIDIA B200'"),
    ),
    "Ampere (A100)": (
        Anchor(0.582, "Llama 3 8B, FSDP on 64 A100, local batch 1, selective op checkpointing",
               "torchtitan docs/performance.md (its A100 table, 2024)"),
        Anchor(0.542, "530B GPT on 2240 A100, t=8 p=35, sequence parallel + selective recompute",
               "Korthikanti et al. 2022, abstract"),
    ),
}


def generation(peak_flops: float) -> str | None:
    return GENERATIONS.get(peak_flops)


def ceiling(peak_flops: float) -> Anchor | None:
    """The highest cited MFU on this peak's GPU generation; None for a GPU (or CPU) we have no anchor for."""
    gen = generation(peak_flops)
    return max(ANCHORS[gen], key=lambda a: a.mfu) if gen else None


def check(mfu: float, peak_flops: float, mixed: bool) -> dict | None:
    """{"ceiling", "above", "anchor", "source", "generation"} for a plan's MFU (None: no anchor applies: an
    fp32 plan, whose MFU is against the fp32 peak, or a GPU generation with no cited figure)."""
    top = ceiling(peak_flops) if mixed else None
    if top is None:
        return None
    return {"ceiling": top.mfu, "above": mfu > top.mfu, "anchor": top.what, "source": top.source,
            "generation": generation(peak_flops)}


def warning(flag: dict | None, mfu: float) -> str:
    """The plan's line when its MFU is above the ceiling ("" otherwise)."""
    if not flag or not flag["above"]:
        return ""
    return (f"warning: MFU {mfu:.1%} is above every cited measurement on {flag['generation']} "
            f"(highest: {flag['ceiling']:.1%}, {flag['anchor']}; {flag['source']}): treat this step time and "
            "tokens/s as optimistic (docs/planner.md, 'The MFU ceiling')")
