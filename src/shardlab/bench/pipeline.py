"""`shardlab bench pipeline`: the bubble of every schedule, measured against the formulas.

Two measurements, both paired within one run:
- **Emulated compute** (p = 2 and p = 4): each stage sleeps for its forward / backward time instead of
  computing, while the engine sends real activations and gradients through comm. Sleeping ranks need no
  core, so 4 stages run faithfully on 2 cores and the step time measures the schedule (plus the
  point-to-point latency), not the arithmetic. Measured bubble = 1 - m (f + b) / step time, next to the
  analytic one and the simulator's.
- **Own vs torch** (p = 2, the real tiny model): the own 1F1B engine and torch.distributed.pipelining's
  Schedule1F1B on copies of the same stages, steps alternated A B A B, median ratio of step times.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from shardlab.bench import common

SCHEDULES = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb", 1)]


def emulated_step_times(name: str, m: int, virtual: int, f_s: float, b_s: float, steps: int = 3,
                        micro: int = 1, seq: int = 16, d_model: int = 32) -> list[float]:
    """Rank-side: time `steps` steps of schedule `name` (pp = world size), stage times f_s / b_s per
    stage (split evenly over virtual stages). Returns the step times seen by this rank."""
    from shardlab import comm
    from shardlab.parallel.pp.engine import Emulation, PipelineEngine
    from shardlab.parallel.pp.schedule import build

    pp, rank = comm.world_size(), comm.rank()
    sched = build(name, pp, m, virtual)
    v = sched.virtual
    engine = PipelineEngine(sched, {s: None for s in sched.stages_of(rank)}, stage_rank=sched.rank_of,
                            pp_rank=rank, loss_fn=None, act_shape=lambda x: (micro, seq, d_model),
                            device=torch.device("cpu"), emulate=Emulation(f_s=f_s / v, b_s=b_s / v))
    mbs = [(torch.zeros(micro, seq, dtype=torch.long), None)] * m
    times = []
    for _ in range(steps + 1):  # the first step sets up the connections
        comm.barrier()
        t0 = time.perf_counter()
        engine.step(mbs, 1.0)
        comm.barrier()
        times.append(time.perf_counter() - t0)
    return times[1:]


def own_vs_torch(rounds: int, m: int = 4) -> list[tuple[float, float]]:
    """Rank-side (pp = 2): (own, torch) 1F1B step times on copies of the same tiny-model stages."""
    from shardlab import comm
    from shardlab.parallel.pp.testing import TINY4, batch, pipeline_engine

    own = pipeline_engine("1f1b", m, 1, TINY4)
    native = pipeline_engine("torch-1f1b", m, 1, TINY4)
    mbs = batch(m)
    weight = 1.0 / sum(y.numel() for _, y in mbs)
    out = []
    for r in range(rounds + 1):
        pair = []
        for engine in (own, native) if r % 2 == 0 else (native, own):
            comm.barrier()
            t0 = time.perf_counter()
            engine.step(mbs, weight)
            comm.barrier()
            pair.append(time.perf_counter() - t0)
        if r:
            out.append(tuple(pair) if r % 2 == 0 else (pair[1], pair[0]))
    return out


def measured_bubble(step_s: float, m: int, f_s: float, b_s: float) -> float:
    return 1.0 - m * (f_s + b_s) / step_s


def run(out: Path, quick: bool) -> dict:
    from shardlab.parallel.pp import analytic_bubble, build
    from shardlab.parallel.pp.draw import png_diagram, simulated_spans
    from shardlab.parallel.pp.simulate import simulate
    from shardlab.workers import WorkerPool

    f_s, b_s = (0.02, 0.04) if quick else (0.04, 0.08)
    ms = (8,) if quick else (4, 8)
    steps = 2 if quick else 3
    rows = []
    for p in (2, 4):
        with WorkerPool(p, timeout=600) as pool:
            for name, v in SCHEDULES:
                for m in ms:
                    if name == "interleaved" and m % p:
                        continue
                    times = pool.run(emulated_step_times, name, m, v, f_s, b_s, steps)[0]
                    step = statistics.median(times)
                    sched = build(name, p, m, v)
                    rows.append({"kind": "emulated", "schedule": name, "pp": p, "m": m, "virtual": v,
                                 "step_s": step, "step_times_s": times,
                                 "bubble_measured": measured_bubble(step, m, f_s, b_s),
                                 "bubble_analytic": analytic_bubble(name, p, m, v),
                                 "peak_activations": max(simulate(sched).peak_activations),
                                 "f_s": f_s, "b_s": b_s})
                    common.progress(f"pp={p} {name} m={m}: bubble {rows[-1]['bubble_measured']:.3f} "
                                    f"(analytic {rows[-1]['bubble_analytic']:.3f})")
    with WorkerPool(2, timeout=600) as pool:
        pairs = pool.run(own_vs_torch, 3 if quick else 7)[0]
    ratios = [a / b for a, b in pairs]
    ratio = common.paired_ratios([a for a, _ in pairs], [b for _, b in pairs])

    def bubble_time(name, p, m):
        """Idle time of the step: step time - m (f + b), what the formulas' gains compare."""
        return next((r["step_s"] - m * (f_s + b_s) for r in rows
                     if r["schedule"] == name and r["pp"] == p and r["m"] == m), None)

    errs = [abs(r["bubble_measured"] - r["bubble_analytic"]) / r["bubble_analytic"] for r in rows
            if r["schedule"] in ("gpipe", "1f1b")]
    m_ref = max(ms)
    figures = {"pp_bubble_err_max": max(errs),
               "pp_interleaved_gain": bubble_time("1f1b", 4, m_ref) / bubble_time("interleaved", 4, m_ref),
               "pp_zb_gain": bubble_time("1f1b", 4, m_ref) / bubble_time("zb", 4, m_ref),
               "pp_own_vs_torch_step_ratio": statistics.median(ratios)}
    for name, v in SCHEDULES:
        png_diagram(simulated_spans(build(name, 4, 8, v)), out / f"pipeline_{name}.png",
                    f"{name}: p=4, m=8" + (f", V={v}" if v > 1 else "") + " (simulated, backward = 2 x forward)")
    table = common.md_table(
        ["schedule", "p", "m", "V", "step ms (median)", "bubble measured", "bubble analytic", "peak activations"],
        [[r["schedule"], r["pp"], r["m"], r["virtual"], f"{r['step_s'] * 1e3:.1f}", f"{r['bubble_measured']:.3f}",
          f"{r['bubble_analytic']:.3f}", r["peak_activations"]] for r in rows])
    rows.append({"kind": "own_vs_torch", "schedule": "1f1b", "pp": 2, "pairs_own_torch_s": pairs,
                 "torch_over_own": ratio})
    common.write_results(out, "pipeline", figures, rows)
    common.write_report(out, "Pipeline schedules: the bubble measured", [
        f"Emulated compute: every stage sleeps f = {f_s * 1e3:.0f} ms per forward and b = {b_s * 1e3:.0f} ms per "
        "backward (split evenly over virtual stages); activations and gradients are real tensors sent through "
        "comm. Measured bubble = 1 - m(f + b) / step time; analytic: (p-1)/(m+p-1), ÷ V interleaved, "
        "(p-1)/(3m+p-1) for ZB-H1 (F = I = W). Peak activations: microbatches (interleaved: chunks) a stage "
        "holds at once, counted from the schedule.",
        table,
        f"**Figures**: pp_bubble_err_max = {figures['pp_bubble_err_max']:.3f} (goal ≤ 0.10), pp_interleaved_gain = "
        f"{figures['pp_interleaved_gain']:.2f} (1F1B's idle time ÷ interleaved's at p = 4, V = 2: theory 2, goal ≥ 1.7), "
        f"pp_zb_gain = {figures['pp_zb_gain']:.2f} (1F1B's idle time ÷ ZB-H1's: theory 3, goal ≥ 2), pp_own_vs_torch_step_ratio = {figures['pp_own_vs_torch_step_ratio']:.3f} "
        f"(own ÷ torch 1F1B, real tiny model, p = 2, {len(pairs)} alternated pairs; goal ≤ 1.00, must ≤ 1.05).",
        *[f"![{name}](pipeline_{name}.png)" for name, _ in SCHEDULES],
    ])
    return {"suite": "pipeline", "figures": figures, "rows": rows}
