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
(optimizer, non-GEMM ops, attention, Python).
"""
from __future__ import annotations

import contextlib
import io
import shutil
import time
from pathlib import Path

import torch

from shardlab import config as config_mod
from shardlab.bench import common


def flops_per_token(model, seq_len: int) -> float:
    """6N + 12·L·d·T (see the module docstring)."""
    n = sum(p.numel() for p in model.parameters())  # the tied wte/head counted once
    wpe = getattr(model, "wpe", None)
    if wpe is not None:
        n -= wpe.weight.numel()  # a lookup, not a matmul
    c = model.cfg
    return 6 * n + 12 * c.n_layer * c.d_model * seq_len


def gemm_shapes(model, tokens: int) -> list[tuple[int, int, int]]:
    """(M, K, N) of every GEMM in one training step of `model` on `tokens` rows: per Linear the forward
    (tokens×in @ in×out), the input gradient (tokens×out @ out×in) and the weight gradient (out×tokens @ tokens×in)."""
    shapes = []
    for mod in model.modules():
        if isinstance(mod, torch.nn.Linear):
            i, o = mod.in_features, mod.out_features
            shapes += [(tokens, i, o), (tokens, o, i), (o, tokens, i)]
    return shapes


def gemm_peak(shapes: list[tuple[int, int, int]], repeats: int = 5) -> float:
    """FLOP/s of one thread running `shapes` back to back (best of `repeats` per distinct shape, weighted
    by how often each shape occurs in the step)."""
    counts: dict = {}
    for s in shapes:
        counts[s] = counts.get(s, 0) + 1
    flops = seconds = 0.0
    for (m, k, n), c in counts.items():
        a, b = torch.randn(m, k), torch.randn(k, n)
        torch.mm(a, b)  # first call: allocation, kernel selection
        best = min(_timed(torch.mm, a, b) for _ in range(repeats))
        flops += c * 2 * m * k * n
        seconds += c * best
    return flops / seconds


def _timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def _trainer(preset: str, compiled: bool, steps: int, run_dir: Path):
    from shardlab.train.trainer import Trainer

    overrides = [o for o in common.BASE if not o.startswith("train.")] + [
        "train.seq_len=128", "train.seed=1337", "train.threads=1", f"model.preset={preset}", "train.micro_batch=8",
        f"train.steps={steps}", "parallel.strategy=single", "train.eval_every=0", f"train.compile={str(compiled).lower()}"]
    cfg = config_mod.load(None, overrides)
    config_mod.validate(cfg, 1)
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    with contextlib.redirect_stdout(io.StringIO()):
        return Trainer(cfg, run_dir)


def measure(out: Path, preset: str, steps: int, warm: int) -> tuple[dict, list[dict]]:
    """Figures and per-step rows of one model: eager vs compiled, `single`, one thread."""
    from shardlab.bench.overhead import shardlab_step
    from shardlab.parallel import compile as compile_layer

    total = warm + steps
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
    fell = compile_layer.fell_back(next(iter(sides["compiled"].par.model.blocks.values())))
    if fell:
        raise RuntimeError(f"bench overhead: compiling the {preset} model failed ({fell})")
    times: dict = {"eager": [], "compiled": []}
    common.progress(f"  {preset}: {steps} paired steps, eager vs compiled")
    for i in range(steps):
        for name in (("eager", "compiled") if i % 2 == 0 else ("compiled", "eager")):
            t0 = time.perf_counter()
            shardlab_step(sides[name])
            times[name].append(time.perf_counter() - t0)
    peaks.append(gemm_peak(shapes))
    peak = max(peaks)
    fpt = flops_per_token(model, cfg.train.seq_len)
    rows = [{"model": preset, "step": warm + i, "eager_s": e, "compiled_s": c, "ratio": e / c}
            for i, (e, c) in enumerate(zip(times["eager"], times["compiled"]))]
    ratio = common.stats([r["ratio"] for r in rows])
    thr = {k: tokens / common.stats(v)["median"] for k, v in times.items()}
    figures = {f"compile_speedup_{preset}": ratio["median"], f"compile_speedup_{preset}_min": ratio["min"],
               f"compile_speedup_{preset}_max": ratio["max"],
               f"compile_warmup_s_{preset}": warmup["compiled"], f"eager_warmup_s_{preset}": warmup["eager"],
               f"eager_tokens_per_s_{preset}": thr["eager"], f"compiled_tokens_per_s_{preset}": thr["compiled"],
               f"gemm_peak_gflops_{preset}": peak / 1e9, f"gemm_peaks_gflops_{preset}": [p / 1e9 for p in peaks],
               f"model_flops_per_token_{preset}": fpt,
               f"cpu_mfu_eager_{preset}": fpt * thr["eager"] / peak,
               f"cpu_mfu_compiled_{preset}": fpt * thr["compiled"] / peak}
    return figures, rows


def run(out: Path, quick: bool) -> tuple[dict, list[dict], list[str]]:
    """Both models; figures (the small model's also under the plain names), rows and report lines."""
    steps, warm = (10, 3) if quick else (40, 5)
    figures, rows = {}, []
    for preset in ("tiny", "small"):
        f, r = measure(out, preset, steps, warm)
        figures.update(f)
        rows += r
    for k in ("compile_speedup", "cpu_mfu_eager", "cpu_mfu_compiled"):
        figures[k] = figures[f"{k}_small"]
    table = common.md_table(
        ["model", "compile_speedup median (min–max)", "eager tok/s", "compiled tok/s", "warm-up s (compiled / eager)",
         "GEMM peak GFLOP/s", "cpu_mfu eager", "cpu_mfu compiled"],
        [[p, f"{figures[f'compile_speedup_{p}']:.3f} ({figures[f'compile_speedup_{p}_min']:.2f}–"
             f"{figures[f'compile_speedup_{p}_max']:.2f})",
          f"{figures[f'eager_tokens_per_s_{p}']:,.0f}", f"{figures[f'compiled_tokens_per_s_{p}']:,.0f}",
          f"{figures[f'compile_warmup_s_{p}']:.1f} / {figures[f'eager_warmup_s_{p}']:.2f}",
          f"{figures[f'gemm_peak_gflops_{p}']:.1f}", f"{figures[f'cpu_mfu_eager_{p}']:.3f}",
          f"{figures[f'cpu_mfu_compiled_{p}']:.3f}"] for p in ("tiny", "small")])
    lines = [
        "## Compiled blocks (`train.compile=true`) and compute efficiency",
        f"`single`, microbatch 8, seq 128, one thread; {warm} warm-up steps per side (the compiled side's include "
        f"compiling), then {steps} paired steps (A B, B A, ...). compile_speedup = median of t_eager ÷ t_compiled. "
        "cpu_mfu = (6N + 12·L·d·T) × tokens/s ÷ the one-thread GEMM peak at the step's Linear shapes, measured "
        "in this run (before and after the paired steps, the larger kept).",
        table]
    return figures, rows, lines
