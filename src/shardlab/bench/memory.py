"""`shardlab bench memory`: what activation recompute and offload trade, at world 2 (seed 003 Q11, Q13).

Rows: recompute none / full / selective x offload none / optimizer / params (zero3 only: ddp has nothing to
offload) x data-parallel layer ddp / zero3 (docs/memory.md), on the `small` preset, and without `--quick`
also on `gpt2` at a short sequence (a subset: recompute under ddp and zero3, offload with recompute none).
One process group of 2 gloo ranks; the same initialisation and data for every row. Offload goes to disk
(memory-mapped files): on a CPU host offload would be a copy into the same memory, so disk is the tier whose
trade can be measured here.

Method, per data-parallel layer: its baseline row (recompute none, offload none) is built first and stays
alive; every other row is built, measured, timed against the baseline and freed, so two rows at most live
at once.
- Activation bytes: one forward inside `ActivationBytes` (exact, per block, summed over blocks): what the
  blocks hold between forward and backward, beside the closed form `formula_bytes` and the planner's.
- Peak memory (resident, CPU; the ranks run with `ALLOCATOR_ENV` so frees are visible), max over ranks:
  `peak_run` is a `PeakMemory` window around building the row and training its first steps: the whole
  footprint, parameters, gradients and optimizer state included (what offload changes); `peak_step` a window
  around later steps only: what a step adds on top of the state (what recompute changes).
- Time: each row runs back to back with its baseline (A B, then B A the next round): per round the
  step-time ratio; the median with min-max over rounds.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from shardlab.bench import common

DPS = ("ddp", "zero3")
MODES = ("none", "full", "selective")
OFFLOADS = ("none", "optimizer", "params")
SMALL = dict(n_layer=4, n_head=4, d_model=256, vocab_size=256)  # the `small` preset (model/gpt.py)
GPT2 = dict(n_layer=12, n_head=12, d_model=768, vocab_size=50257)  # the `gpt2` preset
QUICK = dict(name="small-quick", model=dict(SMALL, n_layer=2, d_model=128), micro=8, seq=128, rounds=4, warm=1,
             mem_steps=2, subset=False)
FULL = [dict(name="small", model=SMALL, micro=8, seq=128, rounds=8, warm=2, mem_steps=2, subset=False),
        dict(name="gpt2", model=GPT2, micro=2, seq=64, rounds=3, warm=0, mem_steps=1, subset=True)]


def rows_of(size: dict) -> list[tuple[str, str, str]]:
    """(dp, recompute, offload) rows of one preset; each dp layer's baseline first."""
    out = []
    for dp in DPS:
        for off in (OFFLOADS if dp == "zero3" else ("none",)):
            for mode in MODES:
                if size["subset"] and off != "none" and mode != "none":
                    continue
                out.append((dp, mode, off))
    return out


def _build(row: tuple, size: dict):
    from shardlab import parallel
    from shardlab.config import Config
    from shardlab.model.gpt import GPTConfig, build_model

    dp, mode, off = row
    cfg = Config()
    cfg.parallel.strategy, cfg.train.recompute = dp, mode
    cfg.parallel.offload, cfg.parallel.offload_to = off, "disk"
    model = build_model(GPTConfig(max_seq_len=size["seq"], **size["model"]), seed=1337)
    return parallel.build(cfg, torch.device("cpu"), model)


def _step(par, x, y) -> None:
    par.step([(x, y)], 1.0 / y.numel(), max_norm=1.0)


def _activations(par, x) -> int:
    from shardlab.observe.activations import ActivationBytes

    with ActivationBytes(par.model) as acts:
        out = par.module(x)
    out.float().sum().mul(0.0).backward()  # through the graph once (recompute and all), no update
    par.finish()  # a measurement, not a step (no par.step): sync the backward's gradients, drop them
    par.zero_grad()
    return sum(acts.held.values())


