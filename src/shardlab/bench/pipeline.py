"""`shardlab bench pipeline`: the bubble of every schedule, measured against the formulas, and what the
schedules hold in memory.

Three measurements, all within one run:
- **Emulated compute** (p = 2 and p = 4): each stage sleeps for its forward / backward time instead of
  computing, while the engine sends real activations and gradients through comm. Sleeping ranks need no
  core, so 4 stages run faithfully on 2 cores and the step time measures the schedule (plus the
  point-to-point latency), not the arithmetic. A sleep overshoots (the scheduler wakes the rank late), so
  the engine records what each one really took: measured bubble = idle ÷ step = 1 - busy / step per rank,
  busy the rank's measured compute, step the pipeline's (the last rank to finish), averaged over ranks;
  next to it the analytic formula and the planner's bubble and point-to-point bytes for the same layout.
- **Activation memory** (the real tiny model, same p, m and schedule): the microbatches whose saved
  tensors a stage holds at once, counted with saved-tensor hooks (observe.activations.HeldActivations).
- **Own vs torch** (p = 2, the real tiny model): the own 1F1B engine and torch.distributed.pipelining's
  Schedule1F1B on copies of the same stages, steps alternated A B A B, median ratio of step times; the
  ratio of CPU seconds per step beside it (less sensitive to other load than wall time).
"""
from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import torch

from shardlab.bench import common
from shardlab.parallel.pp import registry

# every own schedule (parallel/pp/registry.py), those that take several stages per rank with two
SCHEDULES = [(name, 2 if registry.many_stages(name) else 1) for name in registry.OWN]
BASELINE = registry.DEFAULT  # 1F1B: the gains are of the idle time against it, the own/torch pair is it
TORCH_TWIN = next(n for n in registry.TORCH if registry.SPECS[n].order == BASELINE)  # torch's run of it
PLANNED = registry.PLANNED  # the schedules the planner models
MICRO, SEQ, D_MODEL = 1, 16, 32  # the emulated activations: one sequence of 16 positions, width 32, fp32
# the real model for activation memory: 8 layers, so p = 4 with V = 2 still has a layer per stage
REAL = dict(n_layer=8, n_head=2, d_model=D_MODEL, vocab_size=256, max_seq_len=SEQ)


def emulated_step_times(name: str, m: int, virtual: int, f_s: float, b_s: float, steps: int = 3, warmup: int = 1,
                        micro: int = MICRO, seq: int = SEQ, d_model: int = D_MODEL) -> list[list[dict]]:
    """Rank-side: run `steps` steps of schedule `name` (pp = world size), stage times f_s / b_s per
    stage (split evenly over virtual stages). Returns every rank's steps (gathered): `end_s` (from the
    common start, a barrier, to this rank's last instruction), `busy_s` (what its sleeps really took),
    `op_s` (mean seconds per F / B / I / W) and `p2p_bytes` (sent + received, as comm recorded them)."""
    from shardlab import comm
    from shardlab.parallel.pp.engine import Emulation, PipelineEngine
    from shardlab.parallel.pp.schedule import build

    pp, rank = comm.world_size(), comm.rank()
    sched = build(name, pp, m, virtual)
    v = sched.virtual
    emu = Emulation(f_s=f_s / v, b_s=b_s / v)
    engine = PipelineEngine(sched, {s: None for s in sched.stages_of(rank)}, stage_rank=sched.rank_of,
                            pp_rank=rank, loss_fn=None, act_shape=lambda x: (micro, seq, d_model),
                            device=torch.device("cpu"), emulate=emu)
    mbs = [(torch.zeros(micro, seq, dtype=torch.long), None)] * m
    out = []
    for k in range(steps + warmup):  # a first step sets up the connections
        comm.barrier()
        emu.spent.clear()
        comm.RECORDER.reset_step()
        t0 = time.perf_counter()
        engine.step(mbs, 1.0)
        end = time.perf_counter() - t0
        if k >= warmup:
            got = comm.RECORDER.step_stats()["bytes"]
            out.append({"end_s": end, "busy_s": sum(t for t, _ in emu.spent.values()),
                        "op_s": {op: t / n for op, (t, n) in emu.spent.items()},
                        "p2p_bytes": got.get("send", 0) + got.get("recv", 0)})
    return comm.all_gather_object(out)


