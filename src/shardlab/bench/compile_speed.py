"""`bench overhead`'s compile part: figures `compile_speedup` and `cpu_mfu` (eager and compiled).

compile_speedup = median over paired steps of t_eager / t_compiled = tokens/s(compiled) / tokens/s(eager),
strategy `single`, one thread, the same model, seed and batches on both sides; steps alternate A B, B A
(the load on a shared machine changes faster than a run lasts). The compiled side's warm-up (its first
steps: dynamo tracing, inductor's C++ generation and gcc) is timed separately and reported, then both
sides run a few more untimed steps before the paired ones.

cpu_mfu = model FLOP/s / the GEMM peak of one thread at the model's own shapes, both measured in this run.
Model FLOPs per token are 6N + 12·L·d·T (PaLM's count: N the parameters that multiply, i.e. without the
position table, the tied head counted once as a matmul; the attention term counts QKᵀ and PV over the whole
T×T square, as PaLM does, although causal kernels skip half). The GEMM peak is torch.mm on the step's own
(M, K, N) triples: every Linear's forward, input-gradient and weight-gradient product, weighted by their
FLOPs, best of several repeats, measured before and after the paired steps (the larger is kept: the less
loaded moment). A cpu_mfu near 1 means the step runs at the speed of its GEMMs; the rest is the headroom
(optimizer, non-GEMM ops, attention, Python), broken down by bench/efficiency.py.

Clocks: the figure of record (`cpu_mfu_*`) divides by the process's CPU time (time.process_time: every
thread of the process, the time it waits for a core excluded), on both sides — the steps and the GEMM
peak. On a shared 2-core machine whose load swings from 1 to 20 within a run, wall time measures the
queue for the CPU as much as the step; CPU time keeps what the process itself spent, and the ratio
stays a property of the code. The wall-clock ratio is reported beside it (`cpu_mfu_*_wall`); on an idle
machine the two agree. Every figure carries the bootstrap 90% interval of its median over the paired
steps and the load average (common.median_ci).
"""
from __future__ import annotations

import contextlib
import io
import shutil
import time
from pathlib import Path

import torch

from shardlab import config as config_mod
from shardlab.bench import common, efficiency
from shardlab.bench.measure import flops_per_token, gemm_peak, gemm_shapes, shardlab_step, timed
from shardlab.model import anatomy


def _trainer(preset: str, compiled: bool, steps: int, run_dir: Path):
    from shardlab.train.trainer import Trainer

    overrides = [o for o in common.BASE if not o.startswith("train.")] + [
        "train.seq_len=128", "train.seed=1337", "train.threads=1", f"model.preset={preset}", "train.micro_batch=8",
        f"train.steps={steps}", "parallel.strategy=single", "train.eval_every=0", f"train.compile={str(compiled).lower()}"]
    cfg = config_mod.load(None, overrides)
    cfg = config_mod.validate(cfg, 1)
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    with contextlib.redirect_stdout(io.StringIO()):
        return Trainer(cfg, run_dir)


