"""What every suite shares: running jobs, fair statistics, results.json, REPORT.md and plots.

Fairness rules (seed 000 Q22): a suite fixes the model, its initialisation (train.seed), the data
and the sequence length; excludes warm-up steps; reports medians with min-max, and every paired figure
with a bootstrap 90% interval of its median and the load average it was measured under (`median_ci`,
`fmt_ci`; `goal_verdict` says whether the interval clears the goal or spans it); alternates the
configurations it compares (A B A B ...) so that drift in machine load hits both alike; and
checks that the replicas stayed identical (`ranks_consistent`).
"""
from __future__ import annotations

import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from shardlab.launch.launcher import free_port

# The model and data every suite trains unless it says otherwise.
BASE = ["data.source=stdlib", "train.seq_len=128", "train.seed=1337", "train.eval_every=0",
        "train.log_every=1", "train.warmup_steps=2", "train.threads=1",
        "ckpt.final=false"]  # a bench measures training, not a final save
MODEL = {"full": ["model.preset=small"],  # 3.2M parameters
         "quick": ["model.preset=custom", "model.n_layer=2", "model.n_head=4", "model.d_model=128"]}
# The same two models as GPTConfig keywords, for the suites that build their replicas in one process
# (bench ddp, its tracing and exposed-communication rounds) rather than through the trainer's config.
MODEL_KW = {"quick": dict(n_layer=2, n_head=4, d_model=128), "full": dict(n_layer=4, n_head=4, d_model=256)}


def model_overrides(quick: bool) -> list[str]:
    return MODEL["quick" if quick else "full"]


def own_or_native_ddp() -> str:
    """The own `ddp` strategy once it exists (it reports bucket-ready times), else torch's DDP."""
    from shardlab.parallel.dp import REGISTRY
    return "ddp" if "ddp" in REGISTRY else "torch-ddp"


# --- progress ---------------------------------------------------------------------------------------

_T0 = "SHARDLAB_BENCH_T0"  # the suite's start (epoch seconds), inherited by the ranks it spawns


def progress(msg: str) -> None:
    """One line on stderr while a suite runs (suites take minutes): time since the start, then what
    happens. Ranks print too (rank 0 only, by the caller's choice); they inherit the start time."""
    s = int(time.time() - float(os.environ.setdefault(_T0, str(time.time()))))
    print(f"[bench {s // 60}:{s % 60:02d}] {msg}", file=sys.stderr, flush=True)


def fmt_figure(x) -> str:
    """A figure for people: 4 significant digits, thousands separated (results.json keeps them all)."""
    if isinstance(x, bool) or not isinstance(x, float) or not math.isfinite(x) or x == 0:
        return str(x)
    digits = max(0, 3 - math.floor(math.log10(abs(x))))
    text = f"{x:,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


# --- running ---------------------------------------------------------------------------------------

def run_jobs(jobs: list[dict], nproc: int, work: Path, timeout: float = 900) -> list[dict]:
    """Run jobs ({"name", "overrides", "out"}) in order in one launch of `nproc` ranks; return each
    job's result: its summary.json plus the per-step rows of metrics.jsonl."""
    work.mkdir(parents=True, exist_ok=True)
    for j in jobs:  # a fresh run directory: the trainer appends to metrics.jsonl
        shutil.rmtree(j["out"], ignore_errors=True)
    spec = work / f"jobs-{len(list(work.glob('jobs-*.json')))}.json"
    spec.write_text(json.dumps([{"overrides": j["overrides"], "out": str(j["out"])} for j in jobs]))
    cmd = [sys.executable, "-m", "shardlab.bench.worker", str(spec)]
    if nproc > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--nnodes=1",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}", *cmd[1:]]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    log = work / (spec.stem + ".log")
    progress(f"{len(jobs)} run(s) on {nproc} rank(s): {', '.join(_label(j) for j in jobs)} (log: {log})")
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
        rc = _watch(proc, jobs, time.monotonic() + timeout)
    if rc != 0:
        raise RuntimeError(f"bench jobs failed (exit {rc}); from {log}:\n" + failure_excerpt(log.read_text()))
    return [load_run(Path(j["out"]), j.get("name", "")) for j in jobs]


