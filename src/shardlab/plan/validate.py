"""`shardlab bench planner`: calibrate once, predict configurations never calibrated, run them,
and report the error honestly.

1. calibrate this machine (cluster=this) once, on a fixed calibration set (CALIBRATION below);
2. predict and run (`python -m shardlab train`, its summary.json) two kinds of configuration:
   - held out (HELD_OUT): another model shape, micro batch, world size or strategy than any the
     calibration measured: the figure of record;
   - in sample (IN_SAMPLE): inside the calibration set (its model and micro batch in situ, its
     strategy and world size in the trainer-overhead runs): how well the planner reproduces what
     it measured, reported apart;
   before each run the machine's load is probed (a GEMM loop on `world` processes, the same for
   every configuration; nothing of the configuration is measured) and converts CPU seconds to wall;
3. compare step time (relative error), state memory (params + grads + optimizer) and the
   data-parallel bytes per step per collective (the doctor's own check is subtracted).
Figures: planner_time_err_mean, planner_time_err_max (held out), planner_heldout_configs,
planner_insitu_err_mean, planner_insitu_err_max (in sample), planner_mem_err_max, planner_comm_exact.
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
from .hardware import read_profile
from .layout import Layout, strategy_name
from .train_spec import TrainSpec
from .model import ModelSpec
from .presets import PRESETS
from .published import evaluate_published
from .step import evaluate

# A shape no calibration sees: between tiny and small, another head count and head size
MODELS = {"tiny": PRESETS["tiny"], "small": PRESETS["small"],
          "mid": ModelSpec("mid", n_layer=3, d_model=192, n_head=6, vocab=256, seq=128)}
# What `shardlab plan calibrate` measures for the bench, once: compute in situ and alone for these
# models x micro batches (two ranks busy at once, and one alone), gloo collectives and overlap at
# world 2, and the trainer's own per-step cost on the first model's miniature with `single` at
# world 1 and `ddp` at world 2
CALIBRATION = {"models": ("small", "tiny"), "micro_batches": (2, 8), "world": 2,
               "trainer": (("single", 1), ("ddp", 2))}

# (model, strategy, micro batch, world); world 1 runs the `single` strategy
IN_SAMPLE = [("small", "ddp", 8, 2), ("small", "single", 8, 1), ("tiny", "ddp", 2, 2)]
IN_SAMPLE_QUICK = [("small", "ddp", 8, 2), ("small", "single", 8, 1)]
HELD_OUT = [
    ("small", "zero1", 8, 2), ("small", "zero2", 2, 2), ("small", "zero3", 8, 2),  # strategies
    ("tiny", "zero3", 2, 2), ("tiny", "torch-fsdp2", 8, 2),
    ("small", "ddp", 4, 2), ("small", "single", 4, 1), ("tiny", "ddp", 4, 2),  # micro batches
    ("mid", "ddp", 4, 2), ("mid", "zero2", 8, 2), ("mid", "single", 2, 1),  # a model shape
    ("small", "ddp", 8, 4), ("small", "zero3", 2, 4), ("mid", "zero1", 4, 4),  # world 4
]
HELD_OUT_QUICK = [("small", "zero3", 8, 2), ("small", "zero2", 2, 2), ("small", "ddp", 4, 2),
                  ("mid", "ddp", 4, 2), ("small", "ddp", 8, 4)]
INSTRUMENTATION_TAGS = ("doctor check", "doctor checksum", "metrics")


def held_out_axes(model: str, strategy: str, b: int, world: int) -> list[str]:
    """What of a configuration the calibration never measured ([] = in sample)."""
    out = []
    if model not in CALIBRATION["models"]:
        out.append("model")
    if b not in CALIBRATION["micro_batches"]:
        out.append("micro batch")
    if world not in {w for _, w in CALIBRATION["trainer"]}:
        out.append("world")
    if strategy not in {st for st, _ in CALIBRATION["trainer"]}:
        out.append("strategy")
    return out


def predict(model: str, strategy: str, b: int, world: int, cluster):
    m = MODELS[model]
    train = TrainSpec(global_batch=b * world, micro_batch=b, precision="fp32", flash_attention=True)
    lay = Layout(dp=world, strategy=strategy_name(strategy), health_check=True)
    # more ranks than cores (world 4 on 2): the ranks share the cores, which the core share carries
    return evaluate(m, train, lay, replace(cluster, num_gpus=max(cluster.num_gpus, world)))


def run_one(out: Path, model: str, strategy: str, b: int, world: int, steps: int) -> dict:
    """The run's summary.json."""
    m = MODELS[model]
    shape = [f"model.preset={model}"] if model in PRESETS else [
        "model.preset=custom", f"model.n_layer={m.n_layer}", f"model.n_head={m.n_head}",
        f"model.d_model={m.d_model}"]
    cmd = [sys.executable, "-m", "shardlab", "train", "--nproc", str(world), "--out", str(out), *shape,
           f"parallel.strategy={strategy}", f"train.micro_batch={b}",
           "train.grad_accum=1", f"train.global_batch={b * world}", f"train.seq_len={m.seq}",
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


def _trial(out_dir: Path, cluster, model: str, strategy: str, b: int, world: int, steps: int, rnd: int) -> dict:
    """Predict from the one calibration, run, compare: one (prediction, measurement). Only the
    machine's load is probed, right before and right after the run (the share of a core each of
    `world` GEMM loops gets, A B A): on shared cores it moves by the minute, the mean of the two
    brackets the run, and the probe is the same whatever the configuration. The prediction from
    the probe before the run alone is kept beside it (`pred_step_s_before`)."""
    name = f"{model}-{strategy}-mb{b}-w{world}"
    run_dir = out_dir / "runs" / f"{name}-r{rnd}"
    before = measure_share(world)
    summary = run_one(run_dir, model, strategy, b, world, steps)
    load = os.getloadavg()[0]  # other work on the shared cores, for context
    after = measure_share(world)
    share = (before + after) / 2
    pred = predict(model, strategy, b, world, replace(cluster, cpu_share=share, cpu_share_solo=share))
    pred_before = predict(model, strategy, b, world, replace(cluster, cpu_share=before, cpu_share_solo=before))
    row = {"load_avg_1m": load}
    row.update(compare(pred, summary))
    row.update(cpu_share=share, cpu_share_before=before, cpu_share_after=after,
               pred_step_s_before=pred_before.step_time,
               time_err_before=abs(pred_before.step_time - row["meas_step_s"]) / row["meas_step_s"],
               trainer_overhead_s=pred.times["trainer"], compute_from=pred_how(pred))
    return row


def pred_how(pred) -> str:
    """Where the prediction's forward/backward came from (compute.in_situ_pass)."""
    from .compute import micro_batch_time
    return micro_batch_time(pred.model, pred.train, pred.layout, pred.cluster).how


def _merge(trials: list[dict]) -> dict:
    """One row per configuration over its rounds: median prediction against median measurement."""
    row = dict(trials[-1])
    for k in ("pred_step_s", "meas_step_s", "cpu_share", "load_avg_1m", "pred_step_s_before"):
        row[k] = statistics.median(t[k] for t in trials)
    row["time_err"] = abs(row["pred_step_s"] - row["meas_step_s"]) / row["meas_step_s"]
    row["time_err_before"] = abs(row["pred_step_s_before"] - row["meas_step_s"]) / row["meas_step_s"]
    row["signed_err"] = (row["pred_step_s"] - row["meas_step_s"]) / row["meas_step_s"]
    row["comm_exact"] = all(t["comm_exact"] for t in trials)
    row["mem_err"] = max(t["mem_err"] for t in trials)
    row["rounds"] = [{k: t[k] for k in ("pred_step_s", "meas_step_s", "pred_times_ms", "trainer_overhead_s")}
                     for t in trials]
    return row


def run(out_dir: Path, quick: bool = False, rounds: int | None = None) -> dict:
    """Calibrate once, then every configuration predicted and run `rounds` times (2; quick: 1),
    round after round, so a slow spell of the shared machine falls on one trial of many
    configurations, not on all trials of one; each row is the median prediction against the
    median measurement."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    in_sample, held_out = (IN_SAMPLE_QUICK, HELD_OUT_QUICK) if quick else (IN_SAMPLE, HELD_OUT)
    configs = [c for c in in_sample + held_out]
    steps = 16 if quick else 30
    rounds = rounds or (1 if quick else 2)
    t0 = time.perf_counter()
    print(f"[planner] calibrating once: {CALIBRATION}", flush=True)
    prof = calibrate([MODELS[m] for m in CALIBRATION["models"]], micro_batches=CALIBRATION["micro_batches"],
                     out=out_dir / "this.toml", quick=quick, world=CALIBRATION["world"])
    cluster = read_profile(prof)
    trials: dict[str, list] = {}
    failures: dict[str, dict] = {}  # config -> its last failed trial
    for rnd in range(rounds):
        for i, (model, strategy, b, world) in enumerate(configs, 1):
            name = f"{model}-{strategy}-mb{b}-w{world}"
            try:
                t = _trial(out_dir, cluster, model, strategy, b, world, steps, rnd)
            except RuntimeError as e:  # reported, not hidden: the row carries the error and no figures
                failures[name] = {"config": name, "error": str(e)[-500:]}
                print(f"[planner] {name} (round {rnd + 1}): run failed: {failures[name]['error']}", flush=True)
                continue
            trials.setdefault(name, []).append(t)
            axes = held_out_axes(model, strategy, b, world)
            print(f"[planner] {i}/{len(configs)} {name} ({'held out: ' + ', '.join(axes) if axes else 'in sample'}; "
                  f"round {rnd + 1}/{rounds}): predicted {t['pred_step_s'] * 1e3:.1f} ms, measured "
                  f"{t['meas_step_s'] * 1e3:.1f} ms ({t['signed_err']:+.1%}); state memory error "
                  f"{t['mem_err']:.2%}; comm {'exact' if t['comm_exact'] else 'DIFFERS'}", flush=True)
    rows = []
    for model, strategy, b, world in configs:
        name = f"{model}-{strategy}-mb{b}-w{world}"
        if name in trials:
            axes = held_out_axes(model, strategy, b, world)
            rows.append({"config": name, "model": model, "strategy": strategy, "micro_batch": b, "world": world,
                         "held_out": axes, **_merge(trials[name])})
    failed = [f for n, f in failures.items() if n not in trials]  # no trial at all: no row
    held = [r for r in rows if r["held_out"]]
    ins = [r for r in rows if not r["held_out"]]

    def err(rs, k, fn):
        return fn(r[k] for r in rs) if rs else None
    figures = {"planner_time_err_mean": err(held, "time_err", statistics.fmean),
               "planner_time_err_max": err(held, "time_err", max),
               "planner_time_bias": err(held, "signed_err", statistics.fmean),
               "planner_heldout_configs": len(held),
               "planner_time_err_mean_load_before": err(held, "time_err_before", statistics.fmean),
               "planner_insitu_err_mean": err(ins, "time_err", statistics.fmean),
               "planner_insitu_err_max": err(ins, "time_err", max),
               "planner_insitu_configs": len(ins),
               "planner_mem_err_max": err(rows, "mem_err", max),
               "planner_comm_exact": sum(r["comm_exact"] for r in rows) / len(rows) if rows else None,
               "planner_configs": len(rows), "planner_failed_runs": len(failed),
               "planner_wall_s": time.perf_counter() - t0}
    published = evaluate_published()
    figures["published_err_max"] = max(abs(p["err"]) for p in published if p["kind"] == "measured")
    figures["formula_identity_err_max"] = max(abs(p["err"]) for p in published if p["kind"] == "identity")
    result = {"suite": "planner", "figures": figures, "calibration": CALIBRATION, "rows": rows, "failed": failed,
              "published": published}
    (out_dir / "results.json").write_text(json.dumps(result, indent=2))
    if rows:
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
        color = "tab:red" if r["held_out"] else "tab:blue"
        ax[0].scatter(r["meas_step_s"] * 1e3, r["pred_step_s"] * 1e3, s=30, color=color)
        ax[0].annotate(r["config"], (r["meas_step_s"] * 1e3, r["pred_step_s"] * 1e3), fontsize=6)
    lo = min(min(r["meas_step_s"], r["pred_step_s"]) for r in rows) * 1e3 * 0.8
    hi = max(max(r["meas_step_s"], r["pred_step_s"]) for r in rows) * 1e3 * 1.2
    ax[0].plot([lo, hi], [lo, hi], "k--", lw=1)
    ax[0].fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], alpha=0.1, color="g")
    ax[0].set(xscale="log", yscale="log", xlabel="measured step time (ms)", ylabel="predicted (ms)",
              title="planner vs shardlab train (red: held out, blue: in sample; band ±10%)")
    names = [r["config"] for r in rows]
    ax[1].barh(names, [r["signed_err"] * 100 for r in rows],
               color=["tab:red" if r["held_out"] else "tab:blue" for r in rows])
    ax[1].set(xlabel="step-time error (%), (predicted - measured) / measured", title="error per configuration")
    ax[1].tick_params(axis="y", labelsize=6)
    fig.tight_layout()
    fig.savefig(out_dir / "planner.png", dpi=120)
    plt.close(fig)


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _report(result: dict, cluster) -> str:
    f = result["figures"]
    cal = result.get("calibration", CALIBRATION)
    lines = ["# Planner validation", "",
             f"Calibrated once (`this.toml`, {cluster.source}) on the calibration set: models "
             f"{', '.join(cal['models'])} at micro batches {', '.join(map(str, cal['micro_batches']))} (compute, "
             f"in situ and alone), gloo collectives and overlap at world {cal['world']}, the trainer's per-step "
             f"cost with {', '.join(f'{s} at world {w}' for s, w in cal['trainer'])}. Every configuration is "
             "then predicted from that one profile and run with `shardlab train` (step time = the run's median "
             "after warm-up). Only the machine's load is probed, right before and right after each run (the "
             "share of a core a GEMM loop gets on each of `world` processes, each in its own session as "
             "torchrun's ranks are; the prediction takes the mean of the two), the same probe whatever the "
             "configuration. `planner_time_err_mean_load_before` is the held-out mean error with the probe "
             "before the run alone.", "",
             f"**Held out** (another model shape, micro batch, world size or strategy than calibrated; the "
             f"figure of record): {f['planner_heldout_configs']} configurations, mean error "
             f"**{_pct(f['planner_time_err_mean'])}**, max **{_pct(f['planner_time_err_max'])}**, bias "
             f"{_pct(f['planner_time_bias'])} (goal: mean ≤ 10%, max ≤ 20%). **In sample** (inside the "
             f"calibration set): {f['planner_insitu_configs']} configurations, mean "
             f"{_pct(f['planner_insitu_err_mean'])}, max {_pct(f['planner_insitu_err_max'])}.", "",
             "| figure | value |", "| --- | --- |"]
    lines += [f"| {k} | {'n/a' if v is None else f'{v:.4g}'} |" for k, v in f.items()]
    lines += ["", "Each row: median prediction against median measurement over the configuration's rounds "
              "(all configurations are run once per round, round after round); `rounds` in results.json "
              "lists every trial. `compute from`: in situ (this model and micro batch were calibrated), "
              "interpolated (this model at other micro batches), scaled (the per-op estimate times the "
              "measured/estimated ratio of the calibrated models).", "",
              "| config | held out | compute from | predicted ms | measured ms | error | forward / backward / exposed "
              "comm / optimizer / ZeRO copies / trainer, predicted ms (last round) | core share | state bytes pred "
              "| measured | comm | load |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["rows"]:
        t = r["pred_times_ms"]  # the last trial's breakdown
        parts = " / ".join(f"{t[k]:.1f}" for k in ("forward", "backward", "exposed_comm", "optimizer",
                                                   "zero_copies", "trainer"))
        lines.append(f"| {r['config']} | {', '.join(r['held_out']) or 'in sample'} | {r.get('compute_from', '')} | "
                     f"{r['pred_step_s'] * 1e3:.1f} | {r['meas_step_s'] * 1e3:.1f} | "
                     f"{r['signed_err']:+.1%} | {parts} | {r.get('cpu_share', 1):.2f} | {r['pred_state_bytes']:,.0f} | "
                     f"{r['meas_state_bytes']:,.0f} | {'exact' if r['comm_exact'] else 'differs'} | "
                     f"{r.get('load_avg_1m', 0):.1f} |")
    for r in result.get("failed", []):
        lines.append(f"| {r['config']} | run failed: {r['error'][-200:]} | | | | | | | | | | |")
    lines += ["", f"error = (predicted - measured) / measured; `planner_time_bias` is its mean over the held-out "
              "rows, `planner_time_err_mean` the mean of its absolute value. load = the machine's 1-minute load "
              f"average when the run ended ({os.cpu_count()} cores); anything above the run's own ranks is "
              "other work competing for the cores. Compute is calibrated in CPU seconds; 'core share' is the "
              "share of a core each rank got just before the run, which converts them to wall seconds."]
    lines += ["", "![planner](planner.png)", ""]
    from .published import published_table
    lines += published_table(result["published"])
    return "\n".join(lines) + "\n"


__all__ = ["run", "predict", "compare", "CALIBRATION", "IN_SAMPLE", "HELD_OUT", "held_out_axes"]
