"""Synchronous SGD vs local SGD vs DiLoCo on the same tokens (`shardlab bench sync`): what synchronising
every H steps saves on the wire and costs in loss.

World 2, own ddp as the replica layer, the same model, seed, data order and number of steps (so the same
tokens) for the three: `parallel.sync=every_step`, `local_sgd` and `diloco` (AdamW inside, Nesterov SGD
outside at the defaults 0.7 / 0.9) at H = 8; the step count is a multiple of H, so every run ends
synchronised and its final validation loss is the one model's. Bytes per token are the mean over every
step of the all-reduce bytes one rank sends (summary `comm.bytes_per_step_mean`) ÷ tokens per step.
Figures: `diloco_comm_reduction` (sync bytes per token ÷ DiLoCo's), `diloco_loss_gap` (final val loss
DiLoCo ÷ sync − 1), the same two for local SGD. Step times are not compared here (one run each, a loaded
machine); the loss is a function of the tokens, which are equal by construction.

The asynchronous parameter server (`async_row`, below) runs on the same tokens in its own launch: a server
and two workers; figures `async_staleness_mean`, `async_bytes_ratio`, `async_loss_gap`; loss vs wall time
for every mode in sync_wall.png.
"""
from __future__ import annotations

from pathlib import Path

from shardlab.bench import common

H = 8
MODES = {"sync": ["parallel.sync=every_step"],
         "local_sgd": ["parallel.sync=local_sgd", f"parallel.sync_every={H}"],
         "diloco": ["parallel.sync=diloco", f"parallel.sync_every={H}"]}


def _bytes_per_token(run: dict) -> float:
    s = run["summary"]
    return sum(s["comm"]["bytes_per_step_mean"].values()) / s["tokens_per_step"]


def run(out: Path, quick: bool) -> dict:
    steps = 4 * H if quick else 8 * H
    base = common.BASE + common.model_overrides(quick) + [
        f"train.steps={steps}", "train.micro_batch=8", "parallel.strategy=ddp", f"train.eval_every={steps}",
        "train.eval_seqs=64"]
    jobs = [{"name": m, "out": out / "runs" / m, "overrides": base + extra} for m, extra in MODES.items()]
    runs = {r["name"]: r for r in common.run_jobs(jobs, 2, out / "runs")}
    rows = []
    for m in MODES:
        s = runs[m]["summary"]
        rows.append({"sync": m, "H": 1 if m == "sync" else H, "steps": s["steps"],
                     "tokens": s["steps"] * s["tokens_per_step"], "bytes_per_token": _bytes_per_token(runs[m]),
                     "final_train_loss": s["final_train_loss"], "final_val_loss": s["final_val_loss"],
                     "ranks_consistent": s["ranks_consistent"]})
    by = {r["sync"]: r for r in rows}
    figures = {}
    for m in ("diloco", "local_sgd"):
        figures[f"{m}_comm_reduction"] = by["sync"]["bytes_per_token"] / by[m]["bytes_per_token"]
        figures[f"{m}_loss_gap"] = by[m]["final_val_loss"] / by["sync"]["final_val_loss"] - 1
    by["async"], runs["async"] = async_row(out, base, runs["sync"])
    rows.append(by["async"])
    figures.update(async_figures(by))
    figures["ranks_consistent"] = common.consistent(list(runs.values()))
    doc = common.write_results(out, "sync", figures, rows)
    _plot(out, runs)
    table = common.md_table(
        ["sync", "H", "tokens", "bytes per token (per rank)", "final train loss", "final val loss"],
        [[r["sync"], r["H"], f"{r['tokens']:,}", f"{r['bytes_per_token']:,.1f}", f"{r['final_train_loss']:.4f}",
          f"{r['final_val_loss']:.4f}"] for r in rows])
    common.write_report(out, "Synchronous SGD vs local SGD vs DiLoCo", [
        f"World 2, own ddp as the replica layer, microbatch 8, seq 128, {steps} steps each (equal tokens), "
        f"H = {H}{' (--quick)' if quick else ''}. DiLoCo: AdamW inside, Nesterov SGD outside (lr 0.7, momentum "
        "0.9). One run per mode: the loss is a function of the tokens, equal by construction.",
        table, "![loss vs tokens](sync.png)",
        f"diloco_comm_reduction = {common.fmt_figure(figures['diloco_comm_reduction'])}, diloco_loss_gap = "
        f"{common.fmt_figure(figures['diloco_loss_gap'])}; local_sgd_comm_reduction = "
        f"{common.fmt_figure(figures['local_sgd_comm_reduction'])}, local_sgd_loss_gap = "
        f"{common.fmt_figure(figures['local_sgd_loss_gap'])}.",
        f"Replicas identical at the end (`ranks_consistent`): {figures['ranks_consistent']}.",
        *async_report(by["async"], figures, runs),
    ])
    _plot_wall(out, runs)
    return doc


