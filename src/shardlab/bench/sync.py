"""Synchronous SGD vs local SGD vs DiLoCo on the same tokens (`shardlab bench sync`): what synchronising
every H steps saves on the wire and costs in loss, per token and per second.

At world 2 and 4 (own ddp as the replica layer, the same global batch of 16 x 128 tokens, model, seed, data
order, number of steps and 10-step lr warm-up, so the same tokens): `parallel.sync=every_step`, and
`local_sgd` and `diloco` (AdamW inside, Nesterov SGD outside at the defaults 0.7 / 0.9) at H = 8 and 32. The
step count is a multiple of every H, so every run ends synchronised and its final validation loss is the one
model's. Bytes per token are the mean over every step of the all-reduce bytes one rank sends (summary
`comm.bytes_per_step_mean`) ÷ tokens per step. Wall time is the sum of the measured step times (evaluation excluded).

Closing DiLoCo's loss gap (world 2, H = 8), each a separate, labelled run on the same tokens:
- **sync warm-up**: the first quarter of the steps every-step synchronous (the sync run's own checkpoint at
  that step), then DiLoCo from there: the paper starts DiLoCo from a pretrained model. Its bytes per token
  count the warm-up's gradient all-reduces too.
- **outer momentum 0.5**: with only a few outer steps Nesterov 0.9 overshoots (its first step moves 1.9 x
  lr times the averaged pseudo-gradient); a smaller momentum, with and without the warm-up.

Figures: `diloco_comm_reduction` (sync bytes per token ÷ DiLoCo's, H = 32, world 2), `diloco_loss_gap`
(final val loss DiLoCo ÷ sync − 1, H = 8, world 2, the paper's outer settings, no warm-up: the plain
algorithm), `diloco_loss_gap_best` (the smallest gap among the labelled variants, named in
`diloco_loss_gap_best_setting`; chosen on the same validation set it is measured on, so optimistic), the same
per world in the rows. `--quick`: world 2, H = 8, the small custom model, 32 steps, no variants.

The asynchronous parameter server (`async_row`, below) runs on world 2's tokens in its own launch: a server
and two workers (as many gradient-computing ranks as sync's world 2), τ = 2; figures `async_staleness_mean`,
`async_bytes_ratio` (the server's bytes per token ÷ sync's per rank), `async_loss_gap`; its loss vs wall time
is the server's clock.
"""
from __future__ import annotations

from pathlib import Path

from shardlab.bench import common

GLOBAL_BATCH = 16  # sequences per step at every world size: equal tokens per step
# The suites' common 2-step warm-up reaches lr 3e-3 at step 2 on 2,048-token batches: every layout then spikes
# (to 4.7-5.7 nats) at a step set by rounding alone, and the final losses of layouts that differ only in
# rounding spread over 0.5%, as much as most gaps measured here. Warmed up over 10 steps no layout spikes and
# they spread over 0.23% (docs/sync.md, "Early loss spikes").
WARMUP_STEPS = 10


def _modes(hs: tuple[int, ...]) -> dict[str, list[str]]:
    modes = {"sync": ["parallel.sync=every_step"]}
    for m in ("local_sgd", "diloco"):
        for h in hs:
            modes[f"{m} H={h}"] = [f"parallel.sync={m}", f"parallel.sync_every={h}"]
    return modes


def _variants(steps: int) -> tuple[int, dict[str, list[str]]]:
    """World 2's attempts at DiLoCo's gap (H = 8): name -> overrides; runs named `warm` resume from the sync
    run's checkpoint at `warm` steps."""
    dil = ["parallel.sync=diloco", "parallel.sync_every=8"]
    return steps // 4, {"diloco H=8 warm-up": dil, "diloco H=8 m=0.5": dil + ["parallel.outer_momentum=0.5"],
                        "diloco H=8 warm-up m=0.5": dil + ["parallel.outer_momentum=0.5"]}


def _bytes_per_token(run: dict) -> float:
    s = run["summary"]
    return sum(s["comm"]["bytes_per_step_mean"].values()) / s["tokens_per_step"]


