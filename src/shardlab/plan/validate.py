"""`shardlab bench planner`: predict, then run, and report the error honestly.

1. calibrate this machine (cluster=this) for the models used;
2. for each configuration (strategy x micro batch x world x model): predict with the planner,
   run `python -m shardlab train`, read the run's summary.json;
3. compare step time (relative error), state memory (params + grads + optimizer) and the
   data-parallel bytes per step per collective (the doctor's own check is subtracted).
Figures: planner_time_err_mean, planner_time_err_max, planner_mem_err_max, planner_comm_exact.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from .calibrate import calibrate
from .calibrate_compute import measure_share
from .calibrate_trainer import trainer_overhead
from .hardware import read_profile
from .layout import Layout, TrainSpec
from .model import PRESETS
from .published import PUBLISHED, evaluate_published
from .step import evaluate

# (model, strategy, micro batch, world); world 1 runs the `single` strategy
CONFIGS = [
    ("small", "ddp", 8, 2), ("small", "zero1", 8, 2), ("small", "zero2", 8, 2), ("small", "zero3", 8, 2),
    ("small", "ddp", 2, 2), ("small", "zero1", 2, 2), ("small", "zero2", 2, 2), ("small", "zero3", 2, 2),
    ("tiny", "ddp", 8, 2), ("tiny", "zero1", 8, 2), ("tiny", "zero2", 8, 2), ("tiny", "zero3", 8, 2),
    ("small", "single", 8, 1), ("small", "single", 2, 1), ("tiny", "single", 8, 1),
]
QUICK = [("small", "ddp", 8, 2), ("small", "zero3", 8, 2), ("small", "single", 8, 1), ("tiny", "zero2", 8, 2)]
INSTRUMENTATION_TAGS = ("doctor check", "doctor checksum", "metrics")


def predict(model: str, strategy: str, b: int, world: int, cluster):
    m = PRESETS[model]
    train = TrainSpec(global_batch=b * world, micro_batch=b, precision="fp32", flash_attention=True)
    lay = Layout(dp=world, strategy="ddp" if strategy == "single" else strategy, health_check=True)
    return evaluate(m, train, lay, cluster)


def run_one(out: Path, model: str, strategy: str, b: int, world: int, steps: int) -> dict:
    """The run's summary.json."""
    seq = PRESETS[model].seq
    cmd = [sys.executable, "-m", "shardlab", "train", "--nproc", str(world), "--out", str(out),
           f"model.preset={model}", f"parallel.strategy={strategy}", f"train.micro_batch={b}",
           "train.grad_accum=1", f"train.global_batch={b * world}", f"train.seq_len={seq}",
           f"train.steps={steps}", "train.eval_every=0", f"train.log_every={steps}", "train.threads=1"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for attempt in range(2):  # one retry: a rank can die for reasons of its own on a busy machine
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if proc.returncode == 0:
            return json.loads((out / "summary.json").read_text())
        shutil.rmtree(out, ignore_errors=True)
    tail = proc.stderr.strip().splitlines()[-3:]
    raise RuntimeError(f"shardlab train failed twice ({' '.join(cmd[3:])}): {' | '.join(tail)}")


def compare(pred, summary: dict) -> dict:
    meas_t = summary["step_time_s"]
    st = summary["state_bytes"]
    meas_mem = st["params"] + st["grads"] + st["optimizer"]
    pred_mem = sum(ln.bytes for ln in pred.memory if ln.name in ("params", "grads", "optimizer"))
    comm = dict(summary["comm"]["bytes_per_step"])
    tags = summary["comm"].get("bytes_by_tag", {})
    pred_comm = {k: v for k, v in pred.bytes_per_step().items()}
    for tag in INSTRUMENTATION_TAGS[1:]:  # the doctor check is modelled (health_check); these are not
        if tags.get(tag):
            op = "all_reduce" if tag == "metrics" else "all_gather"
            comm[op] = comm.get(op, 0) - tags[tag]
    comm = {k: v for k, v in comm.items() if v}
    return {"pred_step_s": pred.step_time, "meas_step_s": meas_t,
            "pred_times_ms": {k: round(v * 1e3, 3) for k, v in pred.times.items()},
            "time_err": abs(pred.step_time - meas_t) / meas_t,
            "signed_err": (pred.step_time - meas_t) / meas_t,
            "pred_state_bytes": pred_mem, "meas_state_bytes": meas_mem,
            "mem_err": abs(pred_mem - meas_mem) / meas_mem,
            "pred_comm": pred_comm, "meas_comm": comm, "comm_exact": pred_comm == comm}


def _trial(out_dir: Path, model: str, strategy: str, b: int, world: int, steps: int, rnd: int) -> dict:
    """Calibrate quickly for this configuration, predict, then run it: one (prediction, measurement)."""
    name = f"{model}-{strategy}-mb{b}-w{world}"
    run_dir = out_dir / "runs" / f"{name}-r{rnd}"
    # this machine's two cores are shared: calibrate again right before each run (A B A B ...)
    # so that prediction and measurement see the same load
    fresh = read_profile(calibrate([PRESETS[model]], micro_batches=[b], out=run_dir.with_suffix(".toml"),
                                   quick=True, trainer=False))
    fixed, per_call = trainer_overhead(fresh, world, PRESETS[model], strategy)
    fresh = replace(fresh, step_overhead={str(world): fixed}, call_overhead={strategy: per_call})
    share = measure_share(world)  # the core share right before the run: the load moves by the minute
    fresh = replace(fresh, cpu_share=share, cpu_share_solo=share)
    pred = predict(model, strategy, b, world, fresh)
    summary = run_one(run_dir, model, strategy, b, world, steps)
    row = {"load_avg_1m": os.getloadavg()[0]}  # other work on the shared cores, for context
    row.update(compare(pred, summary))
    row.update(cpu_share=fresh.compute_speed(world), trainer_overhead_s=fixed)
    return row


def _merge(trials: list[dict]) -> dict:
    """One row per configuration over its rounds: median prediction against median measurement."""
    row = dict(trials[-1])
    for k in ("pred_step_s", "meas_step_s", "cpu_share", "load_avg_1m"):
        row[k] = statistics.median(t[k] for t in trials)
    row["time_err"] = abs(row["pred_step_s"] - row["meas_step_s"]) / row["meas_step_s"]
    row["signed_err"] = (row["pred_step_s"] - row["meas_step_s"]) / row["meas_step_s"]
    row["comm_exact"] = all(t["comm_exact"] for t in trials)
    row["mem_err"] = max(t["mem_err"] for t in trials)
    row["rounds"] = [{k: t[k] for k in ("pred_step_s", "meas_step_s", "pred_times_ms", "trainer_overhead_s")}
                     for t in trials]
    return row


def run(out_dir: Path, quick: bool = False, rounds: int | None = None) -> dict:
    """Every configuration predicted and run `rounds` times (2; quick: 1), round after round, so a
    slow spell of the shared machine falls on one trial of many configurations, not on all trials of
    one; each row is the median prediction against the median measurement."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    configs = QUICK if quick else CONFIGS
    steps = 16 if quick else 30
    rounds = rounds or (1 if quick else 2)
    models = sorted({c[0] for c in configs})
    t0 = time.perf_counter()
    prof = calibrate([PRESETS[m] for m in models], micro_batches=sorted({c[2] for c in configs}),
                     out=out_dir / "this.toml", quick=quick)
    cluster = read_profile(prof)
    trials: dict[str, list] = {}
    failures: dict[str, dict] = {}  # config -> its last failed trial
    for rnd in range(rounds):
        for model, strategy, b, world in configs:
            name = f"{model}-{strategy}-mb{b}-w{world}"
            try:
                t = _trial(out_dir, model, strategy, b, world, steps, rnd)
            except RuntimeError as e:  # reported, not hidden: the row carries the error and no figures
                failures[name] = {"config": name, "error": str(e)[-500:]}
                print(f"[planner] {name} (round {rnd + 1}): run failed: {failures[name]['error']}", flush=True)
                continue
            trials.setdefault(name, []).append(t)
            print(f"[planner] {name} (round {rnd + 1}/{rounds}): predicted {t['pred_step_s'] * 1e3:.1f} ms, "
                  f"measured {t['meas_step_s'] * 1e3:.1f} ms ({t['time_err']:.1%}); state memory error "
                  f"{t['mem_err']:.2%}; comm {'exact' if t['comm_exact'] else 'DIFFERS'}", flush=True)
    rows = []
    for model, strategy, b, world in configs:
        name = f"{model}-{strategy}-mb{b}-w{world}"
        if name in trials:
            rows.append({"config": name, "model": model, "strategy": strategy, "micro_batch": b, "world": world,
                         **_merge(trials[name])})
    failed = [f for n, f in failures.items() if n not in trials]  # no trial at all: no row
    errs = [r["time_err"] for r in rows]
    figures = {"planner_time_err_mean": statistics.fmean(errs), "planner_time_err_max": max(errs),
               "planner_mem_err_max": max(r["mem_err"] for r in rows),
               "planner_comm_exact": sum(r["comm_exact"] for r in rows) / len(rows),
               "planner_time_bias": statistics.fmean(r["signed_err"] for r in rows),
               "planner_configs": len(rows), "planner_failed_runs": len(failed),
               "planner_wall_s": time.perf_counter() - t0}
    published = evaluate_published()
    figures["published_err_max"] = max(abs(p["err"]) for p in published)
    result = {"suite": "planner", "figures": figures, "rows": rows, "failed": failed, "published": published}
    (out_dir / "results.json").write_text(json.dumps(result, indent=2))
    _plot(rows, out_dir)
    (out_dir / "REPORT.md").write_text(_report(result, cluster))
    return result


def _plot(rows: list[dict], out_dir: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.5))
    for r in rows:
        ax[0].scatter(r["meas_step_s"] * 1e3, r["pred_step_s"] * 1e3, s=30)
        ax[0].annotate(r["config"], (r["meas_step_s"] * 1e3, r["pred_step_s"] * 1e3), fontsize=6)
    lo = min(min(r["meas_step_s"], r["pred_step_s"]) for r in rows) * 1e3 * 0.8
    hi = max(max(r["meas_step_s"], r["pred_step_s"]) for r in rows) * 1e3 * 1.2
    ax[0].plot([lo, hi], [lo, hi], "k--", lw=1)
    ax[0].fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], alpha=0.1, color="g")
    ax[0].set(xscale="log", yscale="log", xlabel="measured step time (ms)", ylabel="predicted (ms)",
              title="planner vs shardlab train (band: ±10%)")
    names = [r["config"] for r in rows]
    ax[1].barh(names, [r["time_err"] * 100 for r in rows])
    ax[1].set(xlabel="step-time error (%)", title="relative error per configuration")
    ax[1].tick_params(axis="y", labelsize=6)
    fig.tight_layout()
    fig.savefig(out_dir / "planner.png", dpi=120)
    plt.close(fig)


def _report(result: dict, cluster) -> str:
    f = result["figures"]
    lines = ["# Planner validation", "",
             f"Calibrated profile: {cluster.source} (`this.toml`). Because this machine's cores are shared, "
             "each configuration is calibrated again (quick, its own model and micro batch) immediately "
             "before it is predicted and then run with `shardlab train` (step time = the run's median "
             "after warm-up): prediction and measurement alternate and see the same load.", "",
             "| figure | value |", "| --- | --- |"]
    lines += [f"| {k} | {v:.4g} |" for k, v in f.items()]
    lines += ["", "Each row: median prediction against median measurement over the configuration's rounds "
              "(all configurations are run once per round, round after round); `rounds` in results.json "
              "lists every trial.", "",
              "| config | predicted ms | measured ms | error | forward / backward / exposed comm / optimizer "
              "/ ZeRO copies / trainer, predicted ms (last round) | core share | state bytes pred | measured | comm | load |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["rows"]:
        t = r["pred_times_ms"]  # the last trial's breakdown
        parts = " / ".join(f"{t[k]:.1f}" for k in ("forward", "backward", "exposed_comm", "optimizer",
                                                   "zero_copies", "trainer"))
        lines.append(f"| {r['config']} | {r['pred_step_s'] * 1e3:.1f} | {r['meas_step_s'] * 1e3:.1f} | "
                     f"{r['signed_err']:+.1%} | {parts} | {r.get('cpu_share', 1):.2f} | {r['pred_state_bytes']:,.0f} | "
                     f"{r['meas_state_bytes']:,.0f} | {'exact' if r['comm_exact'] else 'differs'} | "
                     f"{r.get('load_avg_1m', 0):.1f} |")
    for r in result.get("failed", []):
        lines.append(f"| {r['config']} | run failed: {r['error'][-200:]} | | | | | | | | |")
    lines += ["", f"error = (predicted - measured) / measured; `planner_time_bias` is its mean, "
              "`planner_time_err_mean` the mean of its absolute value. load = the machine's 1-minute load "
              f"average when the run ended ({os.cpu_count()} cores); anything above the run's own ranks is "
              "other work competing for the cores. Compute is calibrated in CPU seconds; 'core share' is the "
              "share of a core each rank got just before the run, which converts them to wall seconds."]
    lines += ["", "![planner](planner.png)", "", "## Against published figures", "",
              "| case | published | planner | error | source |", "| --- | --- | --- | --- | --- |"]
    for p in result["published"]:
        lines.append(f"| {p['case']} | {p['published']:.4g} {p['unit']} | {p['planner']:.4g} {p['unit']} | "
                     f"{p['err']:+.1%} | {p['source']} |")
    lines += ["", "No per-case factors: every GPU case uses the same cluster presets and the one "
              "GEMM-efficiency assumption (docs/planner.md)."]
    return "\n".join(lines) + "\n"


__all__ = ["run", "predict", "compare", "CONFIGS", "PUBLISHED"]
