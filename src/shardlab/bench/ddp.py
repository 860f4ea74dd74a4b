"""`shardlab bench ddp`: the own `ddp` engine against torch's DistributedDataParallel (`torch-ddp`).

Method (paired, seed 000 Q22): one process group of 2 gloo ranks holds two replicas of the same
model (same init, same data): A wrapped by `ddp`, B by `torch-ddp`, same bucket size. Every step
trains A then B on the same batch (B first on odd steps, so neither always runs second); a barrier
before each timed step lines the ranks up. Per step the ratio t_A / t_B; we report the median ratio
with min–max after warm-up — never one absolute time. Done for fp32 and fp16/bf16 gradient
communication (torch with its fp16/bf16 compression hook).

Also measured:
- `busbw_ratio`: all-reduce bus bandwidth inside training (wire bytes of the step's buckets ÷ the
  union of their intervals from the last rank's launch to completion) ÷ that of the same buckets
  all-reduced standalone
  (launched back to back, no compute) in the same process group. Bus bandwidth = payload x
  2(N-1)/N / time, the per-rank ring traffic.
- `loss_dev_fp16`, `loss_dev_bf16`: max |training loss - fp32-comm loss| over the run, same init and
  data (the cost of compressing the gradient all-reduce).
- `exposed_comm_frac` (the figure of record for communication, bench/exposed.py): exposed
  communication / step time from the trace of a default `ddp` training run (world 2, micro batch 8),
  median over steps with a bootstrap 90% interval and the load average; and the same per bucket layout,
  paired in one process group (`exposed_comm_frac_<layout>`), to show what each lever does.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from shardlab.bench import common, exposed, tracing

PAIRS = {"quick": (14, 4), "full": (40, 5)}  # (steps, warm-up steps excluded)
MICRO_BATCH, SEQ, BUCKET_MB = 8, 128, 25.0
# Bucket layouts compared for exposed communication (parallel.* keys; {} = the defaults)
LAYOUTS = {"no_tail": {"last_bucket_mb": 0.0}, "default": {}}


def _step(par, x, y) -> torch.Tensor:
    return par.step([(x, y)], 1.0 / y.numel(), max_norm=1.0).loss_sum / y.numel()  # the mean token loss


def _paired_fn(comm_dtype: str, steps: int, model_kw: dict) -> dict:
    """On every rank: train a `ddp` and a `torch-ddp` replica alternately; rank 0's times count."""
    from shardlab import comm, parallel
    from shardlab.config import Config
    from shardlab.data.corpus import load_tokens
    from shardlab.data.dataset import TokenDataset, get_batch
    from shardlab.model.gpt import GPTConfig, build_model

    rank, world = comm.rank(), comm.world_size()
    data = TokenDataset(load_tokens("stdlib"), SEQ)
    cfg = GPTConfig(vocab_size=256, max_seq_len=SEQ, **model_kw)
    runs = {}
    for name in ("ddp", "torch-ddp"):
        # torch's bf16 compression hook needs CUDA/NCCL: on CPU torch-ddp stays fp32 in the bf16 round.
        dtype = "fp32" if name == "torch-ddp" and comm_dtype == "bf16" and world_is_cpu() else comm_dtype
        run_cfg = Config()
        run_cfg.parallel.strategy, run_cfg.parallel.bucket_mb, run_cfg.parallel.comm_dtype = name, BUCKET_MB, dtype
        runs[name] = parallel.build(run_cfg, torch.device("cpu"), build_model(cfg, seed=1337))
    times = {n: [] for n in runs}
    losses = {n: [] for n in runs}
    bus = []  # inside training: (wire bytes, seconds) of each step's buckets
    g = torch.Generator().manual_seed(0)
    for step in range(steps):
        idx = torch.randint(0, len(data), (world, MICRO_BATCH), generator=g)[rank]
        x, y = get_batch(data, idx.tolist())
        order = list(runs) if step % 2 == 0 else list(runs)[::-1]
        for name in order:
            comm.barrier()
            t0 = time.perf_counter()
            loss = _step(runs[name], x, y)
            times[name].append(time.perf_counter() - t0)
            losses[name].append(loss)
        # A collective cannot start before the last rank joins it: measure from the latest launch
        # (perf_counter is the host's monotonic clock, shared by the ranks of one machine).
        events = runs["ddp"].dp.bucket_events()
        launches = comm.all_gather_object([e["t_launch"] for e in events])
        for i, e in enumerate(events):
            e["t_launch"] = max(ts[i] for ts in launches)
        bus.append((sum(e["bytes"] for e in events) * 2 * (world - 1) / world, _union(events)))
    # Standalone: the same bucket sizes, launched back to back, no compute in between.
    layout = runs["ddp"].dp.bucket_layout()
    dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    bufs = [torch.randn(b["numel"]).to(dtype[b["dtype"]]) for b in layout]
    standalone = []
    for _ in range(max(5, steps // 2)):
        comm.barrier()
        t0 = time.perf_counter()
        handles = [comm.all_reduce(b, async_op=True, tag="bench_standalone") for b in bufs]
        for h in handles:
            h.wait()
        standalone.append((sum(b.numel() * b.element_size() for b in bufs) * 2 * (world - 1) / world,
                           time.perf_counter() - t0))
    mean_losses = {}
    for n, ls in losses.items():  # the loss averaged over ranks, outside the timed region
        t = torch.stack(ls)
        comm.all_reduce(t, tag="bench_loss")
        mean_losses[n] = (t / world).tolist()
    return {"times": times, "losses": mean_losses, "bus": bus, "standalone": standalone, "layout": layout}


def world_is_cpu() -> bool:
    return not torch.cuda.is_available()


def _union(events: list[dict]) -> float:
    """Length of the union of the buckets' [launch, completion] intervals."""
    total, end = 0.0, float("-inf")
    for e in sorted(events, key=lambda e: e["t_launch"]):
        start, stop = max(e["t_launch"], end), e["t_done"]
        if stop > start:
            total += stop - start
            end = stop
    return total


def run(out: Path, quick: bool) -> dict:
    from shardlab.launch.workers import WorkerPool

    steps, warm = PAIRS["quick" if quick else "full"]
    model_kw = common.MODEL_KW["quick" if quick else "full"]
    results = {}
    with WorkerPool(2, timeout=1800) as pool:
        for dtype in ("fp32", "fp16", "bf16"):
            common.progress(f"own ddp vs torch-ddp, {dtype} gradients: {steps} paired steps")
            results[dtype] = pool.run(_paired_fn, dtype, steps, model_kw)[0]  # rank 0's view
        common.progress(f"tracing on vs off: {max(40, 3 * steps)} paired steps")
        traced = pool.run(tracing.paired_trace_fn, max(40, 3 * steps), model_kw)[0]  # trace_overhead, see bench/tracing.py
        common.progress(f"exposed communication per bucket layout ({', '.join(LAYOUTS)}): {steps} traced rounds")
        layouts = pool.run(exposed.paired_layouts_fn, steps, model_kw, LAYOUTS, MICRO_BATCH, SEQ)[0]
    common.progress("exposed communication of record: a traced default ddp run")
    record = exposed.of_record(out / "runs", quick)

    rows, figures = [], {}
    for dtype, r in results.items():
        a, b = r["times"]["ddp"][warm:], r["times"]["torch-ddp"][warm:]
        ratio = common.stats([x / y for x, y in zip(a, b)])
        bw_train = [w / s for w, s in r["bus"][warm:] if s > 0]
        bw_alone = [w / s for w, s in r["standalone"]]
        dev = {n: max(abs(p - q) for p, q in zip(r["losses"][n], results["fp32"]["losses"][n])) for n in r["losses"]}
        rows.append({"comm_dtype": dtype, "step_ratio": ratio, "ddp_step_s": common.stats(a),
                     "torch_ddp_step_s": common.stats(b), "buckets": len(r["layout"]),
                     "bucket_bytes": [x["bytes"] for x in r["layout"]],
                     "busbw_train_GBps": statistics.median(bw_train) / 1e9,
                     "busbw_standalone_GBps": statistics.median(bw_alone) / 1e9,
                     "loss_dev_ddp": dev["ddp"], "loss_dev_torch_ddp": dev["torch-ddp"],
                     "final_loss_ddp": r["losses"]["ddp"][-1], "final_loss_torch_ddp": r["losses"]["torch-ddp"][-1]})
        key = f"step_ratio_{dtype}" + ("_vs_torch_fp32" if dtype == "bf16" and world_is_cpu() else "")
        figures[key] = ratio["median"]
        figures[f"{key}_min"], figures[f"{key}_max"] = ratio["min"], ratio["max"]
    by = {r["comm_dtype"]: r for r in rows}
    figures["busbw_ratio"] = by["fp32"]["busbw_train_GBps"] / by["fp32"]["busbw_standalone_GBps"]
    figures["loss_dev_fp16"] = by["fp16"]["loss_dev_ddp"]
    figures["loss_dev_bf16"] = by["bf16"]["loss_dev_ddp"]
    figures.update(tracing.figures(traced, warm))
    frac = record["frac"]
    figures["exposed_comm_frac"] = frac["median"]
    figures["exposed_comm_frac_ci90_lo"], figures["exposed_comm_frac_ci90_hi"] = frac["ci90"]
    figures["exposed_wait_frac"] = record["wait_frac"]["median"]  # the part of it spent waiting for the peer
    figures["exposed_comm_ms"], figures["exposed_step_ms"] = record["exposed_ms"]["median"], record["step_ms"]["median"]
    figures["exposed_load_avg_start"], figures["exposed_load_avg_end"] = record["load"]["start"], record["load"]["end"]
    layout_rows = exposed.summarize_layouts(layouts, warm)
    for r in layout_rows:
        figures[f"exposed_comm_frac_{r['layout']}"] = r["exposed_comm_frac"]["median"]
    rows += [{"exposed_of_record": record}] + [{"exposed_layout": r} for r in layout_rows]
    doc = common.write_results(out, "ddp", figures, rows)
    _plot(out, results, warm)
    _report(out, rows[:len(results)], figures, steps, warm, model_kw, quick, record, layout_rows, layouts["load"])
    return doc


def _plot(out: Path, results: dict, warm: int) -> None:
    plt = common.pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for dtype, r in results.items():
        ratios = [x / y for x, y in zip(r["times"]["ddp"][warm:], r["times"]["torch-ddp"][warm:])]
        a.plot(range(warm, warm + len(ratios)), ratios, "o-", ms=3, label=f"{dtype} comm")
    a.axhline(1.0, color="gray", lw=0.8)
    a.axhline(1.05, color="red", lw=0.8, ls="--", label="1.05 bound")
    a.set(xlabel="step", ylabel="t(ddp) / t(torch-ddp)", title="paired step-time ratio, world 2")
    a.legend(fontsize=8)
    for dtype, r in results.items():
        b.plot(r["losses"]["ddp"], label=f"ddp, {dtype} comm")
    b.plot(results["fp32"]["losses"]["torch-ddp"], "k:", label="torch-ddp, fp32")
    b.set(xlabel="step", ylabel="training loss (mean over ranks)", title="loss with compressed gradients")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "ddp.png", dpi=110)
    plt.close(fig)


def _report(out, rows, figures, steps, warm, model_kw, quick, record, layout_rows, layout_load) -> None:
    f = lambda x, d=3: "-" if x is None else f"{x:.{d}f}"  # noqa: E731
    table = common.md_table(
        ["comm dtype", "t(ddp)/t(torch-ddp) median (min–max)", "ddp step ms", "torch-ddp step ms", "buckets",
         "busbw train GB/s", "busbw standalone GB/s", "max loss dev vs fp32 (ddp / torch)"],
        [[r["comm_dtype"], common.fmt_stats(r["step_ratio"], 1, 3), common.fmt_stats(r["ddp_step_s"], 1e3, 1),
          common.fmt_stats(r["torch_ddp_step_s"], 1e3, 1), r["buckets"], f(r["busbw_train_GBps"]),
          f(r["busbw_standalone_GBps"]), f"{f(r['loss_dev_ddp'], 4)} / {f(r['loss_dev_torch_ddp'], 4)}"]
         for r in rows])
    verdict = "meets" if figures["step_ratio_fp32"] <= 1.05 else "MISSES"
    common.write_report(out, "Own DDP engine vs torch DistributedDataParallel", [
        f"World 2, GPT {model_kw} ({'--quick' if quick else 'small preset'}), seq {SEQ}, microbatch {MICRO_BATCH}, "
        f"AdamW, bucket {BUCKET_MB:g} MB for both (ddp's first bucket 1 MiB; its last 1 MiB with a geometric tail "
        f"before it, docs/ddp.md). {steps} paired steps, the first "
        f"{warm} excluded (warm-up, bucket rebuild). A and B alternate within one process group on the same batches.",
        table,
        "![ddp](ddp.png)",
        f"**step_ratio_fp32 = {f(figures['step_ratio_fp32'])}** ({verdict} the ≤ 1.05 bound; goal ≤ 0.97); "
        f"step_ratio_fp16 = {f(figures['step_ratio_fp16'])} (against torch's fp16 compression hook). "
        "torch's bf16 hook needs CUDA/NCCL, so on CPU the bf16 row compares ddp-bf16 with torch-ddp in fp32.",
        f"**busbw_ratio = {f(figures['busbw_ratio'])}**: bus bandwidth of the gradient all-reduces inside training "
        "÷ the same buckets all-reduced standalone. On this 2-core machine the all-reduce shares the cores with "
        "backward compute of both ranks, so inside-training bandwidth is expected below standalone.",
        f"**Loss deviation** (max over steps of |loss − loss with fp32 comm|, same init and data): "
        f"fp16 {f(figures['loss_dev_fp16'], 4)}, bf16 {f(figures['loss_dev_bf16'], 4)}. Pre-division by the world "
        "size before the cast keeps fp16 sums from overflowing; bf16 keeps the range but has 8 mantissa bits.",
        f"**trace_overhead = {f(figures['trace_overhead'])}** ({f(figures['trace_overhead_min'])}–"
        f"{f(figures['trace_overhead_max'])}): tokens/s with `trace.enabled` ÷ without, paired per step "
        "(bench/tracing.py); ≥ 0.97 means tracing costs at most 3%.",
        *_exposed_sections(record, layout_rows, layout_load, warm),
    ])


def _exposed_sections(record, layout_rows, layout_load, warm) -> list[str]:
    goal, frac = 0.03, record["frac"]
    lo, hi = frac["ci90"]
    verdict = ("meets the goal" if hi <= goal else "misses the goal" if lo > goal
               else "its interval spans the goal, so neither met nor missed")
    table = common.md_table(
        ["layout", "bucket MiB (launch order)", "exposed / step, median [90% CI]", "exposed ms",
         "of which waiting for the peer, ms", "step / first layout's", "exposed ms by bucket (median)"],
        [[r["layout"], " ".join(f"{b / 2**20:.2f}" for b in r["bucket_bytes"]), exposed.fmt(r["exposed_comm_frac"]),
          exposed.fmt(r["exposed_ms"], 1, 1), exposed.fmt(r["wait_ms"], 1, 1), exposed.fmt(r["step_ratio_vs_first"]),
          ", ".join(f"{t} {v:.1f}" for t, v in r["exposed_ms_by_tag"].items() if v >= 0.05) or "-"]
         for r in layout_rows])
    return [
        f"**exposed_comm_frac = {frac['median']:.3f}** (bootstrap 90% interval {lo:.3f}–{hi:.3f}, {record['steps']} "
        f"steps after {record['warm']} warm-up, load average {record['load']['start']:.1f} → "
        f"{record['load']['end']:.1f}): "
        f"{verdict} (goal ≤ {goal}). Exposed communication (the trace's communication time that no compute hides) ÷ "
        f"step time, per step the mean over ranks, from a traced default `ddp` training run (world 2, micro batch 8; "
        f"median exposed {record['exposed_ms']['median']:.1f} ms of a {record['step_ms']['median']:.0f} ms step). "
        f"Of it, {record['wait_frac']['median']:.3f} of the step (`exposed_wait_frac`) was a rank waiting for its peer "
        "to launch the same collective: on a loaded machine, a rank the scheduler held back, not the wire.",
        "Bucket layouts, paired: one replica per layout in one process group, same init and batches, trained in "
        f"rotation, every step traced; the first {warm} rounds excluded; load average {layout_load['start']:.1f} → "
        f"{layout_load['end']:.1f}. `no_tail` is the layout before `parallel.last_bucket_mb` (`last_bucket_mb=0`: one "
        "bucket for everything after the first); `default` has the geometric tail (docs/ddp.md).",
        table,
    ]