def measure(out: Path, preset: str, steps: int, warm: int, profiled: int = 5) -> tuple[dict, list[dict]]:
    """Figures and per-step rows of one model: eager vs compiled, `single`, one thread; then `profiled`
    steps of the eager side under the profiler: where its time goes (bench/efficiency.py)."""
    from shardlab.parallel import compile as compile_layer

    total = warm + steps + profiled
    sides = {"eager": _trainer(preset, False, total, out / "runs" / f"{preset}-eager"),
             "compiled": _trainer(preset, True, total, out / "runs" / f"{preset}-compiled")}
    torch.set_num_threads(1)
    cfg = sides["eager"].cfg
    tokens = cfg.train.micro_batch * cfg.train.seq_len
    model = sides["eager"].par.model
    shapes = gemm_shapes(model, tokens)
    peaks = [gemm_peak(shapes)]
    common.progress(f"  {preset}: warm-up ({warm} steps each; the compiled side compiles now)")
    warmup = {}
    for name, tr in sides.items():
        t0 = time.perf_counter()
        for _ in range(warm):
            shardlab_step(tr)
        warmup[name] = time.perf_counter() - t0
    model = sides["compiled"].par.model
    fell = compile_layer.fell_back(next(iter(anatomy.of(model).named_blocks(model)))[1])
    if fell:
        raise RuntimeError(f"bench overhead: compiling the {preset} model failed ({fell})")
    times: dict = {"eager": [], "compiled": []}
    cpu: dict = {"eager": [], "compiled": []}
    common.progress(f"  {preset}: {steps} paired steps, eager vs compiled")
    for i in range(steps):
        for name in (("eager", "compiled") if i % 2 == 0 else ("compiled", "eager")):
            wall, used = timed(shardlab_step, sides[name])
            times[name].append(wall)
            cpu[name].append(used)
    peaks.append(gemm_peak(shapes))
    peak = {k: max(p[k] for p in peaks) for k in ("wall", "cpu")}
    fpt = flops_per_token(model, cfg.train.seq_len)
    rows = [{"model": preset, "step": warm + i, "eager_s": e, "compiled_s": c, "ratio": e / c,
             "eager_cpu_s": ec, "compiled_cpu_s": cc}
            for i, (e, c, ec, cc) in enumerate(zip(times["eager"], times["compiled"], cpu["eager"], cpu["compiled"]))]
    ratio = common.median_ci([r["ratio"] for r in rows])
    thr = {k: tokens / common.stats(v)["median"] for k, v in times.items()}
    figures = {f"compile_speedup_{preset}": ratio["median"], f"compile_speedup_{preset}_min": ratio["min"],
               f"compile_speedup_{preset}_max": ratio["max"], f"compile_speedup_{preset}_ci90": ratio["ci90"],
               f"compile_speedup_{preset}_stats": ratio,
               f"compile_warmup_s_{preset}": warmup["compiled"], f"eager_warmup_s_{preset}": warmup["eager"],
               f"eager_tokens_per_s_{preset}": thr["eager"], f"compiled_tokens_per_s_{preset}": thr["compiled"],
               f"gemm_peak_gflops_{preset}": peak["cpu"] / 1e9, f"gemm_peak_gflops_wall_{preset}": peak["wall"] / 1e9,
               f"gemm_peaks_gflops_{preset}": [{k: v / 1e9 for k, v in p.items()} for p in peaks],
               f"model_flops_per_token_{preset}": fpt}
    for name in ("eager", "compiled"):
        mfu = common.median_ci([fpt * tokens / c / peak["cpu"] for c in cpu[name]], GOAL, ">=")
        figures[f"cpu_mfu_{name}_{preset}"] = mfu["median"]
        figures[f"cpu_mfu_{name}_{preset}_stats"] = mfu
        figures[f"cpu_mfu_{name}_wall_{preset}"] = fpt * thr[name] / peak["wall"]
    common.progress(f"  {preset}: {profiled} eager steps under the profiler (where the time goes)")
    gemm_flops = sum(2 * m * k * n for m, k, n in shapes)
    c = model.cfg
    attn_flops = 12 * c.n_layer * c.d_model * cfg.train.seq_len * tokens
    figures[f"cpu_mfu_breakdown_{preset}"] = efficiency.breakdown(
        lambda: shardlab_step(sides["eager"]), sides["eager"], profiled, peak["cpu"], gemm_flops, attn_flops)
    return figures, rows


GOAL = 0.92  # cpu_mfu of the small model, eager (issue 20)


