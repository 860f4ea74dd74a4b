"""The `fp8` suite: loss vs tokens of bf16 and of every float8 recipe (own; torchao where installed;
MXFP8 emulated) on one rank for a short run, the final-loss gap to bf16, the step-time ratio (on CPU an
emulation cost, labelled so) and the weights' all-gather bytes of float8 against bf16: by fp8/cost.py's
formula, and measured (comm's bytes by tag) in two one-step own zero3 runs on 2 ranks, tensorwise (float8
all-gather) against bf16 (own zero3 gathers the fp32 master under autocast: bf16's bytes are half of them)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from shardlab import config
from shardlab.bench import common

RUNS = [("bf16", "none", "own"), ("tensorwise", "tensorwise", "own"), ("rowwise", "rowwise", "own"),
        ("tensorwise-torchao", "tensorwise", "torchao"), ("rowwise-torchao", "rowwise", "torchao"),
        ("mxfp8-emulated", "mxfp8", "own")]


def one(out: Path, name: str, fp8: str, impl: str, preset: str, steps: int) -> dict:
    from shardlab.train.trainer import Trainer

    over = [f"model.preset={preset}", "parallel.strategy=single", "train.dtype=bf16", f"train.fp8={fp8}",
            f"train.fp8_impl={impl}", f"train.steps={steps}", "train.log_every=5", "train.eval_every=0",
            "ckpt.final=false", "train.seq_len=64", "train.micro_batch=8", "train.warmup_steps=5"]
    cfg = config.validate(config.load(None, over), 1)
    summary = Trainer(cfg, out / name).run()
    rows = [json.loads(x) for x in (out / name / "metrics.jsonl").read_text().splitlines()]
    curve = [(r["step"] * summary["tokens_per_step"], r["loss"]) for r in rows if "loss" in r]
    return {"run": name, "final_loss": curve[-1][1], "step_time_s": summary["step_time_s"], "curve": curve}


def gathered_bytes(out: Path, preset: str) -> dict:
    """Measured all-gather bytes a step of the block units (tags ag:blocks.*: the float8 gathers and their
    amax agreement, or the fp32 gathers), own zero3 on 2 ranks, bf16 and tensorwise."""
    over = [f"model.preset={preset}", "parallel.strategy=zero3", "train.dtype=bf16", "train.steps=2",
            "train.log_every=1", "train.eval_every=0", "ckpt.final=false", "train.seq_len=64", "train.micro_batch=4"]
    jobs = [{"name": n, "overrides": over + [f"train.fp8={f}"], "out": str(out / f"zero3-{n}")}
            for n, f in (("bf16", "none"), ("tensorwise", "tensorwise"))]
    done = common.run_jobs(jobs, 2, out / "zero3-jobs")
    return {j["name"]: sum(v for k, v in r["summary"]["comm"]["bytes_by_tag"].items() if k.startswith("ag:blocks"))
            for j, r in zip(jobs, done)}


def run(out: Path, quick: bool) -> dict:
    from shardlab.fp8.cost import all_gather_bytes

    preset, steps = ("tiny", 40) if quick else ("small", 60)
    have_torchao = importlib.util.find_spec("torchao") is not None
    rows = []
    for name, fp8, impl in RUNS:
        if impl == "torchao" and not have_torchao:
            continue
        common.progress(f"fp8: {name} ({preset}, {steps} steps)")
        rows.append(one(out, name, fp8, impl, preset, steps))
    base = rows[0]
    for r in rows:
        r["loss_gap"] = (r["final_loss"] - base["final_loss"]) / base["final_loss"]
        r["step_time_ratio_emulated_on_cpu"] = r["step_time_s"] / base["step_time_s"]
    from shardlab.model.configs import resolve_model_config
    m = resolve_model_config(config.load(None, [f"model.preset={preset}"]).model, 64)
    h = m.d_model
    shapes = [(h, h)] * 4 + [(4 * h, h), (h, 4 * h)]
    f8, hp = all_gather_bytes(shapes * m.n_layer, "tensorwise", 2)
    figures = {"fp8_loss_gap": {r["run"]: r["loss_gap"] for r in rows[1:]},
               "fp8_step_time_ratio_emulated_on_cpu": {r["run"]: r["step_time_ratio_emulated_on_cpu"] for r in rows[1:]},
               "fp8_all_gather_bytes_ratio_formula": f8 / hp}
    got = gathered_bytes(out, preset)
    measured = 2 * got["tensorwise"] / got["bf16"]  # against bf16's bytes: half the fp32 gather's
    figures["fp8_all_gather_bytes_ratio_measured"] = measured
    sections = [f"{preset} model, {steps} steps, one rank; on CPU every float8 GEMM is emulated, so the step "
                "time ratio is an emulation cost, not a speed-up.",
             common.md_table(["run", "final loss", "gap to bf16", "step time ratio (emulated on CPU)"],
                             [[r["run"], f"{r['final_loss']:.4f}", f"{r['loss_gap']:+.2%}",
                               f"{r['step_time_ratio_emulated_on_cpu']:.2f}"] for r in rows]),
             f"All-gather bytes of the block weights, float8 + scales vs bf16 (formula, fp8/cost.py): {f8 / hp:.3f}",
             f"Measured (own zero3, 2 ranks, one step's block-unit gathers: weights in float8 plus their amax "
             f"agreement, norms and biases as they are; against the fp32 gather halved): {measured:.3f} "
             f"({got['tensorwise']:,} B against {got['bf16']:,} B fp32)"]
    common.write_report(out, "FP8 training: bf16 vs float8 recipes", sections)
    return common.write_results(out, "fp8", figures, rows)