def _base(world: int, steps: int, quick: bool) -> list[str]:
    return common.BASE + common.model_overrides(quick) + [
        f"train.warmup_steps={WARMUP_STEPS}", f"train.steps={steps}", f"train.micro_batch={GLOBAL_BATCH // world}",
        f"train.global_batch={GLOBAL_BATCH}",
        "parallel.strategy=ddp", f"train.eval_every={steps}", "train.eval_seqs=64"]


def _world_runs(out: Path, world: int, steps: int, hs: tuple[int, ...], quick: bool, variants: bool) -> dict:
    """Every mode (and at world 2 the gap variants) on `world` ranks, in one launch; name -> run."""
    base = _base(world, steps, quick)
    runs_dir = out / "runs" / f"world{world}"
    warm, extra = _variants(steps) if variants else (0, {})
    jobs = []
    for name, ov in _modes(hs).items():
        # the warm-up's hand-over point, kept (keep_every) past the newer saves
        save = [f"ckpt.every={warm}", f"ckpt.keep_every={warm}"] if name == "sync" and warm else []
        jobs.append({"name": name, "out": runs_dir / _slug(name), "overrides": base + ov + save})
    for name, ov in extra.items():
        resume = [f"ckpt.resume={runs_dir / 'sync' / 'checkpoints' / f'step_{warm:06d}'}"] if "warm-up" in name else []
        jobs.append({"name": name, "out": runs_dir / _slug(name), "overrides": base + ov + resume})
    runs = {r["name"]: r for r in common.run_jobs(jobs, world, runs_dir, timeout=5400)}
    for name, r in runs.items():
        r["warm"] = warm if "warm-up" in name else 0
    return runs


def _slug(name: str) -> str:
    return name.replace(" ", "_").replace("=", "").replace(".", "")


def _curve(run: dict, sync: dict) -> tuple[list, list, list]:
    """(tokens, seconds, loss) per logged step; a warm-up run starts with the sync run's first steps."""
    tps = run["summary"]["tokens_per_step"]
    rows = [x for x in sync["metrics"] if "loss" in x and x["step"] <= run["warm"]] if run["warm"] else []
    rows += [x for x in run["metrics"] if "loss" in x and x["step"] > run["warm"]]
    if rows and "wall_s" in rows[-1]:  # async: the server's clock
        secs = [x["wall_s"] for x in rows]
    else:  # the sum of the step times so far
        t, secs = 0.0, []
        for x in rows:
            t += x.get("step_time_s") or 0.0
            secs.append(t)
    return [x["step"] * tps for x in rows], secs, [x["loss"] for x in rows]


def _row(world: int, name: str, run: dict, sync: dict) -> dict:
    s = run["summary"]
    bpt = _bytes_per_token(run)
    if run["warm"]:  # the warm-up's steps were the sync run's: count their bytes too (steps counts them)
        bpt = (run["warm"] * _bytes_per_token(sync) + (s["steps"] - run["warm"]) * bpt) / s["steps"]
    _, secs, _ = _curve(run, sync)
    return {"world": world, "sync": name, "H": int(name.split("H=")[1].split()[0]) if "H=" in name else 1,
            "warmup_steps": run["warm"], "tokens": s["steps"] * s["tokens_per_step"],
            "bytes_per_token": bpt, "wall_s": secs[-1] if secs else None,
            "final_train_loss": s["final_train_loss"], "final_val_loss": s["final_val_loss"],
            "loss_gap": s["final_val_loss"] / sync["summary"]["final_val_loss"] - 1,
            "ranks_consistent": s["ranks_consistent"]}


