"""summary.json: the run's figures under the keys DESIGN.md promises (null where not measured)."""
from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import torch

from shardlab import comm


def _peak_mem_bytes(device: torch.device) -> tuple[int, str]:
    """CUDA: max allocated. CPU: the process's peak resident set (ru_maxrss), labelled as such."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "cuda_max_allocated"
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "cpu_peak_rss"


def replicas_consistent(strategy) -> bool:
    """Do all ranks hold the same full parameters? One checksum per parameter, compared across ranks."""
    sums = [float(p.double().sum()) + float(p.double().abs().sum()) for p in strategy.full_parameters().values()]
    return all(s == sums for s in comm.all_gather_object(sums))


def build(trainer, step_times: list[float], train_loss, val_loss) -> dict:
    st, cfg = trainer.state, trainer.cfg
    peak, peak_kind = _peak_mem_bytes(trainer.device)
    state_bytes = trainer.strategy.state_bytes(st.optimizer)
    per_rank = comm.all_gather_object({"peak": peak, "state_bytes": state_bytes})
    step_time = statistics.median(step_times) if step_times else None
    stats = getattr(trainer, "comm_stats", None) or {}
    doctor = getattr(trainer, "doctor_result", None)  # the doctor's bitwise checksum of replicated params
    consistent = doctor["ranks_consistent"] if doctor else replicas_consistent(trainer.strategy)
    return {
        "strategy": cfg.parallel.strategy,
        "world_size": trainer.world,
        "params": trainer.n_params,
        "steps": st.step,
        "tokens_per_step": trainer.tokens_per_step,
        "tokens_per_s": trainer.tokens_per_step / step_time if step_time else None,
        "step_time_s": step_time,
        "final_train_loss": train_loss,
        "final_val_loss": val_loss,
        "peak_mem_bytes": max(r["peak"] for r in per_rank),
        "peak_mem_kind": peak_kind,
        "state_bytes": state_bytes,
        "state_bytes_by_rank": [r["state_bytes"] for r in per_rank],
        "comm": {"bytes_per_step": stats.get("bytes", {}), "calls_per_step": stats.get("calls", {}),
                 "wire_bytes_per_step": stats.get("wire_bytes", {}), "bytes_by_tag": stats.get("bytes_by_tag", {})},
        "overlap_pct": None,
        "exposed_comm_s": None,
        "ranks_consistent": consistent,
        "anomalies": doctor["anomalies"] if doctor else 0,
        "skipped_steps": st.scaler.skipped if st.scaler is not None else 0,
        "dtype": cfg.train.dtype,
    }


def write(run_dir: Path, summary: dict) -> None:
    tmp = run_dir / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    os.replace(tmp, run_dir / "summary.json")
