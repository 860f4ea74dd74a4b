"""Calibration, compute half: how fast this machine runs the model's own operations, one thread.

GEMMs exactly as nn.Linear issues them (addmm with W^T, and the two backward GEMMs), SDPA attention,
elementwise families (LayerNorm, GELU, adds, copies, bias-gradient sums, cross-entropy) fitted as
latency + bytes / bandwidth, the eager cost of one dispatched op, the optimizer step as the trainer
runs it, and how many ops the real model dispatches. torch is imported inside the functions.
"""
from __future__ import annotations

import statistics
import time

from .geometry import units
from .calibrate_insitu import make_optimizer_step, measure_in_situ
from .ops import gemm_shapes
from .model import ModelSpec


def _timeit(fn, min_time: float, min_reps: int = 3, keep: bool = False) -> float:
    """Median CPU seconds per call (this process's CPU time, so other work on shared cores does not
    leak in; `cpu_share` converts back to wall time) over batches of at least min_time/5 each.
    keep=True holds the
    last outputs alive, as autograd holds a forward's activations until the backward: each call then
    writes fresh memory, which is slower than reusing the buffer just freed."""
    if keep:
        kept: list = []

        def fn(inner=fn):
            kept.append(inner())
            if len(kept) > 16:
                kept.pop(0)
    fn()
    reps, t0 = 1, time.process_time()
    fn()
    one = max(time.process_time() - t0, 1e-7)
    reps = max(1, int(min_time / 5 / one))
    samples = []
    for _ in range(min_reps):
        t0 = time.process_time()
        for _ in range(reps):
            fn()
        samples.append((time.process_time() - t0) / reps)
    return statistics.median(samples)


def cpu_share(seconds: float = 1.0) -> float:
    """Fraction of one core this process gets right now: CPU time / wall time over a GEMM loop.
    Predicted compute (CPU seconds) / share = wall seconds on a machine shared with other work."""
    import torch
    a, b = torch.randn(192, 192), torch.randn(192, 192)
    w0, c0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - w0 < seconds:
        torch.mm(a, b)
    return min(1.0, (time.process_time() - c0) / (time.perf_counter() - w0))


def as_a_rank() -> None:
    """Put this process in a session of its own, as torchrun starts every rank of a run
    (start_new_session). On Linux with autogroup scheduling each session is a scheduling group of
    its own, so on shared cores a rank's share of the CPU is that of a separate program; measured
    from inside one session, two probes split one group's share and read about half of what the
    ranks get (measured: every world-2 run over-predicted by 60-200% under a load of 20)."""
    import os
    try:
        os.setsid()
    except OSError:  # already a session leader
        pass


def _share_worker(seconds: float, q) -> None:
    as_a_rank()
    import torch
    torch.set_num_threads(1)
    q.put(cpu_share(seconds))


