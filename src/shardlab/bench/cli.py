"""`shardlab bench SUITE --out DIR [--quick]`: run a benchmark suite, write REPORT.md, results.json, PNGs.

Each suite is a module with `run(out_dir: Path, quick: bool) -> dict` returning the results
document ({"suite", "figures", "rows"}) it has written.
"""
from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

from shardlab.bench.common import fmt_figure, progress

SUITES = {
    "overhead": ("shardlab.bench.overhead", "single strategy vs a plain PyTorch loop (figure overhead_ratio)"),
    "scaling": ("shardlab.bench.scaling", "strong and weak scaling over world 1, 2, 4"),
    "microbatch": ("shardlab.bench.microbatch", "gradient payload per token and efficiency vs microbatch"),
    "buckets": ("shardlab.bench.buckets", "bucket size sweep: step time, collectives, exposed comm, overlap"),
    "compression": ("shardlab.bench.compression", "fp32 / fp16 / bf16 and PowerSGD gradient communication"),
    "ddp": ("shardlab.bench.ddp", "own ddp vs torch-ddp, and the tracing overhead"),
    "strategies": ("shardlab.bench.strategies", "tokens/s vs memory of every strategy (Pareto plot)"),
    "checkpoint": ("shardlab.bench.checkpoint", "checkpoint save/load cost"),
    "memory": ("shardlab.bench.memory", "activation recompute: activation bytes, peak memory, step time"),
    "planner": ("shardlab.plan.validate", "planner predictions vs measurements"),
    "layouts": ("shardlab.bench.layouts", "parallel.layout=auto's choice vs a paired sweep of every layout shardlab "
                "runs (world 2; and 4 without --quick)"),
    "tp": ("shardlab.bench.tensor_parallel", "data vs tensor vs tensor x data parallelism at world 2 and 4, own vs DTensor"),
    "pipeline": ("shardlab.bench.pipeline", "every pipeline schedule's bubble measured against the formula"),
    "context": ("shardlab.bench.context", "context parallelism cp 1 vs 2 over sequence lengths: activation memory, "
                "step time, K/V bytes, zigzag balance; ring vs Ulysses vs hybrid at cp 2 and 4: bytes, crossover vs the planner"),
    "generate": ("shardlab.bench.generate", "generation: TTFT, latency, tokens/s, KV bytes; KV cache and pp lanes"),
    "balance": ("shardlab.bench.balance", "a 2x slow rank: equal vs measured data-parallel shares"),
    "sync": ("shardlab.bench.sync", "sync vs local SGD vs DiLoCo (H=8, 32; world 2, 4) vs async on equal tokens: bytes per token, loss, staleness"),
    "chaos": ("shardlab.bench.chaos", "SIGINT/SIGTERM/SIGKILL to the launcher, a rank or the process group, mid-step, "
              "during an async save or a resume's load: no orphan, nothing lost, bitwise-equal resume"),
    "faults": ("shardlab.bench.faults", "fault-tolerant replicas: a rank SIGKILLed (once, twice), a straggler "
               "SIGSTOPped past the timeout, the lighthouse killed; heal time, bitwise equality, the reference's "
               "loss trajectory"),
    "data": ("shardlab.bench.data", "data prepare throughput (tokens/s) with 1 and 2 workers"),
    "packing": ("shardlab.bench.packing", "packed documents: the loader's cost per step with document positions, "
                "and a training step with block-causal masks vs plain causal attention"),
    "fp8": ("shardlab.bench.fp8", "bf16 vs float8 tensorwise / rowwise (own, torchao) / mxfp8 (emulated): loss vs "
            "tokens, final-loss gap, step time ratio (emulated on CPU), all-gather bytes ratio"),
    "optim": ("shardlab.bench.optim", "AdamW vs Muon (fp32 and bf16 states) at equal tokens: loss vs tokens, the "
              "token-efficiency ratio, optimizer step time (paired), Muon's bytes under zero1 / zero3 vs the formula"),
    "moe": ("shardlab.bench.moe", "dense vs MoE (E=4, top-1, ep=world) at equal active params, world 2 and 4: "
            "loss, step time, all-to-all bytes, load imbalance with and without the aux loss"),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="shardlab bench", description="Run a benchmark suite and write a report.",
                                 epilog="suites: " + "; ".join(f"{k}: {v[1]}" for k, v in SUITES.items()))
    ap.add_argument("suite", choices=sorted(SUITES), metavar="SUITE", help=", ".join(SUITES))
    ap.add_argument("--out", type=Path, help="output directory (default bench/<suite>-<time>)")
    ap.add_argument("--quick", action="store_true", help="a smaller run (at most ~3 minutes)")
    args = ap.parse_args(argv)
    out = args.out or Path("bench") / f"{args.suite}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        module = importlib.import_module(SUITES[args.suite][0])
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("shardlab"):
            print(f"shardlab bench: suite {args.suite!r} is not available in this build", file=sys.stderr)
            return 2
        raise
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    progress(f"{args.suite}{' --quick' if args.quick else ''} -> {out}")
    doc = module.run(out, args.quick)
    print(f"{args.suite}: {len(doc.get('rows', []))} rows in {time.perf_counter() - t0:.0f}s -> {out}/REPORT.md")
    for name, value in doc.get("figures", {}).items():
        if isinstance(value, dict):  # a summary (interval, load, breakdown): results.json has it whole
            continue
        text = "[" + ", ".join(map(fmt_figure, value)) + "]" if isinstance(value, list) else fmt_figure(value)
        print(f"  {name} = {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