def _label(job: dict) -> str:
    return Path(job["out"]).name


def _watch(proc: subprocess.Popen, jobs: list[dict], deadline: float) -> int:
    """Wait for the launch, saying when each job finishes (its summary.json appears)."""
    done = 0
    while True:
        rc = proc.poll()
        while done < len(jobs) and (Path(jobs[done]["out"]) / "summary.json").exists():
            done += 1
            progress(f"  run {done}/{len(jobs)} done: {_label(jobs[done - 1])}")
        if rc is not None:
            return rc
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise subprocess.TimeoutExpired(proc.args, 0)
        time.sleep(0.5)


# What a dying rank prints before torchrun's summary (which says only "Signal 6").
_CAUSES = ("Traceback", "Error", "error:", "what():", "terminate called", "Fatal Python error", "Thread 0x",
           "Current thread", "[shardlab doctor]")


def failure_excerpt(text: str, tail: int = 25) -> str:
    """The lines that say why ranks died (exceptions, C++ aborts, faulthandler stacks), then the tail."""
    lines = text.splitlines()
    head = len(lines) - tail
    causes = [i for i, line in enumerate(lines[:max(head, 0)]) if any(c in line for c in _CAUSES)]
    keep = sorted({j for i in causes[:8] for j in range(i, min(i + 12, head))})
    picked = [lines[j] for j in keep]
    return "\n".join(picked + (["..."] if picked else []) + lines[-tail:])


def load_run(run_dir: Path, name: str = "") -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {"name": name, "dir": str(run_dir), "summary": summary, "metrics": rows}


