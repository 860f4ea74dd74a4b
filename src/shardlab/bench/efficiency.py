"""Where a step's time goes relative to its GEMM peak: the breakdown behind `cpu_mfu` (bench overhead).

A few steps run under torch.profiler. Every profiled event's *self* time (its own, children excluded) goes
to one row: to the step phase it runs inside (optimizer, gradient norm and clipping, zero_grad, data,
the doctor's checks; phases are marked by wrapping the trainer's methods on this one instance, for the
profiled steps only), else by operator (Linear GEMMs, fused attention, GELU, LayerNorm, the loss over the
vocabulary, other ATen ops). Step wall time minus all profiled self time is Python and framework work
outside any operator. The GEMM and attention rows are also split into their time at the measured peak
(the model FLOPs they carry) and the rest (running below peak: cold caches, small shapes, load).

The profiler adds a few microseconds per operator, so the profiled step is slower than the timed one;
the table reports milliseconds per profiled step and shares of it. The profiler's clock is the wall
clock: on a shared machine every row also holds waits for a core. The process's CPU time over the same
steps is measured too, and the GEMM and attention rows are compared with the peak on that clock: their
share of the step's CPU time (assuming the waits fall on every row alike) against their FLOPs at the
CPU-time peak.
"""
from __future__ import annotations

import contextlib
import time

import torch

_PHASES = {  # trainer attribute path -> row; the methods wrapped while profiling
    ("par", "clip_grad_norm_"): "gradient norm + clipping",
    ("par", "optimizer_step"): "optimizer (AdamW)",
    ("par", "zero_grad"): "zero_grad",
    ("par", "finish"): "gradient sync (finish)",
    ("state", "sampler", "next_batch"): "data (sampler, batch)",
    ("doctor", "before_step"): "doctor checks",
    ("doctor", "after_backward"): "doctor checks",
    ("doctor", "check_step"): "doctor checks",
    ("doctor", "after_step"): "doctor checks",
}
_MARK = "shardlab.phase::"

_OPS = [  # (row, test on an operator's name); the first match wins
    ("Linear GEMMs (mm, addmm)", lambda n: n in ("aten::mm", "aten::addmm", "aten::bmm")),
    ("attention (SDPA, fused CPU kernel)", lambda n: "scaled_dot_product" in n),
    ("GELU", lambda n: n.startswith("aten::gelu")),
    ("LayerNorm", lambda n: "layer_norm" in n),
    ("loss (log-softmax + NLL over the vocabulary)", lambda n: "log_softmax" in n or "nll_loss" in n),
    # the doctor's per-parameter gradient hooks (doctor/anomaly.py) run inside backward, outside any phase:
    # their norms are recognised by name (the clip's norm runs inside its own phase row)
    ("doctor's gradient-norm hooks in backward (norms)", lambda n: n == "aten::linalg_vector_norm"),
]
OTHER = "other ATen ops (copies, adds, views, autograd)"
PYTHON = "Python and framework outside operators"


@contextlib.contextmanager
def _marked(tr):
    """Wrap the phase methods of this trainer instance in profiler ranges; undone on exit."""
    undo = []
    for path, row in _PHASES.items():
        obj = tr
        for attr in path[:-1]:
            obj = getattr(obj, attr, None)
        if obj is None or not hasattr(obj, path[-1]):
            continue
        real = getattr(obj, path[-1])

        def wrapped(*a, _real=real, _row=row, **k):
            with torch.profiler.record_function(_MARK + _row):
                return _real(*a, **k)
        undo.append((obj, path[-1], vars(obj).get(path[-1])))
        setattr(obj, path[-1], wrapped)
    try:
        yield
    finally:
        for obj, name, own in reversed(undo):
            if own is None:
                delattr(obj, name)  # the wrapper goes; the class's method shows again
            else:
                setattr(obj, name, own)


def _row_of(ev) -> str:
    e = ev
    while e is not None:  # the innermost phase this event runs in
        if e.name.startswith(_MARK):
            return e.name[len(_MARK):]
        e = e.cpu_parent
    for row, test in _OPS:
        if test(ev.name):
            return row
    return OTHER


