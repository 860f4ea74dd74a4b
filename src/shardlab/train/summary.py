"""summary.json: the run's figures under the keys docs/training.md lists (null where not measured)."""
from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

from shardlab import comm


def build(trainer, step_times: list[float], train_loss, val_loss) -> dict:
    st, cfg = trainer.state, trainer.cfg
    trainer.peak_mem.__exit__(None, None, None)  # CUDA max-allocated, or CPU peak RSS above the start
    peak, peak_kind = trainer.peak_mem.bytes, trainer.peak_mem.kind
    state_bytes = trainer.strategy.state_bytes(st.optimizer)
    per_rank = comm.all_gather_object({"peak": peak, "state_bytes": state_bytes,
                                       "params": trainer.strategy.params_held(),
                                       "core_share": trainer.core_share.value})
    step_time = statistics.median(step_times) if step_times else None
    stats = getattr(trainer, "comm_stats", None) or {}
    doctor = trainer.doctor_result  # the doctor's final bitwise checksum of replicated parameters
    return {
        # the data-parallel layer the step runs: `single` where tp/pp/cp take every rank (parallel/dp/apply.py),
        # whatever parallel.strategy says (its default, ddp, would name a layer that is not there)
        "strategy": trainer.strategy.name,
        "world_size": trainer.world,
        "layout": layout(trainer),
        "params": trainer.par.params_total,  # the whole model (counted as built, before any layer splits it)
        "params_rank0": per_rank[0]["params"],  # what rank 0 holds at rest (its stage, its shards)
        "params_total": trainer.par.params_total,
        "params_per_rank": [r["params"] for r in per_rank],
        "steps": st.step,
        "tokens_per_step": trainer.tokens_per_step,
        "tokens_per_s": trainer.tokens_per_step / step_time if step_time else None,
        "step_time_s": step_time,
        "final_train_loss": train_loss,
        "final_val_loss": val_loss,
        **mfu(trainer, step_time),
        "peak_mem_bytes": max(r["peak"] for r in per_rank),
        "peak_mem_bytes_per_rank": [r["peak"] for r in per_rank],
        "peak_mem_kind": peak_kind,
        "state_bytes": state_bytes,
        "state_bytes_by_rank": [r["state_bytes"] for r in per_rank],
        "comm": {"bytes_per_step": stats.get("bytes", {}), "calls_per_step": stats.get("calls", {}),
                 "wire_bytes_per_step": stats.get("wire_bytes", {}), "bytes_by_tag": stats.get("bytes_by_tag", {}),
                 # the mean over every step of this run (local SGD / DiLoCo send on 1 step in H: the last
                 # step alone says nothing of the rate)
                 "bytes_per_step_mean": {op: b / max(1, trainer.comm_steps)
                                         for op, b in getattr(trainer, "comm_total", {}).items()}},
        "overlap_pct": None,
        "exposed_comm_s": None,
        # Replicas were compared only with more than one rank: at world 1 nothing was, so null.
        "ranks_consistent": doctor["ranks_consistent"] if trainer.world > 1 else None,
        "ckpt_failed_saves": list(trainer.ckpt.failed),  # non-empty: the run exits non-zero
        "anomalies": doctor["anomalies"],
        # counted from metrics.jsonl (rank 0) so that they match its event records
        "skipped_steps": 0, "events": {}, **trainer.metrics.counts(),
        "dtype": cfg.train.dtype,
        # the share of a core each rank had while runnable in the timed steps (observe/core_share.py;
        # null without Linux's schedstat): explain's prediction turns CPU time into wall time with it
        "core_share": _mean([r["core_share"] for r in per_rank]),
        "core_share_by_rank": [r["core_share"] for r in per_rank],
    }


def _mean(values):
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def layout(trainer) -> dict:
    """What runs where: the step's layout (the dp layer, every degree), how the pipeline is scheduled and
    how replicas synchronise."""
    p = trainer.cfg.parallel
    out = trainer.par.layout()
    return {**out, "pp_schedule": p.pp_schedule if out["pp"] > 1 else None, "sync": p.sync}


def mfu(trainer, step_time: float | None) -> dict:
    """Model FLOPs utilisation (PaLM's: forward + backward FLOPs of the model, no recomputation, per
    second ÷ the ranks' peak), with the peak per rank and where it came from (plan/peak.py)."""
    from shardlab.plan.from_config import model_spec
    from shardlab.plan.peak import cpu_peak, gpu_peak

    import torch

    cfg = trainer.cfg
    if trainer.rank != 0:  # rank 0 writes the summary; a first measurement on every rank at once would
        return {}  # share the cores and find a lower peak
    if trainer.device.type == "cuda":
        peak, source = gpu_peak(torch.cuda.get_device_name(trainer.device), cfg.train.dtype)
    else:
        peak, source = cpu_peak(torch.get_num_threads())
    flops = model_spec(cfg).model_flops(trainer.tokens_per_step, cfg.train.seq_len)
    value = flops / step_time / (trainer.world * peak) if step_time and peak else None
    out = {"mfu": value, "model_flops_per_step": flops, "peak_flops_per_rank": peak, "peak_flops_from": source}
    if cfg.train.fp8 != "none":  # mfu stays over the bf16 dense peak (as torchtitan reports); the FP8 one beside
        from shardlab.plan.peak import fp8_peak

        p8, out["peak_flops_fp8_from"] = fp8_peak(torch.cuda.get_device_name(trainer.device)
                                                  if trainer.device.type == "cuda" else None)
        out["peak_flops_fp8_per_rank"] = p8
        out["mfu_fp8_peak"] = flops / step_time / (trainer.world * p8) if step_time and p8 else None
    return out


def write(run_dir: Path, summary: dict) -> None:
    tmp = run_dir / "summary.json.tmp"
    from shardlab.train.metrics import strict_json
    tmp.write_text(json.dumps(strict_json(summary), indent=2, allow_nan=False) + "\n")  # strict JSON: null for NaN
    os.replace(tmp, run_dir / "summary.json")
