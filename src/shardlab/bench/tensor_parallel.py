"""`shardlab bench tp`: data parallelism vs tensor parallelism vs both, at world 2 and 4, the same global
batch. `measure(quick)` runs the study and returns rows and figures; `run` writes the report and the plot.

Method. For each world W, one pool of W gloo ranks; the same model, initialisation and batches for all.
The global batch is W x B sequences: a configuration with data-parallel degree d gives each dp rank
W x B / d of them (the ranks of a TP group read the same ones). World 2: `dp2` (own ddp), `tp2` own and
DTensor, with and without SP. World 4: `dp4`, `tp2 x dp2` (own TP under own ddp, with and without SP),
`tp4` own and DTensor.
- Memory: each configuration in turn builds its model and optimizer and trains a few steps inside a
  `PeakMemory` window; twice, in opposite orders, the smaller of the two, max over ranks. Beside it the
  exact state per rank (parameters, gradients, AdamW moments) and the formula for it (docs/tp.md).
- Time: every round trains one step of each configuration, the order rotating, a barrier before each
  timed step: per round the ratio to the world's dp-only step (the same round, so load drift hits both);
  then own vs DTensor back to back (A B, then B A next round). Ratios: the median with a bootstrap 90%
  interval of the median, and min-max.
- Bytes: every own configuration's recorded payload per step by op against the planner's formula for
  the same layout (`plan.comm`): `tp_comm_exact` is 1 when they are equal for every such row. DTensor's
  collectives are torch's own and not recorded.
"""
from __future__ import annotations

import copy
import os
import time
from pathlib import Path

import torch

from shardlab.bench.common import bootstrap_median  # noqa: F401 - moved to common; old imports keep working

MICRO_BATCH, SEQ = 8, 128  # B sequences per rank of the global batch, tokens per sequence
SIZES = {"quick": dict(rounds=9, warm=2, mem_steps=2, model=dict(n_layer=2, n_head=4, d_model=128)),
         "full": dict(rounds=24, warm=4, mem_steps=3, model=dict(n_layer=4, n_head=4, d_model=256))}
# world -> label -> (tp degree, tp impl or None, sp)
CONFIGS = {
    2: {"dp2": (1, None, False), "tp2 own": (2, "own", False), "tp2 dtensor": (2, "dtensor", False),
        "tp2 own sp": (2, "own", True), "tp2 dtensor sp": (2, "dtensor", True)},
    4: {"dp4": (1, None, False), "tp2 x dp2 own": (2, "own", False), "tp2 x dp2 own sp": (2, "own", True),
        "tp4 own": (4, "own", False), "tp4 dtensor": (4, "dtensor", False)},
}
# world -> (A, B, figure prefix): back to back, figure = A / B
PAIRS = {2: [("tp2 own", "tp2 dtensor", "tp_own_vs_dtensor"), ("tp2 own sp", "tp2 dtensor sp", "tp_sp_own_vs_dtensor")],
         4: [("tp4 own", "tp4 dtensor", "tp4_own_vs_dtensor")]}
VOCAB = 256


def _config(world: int, label: str):
    from shardlab.config import Config

    tp, impl, sp = CONFIGS[world][label]
    cfg = Config()
    cfg.train.seq_len, cfg.train.grad_clip, cfg.ckpt.final = SEQ, 1.0, False
    if tp == 1:
        cfg.parallel.strategy = "ddp"
    elif tp == world:
        cfg.parallel.strategy, cfg.parallel.tp, cfg.parallel.tp_impl, cfg.parallel.sp = "single", tp, impl, sp
    else:
        cfg.parallel.strategy, cfg.parallel.tp, cfg.parallel.tp_impl, cfg.parallel.sp = "ddp", tp, impl, sp
    return cfg


class _Run:
    """One configuration, built by the composition the trainer uses (`shardlab.parallel.build`): a step =
    forward, loss, backward, gradient sync, clip, AdamW."""

    def __init__(self, world: int, label: str, model_kw: dict):
        from shardlab.model.gpt import GPTConfig, build_model
        from shardlab.parallel import build

        model = build_model(GPTConfig(vocab_size=VOCAB, max_seq_len=SEQ, **model_kw), seed=1337)
        self.par = build(_config(world, label), torch.device("cpu"), model)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.par.step([(x, y)], 1.0 / y.numel(), max_norm=1.0)


