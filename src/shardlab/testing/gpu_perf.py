"""The GPU check's performance runs of record (bf16, one rank, compiled and eager): tokens/s and MFU as
summary.json reports them, peak memory, the planner's prediction of the run (`shardlab explain`) and the
profiler's top kernels."""
from __future__ import annotations

import json
import time
from pathlib import Path

from shardlab.testing.gpu_runs import Case, Result, _env, _gpu_name, _last_line, _run, _tail


# The performance runs of record (bf16, one rank): name -> (config keys, micro batch, sequence length). The
# Llama is Llama 3.2 1B's shape (d 2048, 16 layers, GQA 32/8, SwiGLU 8192, tied 128,256-token embedding,
# 1.24B parameters) at sequence 4096; gpt2 is the 124M preset at 1024, its 50,257-token vocabulary set
# explicitly (left at 0, the byte tokenizer's 256 would make it an 86M model). Each runs eager and compiled.
LLAMA_1B = ["model.preset=custom", "model.arch=llama", "model.n_layer=16", "model.d_model=2048", "model.n_head=32",
            "model.n_kv_heads=8", "model.vocab_size=128256", "model.intermediate_size=8192",
            "model.tie_embeddings=true", "model.rope_theta=500000"]
# gpt2-v50304 is nanoGPT's padding of that vocabulary to a multiple of 64: at 50,257 the head's GEMMs are not
# 16-byte aligned and cuBLAS falls back to pre-Hopper kernels (measured on the H200: docs/cuda.md).
PERF_MODELS = {"llama-1b": (LLAMA_1B, 4, 4096),
               "gpt2": (["model.preset=gpt2", "model.vocab_size=50257"], 32, 1024),
               "gpt2-v50304": (["model.preset=gpt2", "model.vocab_size=50304"], 32, 1024)}
PERF_STEPS = 20  # the first max(3, steps/10) are warm-up; the profiled ones (PROFILE) are not timed either
PROFILE = "17-18"


def perf_cases(names: list[str], micro: dict[str, int], seqs: dict[str, int] | None = None,
               modes: tuple[bool, ...] = (True, False)) -> list[Case]:
    """The performance runs in the order they run: compiled first (the goals are on them), then eager."""
    out = []
    for compiled in modes:
        for name in names:
            keys, mb, seq = PERF_MODELS[name]
            mb, seq = micro.get(name, mb), (seqs or {}).get(name, seq)
            out.append(Case(f"{name} bf16{' compile' if compiled else ''}", 1,
                            [*keys, "train.dtype=bf16", f"train.seq_len={seq}", f"train.micro_batch={mb}",
                             "parallel.strategy=single", f"train.compile={str(compiled).lower()}",
                             f"trace.profile={PROFILE}"], timeout=420, cmd="perf"))
    return out


def run_perf(case: Case, device: str, work: Path) -> Result:
    """One performance run: tokens/s and MFU as summary.json reports them, peak memory, the planner's
    prediction of the run (`shardlab explain --cluster <the GPU's preset>`), the profiler's top kernels
    (the result's `log`)."""
    from shardlab.plan.peak import gpu_preset

    t0 = time.perf_counter()
    run_dir = work / case.name.replace(" ", "_")
    args = ["train", "--nproc", "1", "--out", str(run_dir), f"train.steps={PERF_STEPS}", "train.log_every=5",
            "train.eval_every=0", "train.warmup_steps=2", "ckpt.final=false", *case.keys]
    rc, o, e = _run(args, _env(False, device), case.timeout, work)
    took = time.perf_counter() - t0
    if rc != 0:
        return Result(case, "FAIL", seconds=took, note=f"exit {rc}: {_last_line(e) or _last_line(o)}",
                      log=_tail(o, 20) + "\n--- stderr ---\n" + _tail(e))
    s = json.loads((run_dir / "summary.json").read_text())
    fig = {k: s.get(k) for k in ("tokens_per_s", "mfu", "step_time_s", "peak_mem_bytes", "peak_mem_kind",
                                 "params", "peak_flops_from", "final_train_loss")}
    top = run_dir / "profile" / "rank0_top.txt"
    profile = top.read_text() if top.exists() else ""
    gpu = _gpu_name(device)
    preset = gpu_preset(gpu) if device == "cuda" else None
    if preset:  # the planner's prediction of this run on the GPU's preset
        rc, eo, ee = _run(["explain", str(run_dir), "--cluster", preset, "--json"], _env(False, device), 120, work)
        if rc == 0:
            ex = json.loads(eo)
            pred, meas = ex["predicted"], ex["measured"]
            fig.update(predicted_step_s=pred["step_time_s"], step_time_error=ex.get("step_time_error"),
                       predicted_mem_bytes=pred["memory"]["total"], predicted_fits=pred.get("fits"),
                       predicted_memory=pred["memory"], measured_memory=meas["memory"])
            if fig["peak_mem_bytes"] and fig["predicted_mem_bytes"]:
                fig["mem_error"] = fig["predicted_mem_bytes"] / fig["peak_mem_bytes"] - 1
            fig["explain"] = {k: ex.get(k) for k in ("layout", "compute_from", "components", "off")}
        else:
            fig["explain_error"] = _last_line(ee) or _last_line(eo)
    mfu = fig.get("mfu")
    note = (f"MFU {mfu:.3f}" if mfu else "MFU -") + f", step {fig['step_time_s'] or 0:.3f}s"
    if fig.get("peak_mem_bytes"):
        note += f", peak {fig['peak_mem_bytes'] / 2**30:.1f} GiB"
    if "predicted_step_s" in fig:
        note += (f"; plan: step {fig['predicted_step_s']:.3f}s ({fig['step_time_error']:+.0%}), "
                 f"memory {fig['predicted_mem_bytes'] / 2**30:.1f} GiB ({fig.get('mem_error', 0):+.0%})")
    elif "explain_error" in fig:
        note += f"; explain failed: {fig['explain_error']}"
    return Result(case, "ok", fig["final_train_loss"], fig["tokens_per_s"], took, note, log=profile, extra=fig)