def _measure(size: dict) -> dict:
    """On every rank, per data-parallel layer: the baseline, then each other row against it."""
    from shardlab import comm
    from shardlab.data.corpus import load_tokens
    from shardlab.data.dataset import TokenDataset, get_batch
    from shardlab.observe.memory import PeakMemory, release

    rank, world = comm.rank(), comm.world_size()
    data = TokenDataset(load_tokens("stdlib"), size["seq"])
    gen = torch.Generator().manual_seed(0)

    def batch():
        idx = torch.randint(0, len(data), (world, size["micro"]), generator=gen)[rank]
        return get_batch(data, idx.tolist())

    def measured(row):
        """Build `row` inside the whole-footprint window, then its activations and a step window."""
        release()
        comm.barrier()
        with PeakMemory("cpu") as run:
            par = _build(row, size)
            for _ in range(size["mem_steps"] + 1):  # the first step creates the optimizer state
                _step(par, *batch())
        acts = _activations(par, batch()[0])
        release()
        comm.barrier()
        with PeakMemory("cpu") as step:
            for _ in range(size["mem_steps"]):
                _step(par, *batch())
        return par, {"act": acts, "peak_run": run.bytes, "peak_step": step.bytes, "kind": run.kind}

    # One-time costs (lazy imports, the process group's and kernels' buffers) must not land in the first
    # row's windows: build and step the first row once, unmeasured.
    warm, _ = measured(rows_of(size)[0])
    del warm
    res, times, paired = {}, {}, {}
    for dp in DPS:
        rows = [r for r in rows_of(size) if r[0] == dp]
        base, res[rows[0]] = measured(rows[0])
        times[rows[0]] = []
        for row in rows[1:]:
            par, res[row] = measured(row)
            times[row], paired[row] = [], []
            for r in range(size["rounds"]):
                x, y = batch()
                t = {}
                for which in ((base, par) if r % 2 == 0 else (par, base)):
                    comm.barrier()
                    t0 = time.perf_counter()
                    _step(which, x, y)
                    t[which is par] = time.perf_counter() - t0
                times[row].append(t[True])
                times[rows[0]].append(t[False])
                paired[row].append(t[True] / t[False])
            del par, which  # freed before the next row is built
        del base
    every = comm.all_gather_object(res)  # peaks: the max over ranks
    for row, r in res.items():
        for key in ("peak_run", "peak_step"):
            r[key] = max(e[row][key] for e in every)
    return {"res": res, "times": times, "paired": paired}


def _planner(size: dict, row: tuple) -> dict:
    """The planner's predictions for a row: activation bytes (its per-layer term x2 for fp32, fused
    attention, x n_layer) and the state it keeps in device memory per rank (offloaded state excluded)."""
    from shardlab.plan.layout import Layout
    from shardlab.plan.train_spec import TrainSpec
    from shardlab.plan.memory import state_bytes
    from shardlab.plan.activations import activation_bytes_per_layer
    from shardlab.plan.model import ModelSpec

    dp, mode, off = row
    m = size["model"]
    spec = ModelSpec(size["name"], n_layer=m["n_layer"], d_model=m["d_model"], n_head=m["n_head"],
                     vocab=m["vocab_size"], seq=size["seq"])
    act = 2 * m["n_layer"] * activation_bytes_per_layer(spec, size["micro"], size["seq"], recompute=mode, flash=True)
    train = TrainSpec(global_batch=2 * size["micro"], micro_batch=size["micro"], seq=size["seq"], precision="fp32",
                      flash_attention=True)
    state = sum(state_bytes(spec, train, Layout(dp=2, strategy=dp, offload=off)).values())
    return {"act": act, "state": state}


def _rows(size: dict, got: dict) -> list[dict]:
    from shardlab.observe.activations import formula_bytes

    m, warm, out = size["model"], size["warm"], []
    for row in rows_of(size):
        dp, mode, off = row
        r, plan = got["res"][row], _planner(size, row)
        ratio = common.median_ci(got["paired"][row][warm:]) if row in got["paired"] else None
        out.append({"preset": size["name"], "dp": dp, "recompute": mode, "offload": off,
                    "step_s": common.stats(got["times"][row][warm:]), "time_ratio_vs_base": ratio,
                    "time_ratios": got["paired"].get(row, [])[warm:],
                    "act_bytes": r["act"],
                    "act_formula_bytes": m["n_layer"] * formula_bytes(size["micro"], size["seq"], m["d_model"],
                                                                     m["n_head"], mode),
                    "act_planner_bytes": plan["act"], "state_planner_bytes": plan["state"],
                    "peak_run_bytes": r["peak_run"], "peak_step_bytes": r["peak_step"], "peak_mem_kind": r["kind"]})
    return out


