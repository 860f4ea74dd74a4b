"""What the trainer costs: shardlab's `single` strategy vs a plain PyTorch loop (figure `overhead_ratio`).

Both train the same model (same preset, seed, init), on the same data, with the same AdamW
hyper-parameters and gradient clipping, one thread, in this one process, alternating
A (shardlab) B (plain) A B ... Throughput is measured the same way on both sides: wall-clock
tokens/s over windows of `log_every` steps (the trainer's own `tokens_per_s` metric, which includes
its bookkeeping and logging), the first window (warm-up) excluded, median over windows.
overhead_ratio = median over pairs of tokens/s(shardlab) / tokens/s(plain); 1.0 = no overhead.
"""
from __future__ import annotations

import contextlib
import io
import shutil
import statistics
import time
from pathlib import Path

import torch

from shardlab import config as config_mod
from shardlab.bench import common


def plain_loop(cfg, steps: int, window: int) -> list[float]:
    """The ~40-line loop a user would write. Returns tokens/s per window of `window` steps."""
    from shardlab.data import load_tokens, split_train_val
    from shardlab.model.gpt import build_model, resolve_model_config

    torch.set_num_threads(cfg.train.threads)
    t = cfg.train
    model = build_model(resolve_model_config(cfg.model, t.seq_len), t.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": t.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=t.lr, betas=(t.beta1, t.beta2))
    train, _ = split_train_val(load_tokens(cfg.data.source), cfg.data.val_fraction)
    data = torch.from_numpy(train.astype("int64"))
    gen = torch.Generator().manual_seed(t.seed)
    b, s = t.micro_batch, t.seq_len
    rates, t0 = [], time.perf_counter()
    for step in range(1, steps + 1):
        starts = torch.randint(0, len(data) - s - 1, (b,), generator=gen)
        x = torch.stack([data[i:i + s] for i in starts.tolist()])
        y = torch.stack([data[i + 1:i + 1 + s] for i in starts.tolist()])
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % window == 0:
            loss.item()
            now = time.perf_counter()
            rates.append(window * b * s / (now - t0))
            t0 = now
    return rates


def shardlab_run(cfg, run_dir: Path) -> list[float]:
    from shardlab.train.trainer import Trainer

    shutil.rmtree(run_dir, ignore_errors=True)  # the trainer appends to metrics.jsonl
    run_dir.mkdir(parents=True)
    with contextlib.redirect_stdout(io.StringIO()):
        Trainer(cfg, run_dir).run()
    run = common.load_run(run_dir)
    return [m["tokens_per_s"] for m in run["metrics"] if "tokens_per_s" in m]


def run(out: Path, quick: bool) -> dict:
    steps, window, rounds = (15, 5, 4) if quick else (60, 10, 6)
    overrides = [o for o in common.BASE if not o.startswith("train.log_every")] + [
        "model.preset=small", "train.micro_batch=8", f"train.steps={steps}", f"train.log_every={window}",
        "parallel.strategy=single"]
    cfg = config_mod.load(None, overrides)
    config_mod.validate(cfg, 1)
    rows = []
    for r in range(rounds):
        a = shardlab_run(cfg, out / "runs" / f"shardlab-r{r}")[1:]  # first window = warm-up
        b = plain_loop(cfg, steps, window)[1:]
        rows.append({"round": r, "shardlab_tokens_per_s": statistics.median(a),
                     "plain_tokens_per_s": statistics.median(b)})
        rows[-1]["ratio"] = rows[-1]["shardlab_tokens_per_s"] / rows[-1]["plain_tokens_per_s"]
    ratio = common.stats([x["ratio"] for x in rows])
    figures = {"overhead_ratio": ratio["median"], "overhead_ratio_min": ratio["min"],
               "overhead_ratio_max": ratio["max"]}
    doc = common.write_results(out, "overhead", figures, rows)
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([x["round"] for x in rows], [x["shardlab_tokens_per_s"] for x in rows], "o-", label="shardlab single")
    ax.plot([x["round"] for x in rows], [x["plain_tokens_per_s"] for x in rows], "s--", label="plain loop")
    ax.set(xlabel="pair", ylabel="tokens/s (median over windows)", title=f"overhead ratio {ratio['median']:.3f}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "overhead.png", dpi=110)
    plt.close(fig)
    params = common.load_run(out / "runs" / "shardlab-r0")["summary"]["params"]
    common.write_report(out, "Trainer overhead: `single` vs a plain PyTorch loop", [
        f"Model `small` ({params:,} parameters), microbatch 8, seq 128, fp32, AdamW + clipping, one thread; "
        f"{steps} steps per run, tokens/s over windows of {window} steps (first window excluded), {rounds} pairs "
        f"run A B A B in one process{' (--quick)' if quick else ''}.",
        common.md_table(["pair", "shardlab tokens/s", "plain tokens/s", "ratio"],
                        [[x["round"], f"{x['shardlab_tokens_per_s']:,.0f}", f"{x['plain_tokens_per_s']:,.0f}",
                          f"{x['ratio']:.3f}"] for x in rows]),
        f"**overhead_ratio = {common.fmt_stats(ratio, 1, 3)}** (median (min–max) over pairs; target ≥ 0.97).",
        "![overhead](overhead.png)",
        "The shardlab side includes everything the trainer does per step: the global sampler, the strategy "
        "interface calls, the LR schedule, comm accounting, metrics logging.",
    ])
    return doc
