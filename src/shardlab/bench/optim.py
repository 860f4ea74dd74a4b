"""The `optim` suite: AdamW vs Muon (fp32 and bf16 states) on the small model at equal tokens (docs/optim.md).

    loss vs tokens        one rank, the same data, lr and schedule for every run; the curve is each step's
                          training loss, smoothed over a trailing window (one batch a step is noisy)
    token efficiency      tokens AdamW needs to reach Muon's final smoothed loss / Muon's tokens (linear
                          interpolation on AdamW's smoothed curve; a lower bound where AdamW never gets there),
                          and from the other side, which a short run can always measure: AdamW's tokens / the
                          tokens Muon needs to reach AdamW's final smoothed loss
    optimizer step time   in one process, on the same gradients: AdamW's and Muon's step timed alternately
                          (A B A B ...), the paired ratios' median and interval
    bytes per step        Muon's gather / scatter bytes comm records on rank 0 of a 2-rank zero1 and zero3
                          step against optim/muon/cost.py's formula (exact, or the report says not)
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from shardlab import config
from shardlab.bench import common

RUNS = [("adamw", "adamw", "fp32"), ("muon", "muon", "fp32"), ("adamw-bf16", "adamw", "bf16"),
        ("muon-bf16", "muon", "bf16")]
WINDOW = 10  # steps of the trailing mean


def _overrides(preset: str, steps: int) -> list[str]:
    return [f"model.preset={preset}", "parallel.strategy=single", f"train.steps={steps}", "train.log_every=1",
            "train.eval_every=0", "ckpt.final=false", "train.seq_len=128", "train.micro_batch=8",
            "train.warmup_steps=10", "train.lr=3e-3"]


def one(out: Path, name: str, opt: str, dtype: str, preset: str, steps: int) -> dict:
    from shardlab.train.trainer import Trainer

    over = _overrides(preset, steps) + [f"train.optimizer={opt}", f"train.optim_dtype={dtype}"]
    summary = Trainer(config.validate(config.load(None, over), 1), out / name).run()
    rows = [json.loads(x) for x in (out / name / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    smooth = [sum(losses[max(0, i - WINDOW + 1): i + 1]) / len(losses[max(0, i - WINDOW + 1): i + 1])
              for i in range(len(losses))]
    tokens = [(i + 1) * summary["tokens_per_step"] for i in range(len(losses))]
    return {"run": name, "optimizer": opt, "optim_dtype": dtype, "tokens": tokens, "loss": losses,
            "smoothed": smooth, "final_smoothed": smooth[-1], "step_time_s": summary["step_time_s"],
            "optimizer_state_bytes": summary["state_bytes"].get("optimizer"), "load_avg": os.getloadavg()[0]}


def tokens_to_reach(run: dict, target: float) -> float | None:
    """The first token count at which `run`'s smoothed loss reaches `target` (linear between steps)."""
    xs, ys = run["tokens"], run["smoothed"]
    for i, y in enumerate(ys):
        if y <= target:
            if i == 0:
                return xs[0]
            x0, y0 = xs[i - 1], ys[i - 1]
            return x0 + (xs[i] - x0) * (y0 - target) / (y0 - y)
    return None


def efficiency(adamw: dict, muon: dict) -> tuple[float, bool]:
    """(tokens AdamW needs for Muon's final loss / Muon's tokens, exact): a lower bound when AdamW never
    reaches it (exact False)."""
    need = tokens_to_reach(adamw, muon["final_smoothed"])
    return (adamw["tokens"][-1] if need is None else need) / muon["tokens"][-1], need is not None


def converse_efficiency(adamw: dict, muon: dict) -> float | None:
    """AdamW's tokens / the tokens Muon needs to reach AdamW's final smoothed loss (None: it never does)."""
    need = tokens_to_reach(muon, adamw["final_smoothed"])
    return None if need is None else adamw["tokens"][-1] / need


def step_times(preset: str, pairs: int) -> dict:
    """Paired optimizer step times (s): AdamW and Muon (fp32), each on its own copy of the model with the
    same gradients, stepped alternately so the machine's load falls on both alike."""
    import torch

    from shardlab.model import build_model
    from shardlab.model.configs import resolve_model_config
    from shardlab.optim import factory_for, no_decay_names, router_names

    cfg = config.validate(config.load(None, _overrides(preset, 10)), 1)
    torch.set_num_threads(1)
    steppers = {}
    for name in ("adamw", "muon"):
        model = build_model(resolve_model_config(cfg.model, cfg.train.seq_len), 0)
        for p in model.parameters():
            p.grad = torch.randn_like(p) * 1e-3
        cfg.train.optimizer = name
        steppers[name] = factory_for(cfg, no_decay_names(model), router_names(model))(list(model.named_parameters()))
    times = {"adamw": [], "muon": []}
    for _ in range(pairs + 1):  # the first pair allocates the state: dropped
        for name, opt in steppers.items():
            t0 = time.perf_counter()
            opt.step()
            times[name].append(time.perf_counter() - t0)
    return {k: v[1:] for k, v in times.items()}


def ns_flops(preset: str) -> int:
    """Newton-Schulz FLOPs of one step on one rank holding every matrix (newton_schulz.flops)."""
    from shardlab.optim.muon import cost
    from shardlab.optim.muon.newton_schulz import flops
    from shardlab.plan.from_config import model_spec

    return sum(flops(s) for s, _ in cost.matrices_of(model_spec(config.validate(
        config.load(None, _overrides(preset, 10)), 1))))


