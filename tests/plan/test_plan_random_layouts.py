"""Random plans over every preset, model family and strategy (seeded, so the same draw each run): a layout the
planner accepts plans to a finite step time and memory and renders with --explain; any other input is refused with
a ValueError (the CLI's one line and exit code 2), never another exception."""
import math
import random

from shardlab.plan.cli import _parse_kv, build
from shardlab.plan.report import render
from shardlab.plan.step import evaluate

MODELS = ["gpt2", "gpt3-1.3b", "gpt3-175b", "llama3-8b", "llama3-70b", "deepseek-v3", "mt-22b"]
CLUSTERS = ["A100-80G", "A100-40G", "H100-SXM", "H100-SXM-500W", "H200", "H800", "B200", "B300", "GB200", "GB300"]
STRATEGIES = ["ddp", "zero1", "zero2", "zero3", "fsdp", "fsdp2", "hsdp"]


def _draw(rng: random.Random) -> list[str]:
    tp, pp, cp, dp = (rng.choice(x) for x in ([1, 2, 4, 8], [1, 1, 2, 4], [1, 1, 2], [1, 2, 4, 8]))
    micro = rng.choice([1, 2])
    kv = {"model": rng.choice(MODELS), "cluster": rng.choice(CLUSTERS), "tp": tp, "pp": pp, "cp": cp, "dp": dp,
          "gpus": tp * pp * cp * dp, "micro_batch": micro, "global_batch": micro * dp * rng.choice([1, 8, 32])}
    optional = {"strategy": STRATEGIES, "recompute": ["none", "full", "selective", "selective-attn"],
                "fp8": ["tensorwise", "rowwise", "mxfp8"], "compile": ["true"], "llama_impl": ["own", "torchtitan", "te"],
                "cuda_graphs": ["full", "attn"], "schedule": ["1f1b", "gpipe", "interleaved", "zb", "zbv"],
                "ep": [2, 8], "ep_dispatcher": ["alltoall", "flex"], "z_loss": ["true"], "sp": ["true"],
                "attention": ["flash2", "cudnn", "flash4"], "power_w": [500.0], "moe_load": [1.5]}
    for key, values in optional.items():
        if rng.random() < 0.25:
            kv[key] = rng.choice(values)
    return [f"{k}={v}" for k, v in kv.items()]


def test_random_layouts_plan_or_are_refused():
    rng = random.Random(20261207)
    planned = 0
    for _ in range(400):
        argv = _draw(rng)
        try:
            plan = evaluate(*build(_parse_kv(argv)))
        except ValueError:
            continue
        assert math.isfinite(plan.step_time) and plan.step_time > 0, argv
        assert math.isfinite(plan.mem_total) and plan.mem_total > 0, argv
        assert "memory per GPU" in render(plan, True), argv
        planned += 1
    assert planned >= 100  # the draw is not all refusals
