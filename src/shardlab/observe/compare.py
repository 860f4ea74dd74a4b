"""Several runs side by side (`shardlab compare`, docs/training.md): what each run directory recorded —
metrics.jsonl, summary.json, config.toml — read as files, so a run of another checkout compares too.

Runs compare only when they learn the same thing: the same tokens per step (the global batch), the same
data and the same seeds. Otherwise a loss curve difference says nothing about the layout, and `problems`
says why, key by key. `config_diff` lists every resolved key whose value differs.

Loss "at equal tokens": at the most tokens every run reached (the shortest run's end), each run's last
logged loss at or before that count; validation loss at the most tokens (up to that count) at which every run
evaluated, or, when they share no such point, each run's last with the tokens it was taken at. Wall time of a record: the sum of the logged
step times up to it (each record's `step_time_s` x the steps since the one before), evaluation excluded.
"""
from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

# What must agree for the runs' losses to be comparable (config keys; the run's tokens per step comes
# from its summary.json, or train.global_batch x train.seq_len)
SAME_DATA = ("data.source", "data.tokenizer", "data.val_fraction", "data.doc_mask")
SAME_SEEDS = ("train.seed",)


class NotARun(ValueError):
    """A path that is not a run directory with metrics: the one line the CLI prints."""


@dataclass
class Run:
    path: Path
    rows: list[dict]
    summary: dict
    config: dict  # dotted key -> value (config.toml flattened)
    name: str = ""
    tokens_per_step: int = 0
    curves: dict = field(default_factory=dict)  # loss, val_loss: [(tokens, wall_s, value)]; tokens_per_s: [...]