def measure_share(world: int, seconds: float = 1.5) -> float:
    """Mean share of a core over `world` processes each running a GEMM loop at once, each in its own
    session as torchrun's ranks are (world 1: this process, as `shardlab train --nproc 1` runs in
    the caller's): measured right before a run, the machine's availability at that moment."""
    if world <= 1:
        return cpu_share(seconds)
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_share_worker, args=(seconds, q)) for _ in range(world)]
    for p in procs:
        p.start()
    shares = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=10)
    return statistics.fmean(shares)


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
                    fwd = kind.startswith("linear")
                    table[key] = 2 * m * n * k / _timeit(_gemm_fn(kind, m, n, k), mt, keep=fwd)
            table.update(_sdpa(model, b, mt))
    # elementwise families: t = latency + bytes / bandwidth, fitted over the models' sizes
    samples: dict[str, list] = {}
    for model in models:
        for b in micro_batches:
            for fam, (nb, tf, tb) in _elementwise(model, b, mt).items():
                samples.setdefault(fam, []).append((nb, tf, tb))
                table[f"ewt:{fam}:{int(nb)}"], table[f"ewt_bwd:{fam}:{int(nb)}"] = tf, tb  # exact sizes
    for fam, pts in samples.items():
        for prefix, idx in (("", 1), ("_bwd", 2)):
            alpha, bw = _line_fit([(p[0], p[idx]) for p in pts])
            table[f"ew{prefix}:{fam}"] = bw
            table[f"ewa{prefix}:{fam}"] = alpha
    # ZeRO's flat buffers: a unit's packed reduce-scatter input and all-gather output are fresh
    # allocations of N x (unit's shard) elements every step (page faults on first touch), filled
    # by a copy: timed as the strategies do it, at the models' unit sizes, outputs kept alive
    flat = sorted({2 * sum(u) for m in models for u in units(m)})
    pts = []
    for n in flat:
        src = torch.randn(n)
        # first touch is kernel work (page faults) whose cost moves with the machine's load: longer
        # batches and more of them than the other entries (a quick 10 ms sample read 0.8 and 4.3 GB/s
        # in two calibrations minutes apart)
        t = _timeit(lambda: torch.empty(2, n // 2).copy_(src.view(2, n // 2)), max(mt, 0.1), min_reps=7, keep=True)
        pts.append((2 * n * 4, t))
        del src
    if pts:
        table["ewa:flat"], table["ew:flat"] = _line_fit(pts)
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
    # in situ: the same ops inside the real model's step override the isolated entries at the shapes
    # the model runs (calibrate_insitu.py), with the remainder of its step and the optimizer's cost;
    # the miniature too (same tensors, almost no arithmetic): the trainer's overhead is measured on
    # it (calibrate_trainer.py), and the two optimizer points split per tensor from per parameter
    in_situ = []
    for model in models:
        for spec, bs, t_min in ((model, micro_batches, 2.0 if quick else 4.0), (model.miniature(), (1,), 1.0)):
            for b in bs:
                r = measure_in_situ(spec, b, steps=2, min_time=t_min)
                if r is not None:
                    table.update(r[0])
                    in_situ.append(r[1])
    refit_in_situ_families(table)
    # optimizer: shardlab's AdamW (fused, decay groups) + grad-norm clip; least squares
    # t = a*tensors + b*params over the in-situ points, else timed alone at the models' parameter
    # shapes plus per-tensor and per-element anchors
    pts = in_situ or ([_adam_time([n for _, n in m.param_shapes()], mt) for m in models]
                      + [_adam_time([16] * 64, mt), _adam_time([2**20], mt)])
    a_t, b_p = _fit_two(pts)
    return {"gemm_table": table, "elementwise_bw": statistics.median(bws), "op_overhead_s": op_overhead,
            "adam_s_per_param": b_p, "adam_s_per_tensor": a_t,
            "overhead": framework_overhead(models[0], mt)}


def _elementwise(model: ModelSpec, b: int, mt: float) -> dict:
    """family -> (forward bytes as compute.py counts them, forward s, backward s) at this size."""
    import torch
    import torch.nn.functional as F
    T, h, a, v = b * model.seq, model.d_model, model.n_head, model.vocab
    out = {}

    def fb(fn, *xs, nbytes):
        xs = [x.requires_grad_() for x in xs]
        t_f = _timeit(lambda: fn(*xs), mt, keep=True)
        t_free = _timeit(lambda: fn(*xs), mt)
        y = fn(*xs)
        g = torch.randn_like(y)
        t_b = _timeit(lambda: torch.autograd.grad(fn(*xs), xs, g), mt) - t_free
        return nbytes, t_f, max(t_b, 1e-7)
    ln = torch.nn.LayerNorm(h)
    out["ln"] = fb(ln, torch.randn(T, h), nbytes=2 * T * h * 4)
    out["gelu"] = fb(lambda x: F.gelu(x, approximate="tanh"), torch.randn(T, 4 * h), nbytes=8 * T * h * 4)
    x, y = torch.randn(T, h), torch.randn(T, h)
    t_add = _timeit(lambda: x + y, mt, keep=True)
    out["add"] = (3 * T * h * 4, t_add, t_add)
    xv = torch.randn(b, model.seq, a, h // a)
    t_copy = _timeit(lambda: xv.transpose(1, 2).contiguous(), mt, keep=True)
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


def framework_overhead(model: ModelSpec, mt: float) -> dict:
    """Seconds of eager framework work (Python, dispatch, autograd) per block and outside the blocks,
    forward and backward: shardlab's GPT timed at miniature sizes (1 dim per head, 8 positions,
    batch 1) where the arithmetic is negligible, with 1 and 2 blocks; the difference is one block."""
    try:
        import torch
        from shardlab.model.gpt import GPTConfig, build_model
        from shardlab.model.loss import cross_entropy
    except ImportError:
        return {}

    def run(layers):
        net = build_model(GPTConfig(n_layer=layers, n_head=model.n_head, d_model=model.n_head,
                                    vocab_size=256, max_seq_len=8), seed=0)
        x = torch.randint(0, 256, (1, 8))
        t_f = _timeit(lambda: cross_entropy(net(x), x, reduction="sum"), mt, keep=True)

        def fb():
            cross_entropy(net(x), x, reduction="sum").backward()
            net.zero_grad(set_to_none=True)
        return t_f, max(0.0, _timeit(fb, mt) - t_f)
    (f1, b1), (f2, b2) = run(1), run(2)
    return {"layer_fwd": max(0.0, f2 - f1), "layer_bwd": max(0.0, b2 - b1),
            "fixed_fwd": max(0.0, 2 * f1 - f2), "fixed_bwd": max(0.0, 2 * b1 - b2)}


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
    t_f = _timeit(lambda: F.scaled_dot_product_attention(q, kk, v, is_causal=True), mt, keep=True)
    t_free = _timeit(lambda: F.scaled_dot_product_attention(q, kk, v, is_causal=True), mt)
    gy = torch.randn(b, a, s, dh)

    def fb():
        out = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
        torch.autograd.grad(out, (q, kk, v), gy)
    t_fb = _timeit(fb, mt)
    return {f"sdpa:{b * a}x{s},{dh}": flops / t_f,
            f"sdpa_bwd:{b * a}x{s},{dh}": 2 * flops / max(t_fb - t_free, 1e-9)}


def _adam_time(numels: list[int], mt: float) -> tuple[int, int, float]:
    """Optimizer step over tensors of these sizes; a model's `Param` keeps its rows x row shape
    (matrices are decayed, vectors not, as in training)."""
    import torch
    params = [torch.zeros(getattr(n, "rows", n), getattr(n, "row", 1), requires_grad=True)
              if getattr(n, "row", 1) > 1 else torch.zeros(n, requires_grad=True) for n in numels]
    for p in params:
        p.grad = torch.randn_like(p)
    step = make_optimizer_step(params, zero_grad=False)  # the grads stay: the same step, timed again
    return len(numels), sum(numels), _timeit(step, mt)


def refit_in_situ_families(table: dict) -> None:
    """The latency + bandwidth lines of the families timed inside the model (LayerNorm, GELU), refitted
    over their in-situ sizes (the real models' and the miniatures'), which replaced the isolated ones.
    An isolated GELU (its own fresh output, autograd recording for one op) ran at 1.4 GB/s where the
    same op inside the model ran at 3.2: a shape never calibrated (`scaled`) took the isolated line and
    over-predicted a 3-layer d=192 model's forward by 30%. The exact sizes stay as they are."""
    for fam in ("ln", "gelu"):
        for pre in ("", "_bwd"):
            head = f"ewt{pre}:{fam}:"
            pts = [(float(k[len(head):]), v) for k, v in table.items() if k.startswith(head)]
            if len({x for x, _ in pts}) >= 2:
                # the backward moves 2x the forward bytes (compute.py's default for these families)
                scale = 2.0 if pre else 1.0
                alpha, bw = _line_fit([(x * scale, t) for x, t in pts])
                table[f"ewa{pre}:{fam}"], table[f"ew{pre}:{fam}"] = alpha, bw


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
