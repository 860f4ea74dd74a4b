"""`shardlab bench strategies`: throughput and memory of every strategy at world 2, the capacity /
throughput frontier (seed 000 Q20-Q23).

Method. One process group of 2 gloo ranks, the same model, initialisation, data and optimizer for all.
- Memory: after a warm-up, each strategy in turn builds its model and optimizer and trains a few steps
  inside a `PeakMemory` window (peak above the window's start: CPU resident set, or CUDA max-allocated);
  twice, in opposite orders, the smaller of the two (allocator noise only adds), max over ranks.
  Beside it the exact `state_bytes`.
- Time: all strategies live side by side; every round trains one step of each, in an order that
  rotates each round (so none is always first after the others), a barrier before each timed step:
  the tokens/s of the table. Then the figures' pairs (zero3 / torch-fsdp2, ...) run back to back,
  A B then B A the next round: per pair the median step-time ratio with min-max over rounds.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from shardlab.bench import common

# (label, strategy, parallel.* overrides)
KEEP = {"reshard_after_forward": False}
STRATEGIES = [("single", "single", {}), ("ddp", "ddp", {}), ("torch-ddp", "torch-ddp", {}),
              ("zero1", "zero1", {}), ("zero2", "zero2", {}),
              ("zero3", "zero3", {}), ("zero3 keep", "zero3", KEEP),
              ("torch-fsdp2", "torch-fsdp2", {}), ("torch-fsdp2 keep", "torch-fsdp2", KEEP),
              ("torch-zero1", "torch-zero1", {}),
              # the knobs of seed 000 Q23: prefetch and the wrap unit
              ("zero3 no-prefetch", "zero3", {"prefetch": False}), ("zero3 layer", "zero3", {"wrap": "layer"}),
              ("zero3 whole", "zero3", {"wrap": "whole"})]
# (A, B, figure prefix): paired per round, figure = A / B
PAIRS = [("zero3", "torch-fsdp2", "zero3_vs_fsdp2"), ("zero3 keep", "torch-fsdp2 keep", "zero3_keep_vs_fsdp2_keep"),
         ("zero3 no-prefetch", "zero3", "zero3_noprefetch_vs_prefetch"), ("zero3 layer", "zero3", "zero3_layer_vs_block"),
         ("zero3 whole", "zero3", "zero3_whole_vs_block")]
SIZES = {"quick": dict(rounds=9, warm=2, mem_steps=2, model=dict(n_layer=2, n_head=4, d_model=128)),
         "full": dict(rounds=24, warm=4, mem_steps=3, model=dict(n_layer=4, n_head=4, d_model=256))}
MICRO_BATCH, SEQ = 8, 128


def _build(label: str, model_kw: dict):
    from shardlab import parallel
    from shardlab.config import Config
    from shardlab.model.gpt import GPTConfig, build_model

    _, name, overrides = next(s for s in STRATEGIES if s[0] == label)
    cfg = Config()
    cfg.parallel.strategy = name
    for key, value in overrides.items():
        setattr(cfg.parallel, key, value)
    model = build_model(GPTConfig(vocab_size=256, max_seq_len=SEQ, **model_kw), seed=1337)
    return parallel.build(cfg, torch.device("cpu"), model)


def _step(par, x, y) -> None:
    par.step([(x, y)], 1.0 / y.numel(), max_norm=1.0)


def _measure(size: dict) -> dict:
    """On every rank: the memory windows, then the rotating timed rounds."""
    from shardlab import comm
    from shardlab.data.corpus import load_tokens
    from shardlab.data.dataset import TokenDataset, get_batch
    from shardlab.observe.memory import PeakMemory, release

    rank, world = comm.rank(), comm.world_size()
    data = TokenDataset(load_tokens("stdlib"), SEQ)
    gen = torch.Generator().manual_seed(0)

    def batch():
        idx = torch.randint(0, len(data), (world, MICRO_BATCH), generator=gen)[rank]
        return get_batch(data, idx.tolist())

    labels = [s[0] for s in STRATEGIES]
    for label in ("single", "zero3"):  # warm-up: one-time lazy allocations must not land in a window
        par = _build(label, size["model"])
        _step(par, *batch())
        del par
    peaks = {label: [] for label in labels}
    state, kind, comm_bytes = {}, "", {}
    for order in (labels, labels[::-1]):
        for label in order:
            comm.barrier()
            with PeakMemory("cpu") as peak:
                par = _build(label, size["model"])
                for _ in range(size["mem_steps"]):
                    comm.RECORDER.reset_step()
                    _step(par, *batch())
                state[label] = {k: v for k, v in par.state_bytes().items()}
                comm_bytes[label] = dict(comm.RECORDER.step_stats()["wire_bytes"])
            peaks[label].append(peak.bytes)
            kind = peak.kind
            del par
            release()
    say = common.progress if rank == 0 else (lambda msg: None)
    say("  memory windows done; timed rounds")
    live = {label: _build(label, size["model"]) for label in labels}
    times = {label: [] for label in labels}
    for r in range(size["rounds"]):
        if r and r % 5 == 0:
            say(f"  round {r}/{size['rounds']}")
        x, y = batch()
        for label in labels[r % len(labels):] + labels[: r % len(labels)]:
            comm.barrier()
            t0 = time.perf_counter()
            _step(live[label], x, y)
            times[label].append(time.perf_counter() - t0)
    # The figures' pairs, back to back (A B, then B A next round): load drift hits both alike.
    paired = {key: [] for _, _, key in PAIRS}
    say("  paired rounds")
    for r in range(size["rounds"]):
        x, y = batch()
        for a, b, key in PAIRS:
            t = {}
            for label in ((a, b) if r % 2 == 0 else (b, a)):
                comm.barrier()
                t0 = time.perf_counter()
                _step(live[label], x, y)
                t[label] = time.perf_counter() - t0
            paired[key].append(t[a] / t[b])
    peak_max = comm.all_gather_object({k: min(v) for k, v in peaks.items()})  # allocator noise only adds
    return {"times": times, "paired": paired, "peaks": {k: max(p[k] for p in peak_max) for k in labels}, "kind": kind,
            "state": state, "comm": comm_bytes, "rank": rank}


def _pareto(rows: list[dict]) -> None:
    """Mark the rows on the frontier by measured peak (`pareto`) and by exact state (`pareto_state`)."""
    for flag, key in (("pareto", "peak_mem_bytes"), ("pareto_state", "state_total_bytes")):
        front = {p[2] for p in _frontier([(r[key], r["tokens_per_s"], r["strategy"]) for r in rows])}
        for r in rows:
            r[flag] = r["strategy"] in front


def _frontier(points: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """(memory, tokens/s, label) points no other point beats on both, by memory."""
    return sorted((p for p in points if not any(q[0] <= p[0] and q[1] >= p[1] and q[:2] != p[:2] for q in points)))


def _plot(out: Path, rows: list[dict], kind: str) -> Path:
    """Two panels: measured peak memory (what the process really used, activations included) and the
    exact state per rank (params + grads + optimizer, what the ZeRO formulas predict)."""
    plt = common.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    panels = [("peak_mem_bytes", f"measured peak memory per rank, MiB ({kind})"),
              ("state_total_bytes", "exact state per rank (params + grads + optimizer), MiB")]
    for ax, (key, xlabel) in zip(axes, panels):
        points = [(r[key] / 2**20, r["tokens_per_s"], r["strategy"]) for r in rows]
        front = _frontier(points)
        for x, y, label in points:
            ax.scatter(x, y, color="tab:red" if (x, y, label) in front else "tab:blue", zorder=3)
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
        ax.plot([p[0] for p in front], [p[1] for p in front], "r--", lw=1, label="Pareto frontier")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("tokens/s (median)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("Strategies at world 2: throughput vs memory")
    path = out / "strategies_pareto.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run(out: Path, quick: bool) -> dict:
    from shardlab.observe.memory import ALLOCATOR_ENV
    from shardlab.launch.workers import WorkerPool

    size = SIZES["quick" if quick else "full"]
    saved = {k: os.environ.get(k) for k in ALLOCATOR_ENV}
    os.environ.update(ALLOCATOR_ENV)  # inherited by the spawned ranks: RSS follows frees
    try:
        common.progress(f"{len(STRATEGIES)} strategies on 2 ranks: memory windows, then timed rounds")
        with WorkerPool(2, timeout=1800) as pool:
            res = pool.run(_measure, size)[0]
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    warm, world = size["warm"], 2
    rows = []
    for label, name, overrides in STRATEGIES:
        t = common.stats(res["times"][label][warm:])
        tokens = MICRO_BATCH * SEQ * (1 if name == "single" else world)
        sb = res["state"][label]
        rows.append({"strategy": label, "parallel": overrides, "step_s": t,
                     "tokens_per_s": tokens / t["median"], "peak_mem_bytes": res["peaks"][label],
                     "peak_mem_kind": res["kind"], "state_bytes": sb,
                     "state_total_bytes": sb["params"] + sb["grads"] + sb["optimizer"],
                     "wire_bytes_per_step": res["comm"][label]})
    _pareto(rows)
    figures = {}
    by = {r["strategy"]: r for r in rows}
    for a, b, key in PAIRS:
        ratio = common.median_ci(res["paired"][key][warm:])
        figures[f"{key}_step_ratio"] = ratio["median"]
        figures[f"{key}_step_ratio_min"], figures[f"{key}_step_ratio_max"] = ratio["min"], ratio["max"]
        figures[f"{key}_step_ratio_ci90"], figures[f"{key}_step_ratio_load_avg"] = ratio["ci90"], ratio["load_avg"]
        figures[f"{key}_mem_ratio"] = by[a]["peak_mem_bytes"] / by[b]["peak_mem_bytes"]
    doc = common.write_results(out, "strategies", figures, rows)
    plot = _plot(out, rows, res["kind"])
    _report(out, rows, figures, size, plot)
    return doc


def _report(out: Path, rows: list[dict], figures: dict, size: dict, plot: Path) -> None:
    mib = 2 ** 20
    table = common.md_table(
        ["strategy", "tokens/s", "step ms (min–max)", "peak MiB", "state MiB (params/grads/optim)",
         "transient MiB (bound)", "Pareto (peak)", "Pareto (state)"],
        [[r["strategy"], f"{r['tokens_per_s']:,.0f}", common.fmt_stats(r["step_s"], 1e3, 1),
          f"{r['peak_mem_bytes'] / mib:.1f}",
          f"{r['state_total_bytes'] / mib:.2f} ({r['state_bytes']['params'] / mib:.2f}/"
          f"{r['state_bytes']['grads'] / mib:.2f}/{r['state_bytes']['optimizer'] / mib:.2f})",
          f"{r['state_bytes']['transient'] / mib:.2f}" if "transient" in r["state_bytes"] else "-",
          "yes" if r["pareto"] else "", "yes" if r["pareto_state"] else ""] for r in sorted(rows, key=lambda r: r["peak_mem_bytes"])])
    fig = "\n".join(f"- `{k}` = {v:.3f}" + (f" [90% CI {figures[k + '_ci90'][0]:.3f}–{figures[k + '_ci90'][1]:.3f}]"
                                            if k + "_ci90" in figures else "")
                     for k, v in figures.items() if isinstance(v, float))
    m = size["model"]
    write = common.write_report
    write(out, "Strategies: throughput vs memory", [
        f"Model: GPT n_layer={m['n_layer']} d_model={m['d_model']}, micro-batch {MICRO_BATCH} x {SEQ} tokens per rank, "
        f"world 2, AdamW fp32. {size['rounds']} rounds of one step per strategy (first {size['warm']} excluded), "
        "order rotating each round, a barrier before each timed step; then the figures' pairs back to back "
        "(A B, B A next round), the same number of rounds. `single` is one rank's own throughput "
        "(both ranks busy); the others count both ranks' tokens. `keep` = reshard_after_forward=false; "
        "`no-prefetch`, `layer`, `whole`: zero3 with parallel.prefetch=false, parallel.wrap=layer / whole.",
        "## Figures (A / B back to back: median ratio, min–max)\n\n" + fig,
        "## Pareto table\n\n" + table,
        f"Peak memory is `{rows[0]['peak_mem_kind']}`: measured around building the model, optimizer and a few "
        "steps (the smaller of two windows, max over ranks). On CPU it is resident pages, so small differences are "
        "noise; `state MiB` is the exact accounting (`state_bytes`, per rank).",
        f"![Pareto]({plot.name})"])