def exchanged(out: Path) -> list[dict]:
    """Muon's bytes recorded on rank 0 of one 2-rank step under zero1 and zero3, and the formula's."""
    from shardlab.optim.muon import cost
    from shardlab.plan.from_config import model_spec

    over = ["model.preset=small", "train.steps=1", "train.log_every=1", "train.eval_every=0", "ckpt.final=false",
            "train.seq_len=64", "train.micro_batch=2", "train.optimizer=muon"]
    jobs = [{"name": z, "overrides": over + [f"parallel.strategy={z}"], "out": str(out / f"bytes-{z}")}
            for z in ("zero1", "zero3")]
    done = common.run_jobs(jobs, 2, out / "bytes-jobs")
    shapes = [s for s, _ in cost.matrices_of(model_spec(config.validate(config.load(None, over), 2)))]
    want = cost.exchange_bytes(shapes, 2, 0)
    rows = []
    for job, r in zip(jobs, done):
        got = {t: r["summary"]["comm"]["bytes_by_tag"].get(t, 0) for t in (cost.GATHER, cost.SCATTER)}
        rows.append({"layout": job["name"], **{f"measured {t}": got[t] for t in got},
                     **{f"formula {t}": want[t] for t in want}, "exact": got == want})
    return rows


def plot(out: Path, rows: list[dict]) -> None:
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        ax.plot(r["tokens"], r["smoothed"], label=r["run"])
    ax.set_xlabel("tokens")
    ax.set_ylabel(f"training loss (trailing mean of {WINDOW} steps)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "loss_vs_tokens.png", dpi=120)
    plt.close(fig)


def run(out: Path, quick: bool) -> dict:
    preset, steps, pairs = ("small", 60, 10) if quick else ("small", 200, 30)
    rows = []
    for name, opt, dtype in RUNS:
        common.progress(f"optim: {name} ({preset}, {steps} steps)")
        rows.append(one(out, name, opt, dtype, preset, steps))
    by = {r["run"]: r for r in rows}
    ratio, exact = efficiency(by["adamw"], by["muon"])
    converse = converse_efficiency(by["adamw"], by["muon"])
    common.progress("optim: paired optimizer step times")
    times = step_times(preset, pairs)
    overhead = common.paired_ratios(times["adamw"], times["muon"])
    ns = ns_flops(preset)
    extra = sorted(m - a for a, m in zip(times["adamw"], times["muon"]))[pairs // 2]
    common.progress("optim: Muon's bytes under zero1 and zero3")
    bytes_rows = exchanged(out)
    load = os.getloadavg()[0]
    figures = {"token_efficiency_ratio": ratio, "token_efficiency_exact": exact,
               "token_efficiency_ratio_at_adamw_final_loss": converse,
               "ns_flops_per_step": ns, "ns_flops_per_s_measured": ns / extra if extra > 0 else None,
               "optimizer_step_time_ratio_muon_over_adamw": overhead,
               "final_smoothed_loss": {r["run"]: r["final_smoothed"] for r in rows},
               "bf16_state_loss_gap": {o: by[f"{o}-bf16"]["final_smoothed"] - by[o]["final_smoothed"]
                                       for o in ("adamw", "muon")},
               "muon_bytes_exact": all(b["exact"] for b in bytes_rows), "load_avg": load}
    plot(out, rows)
    tok = rows[0]["tokens"][-1]
    sections = [
        f"{preset} model, one rank, {steps} steps of {tok // steps:,} tokens ({tok:,} tokens), train.lr 3e-3 for "
        f"both (Muon's update RMS-matched, Moonlight), cosine after 10 warm-up steps; loss smoothed over "
        f"{WINDOW} steps. Load average {load:.1f} on {os.cpu_count()} cores: step times are under load.",
        common.md_table(["run", "final loss (smoothed)", "step time s (whole step, under load)",
                         "optimizer state bytes"],
                        [[r["run"], f"{r['final_smoothed']:.4f}", f"{r['step_time_s']:.3f}",
                          f"{r['optimizer_state_bytes']:,}"] for r in rows]),
        f"Token-efficiency ratio (tokens AdamW needs to reach Muon's final loss / Muon's tokens): "
        f"{'' if exact else '>= '}{ratio:.2f}" + ("" if exact else " (AdamW never reached it: a lower bound)")
        + "; from the other side (AdamW's tokens / the tokens Muon needs to reach AdamW's final loss): "
        + ("Muon never reached it" if converse is None else f"{converse:.2f}"),
        f"Optimizer step time, Muon / AdamW (fp32, one thread, paired A B x {pairs}): "
        f"{common.fmt_stats(overhead)}; medians AdamW {sorted(times['adamw'])[pairs // 2] * 1e3:.1f} ms, "
        f"Muon {sorted(times['muon'])[pairs // 2] * 1e3:.1f} ms; Newton-Schulz {ns / 1e9:.2f} GFLOP a step "
        f"(the formula), so the paired extra time runs it at "
        f"{(ns / extra / 1e9) if extra > 0 else float('nan'):.1f} GFLOP/s on one thread",
        "bf16 states' effect on the final smoothed loss (bf16 - fp32): "
        + ", ".join(f"{k} {v:+.4f}" for k, v in figures["bf16_state_loss_gap"].items()),
        "Muon's bytes per step on rank 0 of 2 (small model, fp32 U), measured by comm against the formula:",
        common.md_table(list(bytes_rows[0]), [list(b.values()) for b in bytes_rows]),
        "![loss vs tokens](loss_vs_tokens.png)"]
    common.write_report(out, "Optimizers: AdamW vs Muon, fp32 and bf16 states", sections)
    for r in rows:  # results.json: the curves' end points are enough next to the PNG
        r["tokens"], r["loss"], r["smoothed"] = r["tokens"][::5], r["loss"][::5], r["smoothed"][::5]
    return common.write_results(out, "optim", figures, rows)
