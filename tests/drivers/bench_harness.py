"""What `python -m shardlab.bench.worker JOBS.json` runs on each rank (bench/worker.py), for a rank of the
session's pools (tests/conftest.py, bench_on_session_pools): every job in order, the pool's process group kept."""
from __future__ import annotations


def run_jobs(jobs: list[dict]) -> None:
    from shardlab.bench.worker import run_job

    for job in jobs:
        run_job(job)