def run(out: Path, quick: bool) -> tuple[dict, list[dict], list[str]]:
    """Both models, then `ddp` at world 2 (per-rank cpu_mfu); figures (the small model's also under the
    plain names), rows and report lines."""
    steps, warm = (10, 3) if quick else (40, 5)
    figures, rows = {}, []
    for preset in ("tiny", "small"):
        f, r = measure(out, preset, steps, warm, profiled=2 if quick else 5)
        figures.update(f)
        rows += r
    for k in ("compile_speedup", "cpu_mfu_eager", "cpu_mfu_compiled", "cpu_mfu_eager_wall", "cpu_mfu_compiled_wall",
              "cpu_mfu_breakdown"):
        figures[k] = figures[f"{k}_small"]
    figures["cpu_mfu"] = figures["cpu_mfu_eager_small"]
    common.progress("cpu_mfu per rank: `ddp` at world 2, small model")
    ddp = efficiency.ddp_ranks(out, steps, warm)
    figures["cpu_mfu_ddp_rank"] = [r["cpu_mfu"] for r in ddp]
    figures["cpu_mfu_ddp_rank_wall"] = [r["cpu_mfu_wall"] for r in ddp]
    figures["cpu_mfu_ddp_rank_stats"] = [r["stats"] for r in ddp]
    f = {p: (lambda k, _p=p: figures[k.replace("*", _p)]) for p in ("tiny", "small")}  # "*": the model
    table = common.md_table(
        ["model", "compile_speedup median [90% CI]", "eager tok/s", "compiled tok/s", "warm-up s (compiled / eager)",
         "GEMM peak GFLOP/s (CPU time / wall)", "cpu_mfu eager [90% CI]", "cpu_mfu compiled [90% CI]",
         "cpu_mfu by wall clock (eager / compiled)"],
        [[p, common.fmt_ci(f[p]("compile_speedup_*_stats")),
          f"{f[p]('eager_tokens_per_s_*'):,.0f}", f"{f[p]('compiled_tokens_per_s_*'):,.0f}",
          f"{f[p]('compile_warmup_s_*'):.1f} / {f[p]('eager_warmup_s_*'):.2f}",
          f"{f[p]('gemm_peak_gflops_*'):.1f} / {f[p]('gemm_peak_gflops_wall_*'):.1f}",
          common.fmt_ci(f[p]("cpu_mfu_eager_*_stats")), common.fmt_ci(f[p]("cpu_mfu_compiled_*_stats")),
          f"{f[p]('cpu_mfu_eager_wall_*'):.3f} / {f[p]('cpu_mfu_compiled_wall_*'):.3f}"] for p in ("tiny", "small")])
    mfu = figures["cpu_mfu_eager_small_stats"]
    bd = figures["cpu_mfu_breakdown_small"]
    ddp_line = "; ".join(f"rank {i}: {common.fmt_ci(r['stats'])} (wall clock {r['cpu_mfu_wall']:.3f}, "
                         f"its GEMM peak {r['peak_gflops']:.1f} GFLOP/s)" for i, r in enumerate(ddp))
    lines = [
        "## Compiled blocks (`train.compile=true`) and compute efficiency",
        f"`single`, microbatch 8, seq 128, one thread; {warm} warm-up steps per side (the compiled side's include "
        f"compiling), then {steps} paired steps (A B, B A, ...). compile_speedup = median of t_eager ÷ t_compiled. "
        "cpu_mfu = (6N + 12·L·d·T) × tokens/s ÷ the one-thread GEMM peak at the step's Linear shapes, measured "
        "in this run (before and after the paired steps, the larger kept), both by the process's CPU time (the "
        "figure of record: the wait for a core on a shared machine left out) and by wall clock.",
        table,
        f"**cpu_mfu (small, eager) = {common.fmt_ci(mfu)}**: {mfu['goal']['verdict']}.",
        f"**cpu_mfu_ddp_rank** (`ddp`, world 2, microbatch 8 per rank; each rank's model FLOP/s ÷ its own "
        f"one-thread GEMM peak, CPU time; gloo's threads count in the rank's CPU time): {ddp_line}.",
        "### Where the small model's eager step goes (torch.profiler: self time per row, ms per step)",
        "Each row is the time inside it (children excluded); a phase row (optimizer, norm, doctor, data) "
        "holds every operator it runs. The profiler's clock is the wall clock (waits for a core included); "
        "the CPU-ms column is each row's share of the same steps' process CPU time, and the GEMM and "
        "attention rows split that into their model FLOPs at the CPU-time GEMM peak and the rest. The "
        "profiler adds microseconds per operator and the machine was shared: shares are the point.",
        common.md_table(["row", "ms / profiled step (wall)", "share", "CPU ms (share × CPU time)",
                         "at peak + below peak (CPU ms)"], efficiency.table_rows(bd)),
    ]
    return figures, rows, lines