def _figures(rows: list[dict], prefix: str) -> dict:
    by = {(r["dp"], r["recompute"], r["offload"]): r for r in rows}
    f = {}
    for mode in ("full", "selective"):
        ratios = [by[(dp, mode, "none")]["time_ratio_vs_base"] for dp in DPS]
        f[f"{prefix}recompute_{mode}_act_ratio"] = by[("ddp", mode, "none")]["act_bytes"] / by[("ddp", "none", "none")]["act_bytes"]
        pooled = common.median_ci([x for dp in DPS for x in by[(dp, mode, "none")]["time_ratios"]])  # both dp layers' rounds
        f[f"{prefix}recompute_{mode}_time_ratio"] = pooled["median"]
        f[f"{prefix}recompute_{mode}_time_ratio_min"] = pooled["min"]
        f[f"{prefix}recompute_{mode}_time_ratio_max"] = pooled["max"]
        f[f"{prefix}recompute_{mode}_time_ratio_ci90"] = pooled["ci90"]
        for dp, r in zip(DPS, ratios):
            f[f"{prefix}recompute_{mode}_time_ratio_{dp}"] = r["median"]
            f[f"{prefix}recompute_{mode}_peak_step_ratio_{dp}"] = \
                by[(dp, mode, "none")]["peak_step_bytes"] / max(by[(dp, "none", "none")]["peak_step_bytes"], 1)
    base = by[("zero3", "none", "none")]
    for off, name in (("optimizer", "offload_disk"), ("params", "offload_params_disk")):
        r = by[("zero3", "none", off)]
        f[f"{prefix}{name}_rss_ratio"] = r["peak_run_bytes"] / max(base["peak_run_bytes"], 1)
        f[f"{prefix}{name}_time_ratio"] = r["time_ratio_vs_base"]["median"]
    f[f"{prefix}act_formula_max_err"] = max(abs(r["act_bytes"] / r["act_formula_bytes"] - 1) for r in rows)
    f[f"{prefix}planner_act_mem_err"] = max(abs(r["act_planner_bytes"] / r["act_bytes"] - 1) for r in rows)
    return f


def run(out: Path, quick: bool) -> dict:
    sizes = [QUICK] if quick else FULL
    rows, figures = [], {}
    for k, size in enumerate(sizes):
        common.progress(f"memory: {size['name']} ({len(rows_of(size))} rows)")
        got = common.run_on_ranks(_measure, size, world=2)
        these = _rows(size, got)
        rows += these
        figures.update(_figures(these, "" if k == 0 else f"{size['name']}_"))
        # written after each preset: the small model's results stand even if gpt2's run is cut short
        doc = common.write_results(out, "memory", figures, rows)
        _report(out, rows, figures, sizes[:k + 1], _plot(out, rows))
    return doc


def _label(r: dict) -> str:
    return f"{r['dp']} {r['recompute']}" + (f" +{r['offload']}" if r["offload"] != "none" else "")


