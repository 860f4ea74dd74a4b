"""`shardlab plan calibrate`: measure this machine into a cluster profile (`cluster=this`).

Measured, one thread per rank as in training:
  - GEMM FLOP/s at the model's shapes (forward, dX, dW of every GEMM) and SDPA attention
  - elementwise bandwidth (LayerNorm, GELU, add at the model's activation sizes)
  - per-op dispatch cost of eager autograd (forward + backward of a chain of tiny ops)
  - optimizer step cost per parameter (AdamW + grad-norm pass at the model's parameter shapes)
  - gloo all_reduce / reduce_scatter / all_gather at world 2: t = alpha + wire / bus_bw, least squares
  - how much of a collective hides behind a GEMM (overlap efficiency)
torch is imported here only.
"""
from __future__ import annotations

import os
import socket
import statistics
import time
from pathlib import Path

from .compute import gemm_shapes
from .hardware import Cluster, default_profile_path, write_profile
from .model import ModelSpec

SIZES = (4, 2**12, 2**16, 2**20, 2**22, 2**24)  # collective payload bytes


def _timeit(fn, min_time: float, min_reps: int = 3) -> float:
    """Median seconds per call over batches lasting at least min_time/5 each."""
    fn()
    reps, t0 = 1, time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    reps = max(1, int(min_time / 5 / one))
    samples = []
    for _ in range(min_reps):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        samples.append((time.perf_counter() - t0) / reps)
    return statistics.median(samples)


def measure_compute(models: list[ModelSpec], micro_batches, quick: bool) -> dict:
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    mt = 0.01 if quick else 0.1
    table = {}
    for model in models:
        s = model.seq
        for b in micro_batches:
            for (kind, m, n, k) in gemm_shapes(model, b, s):
                key = f"{kind}:{m},{n},{k}"
                if key not in table:
                    table[key] = 2 * m * n * k / _timeit(_gemm_fn(kind, m, n, k), mt)
            table.update(_sdpa(model, b, mt))
    # elementwise families: t = latency + bytes / bandwidth, fitted over the models' sizes
    samples: dict[str, list] = {}
    for model in models:
        for b in micro_batches:
            for fam, (nb, tf, tb) in _elementwise(model, b, mt).items():
                samples.setdefault(fam, []).append((nb, tf, tb))
    for fam, pts in samples.items():
        for prefix, idx in (("", 1), ("_bwd", 2)):
            alpha, bw = _line_fit([(p[0], p[idx]) for p in pts])
            table[f"ew{prefix}:{fam}"] = bw
            table[f"ewa{prefix}:{fam}"] = alpha
    bws = [table[f"ew:{f}"] for f in ("ln", "add", "copy") if f"ew:{f}" in table]
    # dispatch: a chain of tiny autograd ops, forward + backward, per aten op dispatched
    z0 = torch.ones(8, requires_grad=True)

    def chain():
        z = z0
        for _ in range(100):
            z = z * 1.0001
        z.sum().backward()
    with _Count() as cnt:
        chain()
    op_overhead = _timeit(chain, mt) / max(1, cnt.n)
    # optimizer: shardlab's AdamW (foreach=False, decay groups) + grad-norm clip at each model's
    # parameter shapes and at many tiny tensors; least squares t = a*tensors + b*params
    pts = [_adam_time([n for _, n in m.param_shapes()], mt) for m in models]
    pts += [_adam_time([16] * 64, mt), _adam_time([2**20], mt)]  # per-tensor and per-element anchors
    a_t, b_p = _fit_two(pts)
    return {"gemm_table": table, "elementwise_bw": statistics.median(bws), "op_overhead_s": op_overhead,
            "adam_s_per_param": b_p, "adam_s_per_tensor": a_t, "op_counts": count_ops(models[0])}