def _measure(world: int, size: dict) -> dict:
    """On every rank: memory windows, rotating timed rounds, own vs DTensor pairs, recorded bytes."""
    from shardlab import comm
    from shardlab.bench import common
    from shardlab.data.corpus import load_tokens
    from shardlab.data.dataset import TokenDataset, get_batch
    from shardlab.observe.memory import PeakMemory, release

    rank = comm.rank()
    say = common.progress if rank == 0 else (lambda msg: None)
    configs = CONFIGS[world]
    data = TokenDataset(load_tokens("stdlib"), SEQ)
    gen = torch.Generator().manual_seed(0)

    def batch(label):
        """The global batch of world x B sequences; this rank's dp coordinate's share of it."""
        idx = torch.randint(0, len(data), (world * MICRO_BATCH,), generator=gen)
        tp = configs[label][0]
        per = world * MICRO_BATCH // (world // tp)
        dp_rank = rank // tp  # tp is the innermost mesh dimension
        return get_batch(data, idx[dp_rank * per:(dp_rank + 1) * per].tolist())

    labels = list(configs)
    for label in labels[:2]:  # warm-up: one-time allocations must not land in a window
        _Run(world, label, size["model"]).step(*batch(label))
    say(f"  world {world}: memory windows")
    peaks = {label: [] for label in labels}
    state, measured = {}, {}
    kind = ""
    for order in (labels, labels[::-1]):
        for label in order:
            comm.barrier()
            with PeakMemory("cpu") as peak:
                run = _Run(world, label, size["model"])
                for _ in range(size["mem_steps"]):
                    comm.RECORDER.reset_step()
                    run.step(*batch(label))
                state[label] = run.par.state_bytes()
                stats = comm.RECORDER.step_stats()
                measured[label] = {"bytes": dict(stats["bytes"]), "wire_bytes": dict(stats["wire_bytes"]),
                                   "calls": dict(stats["calls"]), "by_group": stats["by_group"]}
            peaks[label].append(peak.bytes)
            kind = peak.kind
            del run
            release()
    say(f"  world {world}: timed rounds")
    live = {label: _Run(world, label, size["model"]) for label in labels}
    times = {label: [] for label in labels}
    for r in range(size["rounds"]):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            x, y = batch(label)
            comm.barrier()
            t0 = time.perf_counter()
            live[label].step(x, y)
            times[label].append(time.perf_counter() - t0)
    say(f"  world {world}: paired rounds")
    paired = {key: [] for _, _, key in PAIRS[world]}
    for r in range(size["rounds"]):
        for a, b, key in PAIRS[world]:
            x, y = batch(a)
            t = {}
            for label in ((a, b) if r % 2 == 0 else (b, a)):
                comm.barrier()
                t0 = time.perf_counter()
                live[label].step(x, y)
                t[label] = time.perf_counter() - t0
            paired[key].append(t[a] / t[b])
    # every rank's step times: the step is as slow as its slowest rank
    all_times = comm.all_gather_object(times)
    times = {k: [max(t[k][i] for t in all_times) for i in range(len(times[k]))] for k in labels}
    peak_all = comm.all_gather_object({k: min(v) for k, v in peaks.items()})  # allocator noise only adds
    state_all = comm.all_gather_object(state)
    return {"times": times, "paired": paired, "peaks": {k: max(p[k] for p in peak_all) for k in labels},
            "kind": kind, "state": {k: max((s[k] for s in state_all), key=lambda d: sum(d.values())) for k in labels},
            "measured": copy.deepcopy(measured)}


# --- statistics --------------------------------------------------------------------------------------

# bootstrap_median and ratio_stats live in bench/common.py (shared with the checkpoint suite); the
# names stay importable from here.
from shardlab.bench.common import bootstrap_median, ratio_stats  # noqa: E402,F401


# --- analytic values ---------------------------------------------------------------------------------

