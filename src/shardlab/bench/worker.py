"""Run several training jobs in one launch: `python -m shardlab.bench.worker JOBS.json`.

Process start-up (importing torch, joining the process group) costs seconds on a small machine, so a
suite starts its ranks once and runs its jobs back to back in them, in the order given (which is
how suites alternate A B A B). Each job is `{"overrides": [key=value, ...], "out": RUN_DIR}` and
writes an ordinary run directory. Under torchrun every rank runs every job.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

from shardlab import comm, config as config_mod
from shardlab.launch import launcher as launch


def run_job(job: dict) -> None:
    from shardlab.train import make_trainer

    world = int(os.environ.get("WORLD_SIZE", 1))
    cfg = config_mod.load(None, job["overrides"])
    cfg = config_mod.validate(cfg, world)
    run_dir = Path(job["out"])
    if int(os.environ.get("RANK", 0)) == 0:
        launch.write_config(run_dir, cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / f"log.rank{comm.rank()}.txt", "w") as log, contextlib.redirect_stdout(log):
        make_trainer(cfg, run_dir).run()


def main(argv: list[str]) -> int:
    jobs = json.loads(Path(argv[0]).read_text())
    clean = False
    try:
        for job in jobs:
            run_job(job)
        clean = True
    finally:
        comm.shutdown(clean)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