def _plot(out: Path, rows: list[dict]) -> Path:
    """Memory against time, one panel per preset: peak resident memory of the run and the step time,
    the Pareto frontier (less memory, less time) dashed."""
    from shardlab.bench.pareto import frontier

    plt = common.pyplot()
    presets = list(dict.fromkeys(r["preset"] for r in rows))
    fig, axes = plt.subplots(1, len(presets), figsize=(7 * len(presets), 4.8), squeeze=False)
    colors = {"ddp": "tab:blue", "zero3": "tab:orange"}
    for ax, preset in zip(axes[0], presets):
        pts = [dict(r, mem=r["peak_run_bytes"], neg_ms=-r["step_s"]["median"]) for r in rows if r["preset"] == preset]
        for r in pts:
            x, y = r["mem"] / 2**20, r["step_s"]["median"] * 1e3
            marker = {"none": "o", "optimizer": "s", "params": "^"}[r["offload"]]
            ax.scatter(x, y, color=colors[r["dp"]], marker=marker, zorder=3)
            ax.annotate(_label(r), (x, y), textcoords="offset points", xytext=(5, 4), fontsize=7)
        front = frontier(pts, x="mem", y="neg_ms")
        ax.plot([p["mem"] / 2**20 for p in front], [-p["neg_ms"] * 1e3 for p in front], "--", color="grey",
                label="Pareto frontier")
        ax.set(xlabel="peak resident memory per rank, MiB (build + first steps)", ylabel="step time, ms (median)",
               title=f"{preset}: memory vs time (world 2; o none, ■ optimizer, ▲ params offload)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "memory_tradeoff.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _report(out: Path, rows: list[dict], figures: dict, sizes: list[dict], plot: Path) -> None:
    mib = 2 ** 20
    table = common.md_table(
        ["preset", "dp", "recompute", "offload", "step ms (min–max)", "time ÷ base, paired (min–max)",
         "activation MiB", "formula MiB", "planner act MiB", "peak step MiB", "peak run MiB", "planner state MiB"],
        [[r["preset"], r["dp"], r["recompute"], r["offload"], common.fmt_stats(r["step_s"], 1e3, 1),
          common.fmt_stats(r["time_ratio_vs_base"], 1, 3) if r["time_ratio_vs_base"] else "1 (base)",
          f"{r['act_bytes'] / mib:.2f}", f"{r['act_formula_bytes'] / mib:.2f}",
          f"{r['act_planner_bytes'] / mib:.2f}", f"{r['peak_step_bytes'] / mib:.1f}",
          f"{r['peak_run_bytes'] / mib:.1f}", f"{r['state_planner_bytes'] / mib:.1f}"]
         for r in rows])
    fig = "\n".join(f"- `{k}` = {v:.3f}" + (f" [90% CI {figures[k + '_ci90'][0]:.3f}–{figures[k + '_ci90'][1]:.3f}]"
                                            if k + "_ci90" in figures else "")
                     for k, v in figures.items() if isinstance(v, float))
    models = "; ".join(
        f"{s['name']}: n_layer={s['model']['n_layer']} n_head={s['model']['n_head']} d_model={s['model']['d_model']} "
        f"vocab {s['model']['vocab_size']}, micro-batch {s['micro']} x {s['seq']} tokens per rank, {s['rounds']} rounds "
        f"(first {s['warm']} excluded)" + (", offload rows with recompute none only" if s["subset"] else "")
        for s in sizes)
    common.write_report(out, "Memory: activation recompute and offload", [
        f"Models: {models}. World 2, fp32, dropout off, offload to disk (memory-mapped files in TMPDIR). Each row "
        "runs back to back with its data-parallel layer's base row (recompute none, offload none): A B, then B A; "
        "the time ratio is the median of the per-round ratios.",
        "## Figures\n\n" + fig,
        "`recompute_*_time_ratio`: the median over the ddp and zero3 rounds together (offload none). `offload_disk_*`: zero3 "
        "with `parallel.offload=optimizer parallel.offload_to=disk` against zero3 without (recompute none); "
        "`offload_params_disk_*` the same with `parallel.offload=params` (parameter shards and optimizer in files). "
        "`*_rss_ratio` compares `peak run`: the peak resident set above the window's start around building the "
        "model and training its first steps (max over ranks).",
        "## Rows\n\n" + table,
        "Activation bytes are exact (`shardlab.observe.activations.ActivationBytes`, summed over blocks: what the "
        "blocks hold between forward and backward); the formula is `formula_bytes` x n_layer (docs/memory.md); "
        "the planner columns are `plan.model.activation_bytes_per_layer` x 2 (fp32) x n_layer with fused attention, "
        "and `plan.memory.state_bytes` (parameters, gradients, optimizer state kept in device memory per rank: "
        "offloaded state is not). `peak step` is a window around later steps (what a step adds: activations, "
        "logits, gradients, temporaries); `peak run` the whole footprint. Both are "
        f"`{rows[0]['peak_mem_kind']}`, measured once per row.",
        f"![trade-off]({plot.name})"])