def run(out: Path, quick: bool) -> dict:
    steps, worlds, hs = (32, (2,), (8,)) if quick else (64, (2, 4), (8, 32))
    by_world, rows = {}, []
    for world in worlds:
        runs = by_world[world] = _world_runs(out, world, steps, hs, quick, variants=not quick and world == 2)
        rows += [_row(world, name, r, runs["sync"]) for name, r in runs.items()]
    figures = _figures(rows, hs)
    arow, arun = async_row(out, _base(2, steps, quick), by_world[2]["sync"])
    arun["warm"] = 0
    arow.update(world=2, wall_s=_curve(arun, by_world[2]["sync"])[1][-1], warmup_steps=0,
                loss_gap=arow["final_val_loss"] / by_world[2]["sync"]["summary"]["final_val_loss"] - 1)
    rows.append(arow)
    figures.update(async_figures({"async": arow, "sync": _row(2, "sync", by_world[2]["sync"], by_world[2]["sync"])}))
    by_world[2]["async τ=2"] = arun
    figures["ranks_consistent"] = common.consistent(
        [r for runs in by_world.values() for name, r in runs.items() if not name.startswith("async")])
    doc = common.write_results(out, "sync", figures, rows)
    _plot(out, by_world)
    _report(out, steps, hs, quick, rows, figures)
    return doc


def _figures(rows: list[dict], hs: tuple[int, ...]) -> dict:
    at = {(r["world"], r["sync"]): r for r in rows}
    h_comm = max(hs)
    figures = {"diloco_comm_reduction": at[2, "sync"]["bytes_per_token"] / at[2, f"diloco H={h_comm}"]["bytes_per_token"],
               "local_sgd_comm_reduction": at[2, "sync"]["bytes_per_token"] / at[2, f"local_sgd H={h_comm}"]["bytes_per_token"],
               "diloco_loss_gap": at[2, "diloco H=8"]["loss_gap"],
               "local_sgd_loss_gap": at[2, "local_sgd H=8"]["loss_gap"]}
    tried = [r for r in rows if r["world"] == 2 and r["sync"].startswith("diloco H=8")]
    best = min(tried, key=lambda r: r["loss_gap"])
    figures["diloco_loss_gap_best"], figures["diloco_loss_gap_best_setting"] = best["loss_gap"], best["sync"]
    return figures


def _report(out: Path, steps: int, hs, quick: bool, rows: list[dict], figures: dict) -> None:
    table = common.md_table(
        ["world", "sync", "H", "tokens", "bytes per token (per rank)", "wall s", "final train loss",
         "final val loss", "gap to sync"],
        [[r["world"], r["sync"], r["H"], f"{r['tokens']:,}", f"{r['bytes_per_token']:,.1f}",
          f"{r['wall_s']:.0f}" if r["wall_s"] else "-", f"{r['final_train_loss']:.4f}",
          f"{r['final_val_loss']:.4f}", f"{r['loss_gap']:+.3f}"] for r in rows])
    common.write_report(out, "Synchronous SGD vs local SGD vs DiLoCo", [
        f"Own ddp as the replica layer, global batch {GLOBAL_BATCH} x 128 tokens at every world size, {steps} steps "
        f"each (equal tokens, lr warm-up {WARMUP_STEPS} steps), H in {list(hs)}{' (--quick)' if quick else ''}. "
        "DiLoCo: AdamW inside, Nesterov SGD "
        "outside (lr 0.7, momentum 0.9 unless named). 'warm-up': the sync run's first quarter of the steps, then "
        "DiLoCo from its checkpoint (bytes per token include the warm-up's). One run per row: the loss is a "
        "function of the tokens, equal by construction; wall time is the sum of step times on a shared machine.",
        table, "![loss vs tokens](sync.png)", "![loss vs wall time](sync_wall.png)",
        "Figures: " + ", ".join(f"{k} = {v if isinstance(v, str) else common.fmt_figure(v)}"
                                for k, v in figures.items()) + ".",
    ])


def _plot(out: Path, by_world: dict) -> None:
    plt = common.pyplot()
    for x_axis, fname in (("tokens", "sync.png"), ("wall time (s)", "sync_wall.png")):
        fig, axes = plt.subplots(1, len(by_world), figsize=(6 * len(by_world), 4), squeeze=False)
        for ax, (world, runs) in zip(axes[0], by_world.items()):
            for name, r in runs.items():
                tokens, secs, loss = _curve(r, runs["sync"])
                ax.plot(tokens if x_axis == "tokens" else secs, loss, label=name, lw=1)
            ax.set(xlabel=x_axis, ylabel="train loss", title=f"world {world}: loss vs {x_axis.split()[0]}")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / fname, dpi=110)
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