def breakdown(step, tr, steps: int, peak: float, gemm_flops: float, attn_flops: float) -> dict:
    """ms per profiled step of every row (see the module docstring), `steps` calls of `step()` on trainer
    `tr`; `gemm_flops`/`attn_flops`: FLOPs per step of the Linear GEMMs and of attention, `peak` FLOP/s by
    CPU time ("at_peak_ms": CPU ms those FLOPs take at the peak)."""
    from torch.profiler import ProfilerActivity, profile

    with _marked(tr), profile(activities=[ProfilerActivity.CPU]) as prof:
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            step()
        wall, used = time.perf_counter() - t0, time.process_time() - c0
    rows: dict = {}
    covered = 0.0
    for ev in prof.events():
        us = ev.self_cpu_time_total
        covered += us
        rows[_row_of(ev)] = rows.get(_row_of(ev), 0.0) + us
    ms = {k: v / 1e3 / steps for k, v in rows.items()}
    ms[PYTHON] = max(0.0, wall * 1e3 / steps - covered / 1e3 / steps)
    at_peak = {"Linear GEMMs (mm, addmm)": gemm_flops / peak * 1e3,
               "attention (SDPA, fused CPU kernel)": attn_flops / peak * 1e3}
    return {"step_ms": wall * 1e3 / steps, "step_cpu_ms": used * 1e3 / steps,
            "rows_ms": dict(sorted(ms.items(), key=lambda kv: -kv[1])), "at_peak_ms": at_peak}


def table_rows(b: dict) -> list[list]:
    """Markdown rows: the row, ms per profiled step (wall), its share, that share of the step's CPU ms, and
    for GEMMs/attention the CPU ms their FLOPs take at the peak and the rest."""
    out = []
    for row, ms in b["rows_ms"].items():
        share = ms / b["step_ms"]
        cpu = share * b["step_cpu_ms"]
        ideal = b["at_peak_ms"].get(row)
        note = f"{ideal:.1f} at peak + {cpu - ideal:.1f} below it" if ideal is not None else ""
        out.append([row, f"{ms:.1f}", f"{share:.1%}", f"{cpu:.1f}", note])
    out.append(["**profiled step**", f"{b['step_ms']:.1f}", "100%", f"{b['step_cpu_ms']:.1f}", ""])
    return out


# --- per rank under `ddp` --------------------------------------------------------------------------

def ddp_ranks(out, steps: int, warm: int, world: int = 2) -> list[dict]:
    """cpu_mfu of every rank of a `ddp` run at `world` (small model, microbatch 8 per rank, one thread):
    its model FLOP/s by CPU time (and by wall clock) ÷ its own one-thread GEMM peak; in rank order."""
    from shardlab.launch.workers import WorkerPool

    with WorkerPool(world, timeout=1800) as pool:
        return pool.run(_ddp_rank, str(out / "runs" / "ddp-mfu"), steps, warm)


def _ddp_rank(run_dir: str, steps: int, warm: int) -> dict:
    """On each rank: warm up, GEMM peak, `steps` timed steps, GEMM peak again (the larger kept)."""
    import contextlib
    import io
    from pathlib import Path

    from shardlab import comm, config as config_mod
    from shardlab.bench import common
    from shardlab.bench.measure import flops_per_token, gemm_peak, gemm_shapes, shardlab_step, timed
    from shardlab.train.trainer import Trainer

    world = comm.world_size()
    overrides = [o for o in common.BASE if not o.startswith("train.")] + [
        "train.seq_len=128", "train.seed=1337", "train.threads=1", "model.preset=small", "train.micro_batch=8",
        f"train.global_batch={8 * world}", f"train.steps={warm + steps}", "parallel.strategy=ddp",
        "train.eval_every=0"]
    cfg = config_mod.load(None, overrides)
    cfg = config_mod.validate(cfg, world)
    with contextlib.redirect_stdout(io.StringIO()):
        tr = Trainer(cfg, Path(run_dir))
    model = tr.par.model
    tokens = cfg.train.micro_batch * cfg.train.seq_len  # this rank's tokens per step
    shapes = gemm_shapes(model, tokens)
    for _ in range(warm):
        shardlab_step(tr)
    peaks = [gemm_peak(shapes)]
    wall, used = [], []
    for _ in range(steps):
        w, c = timed(shardlab_step, tr)
        wall.append(w)
        used.append(c)
    peaks.append(gemm_peak(shapes))
    peak = {k: max(p[k] for p in peaks) for k in ("wall", "cpu")}
    fpt = flops_per_token(model, cfg.train.seq_len)
    mfu = common.median_ci([fpt * tokens / c / peak["cpu"] for c in used])
    return {"cpu_mfu": mfu["median"], "stats": mfu, "peak_gflops": peak["cpu"] / 1e9,
            "cpu_mfu_wall": fpt * tokens / common.stats(wall)["median"] / peak["wall"]}
