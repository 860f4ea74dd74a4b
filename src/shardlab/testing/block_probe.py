"""One transformer block timed on the device beside the planner's block: Korthikanti et al.'s Table 4 (one layer,
forward and backward; plan/published_gpu_layer.py) for the GPU at hand, at torchtitan's shape.

The planner's published runs leave one question only a device can answer (docs/planner.md, "The eleventh round"):
on Hopper, torchtitan's whole steps run 5% to 19% slower than planned, where Megatron's one layer on A100 is met.
This times shardlab's Llama block (model/llama.py, the planner's llama_impl "own") at Llama 3 8B's shape, micro
batch 2 at sequence 8192 (torchtitan's runs), bf16 weights and activations, SDPA: forward, and backward alone,
eager and compiled (torch.compile of the block, as torchtitan's apply_compile), mean of `--repeat` after warm-ups,
CUDA events. Beside each, the planner's per-block forward and backward on the GPU's preset (plan/peak.py
gpu_preset; `--preset` to choose), the same shape and recipe (no recompute, no parallelism). With --profile the
profiler's top kernels of one eager forward and backward follow, to set against `shardlab plan --explain`.

    python -m shardlab.testing.block_probe                 # on a GPU (about a minute on an H100)
    python -m shardlab.testing.block_probe --device cpu --tiny   # the rehearsal the suite runs

`make gpu-check` runs it after its performance runs. Exit 2 without a CUDA device (unless --device cpu).
"""
from __future__ import annotations

import argparse
import sys
import time

LLAMA3_8B = dict(n_layer=1, n_head=32, n_kv_heads=8, d_model=4096, intermediate_size=14336, vocab_size=128256)
TINY = dict(n_layer=1, n_head=4, n_kv_heads=2, d_model=64, intermediate_size=128, vocab_size=256)


def _block(shape: dict, seq: int, device: str, dtype):
    from shardlab.model.configs import LlamaConfig
    from shardlab.model.llama import LlamaBlock

    return LlamaBlock(LlamaConfig(**shape, max_seq_len=seq)).to(device=device, dtype=dtype)


def _seconds(fn, device: str) -> float:
    """Seconds of one call of `fn`, after the device is idle: CUDA events around it on a GPU, the wall clock on CPU."""
    import torch

    if device != "cuda":
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3


def measure(shape: dict, batch: int, seq: int, device: str, compiled: bool, warmup: int, repeat: int):
    """(forward, backward) seconds of one block, means of `repeat` after `warmup`: the backward timed alone, each
    after a forward of its own outside the timed call."""
    import torch

    dtype = torch.bfloat16
    block = _block(shape, seq, device, dtype)
    run = torch.compile(block) if compiled else block
    x = torch.randn(batch, seq, shape["d_model"], device=device, dtype=dtype, requires_grad=True)
    grad = torch.randn_like(x)

    def forward() -> float:
        return _seconds(lambda: run(x), device)

    def backward() -> float:
        y = run(x)
        return _seconds(lambda: y.backward(grad), device)

    for _ in range(warmup):
        forward(), backward()
    return (sum(forward() for _ in range(repeat)) / repeat, sum(backward() for _ in range(repeat)) / repeat)


def planned(shape: dict, batch: int, seq: int, preset: str, compiled: bool) -> tuple[float, float]:
    """The planner's (forward, backward) seconds of one block: plan/compute.py's per-block times on `preset`."""
    from shardlab.plan.compute import micro_batch_time
    from shardlab.plan.hardware import load_cluster
    from shardlab.plan.layout import Layout
    from shardlab.plan.train_spec import TrainSpec
    from shardlab.plan.model import ModelSpec

    model = ModelSpec("probe", n_layer=1, d_model=shape["d_model"], n_head=shape["n_head"], vocab=shape["vocab_size"],
                      seq=seq, arch="llama", n_kv_heads=shape["n_kv_heads"], ffn=shape["intermediate_size"])
    train = TrainSpec(global_batch=batch, micro_batch=batch, seq=seq, precision="bf16-mixed", flash_attention=True,
                      compile=compiled)
    return micro_batch_time(model, train, Layout(), load_cluster(preset)).block


def report(device: str = "cuda", tiny: bool = False, preset: str = "", warmup: int = 3, repeat: int = 10,
           profile: bool = False) -> list[str]:
    """The table's lines: measured and planned ms per block, eager and compiled."""
    from shardlab.plan.peak import gpu_preset
    from shardlab.testing.gpu_runs import _gpu_name

    shape, batch, seq = (TINY, 2, 32) if tiny else (LLAMA3_8B, 2, 8192)
    gpu = _gpu_name(device)
    preset = preset or (gpu_preset(gpu) if device == "cuda" else "") or "H100-SXM"
    lines = [f"one block, Llama {'tiny' if tiny else '3 8B'} shape, micro batch {batch} x seq {seq}, bf16, on {gpu}; "
             f"planned on {preset}" + ("" if device == "cuda" else " (a CPU rehearsal: the figures compare nothing)"),
             "| block | measured fwd ms | planned fwd ms | error | measured bwd ms | planned bwd ms | error |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for compiled in (False, True):
        if compiled and device != "cuda":
            continue  # Inductor on CPU would compile C++ for minutes; the rehearsal keeps to eager
        f, b = measure(shape, batch, seq, device, compiled, warmup, repeat)
        pf, pb = planned(shape, batch, seq, preset, compiled)
        lines.append(f"| {'compiled' if compiled else 'eager'} | {f * 1e3:.3f} | {pf * 1e3:.3f} | {pf / f - 1:+.1%} | "
                     f"{b * 1e3:.3f} | {pb * 1e3:.3f} | {pb / b - 1:+.1%} |")
    if profile:
        lines += _top_kernels(shape, batch, seq, device)
    return lines


def _top_kernels(shape: dict, batch: int, seq: int, device: str, top: int = 15) -> list[str]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    block = _block(shape, seq, device, torch.bfloat16)
    x = torch.randn(batch, seq, shape["d_model"], device=device, dtype=torch.bfloat16, requires_grad=True)
    block(x).sum().backward()  # warm-up outside the trace
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts) as prof:
        _seconds(lambda: block(x).sum().backward(), device)  # waits for the device before the trace ends
    key = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=key, row_limit=top)
    return ["", f"top {top} kernels of one eager forward and backward (by {key}):", table]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a tiny block (the CPU rehearsal)")
    ap.add_argument("--preset", default="", help="the planner's cluster preset (default: the GPU's)")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--profile", action="store_true", help="the profiler's top kernels too")
    args = ap.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("block-probe: no CUDA device; rehearse with --device cpu --tiny", file=sys.stderr)
        return 2
    print("\n".join(report(args.device, args.tiny, args.preset, repeat=args.repeat, profile=args.profile)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