def p2p_latency(rounds: int = 30, micro: int = MICRO, seq: int = SEQ, d_model: int = D_MODEL) -> float:
    """Rank-side: one-way seconds of an activation-sized message between ranks 0 and 1 through comm (half
    the median round trip; the other ranks wait): the per-hop cost the formulas leave out."""
    from shardlab import comm

    rank, buf, rtts = comm.rank(), torch.zeros(micro, seq, d_model), []
    comm.barrier()
    for _ in range(rounds):
        t0 = time.perf_counter()
        if rank == 0:
            comm.send(buf, 1, tag="ping")
            comm.recv(buf, 1, tag="pong")
        elif rank == 1:
            comm.recv(buf, 0, tag="ping")
            comm.send(buf, 0, tag="pong")
        rtts.append(time.perf_counter() - t0)
    comm.barrier()
    return statistics.median(rtts) / 2


def pipeline_step(ranks: list[list[dict]]) -> dict:
    """Per step: the pipeline's time (the last rank to finish) and each rank's measured bubble; the
    median step. Bubble = idle ÷ step = 1 - busy / step, averaged over ranks (the formulas give every
    rank the same bubble)."""
    steps = []
    for k in range(len(ranks[0])):
        step = max(r[k]["end_s"] for r in ranks)
        idle = [step - r[k]["busy_s"] for r in ranks]
        steps.append({"step_s": step, "idle_s": statistics.mean(idle), "bubble": statistics.mean(i / step for i in idle)})
    mid = sorted(steps, key=lambda x: x["step_s"])[len(steps) // 2]
    ops: dict[str, list[float]] = {}
    for r in ranks:
        for st in r:
            for op, t in st["op_s"].items():
                ops.setdefault(op, []).append(t)
    return {**mid, "step_times_s": [x["step_s"] for x in steps], "bubbles": [x["bubble"] for x in steps],
            "op_s": {op: statistics.mean(t) for op, t in ops.items()},
            "p2p_bytes": [r[0]["p2p_bytes"] for r in ranks]}


def planner_view(name: str, p: int, m: int, v: int) -> dict:
    """The planner's bubble (its share of the pipeline's time) and p2p payload per rank for the emulated
    layout (the tiny model's shapes, fp32); None for a schedule the planner does not model (torch's V ones)."""
    if name not in PLANNED:
        return {"plan_bubble": None, "plan_p2p_bytes": None}
    from shardlab.plan.hardware import load_cluster
    from shardlab.plan.layout import Layout, TrainSpec
    from shardlab.plan.model import ModelSpec
    from shardlab.plan.step import evaluate

    model = ModelSpec("tiny8", n_layer=REAL["n_layer"], d_model=D_MODEL, n_head=REAL["n_head"],
                      vocab=REAL["vocab_size"], seq=SEQ)
    plan = evaluate(model, TrainSpec(global_batch=m * MICRO, micro_batch=MICRO, precision="fp32"),
                    Layout(pp=p, schedule=name, v=v), load_cluster("A100-80G", p))
    t = plan.times
    return {"plan_bubble": t["bubble"] / (t["compute"] + t["tp_pp_comm"] + t["bubble"]),
            "plan_p2p_bytes": plan.bytes_per_step().get("p2p", 0.0)}


# the own schedules with a torch twin running the same program (1F1B, and the V rows: ZB-V, DualPipeV)
TWINS = {BASELINE: TORCH_TWIN, **{registry.SPECS[n].order: n for n in registry.TORCH if registry.SPECS[n].layout == "v"}}


def own_vs_torch(rounds: int, m: int = 4, name: str = BASELINE) -> list[tuple[float, float, float, float]]:
    """Rank-side (pp = 2): (own, torch) wall seconds of schedule `name` and its torch twin, then (own,
    torch) CPU seconds of this process, per alternated pair, on copies of the same tiny-model stages."""
    from shardlab import comm
    from shardlab.parallel.pp.testing import TINY4, batch, pipeline_engine

    v = 2 if registry.many_stages(name) else 1
    own = pipeline_engine(name, m, v, TINY4)
    native = pipeline_engine(TWINS[name], m, v, TINY4)
    mbs = batch(m)
    weight = 1.0 / sum(y.numel() for _, y in mbs)
    out = []
    for r in range(rounds + 1):
        got = {}
        for engine in (own, native) if r % 2 == 0 else (native, own):
            comm.barrier()
            t0, c0 = time.perf_counter(), time.process_time()
            engine.step(mbs, weight)
            comm.barrier()
            got[engine is own] = (time.perf_counter() - t0, time.process_time() - c0)
        if r:  # the first pair warms up
            out.append((got[True][0], got[False][0], got[True][1], got[False][1]))
    return out


def nominal_bubble(step_s: float, m: int, f_s: float, b_s: float) -> float:
    """1 - m (f + b) / step with the sleeps' nominal lengths: counts their overshoot as bubble."""
    return 1.0 - m * (f_s + b_s) / step_s


def _fmt(x, spec: str = ".3f") -> str:
    return "–" if x is None else format(x, spec)


def _emulated_rounds(pool, configs: list[tuple], steps: int, f_s: float, b_s: float) -> tuple[dict, float]:
    """Rounds of one step of every layout (alternating the order), so a burst of other load on the machine
    spreads over all layouts instead of falling on one. Returns every layout's ranks' steps and the median
    one-way p2p latency over the rounds."""
    runs = {c: None for c in configs}
    latencies = []
    for k in range(steps):
        for c in configs if k % 2 == 0 else configs[::-1]:
            got = pool.run(emulated_step_times, c[0], c[2], c[1], f_s, b_s, 1, 1 if k == 0 else 0)[0]
            runs[c] = got if runs[c] is None else [a + b for a, b in zip(runs[c], got)]
        latencies.append(pool.run(p2p_latency)[0])
    return runs, statistics.median(latencies)


def _emulated_row(pool, p: int, name: str, v: int, m: int, ranks: list[list[dict]], latency: float,
                  f_s: float, b_s: float) -> dict:
    """One layout's row: its measured bubble beside the formula, the simulator, the planner, and the
    activations the real model holds under it (measured on `pool`)."""
    from shardlab.parallel.pp import analytic_bubble, build
    from shardlab.parallel.pp.simulate import simulate
    from shardlab.parallel.pp.testing import held_activations

    got = pipeline_step(ranks)
    held = pool.run(held_activations, name, m, v, REAL)
    sched = build(name, p, m, v)
    o = got["op_s"]  # the simulator at the measured op times and message latency
    sim = simulate(sched, f=o["F"], b=o.get("B", 0.0), i=o.get("I"), w=o.get("W"), latency=latency)
    return {"kind": "emulated", "schedule": name, "pp": p, "m": m, "virtual": v,
            "step_s": got["step_s"], "step_times_s": got["step_times_s"],
            "idle_s": got["idle_s"], "op_s": got["op_s"],
            "bubble_measured": got["bubble"], "bubbles_measured": got["bubbles"],
            "bubble_nominal": nominal_bubble(got["step_s"], m, f_s, b_s),
            "bubble_analytic": analytic_bubble(name, p, m, v),
            "bubble_simulated": sim.mean_bubble, "p2p_latency_s": latency,
            "peak_activations": max(simulate(sched).peak_activations),
            "held_microbatches": [h["peak_microbatches"] for h in held],
            "held_bytes": [h["peak_bytes"] for h in held],
            "p2p_bytes": got["p2p_bytes"], "activation_bytes": MICRO * SEQ * D_MODEL * 4,
            **planner_view(name, p, m, v), "f_s": f_s, "b_s": b_s}


def _emulated_rows(p: int, ms: tuple, steps: int, f_s: float, b_s: float) -> list[dict]:
    """Every schedule at `p` stages and each m in `ms` (interleaved only where p divides m), emulated."""
    from shardlab.launch.workers import WorkerPool

    configs = [(name, v, m) for name, v in SCHEDULES for m in ms
               if not (registry.SPECS[name].microbatch_multiple == "p" and m % p)
               and m >= registry.least_microbatches(name, p)]
    rows = []
    with WorkerPool(p, timeout=600) as pool:
        runs, latency = _emulated_rounds(pool, configs, steps, f_s, b_s)
        for name, v, m in configs:
            r = _emulated_row(pool, p, name, v, m, runs[(name, v, m)], latency, f_s, b_s)
            rows.append(r)
            common.progress(f"pp={p} {name} m={m}: bubble {r['bubble_measured']:.3f} (analytic "
                            f"{r['bubble_analytic']:.3f}), held activations {max(r['held_microbatches'])}")
    return rows


def _figures(rows: list[dict], m_ref: int, ratios: list[float]) -> tuple[dict, dict]:
    """The suite's figures from the emulated rows (the gains at p = 4, m = `m_ref`) and the own/torch
    ratios; also the own/torch ratio's interval (against the must, 1.05)."""
    def idle(name, p, m):
        """Idle time of the step (mean over ranks): what the formulas' gains compare."""
        return next((r["idle_s"] for r in rows if r["schedule"] == name and r["pp"] == p and r["m"] == m), None)

    # the formula's error where it is exact (1F1B's bubble undivided); the gain of every schedule dividing it
    errs = [abs(r["bubble_measured"] - r["bubble_analytic"]) / r["bubble_analytic"] for r in rows
            if registry.SPECS[r["schedule"]].bubble == "1"]
    figures = {"pp_bubble_err_max": max(errs),
               **{f"pp_{name}_gain": idle(BASELINE, 4, m_ref) / idle(name, 4, m_ref) for name, v in SCHEDULES
                  if (registry.bubble_divisor(name, v) or 1) > 1},
               "pp_own_vs_torch_step_ratio": statistics.median(ratios), **v_figures(rows, m_ref)}
    own_torch = common.median_ci(ratios, 1.05, "<=")  # the must; the goal is 1.00
    figures["pp_own_vs_torch_step_ratio_ci90"] = own_torch["ci90"]
    figures["pp_own_vs_torch_step_ratio_load_avg"] = own_torch["load_avg"]
    return figures, own_torch


def v_figures(rows: list[dict], m_ref: int = 8) -> dict:
    """The V rows' figures: their bubble's distance to the row's formula (absolute, every p and m measured;
    goal <= 0.05), and ZB-V's bubble over 1F1B's at p = 4, m = `m_ref` (goal <= 1/3)."""
    v_rows = [r for r in rows if registry.SPECS[r["schedule"]].layout == "v"]
    out = {}
    if v_rows:
        out["pp_v_bubble_err_max"] = max(abs(r["bubble_measured"] - r["bubble_analytic"]) for r in v_rows)
    at = {r["schedule"]: r["bubble_measured"] for r in rows if r["pp"] == 4 and r["m"] == m_ref}
    for name in at:  # pp_zbv_over_1f1b_bubble, pp_dualpipev_over_1f1b_bubble
        if registry.SPECS[name].layout == "v" and BASELINE in at:
            out[f"pp_{name}_over_{BASELINE}_bubble"] = at[name] / at[BASELINE]
    return out


def _tables(rows: list[dict]) -> tuple[str, str]:
    """The report's two tables of the emulated rows: the bubble, and the activations held."""
    def ms_of(r, op):
        return _fmt(r["op_s"].get(op, 0) * 1e3 * r["virtual"], ".1f") if op in r["op_s"] else "–"

    table = common.md_table(
        ["schedule", "p", "m", "V", "step ms", "F / B ms (measured)", "bubble measured", "bubble analytic",
         "planner bubble", "simulated (measured F, B, latency)", "bubble, nominal f b", "p2p KiB per rank",
         "planner p2p KiB", "activations held (max rank)"],
        [[r["schedule"], r["pp"], r["m"], r["virtual"], f"{r['step_s'] * 1e3:.1f}",
          f"{ms_of(r, 'F')} / " + (ms_of(r, "B") if "B" in r["op_s"] else f"{ms_of(r, 'I')}+{ms_of(r, 'W')}"),
          f"{r['bubble_measured']:.3f}", f"{r['bubble_analytic']:.3f}", _fmt(r["plan_bubble"]),
          f"{r['bubble_simulated']:.3f} ({r['p2p_latency_s'] * 1e3:.2f} ms)", f"{r['bubble_nominal']:.3f}",
          f"{min(r['p2p_bytes']) / 1024:g}–{max(r['p2p_bytes']) / 1024:g}",
          _fmt(None if r["plan_p2p_bytes"] is None else r["plan_p2p_bytes"] / 1024, "g"),
          max(r["held_microbatches"])] for r in rows])
    mem_table = common.md_table(
        ["schedule", "p", "m", "V", "held, per rank (measured)", "schedule's count (max)", "peak KiB per rank"],
        [[r["schedule"], r["pp"], r["m"], r["virtual"], ", ".join(map(str, r["held_microbatches"])),
          r["peak_activations"], ", ".join(f"{b / 1024:.0f}" for b in r["held_bytes"])] for r in rows])
    return table, mem_table


def _report(out: Path, f_s: float, b_s: float, steps: int, tables: tuple[str, str], figures: dict,
            pairs: list, ratios: list[float], own_torch: dict, cpu: dict) -> None:
    table, mem_table = tables
    common.write_report(out, "Pipeline schedules: the bubble measured", [
        f"Emulated compute: every stage sleeps f = {f_s * 1e3:.0f} ms per forward and b = {b_s * 1e3:.0f} ms per "
        "backward (split evenly over virtual stages; F / B below are what the sleeps really took, per stage); "
        "activations and gradients are real tensors sent through comm. Measured bubble = 1 - busy / step per rank "
        "(busy: the measured sleeps; step: until the last rank finishes), averaged over ranks, median of "
        f"{steps} steps; analytic: (p-1)/(m+p-1), ÷ V interleaved, (p-1)/(3m+p-1) for ZB-H1 (F = I = W). The "
        "planner's bubble is its share of the pipeline's time for the same layout (the planner has no ZB-H1); "
        "'simulated' replays the schedule (parallel/pp/simulate.py) with the measured F, B (I, W) and the measured "
        "one-way latency of an activation-sized message (in brackets): what remains of the gap to the formula "
        "once the machine's communication is counted; "
        "'nominal' counts the sleeps' overshoot as bubble (1 - m(f+b)/step). p2p: bytes a rank sends plus "
        "receives per step, as comm records them; the planner's figure is the first and last stage's (a middle "
        "stage, p = 4, moves twice as much; interleaved ranks more).",
        table,
        "Activation memory on the real model (8 layers, width 32, microbatches of 2 × 16 tokens): the "
        "microbatches whose saved tensors a rank holds at its peak, counted with saved-tensor hooks during one "
        "step, per rank; interleaved counts (chunk, microbatch) pairs, a chunk being half a stage. 1F1B and "
        "ZB-H1 hold at most p, GPipe all m.",
        mem_table,
        f"**Figures**: pp_bubble_err_max = {figures['pp_bubble_err_max']:.3f} (goal ≤ 0.10), pp_interleaved_gain = "
        f"{figures['pp_interleaved_gain']:.2f} (1F1B's idle time ÷ interleaved's at p = 4, V = 2: theory 2, goal ≥ 1.7), "
        f"pp_zb_gain = {figures['pp_zb_gain']:.2f} (1F1B's idle time ÷ ZB-H1's: theory 3, goal ≥ 2), "
        f"pp_own_vs_torch_step_ratio = {figures['pp_own_vs_torch_step_ratio']:.3f} (own ÷ torch 1F1B, real tiny "
        f"model, p = 2, median of {len(pairs)} alternated pairs, min–max {min(ratios):.2f}–{max(ratios):.2f}, "
        f"{common.fmt_ci(own_torch)}; goal ≤ 1.00: {common.goal_verdict(own_torch['ci90'], 1.00, '<=')}; must ≤ 1.05: "
        f"{own_torch['goal']['verdict']}); CPU seconds per step own ÷ torch {common.fmt_stats(cpu, digits=3)}.",
        "**The V schedules** (ZB-V, DualPipeV: two stages per rank, emulated; load average "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} when written): pp_v_bubble_err_max = "
        f"{_fmt(figures.get('pp_v_bubble_err_max'))} (|measured - formula| over their rows, goal ≤ 0.05), "
        f"pp_zbv_over_1f1b_bubble = {_fmt(figures.get('pp_zbv_over_1f1b_bubble'))} (p = 4, goal ≤ 1/3).",
        *[f"![{name}](pipeline_{name}.png)" for name, _ in SCHEDULES],
    ])