def _plot(out: Path, runs: dict) -> None:
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for m, r in runs.items():
        tps = r["summary"]["tokens_per_step"]
        ms = [x for x in r["metrics"] if "loss" in x]
        ax.plot([x["step"] * tps for x in ms], [x["loss"] for x in ms],
                label=m if m in ("sync", "async") else f"{m} H={H}")
    ax.set(xlabel="tokens", ylabel="train loss", title="loss vs tokens")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "sync.png", dpi=110)
    plt.close(fig)


# --- the asynchronous parameter server ---------------------------------------------------------------------
ASYNC_WORKERS, ASYNC_TAU = 2, 2


def async_row(out: Path, base: list[str], sync_run: dict) -> tuple[dict, dict]:
    """`parallel.sync=async` on sync's tokens: rank 0 serves, ASYNC_WORKERS workers compute (as many
    gradient-computing ranks as sync's world 2), τ = ASYNC_TAU. A step is one applied gradient of a whole
    global batch (sync's), so the same steps are the same tokens. Bytes per token: the server's traffic
    (gradients in, parameters out), which is every byte the scheme moves."""
    seq_len = next(int(o.split("=", 1)[1]) for o in base if o.startswith("train.seq_len="))
    global_batch = sync_run["summary"]["tokens_per_step"] // seq_len
    job = {"name": "async", "out": out / "runs" / "async",
           "overrides": base + ["parallel.sync=async", f"parallel.max_staleness={ASYNC_TAU}",
                                f"train.global_batch={global_batch}"]}
    run = common.run_jobs([job], ASYNC_WORKERS + 1, out / "runs")[0]
    s = run["summary"]
    row = {"sync": "async", "H": 1, "steps": s["steps"], "tokens": s["steps"] * s["tokens_per_step"],
           "bytes_per_token": _bytes_per_token(run), "final_train_loss": s["final_train_loss"],
           "final_val_loss": s["final_val_loss"], "ranks_consistent": None, "workers": ASYNC_WORKERS,
           "max_staleness": ASYNC_TAU, "staleness_mean": s["async"]["staleness_mean"],
           "staleness_max": s["async"]["staleness_max"], "gradients_by_worker": s["async"]["gradients_by_worker"]}
    return row, run


def async_figures(by: dict) -> dict:
    return {"async_staleness_mean": by["async"]["staleness_mean"],
            "async_bytes_ratio": by["async"]["bytes_per_token"] / by["sync"]["bytes_per_token"],
            "async_loss_gap": by["async"]["final_val_loss"] / by["sync"]["final_val_loss"] - 1}


def async_report(row: dict, figures: dict, runs: dict) -> list[str]:
    walls = ", ".join(f"{m} {_wall(r)[0][-1]:.1f} s" for m, r in runs.items())
    return [f"Async parameter server: {row['workers']} workers + a server (world {row['workers'] + 1}), "
            f"max_staleness {row['max_staleness']}; gradients per worker {row['gradients_by_worker']}; "
            f"async_staleness_mean = {common.fmt_figure(figures['async_staleness_mean'])} (max "
            f"{row['staleness_max']}), async_bytes_ratio = {common.fmt_figure(figures['async_bytes_ratio'])} (the "
            f"server's bytes per token ÷ sync's per rank), async_loss_gap = "
            f"{common.fmt_figure(figures['async_loss_gap'])}.",
            f"Wall time of the training steps (one run each, see the load above): {walls}.",
            "![loss vs wall time](sync_wall.png)"]


def _wall(run: dict) -> tuple[list[float], list[float]]:
    """(seconds, loss) per step: async's server clock, else the sum of the step times so far."""
    ms = [x for x in run["metrics"] if "loss" in x]
    if ms and "wall_s" in ms[0]:
        return [x["wall_s"] for x in ms], [x["loss"] for x in ms]
    t, out = 0.0, []
    for x in ms:
        t += x["step_time_s"]
        out.append(t)
    return out, [x["loss"] for x in ms]


def _plot_wall(out: Path, runs: dict) -> None:
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for m, r in runs.items():
        ax.plot(*_wall(r), label=m if m in ("sync", "async") else f"{m} H={H}")
    ax.set(xlabel="wall time (s, training steps only)", ylabel="train loss", title="loss vs wall time")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "sync_wall.png", dpi=110)
    plt.close(fig)