def load(path: Path) -> Run:
    path = Path(path)
    if not path.is_dir():
        raise NotARun(f"{path}: no such run directory")
    metrics = path / "metrics.jsonl"
    if not metrics.is_file() or not metrics.stat().st_size:
        raise NotARun(f"{path}: no metrics.jsonl (not a shardlab run directory, or a run that logged nothing yet)")
    rows = []
    for n, line in enumerate(metrics.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError:
                raise NotARun(f"{metrics}:{n}: not a JSON line") from None
    summary = json.loads((path / "summary.json").read_text()) if (path / "summary.json").is_file() else {}
    config = {}
    if (path / "config.toml").is_file():
        with open(path / "config.toml", "rb") as f:
            config = flatten(tomllib.load(f))
    tps = summary.get("tokens_per_step") or (config.get("train.global_batch", 0) * config.get("train.seq_len", 0))
    run = Run(path, rows, summary, config, name=path.name, tokens_per_step=int(tps or 0))
    run.curves = _curves(run)
    return run


def flatten(d: dict, prefix: str = "") -> dict:
    """A nested dict as one level of dotted keys ({"train": {"seq_len": 8}} -> {"train.seq_len": 8}):
    configs to diff, a checkpoint's state dict to compare."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _curves(run: Run) -> dict:
    """(tokens, wall seconds, value) per logged record, for the losses and the throughput."""
    out: dict[str, list] = {"loss": [], "val_loss": [], "tokens_per_s": []}
    wall, last = 0.0, 0
    for r in sorted((r for r in run.rows if "step" in r), key=lambda r: r["step"]):
        step = r["step"]
        if r.get("step_time_s") is not None and step > last:  # a training record: the window since the last
            wall, last = wall + r["step_time_s"] * (step - last), step
        tokens = step * run.tokens_per_step
        for key in out:
            if r.get(key) is not None:
                out[key].append((tokens, wall, r[key]))
    return out


def problems(runs: list[Run]) -> list[str]:
    """Why these runs' losses are not comparable (empty: they are)."""
    out = []
    tps = {r.name: r.tokens_per_step for r in runs}
    if len(set(tps.values())) > 1:
        out.append("global batch differs (tokens per step: " + ", ".join(f"{n} {v:,}" for n, v in tps.items()) + ")")
    for what, keys in (("data source", SAME_DATA), ("seeds", SAME_SEEDS)):
        for key in keys:
            vals = {r.name: r.config.get(key) for r in runs}
            if len({json.dumps(v) for v in vals.values()}) > 1:
                out.append(f"{what} differ ({key}: " + ", ".join(f"{n} {v!r}" for n, v in vals.items()) + ")")
    return out


def config_diff(runs: list[Run]) -> list[tuple[str, list]]:
    """[(dotted key, [value of each run])] for every key whose resolved value differs between the runs."""
    keys = sorted(set().union(*(r.config for r in runs)))
    return [(k, [r.config.get(k) for r in runs]) for k in keys
            if len({json.dumps(r.config.get(k)) for r in runs}) > 1]


def _at(curve: list, tokens: int):
    before = [v for t, _, v in curve if t <= tokens]
    return before[-1] if before else None


def val_point(runs: list[Run], tokens: int) -> int | None:
    """The most tokens, at or before `tokens`, at which every run has a validation loss (None: no such point,
    e.g. runs that evaluate every 10 and every 20 steps with no step in common yet)."""
    points = [{t for t, _, _ in r.curves["val_loss"] if t <= tokens} for r in runs]
    shared = set.intersection(*points) if points else set()
    return max(shared) if shared else None


def _val_at(curve: list, tokens: int) -> tuple:
    """(value, its tokens): the last validation loss at or before `tokens`."""
    before = [(v, t) for t, _, v in curve if t <= tokens]
    return before[-1] if before else (None, None)


def table(runs: list[Run]) -> list[dict]:
    """One row per run: loss and validation loss at equal tokens, throughput, MFU, memory, communication.
    Validation compares like with like: at the last point every run evaluated at (`val_tokens`, the same in
    every row); where there is none, each run's last value with its own `val_tokens`, for the table to mark."""
    common = min((r.curves["loss"][-1][0] if r.curves["loss"] else 0) for r in runs)
    shared = val_point(runs, common)
    rows = []
    for r in runs:
        s = r.summary
        comm = (s.get("comm") or {}).get("bytes_per_step") or {}
        lay = s.get("layout")
        rows.append({
            "run": r.name, "layout": lay if lay else s.get("strategy"), "world": s.get("world_size"),
            "tokens": common, "loss": _at(r.curves["loss"], common),
            **dict(zip(("val_loss", "val_tokens"), _val_at(r.curves["val_loss"], common if shared is None else shared))),
            "val_shared": shared is not None,
            "tokens_per_s": s.get("tokens_per_s"), "mfu": s.get("mfu"),
            "peak_mem_bytes_per_rank": s.get("peak_mem_bytes_per_rank") or (
                [s["peak_mem_bytes"]] if s.get("peak_mem_bytes") is not None else None),
            "comm_bytes_per_step": sum(comm.values()) if comm else (0 if s else None),
            "exposed_comm_s": s.get("exposed_comm_s")})
    return rows


def plot(runs: list[Run], out: Path) -> list[Path]:
    """loss_vs_tokens.png, loss_vs_time.png, throughput.png, memory.png in `out`; [] without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written = []

    def save(fig, ax, name, xlabel, ylabel):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        written.append(out / name)

    for name, x, xlabel in (("loss_vs_tokens.png", 0, "tokens"), ("loss_vs_time.png", 1, "wall time (s, training steps)")):
        fig, ax = plt.subplots(figsize=(7, 4))
        for r in runs:
            c = r.curves["loss"]
            line, = ax.plot([p[x] for p in c], [p[2] for p in c], label=f"{r.name} train")
            v = r.curves["val_loss"]
            if v:
                ax.plot([p[x] for p in v], [p[2] for p in v], "o--", color=line.get_color(), label=f"{r.name} val")
        save(fig, ax, name, xlabel, "loss")
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        c = r.curves["tokens_per_s"]
        ax.plot([p[0] for p in c], [p[2] for p in c], label=r.name)
    save(fig, ax, "throughput.png", "tokens", "tokens/s")
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(1, len(runs))
    for i, r in enumerate(runs):
        mem = r.summary.get("peak_mem_bytes_per_rank") or []
        ax.bar([k + i * width for k in range(len(mem))], [m / 2**20 for m in mem], width, label=r.name)
    save(fig, ax, "memory.png", "rank", "peak memory (MiB)")
    return written
