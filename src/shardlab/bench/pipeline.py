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

from shardlab.bench import common, pipeline_overlap
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
    `op_s` (mean seconds per F / B / I / W), `p2p_bytes` (sent + received, as comm recorded them), and
    the rank's own timeline for a replay (`replayed`): `took_s`, what each compute instruction took in
    the order it ran, `late_s`, their sum over the nominal lengths (the sleeps' overshoot), `sent`
    (message tag -> when posted) and `received` (tag -> (when the rank began waiting, when it had it)),
    in perf_counter seconds, which all processes of one host share."""
    from shardlab import comm
    from shardlab.parallel.pp.engine import Emulation, PipelineEngine
    from shardlab.parallel.pp.schedule import build

    pp, rank = comm.world_size(), comm.rank()
    sched = build(name, pp, m, virtual)
    v = sched.virtual
    emu = Emulation(f_s=f_s / v, b_s=b_s / v)
    nominal = {"F": emu.f_s, "B": emu.b_s, "I": emu.b_s / 2, "W": emu.b_s / 2}
    engine = PipelineEngine(sched, {s: None for s in sched.stages_of(rank)}, stage_rank=sched.rank_of,
                            pp_rank=rank, loss_fn=None, act_shape=lambda x: (micro, seq, d_model),
                            device=torch.device("cpu"), emulate=emu)
    mbs = [(torch.zeros(micro, seq, dtype=torch.long), None)] * m
    out = []
    for k in range(steps + warmup):  # a first step sets up the connections
        comm.barrier()
        emu.reset()
        comm.RECORDER.reset_step()
        t0 = time.perf_counter()
        engine.step(mbs, 1.0)
        end = time.perf_counter() - t0
        if k >= warmup:
            got = comm.RECORDER.step_stats()["bytes"]
            p2p = [r for r in comm.RECORDER.ring if r.peer is not None and r.t_launch >= t0]
            out.append({"end_s": end, "busy_s": sum(t for t, _ in emu.spent.values()),
                        "op_s": {op: t / n for op, (t, n) in emu.spent.items()},
                        "p2p_bytes": got.get("send", 0) + got.get("recv", 0),
                        "took_s": [t1 - t0_ for _, t0_, t1 in emu.spans],
                        "late_s": sum(t1 - t0_ - nominal[op] for op, t0_, t1 in emu.spans),
                        "sent": {r.tag: r.t_launch for r in p2p if r.op == "send"},
                        "received": {r.tag: (r.t_wait, r.t_done) for r in p2p if r.op == "recv"}})
    return comm.all_gather_object(out)


def _message_key(tag: str) -> tuple:
    """The simulator's key of a message from the engine's tag ("act 3->4 mb0": posting.label)."""
    what, route, mb = tag.split()
    src, dst = route.split("->")
    return ("F" if what == "act" else "B", int(src), int(dst), int(mb[2:]))


def replayed(name: str, p: int, m: int, v: int, ranks: list[list[dict]]) -> dict:
    """The schedule replayed in the simulator from each step's own timeline (median over the steps):
    `ops`, every compute instruction at what it really took, messages free; `ops_messages`, each message
    too at its measured delay (from its send to the receiver having it, where the receiver was already
    waiting; the wait's own cost where it was not). The formula assumes equal op times and free messages;
    what `ops` adds over it is the load's jitter on the compute, what `ops_messages` adds the messages';
    what the measurement has beyond `ops_messages` is the engine's own cost between instructions."""
    from shardlab.parallel.pp.schedule import build
    from shardlab.parallel.pp.simulate import simulate

    sched = build(name, p, m, v)
    ops, both = [], []
    for k in range(len(ranks[0])):
        steps = [r[k] for r in ranks]
        sent = {tag: t for st in steps for tag, t in st["sent"].items()}
        delay = {_message_key(tag): max(0.0, done - max(sent[tag], wait))
                 for st in steps for tag, (wait, done) in st["received"].items()
                 if tag in sent and wait is not None and done is not None}
        took = [st["took_s"] for st in steps]
        ops.append(simulate(sched, durations=took).mean_bubble)
        both.append(simulate(sched, durations=took, latencies=delay).mean_bubble)
    return {"ops": statistics.median(ops), "ops_messages": statistics.median(both),
            "late_ms_per_op": 1e3 * statistics.median(
                st["late_s"] / max(1, len(st["took_s"])) for r in ranks for st in r)}


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
    from shardlab.plan.layout import Layout
    from shardlab.plan.train_spec import TrainSpec
    from shardlab.plan.model import ModelSpec
    from shardlab.plan.step import evaluate

    model = ModelSpec("tiny8", n_layer=REAL["n_layer"], d_model=D_MODEL, n_head=REAL["n_head"],
                      vocab=REAL["vocab_size"], seq=SEQ)
    plan = evaluate(model, TrainSpec(global_batch=m * MICRO, micro_batch=MICRO, precision="fp32"),
                    Layout(pp=p, schedule=name, v=v), load_cluster("A100-80G", p))
    t = plan.times
    # the pipeline's time: m micro batches (their compute, critical comm and waits on the host) and the bubble
    return {"plan_bubble": t["bubble"] / (t["compute"] + t["tp_pp_comm"] + t["host_wait"] + t["bubble"]),
            "plan_p2p_bytes": plan.bytes_per_step().get("p2p", 0.0)}


# the own schedules with a torch twin running the same program (1F1B, and the V rows: ZB-V, DualPipeV)
TWINS = {BASELINE: TORCH_TWIN, **{registry.SPECS[n].order: n for n in registry.TORCH if registry.SPECS[n].layout == "v"}}


def own_vs_torch(rounds: int, m: int = 4, names: tuple = tuple(TWINS)) -> dict[str, list[tuple]]:
    """Rank-side (pp = 2): for each schedule in `names` and its torch twin, (own, torch) wall seconds
    of a step, then (own, torch) CPU seconds of this process, per alternated pair, on copies of the same
    tiny-model stages. One round runs a pair of every schedule (the order of the two, and of the
    schedules, swapped every other round), so a burst of other load falls on all of them alike."""
    from shardlab import comm
    from shardlab.parallel.pp.testing import TINY4, batch, pipeline_engine

    engines = {}
    for name in names:
        v = 2 if registry.many_stages(name) else 1
        engines[name] = (pipeline_engine(name, m, v, TINY4), pipeline_engine(TWINS[name], m, v, TINY4))
    mbs = batch(m)
    weight = 1.0 / sum(y.numel() for _, y in mbs)
    out: dict[str, list[tuple]] = {name: [] for name in names}
    for r in range(rounds + 1):
        for name in names if r % 2 == 0 else names[::-1]:
            own, native = engines[name]
            got = {}
            for engine in (own, native) if r % 2 == 0 else (native, own):
                comm.barrier()
                t0, c0 = time.perf_counter(), time.process_time()
                engine.step(mbs, weight)
                comm.barrier()
                got[engine is own] = (time.perf_counter() - t0, time.process_time() - c0)
            if r:  # the first round warms up
                out[name].append((got[True][0], got[False][0], got[True][1], got[False][1]))
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
    replay = replayed(name, p, m, v, ranks)
    return {"kind": "emulated", "schedule": name, "pp": p, "m": m, "virtual": v,
            "step_s": got["step_s"], "step_times_s": got["step_times_s"],
            "idle_s": got["idle_s"], "op_s": got["op_s"],
            "bubble_measured": got["bubble"], "bubbles_measured": got["bubbles"],
            "bubble_nominal": nominal_bubble(got["step_s"], m, f_s, b_s),
            "bubble_analytic": analytic_bubble(name, p, m, v),
            "bubble_simulated": sim.mean_bubble, "p2p_latency_s": latency,
            "bubble_replayed_ops": replay["ops"], "bubble_replayed_ops_messages": replay["ops_messages"],
            "late_ms_per_op": replay["late_ms_per_op"],
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


def _figures(rows: list[dict], m_ref: int, twins: dict[str, list[float]]) -> tuple[dict, dict]:
    """The suite's figures from the emulated rows (the gains at p = 4, m = `m_ref`) and the own/torch
    ratios per twin (`twins`: schedule -> ratios); also each own/torch ratio's interval (against the
    must, 1.05), by schedule."""
    def idle(name, p, m):
        """Idle time of the step (mean over ranks): what the formulas' gains compare."""
        return next((r["idle_s"] for r in rows if r["schedule"] == name and r["pp"] == p and r["m"] == m), None)

    # the formula's error where it is exact (1F1B's bubble undivided); the gain of every schedule dividing it
    errs = [abs(r["bubble_measured"] - r["bubble_analytic"]) / r["bubble_analytic"] for r in rows
            if registry.SPECS[r["schedule"]].bubble == "1"]
    figures = {"pp_bubble_err_max": max(errs),
               **{f"pp_{name}_gain": idle(BASELINE, 4, m_ref) / idle(name, 4, m_ref) for name, v in SCHEDULES
                  if (registry.bubble_divisor(name, v) or 1) > 1}, **v_figures(rows, m_ref)}
    own_torch = {name: common.median_ci(ratios, 1.05, "<=") for name, ratios in twins.items()}  # the must
    for name, got in own_torch.items():  # pp_own_vs_torch_step_ratio (1F1B), then _zbv, _dualpipev
        key = "pp_own_vs_torch_step_ratio" + ("" if name == BASELINE else f"_{name}")
        figures[key] = got["median"]
        figures[f"{key}_ci90"] = got["ci90"]
        figures[f"{key}_load_avg"] = got["load_avg"]
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
         "planner bubble", "simulated (measured F, B, latency)", "replayed: ops / + messages", "late ms per op",
         "bubble, nominal f b", "p2p KiB per rank",
         "planner p2p KiB", "activations held (max rank)"],
        [[r["schedule"], r["pp"], r["m"], r["virtual"], f"{r['step_s'] * 1e3:.1f}",
          f"{ms_of(r, 'F')} / " + (ms_of(r, "B") if "B" in r["op_s"] else f"{ms_of(r, 'I')}+{ms_of(r, 'W')}"),
          f"{r['bubble_measured']:.3f}", f"{r['bubble_analytic']:.3f}", _fmt(r["plan_bubble"]),
          f"{r['bubble_simulated']:.3f} ({r['p2p_latency_s'] * 1e3:.2f} ms)",
          f"{r['bubble_replayed_ops']:.3f} / {r['bubble_replayed_ops_messages']:.3f}", f"{r['late_ms_per_op']:.2f}",
          f"{r['bubble_nominal']:.3f}",
          f"{min(r['p2p_bytes']) / 1024:g}–{max(r['p2p_bytes']) / 1024:g}",
          _fmt(None if r["plan_p2p_bytes"] is None else r["plan_p2p_bytes"] / 1024, "g"),
          max(r["held_microbatches"])] for r in rows])
    mem_table = common.md_table(
        ["schedule", "p", "m", "V", "held, per rank (measured)", "schedule's count (max)", "peak KiB per rank"],
        [[r["schedule"], r["pp"], r["m"], r["virtual"], ", ".join(map(str, r["held_microbatches"])),
          r["peak_activations"], ", ".join(f"{b / 1024:.0f}" for b in r["held_bytes"])] for r in rows])
    return table, mem_table


def _own_torch_text(figures: dict, twins: dict, own_torch: dict, cpu: dict) -> str:
    """The own/torch figures, one clause per twin."""
    parts = []
    for name, ratios in twins.items():
        got = own_torch[name]
        key = "pp_own_vs_torch_step_ratio" + ("" if name == BASELINE else f"_{name}")
        parts.append(f"{key} = {figures[key]:.3f} (own {name} ÷ {TWINS[name]}, median of {len(ratios)} alternated "
                     f"pairs, min–max {min(ratios):.2f}–{max(ratios):.2f}, {common.fmt_ci(got)}; must ≤ 1.05: "
                     f"{got['goal']['verdict']}; CPU seconds own ÷ torch {common.fmt_stats(cpu[name], digits=3)})")
    return ("**Own against torch** (the real tiny model, p = 2, m = 4; one round runs a pair of every schedule): "
            + "; ".join(parts) + ".")


def _report(out: Path, f_s: float, b_s: float, steps: int, tables: tuple[str, str], figures: dict,
            twins: dict, own_torch: dict, cpu: dict, overlap: dict) -> None:
    table, mem_table = tables
    common.write_report(out, "Pipeline schedules: the bubble measured", [
        f"Emulated compute: every stage sleeps f = {f_s * 1e3:.0f} ms per forward and b = {b_s * 1e3:.0f} ms per "
        "backward (split evenly over virtual stages, I = W = B/2; F / B below are what the sleeps really took, per "
        "stage); activations and gradients are real tensors sent through comm. Measured bubble = 1 - busy / step "
        "per rank (busy: the measured sleeps; step: until the last rank finishes), averaged over ranks, median of "
        f"{steps} steps; analytic: (p-1)/(m+p-1), ÷ V interleaved, (p-1)/(3m+p-1) for ZB-H1 and (p-1)/(6m+p-1) "
        "for ZB-V and DualPipeV (F = I = W). The planner's bubble is its share of the pipeline's time for the same "
        "layout; 'simulated' replays the schedule (parallel/pp/simulate.py) with the measured mean F, B (I, W) "
        "and the measured one-way latency of an activation-sized message (in brackets); 'replayed' replays each "
        "step from the ranks' own timelines: every compute at what it really took (the load's jitter on the "
        "compute), then every message at its measured delay too; what the measurement has beyond that is the "
        "engine's own cost between instructions (posting, waking). 'late' is what a sleep overshot, per op. "
        "'nominal' counts the sleeps' overshoot as bubble (1 - m(f+b)/step). p2p: bytes a rank sends plus "
        "receives per step, as comm records them; the planner's figure is the first and last stage's (a middle "
        "stage, p = 4, moves twice as much; interleaved ranks more).",
        table,
        "Activation memory on the real model (8 layers, width 32, microbatches of 2 × 16 tokens): the "
        "microbatches whose saved tensors a rank holds at its peak, counted with saved-tensor hooks during one "
        "step, per rank; interleaved counts (chunk, microbatch) pairs, a chunk being half a stage. 1F1B and "
        "ZB-H1 hold at most p, GPipe all m.",
        mem_table,
        f"**Figures** (load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} when written, "
        f"{os.cpu_count()} cores): pp_bubble_err_max = {figures['pp_bubble_err_max']:.3f} (goal ≤ 0.10), "
        f"pp_interleaved_gain = {figures['pp_interleaved_gain']:.2f} (1F1B's idle time ÷ interleaved's at p = 4, "
        f"V = 2: theory 2, goal ≥ 1.7), pp_zb_gain = {figures['pp_zb_gain']:.2f} (1F1B's idle time ÷ ZB-H1's: "
        "theory 3, goal ≥ 2).",
        "**The V schedules** (ZB-V, DualPipeV: two stages per rank, emulated): pp_v_bubble_err_max = "
        f"{_fmt(figures.get('pp_v_bubble_err_max'))} (|measured - formula| over their rows, goal ≤ 0.05), "
        f"pp_zbv_over_1f1b_bubble = {_fmt(figures.get('pp_zbv_over_1f1b_bubble'))} (p = 4, goal ≤ 1/3; formula "
        "0.22), pp_dualpipev_over_1f1b_bubble = "
        f"{_fmt(figures.get('pp_dualpipev_over_1f1b_bubble'))}.",
        _own_torch_text(figures, twins, own_torch, cpu),
        "**DualPipe's overlap, as comm can express it** (the own engine cannot run DualPipe's overlapped pair: "
        "docs/pipeline.md): an all-to-all of "
        f"{overlap['bytes_per_rank'] / 2**20:g} MiB per rank (ep = 2) launched async before an emulated chunk of "
        f"{overlap['compute_s'] * 1e3:.0f} ms and waited after it: pp_a2a_hidden_fraction = "
        f"{overlap['hidden_fraction']:.2f} (1 - exposed overlapped ÷ exposed after the chunk; exposed "
        f"{overlap['exposed_serial_s'] * 1e3:.1f} ms after the chunk, {overlap['exposed_overlapped_s'] * 1e3:.1f} ms "
        "overlapped, medians).",
        *[f"![{name}](pipeline_{name}.png)" for name, _ in SCHEDULES],
    ])


def run(out: Path, quick: bool) -> dict:
    from shardlab.parallel.pp import build
    from shardlab.parallel.pp.draw import png_diagram, simulated_spans
    from shardlab.launch.workers import WorkerPool

    # long stage times: a V chunk's F, I or W is f/2 (30 or 50 ms), so the milliseconds a loaded machine
    # adds to a rank's wake-ups and posts stay small beside it (docs/pipeline.md, "Measuring the bubble")
    f_s, b_s = (0.06, 0.12) if quick else (0.1, 0.2)
    ms = (8,) if quick else (4, 8)
    steps = 3 if quick else 5
    rows = []
    for p in (2, 4):
        rows += _emulated_rows(p, ms, steps, f_s, b_s)
    n_pairs = 9 if quick else 21
    with WorkerPool(2, timeout=900) as pool:
        pairs = pool.run(own_vs_torch, n_pairs)[0]
        # DualPipe's all-to-all under the other microbatch's chunk (f/2), as comm expresses it: 8 MiB per rank
        overlap = pipeline_overlap.measure(pool, n_pairs, f_s / 2, 1 << 21)
    twins = {name: [a / b for a, b, _, _ in got] for name, got in pairs.items()}
    cpu = {name: common.median_ci([c / d for _, _, c, d in got if d]) for name, got in pairs.items()}
    figures, own_torch = _figures(rows, max(ms), twins)
    figures["pp_a2a_hidden_fraction"] = overlap["hidden_fraction"]
    for name, v in SCHEDULES:
        png_diagram(simulated_spans(build(name, 4, 8, v)), out / f"pipeline_{name}.png",
                    f"{name}: p=4, m=8" + (f", V={v}" if v > 1 else "") + " (simulated, backward = 2 x forward)")
    tables = _tables(rows)  # the emulated rows only: before own_vs_torch's joins them
    for name, got in pairs.items():
        rows.append({"kind": "own_vs_torch", "schedule": name, "torch": TWINS[name], "pp": 2,
                     "pairs_own_torch_s": [p[:2] for p in got], "pairs_own_torch_cpu_s": [p[2:] for p in got],
                     "own_over_torch": own_torch[name], "own_over_torch_cpu": cpu[name]})
    rows.append(overlap)
    common.write_results(out, "pipeline", figures, rows)
    _report(out, f_s, b_s, steps, tables, figures, twins, own_torch, cpu, overlap)
    return {"suite": "pipeline", "figures": figures, "rows": rows}