def analytic_bytes(world: int, label: str, model_kw: dict) -> dict[str, float]:
    """The planner's payload bytes per rank per step (comm's convention), by op, for a configuration:
    tensor-parallel collectives plus the data-parallel layer's."""
    from shardlab.plan.comm import dp_bytes_per_step, tp_bytes_per_step
    from shardlab.plan.layout import Layout
    from shardlab.plan.train_spec import TrainSpec
    from shardlab.plan.model import ModelSpec

    tp, _, sp = CONFIGS[world][label]
    dp = world // tp
    m = ModelSpec("bench", n_layer=model_kw["n_layer"], d_model=model_kw["d_model"], n_head=model_kw["n_head"],
                  vocab=VOCAB, seq=SEQ)
    tr = TrainSpec(global_batch=world * MICRO_BATCH, micro_batch=world * MICRO_BATCH // dp, precision="fp32")
    lay = Layout(dp=dp, strategy="ddp", tp=tp, sp=sp)
    out: dict[str, float] = {}
    for part in (dp_bytes_per_step(m, tr, lay), tp_bytes_per_step(m, tr, lay) if tp > 1 else {}):
        for op, b in part.items():
            out[op] = out.get(op, 0) + b
    return {op: b for op, b in out.items() if b}


def state_formula(world: int, label: str, model_kw: dict) -> int:
    """Parameters + gradients + AdamW moments per rank, fp32: 16 (Psi_s / N + Psi_r) bytes (docs/tp.md)."""
    from shardlab.plan.comm import local_params
    from shardlab.plan.model import ModelSpec

    tp = CONFIGS[world][label][0]
    m = ModelSpec("bench", n_layer=model_kw["n_layer"], d_model=model_kw["d_model"], n_head=model_kw["n_head"],
                  vocab=VOCAB, seq=SEQ)
    return 16 * local_params(m, tp)


# --- the study ---------------------------------------------------------------------------------------

def measure(quick: bool = True, worlds: tuple[int, ...] = (2, 4)) -> dict:
    """Run the study at each world; returns {"rows": [...], "figures": {...}} in the bench's results.json
    shape: `tp_own_vs_dtensor_step_ratio` (own / DTensor at tp=2, median of back-to-back pairs),
    `tp_mem_ratio` (peak memory tp=2 / dp=2), `tp_comm_exact` (1.0 when every own configuration's recorded
    bytes equal the planner's)."""
    from shardlab.bench import common

    size = SIZES["quick" if quick else "full"]
    load = {"start": os.getloadavg()[0]}
    common.progress(f"load average {load['start']:.2f} on {os.cpu_count()} cores at the start")
    rows, figures, exact, state_exact = [], {}, [], []
    for world in worlds:
        common.progress(f"world {world}: {', '.join(CONFIGS[world])}")
        res = common.run_on_ranks(_measure, world, size, world=world)
        warm = size["warm"]
        base = next(label for label, c in CONFIGS[world].items() if c[0] == 1)
        for label, (tp, impl, sp) in CONFIGS[world].items():
            t = common.stats(res["times"][label][warm:])
            vs_dp = [a / b for a, b in zip(res["times"][label][warm:], res["times"][base][warm:])]
            row = {"world": world, "config": label, "tp": tp, "dp": world // tp, "tp_impl": impl, "sp": sp,
                   "global_batch": world * MICRO_BATCH, "step_s": t, "step_ratio_vs_dp": ratio_stats(vs_dp),
                   "tokens_per_s": world * MICRO_BATCH * SEQ / t["median"], "peak_mem_bytes": res["peaks"][label],
                   "peak_mem_kind": res["kind"], "state_bytes": res["state"][label],
                   "state_formula_bytes": state_formula(world, label, size["model"])}
            row["state_total_bytes"] = sum(row["state_bytes"].values())
            state_exact.append(row["state_total_bytes"] == row["state_formula_bytes"])
            if impl != "dtensor":  # torch's own collectives (DTensor) are not recorded by comm
                meas = res["measured"][label]
                row["bytes_per_step"], row["bytes_by_group"] = meas["bytes"], meas["by_group"]
                row["calls_per_step"] = meas["calls"]
                row["analytic_bytes_per_step"] = analytic_bytes(world, label, size["model"])
                row["bytes_exact"] = {k: v for k, v in meas["bytes"].items() if v} == row["analytic_bytes_per_step"]
                exact.append(row["bytes_exact"])
            rows.append(row)
        for a, b, key in PAIRS[world]:
            s = ratio_stats(res["paired"][key][warm:])
            figures[f"{key}_step_ratio"] = s["median"]
            figures[f"{key}_step_ratio_lo90"], figures[f"{key}_step_ratio_hi90"] = s["ci90"]
            figures[f"{key}_step_ratio_min"], figures[f"{key}_step_ratio_max"] = s["min"], s["max"]
    by = {(r["world"], r["config"]): r for r in rows}
    if 2 in worlds:
        figures["tp_mem_ratio"] = by[2, "tp2 own"]["peak_mem_bytes"] / by[2, "dp2"]["peak_mem_bytes"]
        figures["tp_state_ratio"] = by[2, "tp2 own"]["state_total_bytes"] / by[2, "dp2"]["state_total_bytes"]
    for r in rows:
        if r["tp"] > 1:
            key = r["config"].replace(" x ", "x").replace(" ", "_")
            figures[f"w{r['world']}_{key}_vs_dp_step_ratio"] = r["step_ratio_vs_dp"]["median"]
    figures["tp_comm_exact"] = 1.0 if exact and all(exact) else 0.0
    figures["tp_state_exact"] = 1.0 if all(state_exact) else 0.0
    load["end"] = os.getloadavg()[0]
    common.progress(f"load average {load['end']:.2f} on {os.cpu_count()} cores at the end")
    return {"suite": "tp", "figures": figures, "rows": rows, "size": size, "load_avg": load}


def _plot(out: Path, rows: list[dict]) -> Path:
    """Three panels per configuration, grouped by world: step time relative to dp-only (median, bootstrap
    90% interval), peak memory, payload bytes per step by op (own configurations)."""
    from shardlab.bench import common

    plt = common.pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    labels = [f"w{r['world']} {r['config']}" for r in rows]
    y = list(range(len(rows)))[::-1]
    colors = ["tab:gray" if r["tp"] == 1 else ("tab:orange" if r["tp_impl"] == "dtensor" else "tab:blue") for r in rows]
    med = [r["step_ratio_vs_dp"]["median"] for r in rows]
    lo = [m - r["step_ratio_vs_dp"]["ci90"][0] for m, r in zip(med, rows)]
    hi = [r["step_ratio_vs_dp"]["ci90"][1] - m for m, r in zip(med, rows)]
    axes[0].barh(y, med, xerr=[lo, hi], color=colors, capsize=3)
    axes[0].axvline(1.0, color="k", lw=0.8)
    axes[0].set_xlabel("step time / dp-only step time (same round; median, 90% CI)")
    axes[1].barh(y, [r["peak_mem_bytes"] / 2**20 for r in rows], color=colors)
    axes[1].barh(y, [r["state_total_bytes"] / 2**20 for r in rows], color="none", edgecolor="k", hatch="//",
                 label="exact state (params + grads + AdamW)")
    axes[1].set_xlabel(f"peak memory per rank, MiB ({rows[0]['peak_mem_kind']})")
    axes[1].legend(fontsize=8)
    ops = ["all_reduce", "all_gather", "reduce_scatter"]
    left = [0.0] * len(rows)
    for op, c in zip(ops, ["tab:green", "tab:purple", "tab:brown"]):
        vals = [(r.get("bytes_per_step") or {}).get(op, 0) / 2**20 for r in rows]
        axes[2].barh(y, vals, left=left, color=c, label=op)
        left = [a + b for a, b in zip(left, vals)]
    for yi, r in zip(y, rows):
        if r["tp_impl"] == "dtensor":
            axes[2].text(0, yi, " not recorded (torch's collectives)", va="center", fontsize=7)
    axes[2].set_xlabel("payload per rank per step, MiB (recorded by comm)")
    axes[2].legend(fontsize=8)
    for ax in axes:
        ax.set_yticks(y)
        ax.set_yticklabels(labels if ax is axes[0] else [""] * len(labels))
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle("Data vs tensor parallelism, same global batch (gray: dp only, blue: own TP, orange: DTensor TP)")
    fig.tight_layout()
    path = out / "tp.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run(out: Path, quick: bool) -> dict:
    import json

    from shardlab.bench import common

    doc = measure(quick)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"suite": "tp", "figures": doc["figures"], "rows": doc["rows"], "load_avg": doc["load_avg"],
           "size": doc["size"]}
    (out / "results.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    plot = _plot(out, doc["rows"])
    mib = 2 ** 20

    def total(d):
        return sum(d.values()) if d else 0

    table = common.md_table(
        ["world", "config", "step ms (median, min–max)", "÷ dp step (median, 90% CI)", "tokens/s",
         "peak MiB", "state MiB (formula)", "payload KiB/step (planner: equal?)"],
        [[r["world"], r["config"], common.fmt_stats(r["step_s"], 1e3, 1),
          f"{r['step_ratio_vs_dp']['median']:.3f} ({r['step_ratio_vs_dp']['ci90'][0]:.3f}–"
          f"{r['step_ratio_vs_dp']['ci90'][1]:.3f})", f"{r['tokens_per_s']:,.0f}",
          f"{r['peak_mem_bytes'] / mib:.1f}",
          f"{r['state_total_bytes'] / mib:.3f} ({'=' if r['state_total_bytes'] == r['state_formula_bytes'] else '≠'})",
          "not recorded" if "bytes_per_step" not in r else
          f"{total(r['bytes_per_step']) / 1024:,.1f} ({'yes' if r['bytes_exact'] else 'NO'})"] for r in doc["rows"]])
    f = doc["figures"]
    figs = "\n".join(f"- `{k}` = {common.fmt_figure(v)}" for k, v in f.items())
    m = doc["size"]["model"]
    load = doc["load_avg"]
    common.write_report(out, "Tensor parallelism vs data parallelism (world 2 and 4, same global batch)", [
        f"Model: GPT n_layer={m['n_layer']} d_model={m['d_model']} n_head={m['n_head']}, vocabulary {VOCAB}, "
        f"{SEQ} tokens per sequence, AdamW fp32, clip 1.0. Global batch = world x {MICRO_BATCH} sequences: "
        "a configuration with data-parallel degree d gives each dp rank 1/d of it; the ranks of a TP group "
        "read the same sequences. `tp2 x dp2`: own TP under own ddp on a (dp, tp) = 2 x 2 mesh. "
        f"{doc['size']['rounds']} rounds of one step per configuration (first {doc['size']['warm']} excluded), "
        "order rotating, a barrier before each step; the ratio to dp-only is taken within each round. "
        "Own vs DTensor: back to back, A B then B A. Intervals: bootstrap 90% of the median.",
        f"Load average (1 min): {load['start']:.2f} at the start, {load['end']:.2f} at the end, on "
        f"{os.cpu_count()} cores. World 4 time-shares the cores when there are fewer than 4.",
        "## Figures\n\n" + figs,
        "## Configurations\n\n" + table,
        "Payload: what comm records per rank per step (the full tensor of each collective), against the "
        "planner's formula for the same layout (`shardlab.plan.comm`: tensor-parallel regions, the "
        "vocab-parallel loss's 3 fp32 per token, SP's replicated-gradient sum, the grad norm, ddp's "
        "gradient all-reduce). State: exact bytes of parameters, gradients and AdamW moments per rank, and "
        "16 (Ψ_s/N + Ψ_r) (docs/tp.md).",
        f"![tp]({plot.name})"])
    return doc


if __name__ == "__main__":  # python -m shardlab.bench.tensor_parallel [--full] [--world N]
    import json
    import sys

    worlds = tuple(int(a) for a in sys.argv[sys.argv.index("--world") + 1:][:1]) if "--world" in sys.argv else (2, 4)
    print(json.dumps(measure(quick="--full" not in sys.argv, worlds=worlds), indent=1, default=str))
