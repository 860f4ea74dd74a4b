"""What the trainer costs: shardlab's `single` strategy vs a plain PyTorch loop (figure `overhead_ratio`).

Both train the same model (same preset, seed, init), on the same data, with the same AdamW
hyper-parameters and gradient clipping, one thread, in this one process. They alternate step by
step — A B, then B A — because on a shared 2-core machine the load changes faster than a whole run
lasts; pairing single steps is what keeps the ratio meaningful. The shardlab step (bench/measure.py's
`shardlab_step`) is the trainer's own per-step path (`Trainer.train_step` plus what `Trainer.run` does around it every step:
LR schedule, comm accounting, step span, the doctor's after-step check (heartbeat, periodic replica
checksums), checkpoint check); the per-log work (every `log_every` steps: one `loss.item()` and one
JSON line) is outside both timings. tests/bench/test_bench_overhead.py checks that the two make the same
calls per step.
overhead_ratio = median over steps of t_plain / t_shardlab = tokens/s(shardlab) / tokens/s(plain).
The same run then measures compiled blocks and compute efficiency (`compile_speedup`, `cpu_mfu`):
bench/compile_speed.py.
"""
from __future__ import annotations

import contextlib
import io
import shutil
import time
from pathlib import Path

import torch

from shardlab import config as config_mod
from shardlab.bench import common, compile_speed
from shardlab.bench.measure import shardlab_step
from shardlab.model.loss import cross_entropy


class PlainLoop:
    """The ~40-line loop a user would write, one step at a time."""

    def __init__(self, cfg):
        from shardlab.data import load_tokens, split_train_val
        from shardlab.model.gpt import build_model, resolve_model_config

        t = self.t = cfg.train
        self.model = build_model(resolve_model_config(cfg.model, t.seq_len), t.seed)
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.model.parameters() if p.dim() < 2]
        # fused, as the trainer's (optim/adamw.py): the ratio measures the trainer, not a choice of kernel
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": t.weight_decay},
                                      {"params": no_decay, "weight_decay": 0.0}], lr=t.lr, betas=(t.beta1, t.beta2),
                                     fused=True)
        train, _ = split_train_val(load_tokens(cfg.data.source), cfg.data.val_fraction)
        self.data = torch.from_numpy(train.astype("int64"))
        self.gen = torch.Generator().manual_seed(t.seed)

    def step(self) -> None:
        b, s = self.t.micro_batch, self.t.seq_len
        starts = torch.randint(0, len(self.data) - s - 1, (b,), generator=self.gen).tolist()
        x = torch.stack([self.data[i:i + s] for i in starts])
        y = torch.stack([self.data[i + 1:i + 1 + s] for i in starts])
        loss = cross_entropy(self.model(x), y, reduction="mean")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.t.grad_clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def run(out: Path, quick: bool) -> dict:
    from shardlab.train.trainer import Trainer

    steps, warm = (40, 5) if quick else (150, 10)
    overrides = [o for o in common.BASE if not o.startswith("train.")] + [
        "train.seq_len=128", "train.seed=1337", "train.threads=1", "model.preset=small", "train.micro_batch=8",
        f"train.steps={steps}", "parallel.strategy=single"]
    cfg = config_mod.load(None, overrides)
    cfg = config_mod.validate(cfg, 1)
    run_dir = out / "runs" / "shardlab"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    with contextlib.redirect_stdout(io.StringIO()):
        tr = Trainer(cfg, run_dir)
    plain = PlainLoop(cfg)
    torch.set_num_threads(1)
    times = {"shardlab": [], "plain": []}
    sides = {"shardlab": lambda: shardlab_step(tr), "plain": plain.step}
    common.progress(f"{steps} paired steps: shardlab's `single` vs a plain loop")
    for i in range(steps):
        if i and i % 10 == 0:
            common.progress(f"  step {i}/{steps}")
        for name in (("shardlab", "plain") if i % 2 == 0 else ("plain", "shardlab")):
            t0 = time.perf_counter()
            sides[name]()
            times[name].append(time.perf_counter() - t0)
    tokens = cfg.train.micro_batch * cfg.train.seq_len
    rows = [{"step": i, "shardlab_s": a, "plain_s": b, "ratio": b / a}
            for i, (a, b) in enumerate(zip(times["shardlab"], times["plain"])) if i >= warm]
    ratio = common.median_ci([r["ratio"] for r in rows], 0.97, ">=")
    thr = {k: tokens / common.stats(v[warm:])["median"] for k, v in times.items()}
    figures = {"overhead_ratio": ratio["median"], "overhead_ratio_min": ratio["min"],
               "overhead_ratio_max": ratio["max"], "overhead_ratio_ci90": ratio["ci90"], "overhead_ratio_stats": ratio,
               "shardlab_tokens_per_s": thr["shardlab"],
               "plain_tokens_per_s": thr["plain"]}
    common.progress("compiled blocks: eager vs train.compile=true, tiny and small models")
    cfigs, crows, clines = compile_speed.run(out, quick)
    figures.update(cfigs)
    doc = common.write_results(out, "overhead", figures, rows + crows)
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["step"] for r in rows], [r["ratio"] for r in rows], "o-", ms=3)
    ax.axhline(0.97, color="red", ls="--", lw=0.8, label="0.97")
    ax.axhline(ratio["median"], color="grey", lw=0.8, label=f"median {ratio['median']:.3f}")
    ax.set(xlabel="step", ylabel="t(plain) / t(shardlab)", title="paired per-step throughput ratio")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "overhead.png", dpi=110)
    plt.close(fig)
    common.write_report(out, "Trainer overhead: `single` vs a plain PyTorch loop", [
        f"Model `small` ({tr.n_params:,} parameters), microbatch 8, seq 128, fp32, AdamW + clipping, one thread; "
        f"{steps} steps each, alternating step by step (A B, B A, ...), the first {warm} excluded"
        f"{' (--quick)' if quick else ''}.",
        f"**overhead_ratio = {common.fmt_ci(ratio)}** (median [bootstrap 90% interval] of per-step t_plain ÷ "
        f"t_shardlab, min–max {ratio['min']:.3f}–{ratio['max']:.3f}): {ratio['goal']['verdict']}. "
        f"Median tokens/s: shardlab {thr['shardlab']:,.0f}, plain {thr['plain']:,.0f}.",
        "![overhead](overhead.png)",
        "The shardlab side is the trainer's own step as `Trainer.run` drives it: global sampler, strategy "
        "interface, LR schedule, comm accounting, (disabled) timeline spans, the doctor's after-step check, "
        "checkpoint check. Both loops build the same model from the same seed.",
        *clines,
    ])
    return doc
