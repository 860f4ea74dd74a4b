"""What the overhead, compile and efficiency suites measure with: one trainer step as `Trainer.run`
drives it, a call's two clocks (wall and process CPU time), a model's FLOPs per token and the GEMM peak
at its own shapes.

The three suites time the same step against the same peak, so these pieces live below them and the
imports point one way: overhead -> compile_speed -> efficiency -> measure.
"""
from __future__ import annotations

import time

import torch

from shardlab import comm
from shardlab.model import anatomy


def shardlab_step(tr) -> None:
    """One step exactly as `Trainer.run` drives it (minus logging and the step-time bookkeeping);
    a doctor verdict other than "continue" would end or rewind a run, so here it is an error."""
    from shardlab.observe import inject, timeline
    from shardlab.optim import lr_at, set_lr

    st = tr.state
    set_lr(st.optimizer, lr_at(st.step, tr.cfg))
    comm.RECORDER.reset_step()
    comm.RECORDER.step = st.step
    with timeline.span("step", cat="step", step=st.step):
        inject.maybe_slow(tr.cfg, tr.rank, st.step)
        tr.train_step()
    if tr.verdict in ("stop", "rollback"):
        raise RuntimeError(f"bench overhead: the doctor said {tr.verdict} at step {st.step}")
    tr.comm_stats = comm.RECORDER.step_stats()
    st.step += 1
    if tr.doctor.after_step(st.step - 1) in ("stop", "rollback"):  # heartbeat, periodic replica checksums
        raise RuntimeError(f"bench overhead: the doctor's after-step check stopped step {st.step - 1}")
    tr.balance.after_step(st.step)  # data.shares=auto's measurement (a no-op at equal shares)
    tr.ckpt.maybe_save(st)


def timed(fn, *args) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - t0, time.process_time() - c0


def flops_per_token(model, seq_len: int) -> float:
    """6N + 12·L·d·T (PaLM's count; bench/compile_speed.py's docstring says what N and the terms are)."""
    n = sum(p.numel() for p in model.parameters())  # the tied wte/head counted once
    anat = anatomy.of(model)
    positions = anat.get(model, anat.positions)
    if positions is not None:
        n -= positions.weight.numel()  # a lookup, not a matmul
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


def gemm_peak(shapes: list[tuple[int, int, int]], repeats: int = 5) -> dict:
    """FLOP/s of one thread running `shapes` back to back (best of `repeats` per distinct shape, weighted
    by how often each shape occurs in the step), by wall clock and by process CPU time: {"wall", "cpu"}."""
    counts: dict = {}
    for s in shapes:
        counts[s] = counts.get(s, 0) + 1
    flops = 0.0
    seconds = {"wall": 0.0, "cpu": 0.0}
    for (m, k, n), c in counts.items():
        a, b = torch.randn(m, k), torch.randn(k, n)
        torch.mm(a, b)  # first call: allocation, kernel selection
        runs = [timed(torch.mm, a, b) for _ in range(repeats)]
        flops += c * 2 * m * k * n
        for i, clock in enumerate(("wall", "cpu")):
            seconds[clock] += c * min(r[i] for r in runs)
    return {k: flops / v for k, v in seconds.items()}
