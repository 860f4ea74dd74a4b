"""`shardlab bench memory`: what activation recompute trades, at world 2 (seed 003 Q11).

Method. One process group of 2 gloo ranks; the same model, initialisation and data for every row;
recompute none / full / selective under the data-parallel layers ddp and zero3 (docs/memory.md).
- Activation bytes: one forward per row inside `ActivationBytes` (exact, per block, summed over blocks):
  what the blocks hold between forward and backward, beside the closed form `formula_bytes`.
- Peak memory: per row, after building and one warm step, a `PeakMemory` window around a few steps
  (CPU: resident set above the window's start; the ranks run with `ALLOCATOR_ENV` so frees are visible);
  twice in opposite orders, the smaller (allocator noise only adds), max over ranks.
- Time: every recompute row runs back to back with its `none` row of the same dp layer (A B, then B A
  the next round): per round the step-time ratio, the median with min-max over rounds.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from shardlab.bench import common

DPS = ("ddp", "zero3")
MODES = ("none", "full", "selective")
SIZES = {"quick": dict(rounds=8, warm=2, mem_steps=2, model=dict(n_layer=2, n_head=4, d_model=128)),
         "full": dict(rounds=20, warm=3, mem_steps=3, model=dict(n_layer=4, n_head=4, d_model=256))}  # small
MICRO_BATCH, SEQ = 8, 128


def _build(dp: str, mode: str, model_kw: dict, offload: bool = False):
    from shardlab import parallel
    from shardlab.config import Config
    from shardlab.model.gpt import GPTConfig, build_model

    cfg = Config()
    cfg.parallel.strategy, cfg.train.recompute = dp, mode
    if offload:
        cfg.parallel.offload, cfg.parallel.offload_to = "optimizer", "disk"
    return parallel.build(cfg, torch.device("cpu"), build_model(GPTConfig(vocab_size=256, max_seq_len=SEQ,
                                                                          **model_kw), seed=1337))


def _step(par, x, y) -> None:
    par.forward_backward([(x, y)], 1.0 / y.numel())
    par.finish()
    par.clip_grad_norm_(1.0)
    par.optimizer_step()
    par.zero_grad()


def _activations(par, x) -> int:
    from shardlab.observe.activations import ActivationBytes

    with ActivationBytes(par.model) as acts:
        out = par.module(x)
    out.float().sum().mul(0.0).backward()  # through the graph once (recompute and all), no update
    par.finish()
    par.zero_grad()
    return sum(acts.held.values())


def _measure(size: dict) -> dict:
    """On every rank: activation bytes, the peak-memory windows, then the paired timed rounds."""
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

    rows = [(dp, mode) for dp in DPS for mode in MODES]
    live = {row: _build(*row, size["model"]) for row in rows}
    acts = {row: _activations(live[row], batch()[0]) for row in rows}
    for row in rows:  # warm: lazy allocations and the first step's optimizer state stay out of the windows
        _step(live[row], *batch())
    peaks = {row: [] for row in rows}
    kind = ""
    for order in (rows, rows[::-1]):
        for row in order:
            release()
            comm.barrier()
            with PeakMemory("cpu") as peak:
                for _ in range(size["mem_steps"]):
                    _step(live[row], *batch())
            peaks[row].append(peak.bytes)
            kind = peak.kind
    paired = {row: [] for row in rows if row[1] != "none"}
    times = {row: [] for row in rows}
    for r in range(size["rounds"]):
        x, y = batch()
        for dp, mode in paired:
            t = {}
            for row in (((dp, "none"), (dp, mode)) if r % 2 == 0 else ((dp, mode), (dp, "none"))):
                comm.barrier()
                t0 = time.perf_counter()
                _step(live[row], x, y)
                t[row] = time.perf_counter() - t0
                times[row].append(t[row])
            paired[(dp, mode)].append(t[(dp, mode)] / t[(dp, "none")])
    peak_all = comm.all_gather_object({row: min(v) for row, v in peaks.items()})
    return {"acts": acts, "peaks": {row: max(p[row] for p in peak_all) for row in rows}, "kind": kind,
            "paired": paired, "times": times, "offload": _offload(size, batch, live[("zero3", "none")])}


def _offload(size: dict, batch, base) -> dict:
    """zero3 with the optimizer offloaded to disk vs without: the whole footprint of a run (a window around
    building and training, both orders, the smaller), then step times paired against `base`."""
    from shardlab import comm
    from shardlab.observe.memory import PeakMemory, release

    peaks = {False: [], True: []}
    for order in ((False, True), (True, False)):
        for off in order:
            release()
            comm.barrier()
            with PeakMemory("cpu") as peak:
                par = _build("zero3", "none", size["model"], offload=off)
                for _ in range(size["mem_steps"] + 1):
                    _step(par, *batch())
            peaks[off].append(peak.bytes)
            del par
    live = _build("zero3", "none", size["model"], offload=True)
    _step(live, *batch())
    paired = []
    for r in range(size["rounds"]):
        x, y = batch()
        t = {}
        for par in ((base, live) if r % 2 == 0 else (live, base)):
            comm.barrier()
            t0 = time.perf_counter()
            _step(par, x, y)
            t[par is live] = time.perf_counter() - t0
        paired.append(t[True] / t[False])
    both = comm.all_gather_object({k: min(v) for k, v in peaks.items()})
    return {"peak": {k: max(p[k] for p in both) for k in (False, True)}, "paired": paired}


def run(out: Path, quick: bool) -> dict:
    from shardlab.observe.activations import formula_bytes
    from shardlab.plan.model import ModelSpec, activation_bytes_per_layer

    size = SIZES["quick" if quick else "full"]
    res = common.run_on_ranks(_measure, size, world=2)
    m, warm = size["model"], size["warm"]
    spec = ModelSpec("bench", vocab=256, seq=SEQ, **m)
    rows = []
    for dp in DPS:
        for mode in MODES:
            row = (dp, mode)
            formula = m["n_layer"] * formula_bytes(MICRO_BATCH, SEQ, m["d_model"], m["n_head"], mode)
            ratio = common.stats(res["paired"][row][warm:]) if mode != "none" else None
            # The planner's layer term (Korthikanti's, 16-bit): x2 for fp32, fused attention as here.
            planner = 2 * m["n_layer"] * activation_bytes_per_layer(spec, MICRO_BATCH, SEQ, recompute=mode, flash=True)
            rows.append({"dp": dp, "recompute": mode, "step_s": common.stats(res["times"][row][warm:]),
                         "time_ratio_vs_none": ratio, "act_bytes": res["acts"][row], "act_formula_bytes": formula,
                         "act_planner_bytes": planner,
                         "peak_mem_bytes": res["peaks"][row], "peak_mem_kind": res["kind"]})
    by = {(r["dp"], r["recompute"]): r for r in rows}
    figures = {}
    for mode in ("full", "selective"):
        pooled = common.stats([x for dp in DPS for x in res["paired"][(dp, mode)][warm:]])
        figures[f"recompute_{mode}_act_ratio"] = by[("ddp", mode)]["act_bytes"] / by[("ddp", "none")]["act_bytes"]
        figures[f"recompute_{mode}_time_ratio"] = pooled["median"]
        figures[f"recompute_{mode}_time_ratio_min"], figures[f"recompute_{mode}_time_ratio_max"] = \
            pooled["min"], pooled["max"]
        for dp in DPS:
            figures[f"recompute_{mode}_time_ratio_{dp}"] = by[(dp, mode)]["time_ratio_vs_none"]["median"]
            figures[f"recompute_{mode}_peak_ratio_{dp}"] = \
                by[(dp, mode)]["peak_mem_bytes"] / max(by[(dp, "none")]["peak_mem_bytes"], 1)
    off = res["offload"]
    figures["offload_disk_rss_ratio"] = off["peak"][True] / off["peak"][False]
    figures["offload_disk_time_ratio"] = common.stats(off["paired"][warm:])["median"]
    figures["act_formula_max_err"] = max(abs(r["act_bytes"] / r["act_formula_bytes"] - 1) for r in rows)
    figures["planner_act_mem_err"] = max(abs(r["act_planner_bytes"] / r["act_bytes"] - 1) for r in rows)
    doc = common.write_results(out, "memory", figures, rows)
    plot = _plot(out, rows)
    _report(out, rows, figures, size, plot)
    return doc


def _plot(out: Path, rows: list[dict]) -> Path:
    """Memory against time: activation bytes (exact) and step time, one point per row."""
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in rows:
        x, y = r["act_bytes"] / 2**20, r["step_s"]["median"] * 1e3
        ax.scatter(x, y, color="tab:blue" if r["dp"] == "ddp" else "tab:orange", zorder=3)
        ax.annotate(f"{r['dp']} {r['recompute']}", (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set(xlabel="activation bytes per rank, MiB (exact)", ylabel="step time, ms (median)",
           title="Recompute: activation memory vs step time (world 2)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = out / "memory_tradeoff.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _report(out: Path, rows: list[dict], figures: dict, size: dict, plot: Path) -> None:
    mib = 2 ** 20
    table = common.md_table(
        ["dp", "recompute", "step ms (min–max)", "time ÷ none, paired (min–max)", "activation MiB",
         "formula MiB", "planner MiB", "peak MiB"],
        [[r["dp"], r["recompute"], common.fmt_stats(r["step_s"], 1e3, 1),
          common.fmt_stats(r["time_ratio_vs_none"], 1, 3) if r["time_ratio_vs_none"] else "1",
          f"{r['act_bytes'] / mib:.2f}", f"{r['act_formula_bytes'] / mib:.2f}",
          f"{r['act_planner_bytes'] / mib:.2f}", f"{r['peak_mem_bytes'] / mib:.1f}"]
         for r in rows])
    fig = "\n".join(f"- `{k}` = {v:.3f}" for k, v in figures.items())
    m = size["model"]
    common.write_report(out, "Memory: activation recompute", [
        f"Model: GPT n_layer={m['n_layer']} n_head={m['n_head']} d_model={m['d_model']}, micro-batch "
        f"{MICRO_BATCH} x {SEQ} tokens per rank, world 2, fp32, dropout off. {size['rounds']} rounds (first "
        f"{size['warm']} excluded); each recompute row runs back to back with the `none` row of its dp layer "
        "(A B, then B A): the time ratio is the median of the per-round ratios.",
        "## Figures\n\n" + fig,
        "`offload_disk_*`: zero3 with `parallel.offload=optimizer parallel.offload_to=disk` against zero3 without "
        "(recompute none): the peak resident set above the start of a window around building the model and "
        f"training {size['mem_steps'] + 1} steps (the smaller of two windows, max over ranks), and the step time "
        "paired as above.",
        "## Rows\n\n" + table,
        "Activation bytes are exact (`shardlab.observe.activations.ActivationBytes`, summed over blocks: what the "
        "blocks hold between forward and backward); the formula is `formula_bytes` x n_layer (docs/memory.md); "
        "the planner column is `plan.model.activation_bytes_per_layer` x 2 (fp32) x n_layer, fused attention. "
        f"Peak memory is `{rows[0]['peak_mem_kind']}` around {size['mem_steps']} steps after a warm one: it also "
        "holds the logits, gradients and the optimizer step's temporaries.",
        f"![trade-off]({plot.name})"])