def _elementwise(model: ModelSpec, b: int, mt: float) -> dict:
    """family -> (forward bytes as compute.py counts them, forward s, backward s) at this size."""
    import torch
    import torch.nn.functional as F
    T, h, a, v = b * model.seq, model.d_model, model.n_head, model.vocab
    out = {}

    def fb(fn, *xs, nbytes):
        xs = [x.requires_grad_() for x in xs]
        t_f = _timeit(lambda: fn(*xs), mt)
        y = fn(*xs)
        g = torch.randn_like(y)
        t_b = _timeit(lambda: torch.autograd.grad(fn(*xs), xs, g), mt) - t_f
        return nbytes, t_f, max(t_b, 1e-7)
    ln = torch.nn.LayerNorm(h)
    out["ln"] = fb(ln, torch.randn(T, h), nbytes=2 * T * h * 4)
    out["gelu"] = fb(lambda x: F.gelu(x, approximate="tanh"), torch.randn(T, 4 * h), nbytes=8 * T * h * 4)
    x, y = torch.randn(T, h), torch.randn(T, h)
    t_add = _timeit(lambda: x.add_(y), mt)
    out["add"] = (3 * T * h * 4, t_add, t_add)
    xv = torch.randn(b, model.seq, a, h // a)
    t_copy = _timeit(lambda: xv.transpose(1, 2).contiguous(), mt)
    out["copy"] = (2 * T * h * 4, t_copy, t_copy)
    g4 = torch.randn(T, 4 * h)
    t_sum = _timeit(lambda: g4.sum(0), mt)
    out["sum"] = (4 * T * h * 4, t_sum, t_sum)
    tgt = torch.randint(0, v, (T,))
    out["ce"] = fb(lambda z: F.cross_entropy(z, tgt), torch.randn(T, v), nbytes=2 * T * v * 4)
    return out


def _Count():
    """A dispatch mode that counts the aten ops run under it (forward and autograd backward)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))
    return Count()


def count_ops(model: ModelSpec) -> dict:
    """Dispatched aten ops of shardlab's GPT forward and backward, per block and outside the blocks:
    counted on 1- and 2-block copies of the model (a property of the code, like its FLOPs)."""
    try:
        import torch
        from shardlab.model.gpt import GPTConfig, build_model
    except ImportError:
        return {}

    def run(layers):
        net = build_model(GPTConfig(n_layer=layers, n_head=model.n_head, d_model=model.d_model,
                                    vocab_size=model.vocab, max_seq_len=model.seq), seed=0)
        x = torch.randint(0, model.vocab, (1, model.seq))
        with _Count() as cnt:
            loss = net(x, x)
            f = cnt.n
            loss.backward()
            return f, cnt.n - f
    (f1, b1), (f2, b2) = run(1), run(2)
    return {"layer_fwd": f2 - f1, "layer_bwd": b2 - b1, "fixed_fwd": f1 - (f2 - f1), "fixed_bwd": b1 - (b2 - b1)}


def _gemm_fn(kind: str, m: int, n: int, k: int):
    """The call nn.Linear makes for a GEMM of this kind, with operands laid out as it has them."""
    import torch
    if kind in ("linear", "linear_nobias"):  # x (m, k) @ W^T, W stored (n, k)
        x, w, bias = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        return (lambda: torch.addmm(bias, x, w.t())) if kind == "linear" else (lambda: torch.mm(x, w.t()))
    if kind == "mm_ta":  # dW = dY^T X: A is a transposed view
        a, b = torch.randn(k, m), torch.randn(k, n)
        return lambda: torch.mm(a.t(), b)
    a, b = torch.randn(m, k), torch.randn(k, n)
    return lambda: torch.mm(a, b)


def _sdpa(model: ModelSpec, b: int, mt: float) -> dict:
    import torch
    import torch.nn.functional as F
    s, a, dh = model.seq, model.n_head, model.d_model // model.n_head
    q, kk, v = (torch.randn(b, a, s, dh, requires_grad=True) for _ in range(3))
    flops = 4 * b * a * s * s * dh
    t_f = _timeit(lambda: F.scaled_dot_product_attention(q, kk, v, is_causal=True), mt)
    gy = torch.randn(b, a, s, dh)

    def fb():
        out = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
        torch.autograd.grad(out, (q, kk, v), gy)
    t_fb = _timeit(fb, mt)
    return {f"sdpa:{b * a}x{s},{dh}": flops / t_f,
            f"sdpa_bwd:{b * a}x{s},{dh}": 2 * flops / max(t_fb - t_f, 1e-9)}


def _adam_time(numels: list[int], mt: float) -> tuple[int, int, float]:
    import torch
    params = [torch.zeros(n, requires_grad=True) for n in numels]
    for p in params:
        p.grad = torch.randn_like(p)
    half = len(params) // 2
    opt = torch.optim.AdamW([{"params": params[:half], "weight_decay": 0.1},
                             {"params": params[half:], "weight_decay": 0.0}], lr=1e-4, foreach=False)

    def step():  # the step as shardlab's trainer runs it: per-tensor grad norm, clip, AdamW
        sq = torch.zeros(1)
        for p in params:
            sq += p.grad.detach().float().pow(2).sum()
        coef = torch.clamp(1.0 / (sq.sqrt() + 1e-6), max=1.0)
        for p in params:
            p.grad.mul_(coef)
        opt.step()
    return len(numels), sum(numels), _timeit(step, mt)


def _fit_two(pts: list[tuple[int, int, float]]) -> tuple[float, float]:
    """Least squares t = a*x + b*y through the origin (2x2 normal equations)."""
    sxx = sum(x * x for x, _, _ in pts)
    syy = sum(y * y for _, y, _ in pts)
    sxy = sum(x * y for x, y, _ in pts)
    sxt = sum(x * t for x, _, t in pts)
    syt = sum(y * t for _, y, t in pts)
    det = sxx * syy - sxy * sxy
    a = (sxt * syy - syt * sxy) / det
    b = (syt * sxx - sxt * sxy) / det
    return max(a, 0.0), max(b, 0.0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _comm_worker(rank: int, world: int, port: int, quick: bool, q, models=(), micro_batches=()) -> None:
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    mt = 0.02 if quick else 0.3
    res = {}
    if models:  # compute measured on every rank at once: the contention training sees
        dist.barrier()
        mine = measure_compute(list(models), micro_batches, quick)
        every = [None] * world
        dist.all_gather_object(every, mine)
        res["compute"] = _mean_compute(every)
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        pts = []
        for size in (SIZES[::2] if quick else SIZES):
            n = max(world, size // 4 // world * world)
            full = torch.ones(n)
            part = torch.ones(n // world)
            fn = {"all_reduce": lambda: dist.all_reduce(full),
                  "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, full),
                  "all_gather": lambda: dist.all_gather_into_tensor(full, part)}[op]
            dist.barrier()
            pts.append((n * 4, _sync_time(fn, mt, dist)))
        res[op] = pts
    # overlap: an async all_reduce while this rank runs GEMMs
    a, w = torch.randn(256, 256), torch.randn(256, 256)
    buf = torch.ones(2**20)

    def gemms():
        for _ in range(40):
            torch.mm(a, w)
    dist.barrier()
    t_g = _sync_time(gemms, mt, dist)
    t_c = _sync_time(lambda: dist.all_reduce(buf), mt, dist)

    def both():
        h = dist.all_reduce(buf, async_op=True)
        gemms()
        h.wait()
    t_b = _sync_time(both, mt, dist)
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


def _line_fit(pts: list[tuple[float, float]]) -> tuple[float, float]:
    """t = alpha + x / bw by least squares, alpha >= 0; one distinct x: alpha = 0."""
    xs = [x for x, _ in pts]
    if len(set(xs)) < 2:
        return 0.0, statistics.fmean(x / t for x, t in pts)
    mx, my = statistics.fmean(xs), statistics.fmean(t for _, t in pts)
    slope = sum((x - mx) * (t - my) for x, t in pts) / sum((x - mx) ** 2 for x in xs)
    alpha = my - slope * mx
    if alpha < 0 or slope <= 0:  # noise: fall back to a pure bandwidth through the origin
        return 0.0, sum(x * x for x in xs) / sum(x * t for x, t in pts)
    return alpha, 1.0 / slope


def fit_alpha_beta(points: list[tuple[int, float]], wire_factor: float) -> tuple[float, float]:
    """Least squares t = alpha + wire/bus_bw over (payload, seconds); returns (alpha, bus_bw)."""
    xs = [wire_factor * s for s, _ in points]
    ys = [t for _, t in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    alpha = max(my - slope * mx, min(ys) * 0.5)
    return alpha, 1.0 / max(slope, 1e-15)


def _mean_compute(every: list[dict]) -> dict:
    out = {k: statistics.fmean(d[k] for d in every) for k in every[0] if k not in ("gemm_table", "op_counts")}
    out["op_counts"] = every[0]["op_counts"]
    out["gemm_table"] = {k: statistics.fmean(d["gemm_table"][k] for d in every) for k in every[0]["gemm_table"]}
    return out


def measure_comm(world: int = 2, quick: bool = False, timeout: float = 300.0, models=(),
                 micro_batches=()) -> dict:
    """Collectives (and, given models, compute under `world` concurrent ranks) in spawned processes."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_comm_worker, args=(r, world, port, quick, q, tuple(models), tuple(micro_batches)))
             for r in range(world)]
    for p in procs:
        p.start()
    import queue
    deadline = time.monotonic() + timeout
    try:
        while True:  # wait for rank 0's result, but fail fast if a worker died
            try:
                res = q.get(timeout=0.5)
                break
            except queue.Empty:
                dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"calibration workers failed (exit codes {dead})"
                                       if dead else f"calibration timed out after {timeout:.0f} s")
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    wf = {"all_reduce": 2 * (world - 1) / world, "reduce_scatter": (world - 1) / world,
          "all_gather": (world - 1) / world}
    out = {op: fit_alpha_beta(res[op], wf[op]) for op in wf}
    return {"collectives": out, "overlap_efficiency": res["overlap"], "compute": res.get("compute"), "raw": res}


def _mem_total() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 2**30


def calibrate(models: list[ModelSpec], micro_batches=(1, 2, 4, 8), out: Path | None = None,
              quick: bool = False, world: int = 2) -> Path:
    solo = measure_compute(models, micro_batches, quick)  # one rank alone (world 1 runs)
    comm = measure_comm(world, quick, models=models, micro_batches=micro_batches)
    comp = comm["compute"]  # every rank at once, one thread each: what training at `world` sees
    ratios = [solo["gemm_table"][k] / comp["gemm_table"][k] for k in comp["gemm_table"] if k.startswith("linear:")]
    solo_speedup = max(1.0, statistics.median(ratios))
    gemm = {k: v for k, v in comp["gemm_table"].items() if k.split(":")[0] in ("linear", "mm", "mm_ta")}
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
        elementwise_bw=comp["elementwise_bw"], solo_speedup=solo_speedup, op_counts=comp["op_counts"],
        source=f"calibrated {time.strftime('%Y-%m-%d %H:%M')} for {', '.join(m.name for m in models)}")
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