def step_times(run: dict) -> list[float]:
    """Per-step times after the trainer's warm-up (the first max(3, steps/10) steps are excluded)."""
    steps = run["summary"]["steps"]
    warm = max(3, steps // 10)
    return [r["step_time_s"] for r in run["metrics"] if "step_time_s" in r and r["step"] > warm]


# --- statistics ------------------------------------------------------------------------------------

def stats(xs: list[float]) -> dict:
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def bootstrap_median(xs: list[float], level: float = 0.90, n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the median: resample the values with replacement `n` times.
    Seeded: the same values give the same interval (a report can be re-derived from results.json)."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return (float("nan"), float("nan"))
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    lo = meds[int((1 - level) / 2 * n)]
    hi = meds[min(n - 1, int((1 + level) / 2 * n))]
    return lo, hi


def median_ci(xs: list[float], goal: float | None = None, direction: str = ">=") -> dict:
    """A paired figure's summary: `stats` plus the bootstrap 90% interval of the median (`ci90`), the
    load average when it was summarised (`load_avg`: 1, 5, 15 min; its 1-minute value covers the last
    minute of measuring) and the machine's `cores`; with a `goal`, the verdict on it (`goal_verdict`)."""
    s = stats(xs)
    s["ci90"] = list(bootstrap_median(xs))
    s["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    s["cores"] = os.cpu_count() or 1
    if goal is not None:
        s["goal"] = {"value": goal, "direction": direction, "verdict": goal_verdict(s["ci90"], goal, direction)}
    return s


def goal_verdict(ci, goal: float, direction: str = ">=") -> str:
    """Whether a figure's 90% interval clears its goal (`direction` ">=": the figure should be at least the
    goal; "<=": at most). An interval that spans the goal establishes neither: the text says so."""
    if direction not in (">=", "<="):
        raise ValueError(f"goal direction must be '>=' or '<=', not {direction!r}")
    lo, hi = ci
    sign = "≥" if direction == ">=" else "≤"
    if any(x is None or x != x for x in (lo, hi)):
        return f"no interval: the goal {sign} {goal:g} is not judged"
    good, bad = (lo >= goal, hi < goal) if direction == ">=" else (hi <= goal, lo > goal)
    if good:
        return f"meets the goal {sign} {goal:g} (the whole 90% interval {lo:.3g}–{hi:.3g})"
    if bad:
        return f"misses the goal {sign} {goal:g} (the whole 90% interval {lo:.3g}–{hi:.3g})"
    return f"not established: the 90% interval {lo:.3g}–{hi:.3g} spans the goal {sign} {goal:g}"


def fmt_ci(s: dict, scale: float = 1.0, digits: int = 3) -> str:
    """'median [90% CI lo–hi] (load L on C cores)' for a `median_ci` summary."""
    if s.get("median") is None:
        return "-"
    f = f"{{:.{digits}f}}"
    lo, hi = s["ci90"]
    load = f", load {s['load_avg'][0]:.1f} on {s['cores']} cores" if "load_avg" in s else ""
    return f"{f.format(s['median'] * scale)} [90% CI {f.format(lo * scale)}–{f.format(hi * scale)}{load}]"


def ratio_stats(xs: list[float]) -> dict:
    """A paired ratio's summary: `median_ci` without a goal (the checkpoint and TP suites' name for it)."""
    return median_ci(xs)


def paired_ratios(a: list[float], b: list[float]) -> dict:
    """Ratio b_i / a_i of each A/B pair (run back to back), summarised with its interval (`median_ci`)."""
    return median_ci([y / x for x, y in zip(a, b) if x])


def fmt_stats(s: dict, scale: float = 1.0, digits: int = 2) -> str:
    """'median (min–max)'; a `median_ci` summary also shows its interval: 'median [90% CI lo–hi] (min–max)'."""
    if s["median"] is None:
        return "-"
    f = f"{{:.{digits}f}}"
    ci = f" [90% CI {f.format(s['ci90'][0] * scale)}–{f.format(s['ci90'][1] * scale)}]" if "ci90" in s else ""
    return f"{f.format(s['median'] * scale)}{ci} ({f.format(s['min'] * scale)}–{f.format(s['max'] * scale)})"


# --- output ----------------------------------------------------------------------------------------

def write_results(out: Path, suite: str, figures: dict, rows: list[dict]) -> dict:
    doc = {"suite": suite, "figures": figures, "rows": rows}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return doc


def md_table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def load_note(load: float, cores: int) -> str:
    """What the 1-minute load average says about the measurements (it includes the suite's own ranks)."""
    if load > cores:
        return (f"load average {load:.1f} on {cores} cores when the report was written: more runnable processes "
                "than cores, so other work competed for the CPUs; widen your error bars")
    return f"load average {load:.1f} on {cores} cores when the report was written: the CPUs were not oversubscribed"


def machine_line() -> str:
    import torch
    return (f"Machine: {os.cpu_count()} CPU cores, torch {torch.__version__}, gloo over loopback, one thread per rank; "
            f"run {time.strftime('%Y-%m-%d %H:%M')}; {load_note(os.getloadavg()[0], os.cpu_count() or 1)}. "
            "Paired figures: median [bootstrap 90% interval of the median] (min–max); results.json keeps each "
            "one's interval (`ci90`) and the load average it was measured under (`load_avg`).")


def write_report(out: Path, title: str, sections: list[str]) -> Path:
    path = out / "REPORT.md"
    path.write_text(f"# {title}\n\n{machine_line()}\n\n" + "\n\n".join(sections) + "\n")
    return path


def pyplot():
    """matplotlib with the file-only backend (no display on a server)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def consistent(runs: list[dict]) -> bool:
    """True when every multi-rank run reported identical replicas (null = not applicable, e.g. world 1)."""
    return all(r["summary"].get("ranks_consistent") is not False for r in runs)


def run_on_ranks(fn, *args, world: int = 2, timeout: float = 1800):
    """`fn(*args)` on a fresh pool of `world` gloo ranks with the allocator settings that make frees visible
    in RSS (inherited by the spawned ranks, restored afterwards); rank 0's result."""
    from shardlab.observe.memory import ALLOCATOR_ENV
    from shardlab.launch.workers import WorkerPool

    saved = {k: os.environ.get(k) for k in ALLOCATOR_ENV}
    os.environ.update(ALLOCATOR_ENV)
    try:
        with WorkerPool(world, timeout=timeout) as pool:
            return pool.run(fn, *args)[0]
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
