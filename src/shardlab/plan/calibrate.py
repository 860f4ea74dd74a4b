"""`shardlab plan calibrate`: measure this machine into a cluster profile (`cluster=this`).

Measured, one thread per rank as in training:
  - GEMM FLOP/s at the model's shapes (forward, dX, dW of every GEMM) and SDPA attention
  - elementwise bandwidth (LayerNorm, GELU, add at the model's activation sizes)
  - per-op dispatch cost of eager autograd (forward + backward of a chain of tiny ops)
  - optimizer step cost per parameter (AdamW + grad-norm pass at the model's parameter shapes)
  - gloo all_reduce / reduce_scatter / all_gather at world 2: t = alpha + wire / bus_bw, least squares
  - how much of a collective hides behind a GEMM (overlap efficiency)
Compute is measured by calibrate_compute.py; torch is imported inside the functions only.
"""
from __future__ import annotations

import os
import socket
import statistics
import time
from dataclasses import replace
from pathlib import Path

from .calibrate_compute import as_a_rank, cpu_share, measure_compute
from .ops import gemm_shapes
from .hardware import Cluster, default_profile_path, meminfo, write_profile
from .model import ModelSpec

SIZES = (4, 2**10, 2**12, 2**14, 2**16, 2**18, 2**20, 2**21, 2**22, 2**23, 2**24)  # payload bytes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _comm_worker(rank: int, world: int, port: int, quick: bool, models: tuple, micro_batches: tuple, q) -> None:
    as_a_rank()  # scheduled as torchrun's ranks are (calibrate_compute.as_a_rank)
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    mt = 0.06 if quick else 0.3
    res = {}
    from shardlab.comm import dist_all_gather_flat as ag, dist_reduce_scatter_flat as rs
    if models:  # compute measured on every rank at once: the contention training sees
        dist.barrier()
        mine = measure_compute(list(models), micro_batches, quick)
        dist.barrier()
        mine["cpu_share"] = cpu_share(1.5)  # every rank busy at once
        every = [None] * world
        dist.all_gather_object(every, mine)
        res["compute"] = _mean_compute(every)
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        pts = []
        for size in SIZES:
            n = max(world, size // 4 // world * world)
            full = torch.ones(n)
            part = torch.ones(n // world)
            fn = {"all_reduce": lambda: dist.all_reduce(full),
                  "reduce_scatter": lambda: rs(part, full),
                  "all_gather": lambda: ag(full, part)}[op]
            dist.barrier()
            pts.append((n * 4, _sync_time(fn, mt, dist)))
        res[op] = pts
    # overlap: an async all_reduce while this rank runs GEMMs of about the same length. On CPU the
    # collective's own work (gloo's reduction, the copies through loopback) competes with the
    # GEMMs for the cores, so "hidden" is a measured fraction, not a given. Paired rounds (alone,
    # alone, together; the slowest rank's time), medians: one slow spell moves one round
    a, w = torch.randn(256, 256), torch.randn(256, 256)
    buf = torch.ones(2**20)

    def gemms():
        for _ in range(12):
            torch.mm(a, w)

    def comm():
        dist.all_reduce(buf)

    def both():
        h = dist.all_reduce(buf, async_op=True)
        gemms()
        h.wait()
    rounds = []
    for fn in (gemms, comm, both):  # warm-up
        fn()
    for _ in range(60 if quick else 150):
        ts = []
        for fn in (gemms, comm, both):
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        t = torch.tensor(ts, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        rounds.append(t.tolist())
    # medians per column (a per-round ratio of these differences is mostly noise)
    t_g, t_c, t_b = (statistics.median(r[k] for r in rounds) for k in range(3))
    res["overlap"] = max(0.0, min(1.0, (t_g + t_c - t_b) / min(t_g, t_c)))
    if rank == 0:
        q.put(res)
    dist.barrier()
    dist.destroy_process_group()


def _sync_time(fn, min_time, dist) -> float:
    """Seconds per call, the same repetition count on every rank (collectives must match)."""
    import torch
    fn()
    t0 = time.perf_counter()
    fn()
    one = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(one, op=dist.ReduceOp.MAX)
    reps = max(1, int(min_time / 3 / max(one.item(), 1e-7)))
    samples = []
    for _ in range(3):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        samples.append((time.perf_counter() - t0) / reps)
    return statistics.median(samples)


SYNC_SEGMENTS = (0, 2, 8, 32)  # GEMMs of 256^3 between two syncs (about 0.3 ms each on one core)


def _sync_worker(rank: int, world: int, port: int, rounds: int, q) -> None:
    """Each rank computes a segment (the same GEMMs on every rank), then all-reduces 1 KiB; the time in
    the all-reduce beyond its zero-segment latency is what a rank waits for its peers at a sync point."""
    as_a_rank()
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    a, w, buf = torch.randn(256, 256), torch.randn(256, 256), torch.ones(256)
    out = []
    for reps in SYNC_SEGMENTS:
        seg, wait = [], []
        dist.barrier()
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(reps):
                torch.mm(a, w)
            t1 = time.perf_counter()
            dist.all_reduce(buf)
            seg.append(t1 - t0)
            wait.append(time.perf_counter() - t1)
        out.append((statistics.fmean(seg), statistics.fmean(wait)))
    every = [None] * world
    dist.all_gather_object(every, out)
    if rank == 0:
        q.put(every)
    dist.barrier()
    dist.destroy_process_group()


def _run_ranks(target, world: int, args: tuple, timeout: float, what: str):
    """Spawn `world` ranks of `target(rank, world, port, *args, q)` on a free port; rank 0's result from
    the queue. Fails fast when a rank dies, and after `timeout`; every process is reaped."""
    import queue

    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=target, args=(r, world, port, *args, q)) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                return q.get(timeout=0.5)
            except queue.Empty:
                dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"{what} workers failed (exit codes {dead})" if dead
                                       else f"{what} timed out after {timeout:.0f} s")
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


def measure_sync_wait(world: int, rounds: int = 40, timeout: float = 300.0) -> list[tuple[float, float]]:
    """(segment seconds, mean wait seconds per sync) at `world` ranks: on shared cores ranks that run the
    same work between two syncs still reach the sync apart (a rank descheduled, a peer's I/O thread on its
    core), and every sync costs the early ranks that gap. Tensor parallelism syncs every segment of every
    micro batch (plan/step.py charges it per call); the latency at segment 0 is the collective's own."""
    every = _run_ranks(_sync_worker, world, (rounds,), timeout, "sync calibration")
    # mean over ranks (explain's measured components are means over ranks), the zero segment's latency off
    seg = [statistics.fmean(r[i][0] for r in every) for i in range(len(SYNC_SEGMENTS))]
    wait = [statistics.fmean(r[i][1] for r in every) for i in range(len(SYNC_SEGMENTS))]
    return [(s, max(0.0, w - wait[0])) for s, w in zip(seg, wait)]


def fit_alpha_beta(points: list[tuple[int, float]], wire_factor: float) -> tuple[float, float]:
    """t = alpha + wire/bus_bw over (payload, seconds), least squares in relative error (weights
    1/t^2), so that 8-byte and 16 MB calls count alike; returns (alpha, bus_bw)."""
    xs = [wire_factor * s for s, _ in points]
    ys = [t for _, t in points]
    ws = [1 / (t * t) for t in ys]
    sw = sum(ws)
    mx, my = sum(w * x for w, x in zip(ws, xs)) / sw, sum(w * y for w, y in zip(ws, ys)) / sw
    sxx = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs))
    slope = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys)) / sxx
    alpha = max(my - slope * mx, min(ys) * 0.5)
    return alpha, 1.0 / max(slope, 1e-15)


