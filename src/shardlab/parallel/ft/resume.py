"""Coordinated resume of a whole fault-tolerant job (`parallel.ft_job_dir`, docs/fault_tolerance.md).

The replicas keep their own run directories (and checkpoints); the job directory, which every replica
reaches, holds what a whole-job resume needs to decide where to start:

- `replicas/<i>.json`: replica i's run directory (written by its rank 0 when it starts);
- `epoch.json`: the job's epoch and the step it (re)started from. A whole-job resume (every replica started
  again while the lighthouse saw no quorum for 2 x parallel.ft_timeout) opens epoch e+1 at the newest step
  every replica committed a checkpoint of, and its quorums use keys of their own (`<job>/e<e+1>/...`), so
  nothing of the stopped epoch is mistaken for a live job;
- `quorums.jsonl`: the quorum log (manager.py).
"""
from __future__ import annotations

import json
import os
from pathlib import Path


def _write(path: Path, doc: dict) -> None:
    """Atomically: a replica reading it sees the old document or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)


def register(job_dir: Path, rid: int, run_dir: Path) -> None:
    _write(Path(job_dir) / "replicas" / f"{rid}.json", {"replica": rid, "run_dir": str(Path(run_dir).resolve())})


def read_epoch(job_dir: Path) -> dict | None:
    path = Path(job_dir) / "epoch.json"
    return json.loads(path.read_text()) if path.is_file() else None


def write_epoch(job_dir: Path, epoch: int, step: int, committed: dict) -> None:
    _write(Path(job_dir) / "epoch.json", {"epoch": epoch, "step": step, "committed": committed})


def common_step(job_dir: Path, n_replicas: int, committed_steps) -> tuple[int, dict]:
    """The newest step every replica committed (0: none), and each replica's committed steps.
    `committed_steps(run_dir) -> [step, ...]`: the trainer's (the checkpoint package sits above this one)."""
    by = {}
    for i in range(n_replicas):
        rec = Path(job_dir) / "replicas" / f"{i}.json"
        by[str(i)] = sorted(committed_steps(Path(json.loads(rec.read_text())["run_dir"]))) if rec.is_file() else []
    common = set.intersection(*(set(v) for v in by.values())) if by else set()
    return max(common, default=0), by