def run(out: Path, quick: bool) -> dict:
    from shardlab.parallel.pp import build
    from shardlab.parallel.pp.draw import png_diagram, simulated_spans
    from shardlab.launch.workers import WorkerPool

    f_s, b_s = (0.02, 0.04) if quick else (0.04, 0.08)
    ms = (8,) if quick else (4, 8)
    steps = 3 if quick else 5
    rows = []
    for p in (2, 4):
        rows += _emulated_rows(p, ms, steps, f_s, b_s)
    n_pairs = 9 if quick else 21
    with WorkerPool(2, timeout=600) as pool:
        pairs = pool.run(own_vs_torch, n_pairs)[0]
    ratios = [a / b for a, b, _, _ in pairs]
    cpu_ratios = [c / d for _, _, c, d in pairs if d]
    figures, own_torch = _figures(rows, max(ms), ratios)
    for name, v in SCHEDULES:
        png_diagram(simulated_spans(build(name, 4, 8, v)), out / f"pipeline_{name}.png",
                    f"{name}: p=4, m=8" + (f", V={v}" if v > 1 else "") + " (simulated, backward = 2 x forward)")
    tables = _tables(rows)  # the emulated rows only: before own_vs_torch's joins them
    rows.append({"kind": "own_vs_torch", "schedule": BASELINE, "pp": 2, "pairs_own_torch_s": [p[:2] for p in pairs],
                 "pairs_own_torch_cpu_s": [p[2:] for p in pairs], "own_over_torch": own_torch,
                 "own_over_torch_cpu": common.median_ci(cpu_ratios)})
    common.write_results(out, "pipeline", figures, rows)
    _report(out, f_s, b_s, steps, tables, figures, pairs, ratios, own_torch, common.median_ci(cpu_ratios))
    return {"suite": "pipeline", "figures": figures, "rows": rows}