def _mean_compute(every: list[dict]) -> dict:
    out = {k: statistics.fmean(d[k] for d in every) for k in every[0] if k not in ("gemm_table", "overhead")}
    out["overhead"] = {k: statistics.fmean(d["overhead"][k] for d in every) for k in every[0]["overhead"]}
    out["gemm_table"] = {k: statistics.fmean(d["gemm_table"][k] for d in every) for k in every[0]["gemm_table"]}
    return out


def measure_comm(world: int = 2, quick: bool = False, timeout: float = 300.0, models=(),
                 micro_batches=()) -> dict:
    """Collectives (and, given models, compute under `world` concurrent ranks) in spawned processes."""
    res = _run_ranks(_comm_worker, world, (quick, tuple(models), tuple(micro_batches)), timeout, "calibration")
    wf = {"all_reduce": 2 * (world - 1) / world, "reduce_scatter": (world - 1) / world,
          "all_gather": (world - 1) / world}
    out = {op: fit_alpha_beta(res[op], wf[op]) for op in wf}
    return {"collectives": out, "overlap_efficiency": res["overlap"], "compute": res.get("compute"), "raw": res}


def _mem_total() -> float:
    total = meminfo("MemTotal")
    return total if total is not None else 8 * 2**30


def calibrate(models: list[ModelSpec], micro_batches=(1, 2, 4, 8), out: Path | None = None,
              quick: bool = False, world: int = 2, trainer: bool = True, step_overhead: dict | None = None) -> Path:
    """Measure and write the profile. trainer=True also times `shardlab train` on a miniature model
    at world 1 and `world` to get the trainer's own per-step cost (data, doctor check, bookkeeping);
    `step_overhead` reuses such a measurement instead."""
    solo = measure_compute(models, micro_batches, quick)  # one rank alone (world 1 runs)
    solo_share = cpu_share(1.5)
    comm = measure_comm(world, quick, models=models, micro_batches=micro_batches)
    comp = comm["compute"]  # every rank at once, one thread each: what training at `world` sees
    ratios = [solo["gemm_table"][k] / comp["gemm_table"][k] for k in comp["gemm_table"] if k.startswith("linear:")]
    solo_speedup = max(1.0, statistics.median(ratios))
    # the saturation fit over the models' own GEMMs (the miniatures' in-situ entries are far below
    # any realistic shape and would drag the fitted peak down)
    own = {f"{kind}:{m},{n},{k}" for model in models for b in micro_batches
           for kind, m, n, k in gemm_shapes(model, b, model.seq) if kind != "linear_nobias"}
    gemm = {k: v for k, v in comp["gemm_table"].items() if k in own}
    fit = _fit_gemm(gemm)
    cores = os.cpu_count() or 1
    c = Cluster(
        name="this", num_gpus=cores, gpus_per_node=cores, peak_flops=fit[0], peak_flops_fp32=fit[0],
        hbm_bytes=_mem_total() / cores, hbm_bw=comp["elementwise_bw"], intra_bw=comm["collectives"]
        ["all_reduce"][1], intra_latency=comm["collectives"]["all_reduce"][0] / 2,
        inter_bw=comm["collectives"]["all_reduce"][1], inter_latency=comm["collectives"]["all_reduce"][0] / 2,
        pcie_bw=comp["elementwise_bw"], gemm_efficiency=1.0, mem_usable_fraction=0.9,
        overlap_efficiency=comm["overlap_efficiency"], op_overhead_s=comp["op_overhead_s"],
        collectives=comm["collectives"], measured_world=world, gemm_table=comp["gemm_table"],
        gemm_fit=fit, adam_s_per_param=comp["adam_s_per_param"], adam_s_per_tensor=comp["adam_s_per_tensor"],
        elementwise_bw=comp["elementwise_bw"], solo_speedup=solo_speedup, overhead=comp["overhead"],
        cpu_share=comp["cpu_share"], cpu_share_solo=solo_share,
        source=f"calibrated {time.strftime('%Y-%m-%d %H:%M')} for {', '.join(m.name for m in models)}")
    if trainer:
        from .calibrate_trainer import trainer_overhead
        (f1, _), (f2, _) = trainer_overhead(c, 1, models[0]), trainer_overhead(c, world, models[0])
        c = replace(c, step_overhead={"1": f1, str(world): f2})
    elif step_overhead:
        c = replace(c, step_overhead=step_overhead)
    path = out or default_profile_path()
    write_profile(c, path)
    return path


def _fit_gemm(table: dict) -> tuple[float, float]:
    """1/rate = 1/peak + (f_half/peak)/f is linear in 1/f: least squares."""
    pts = []
    for key, rate in table.items():
        m, n, k = map(int, key.split(":")[-1].split(","))
        pts.append((1 / (2 * m * n * k), 1 / rate))
    if len(pts) < 2:
        return (max(table.values()) if table else 1e9, 1.0)
    mx, my = statistics.fmean(p[0] for p in pts), statistics.fmean(p[1] for p in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts) or 1e-30
    b = sum((x - mx) * (y - my) for x, y in pts) / sxx
    a = my - b * mx
    if a <= 0:
        return (max(table.values()), 1.0)
    peak = 1 / a
    return (peak, max(b * peak, 0.0))


