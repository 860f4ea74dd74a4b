"""The supervisor of a fault-tolerant replica run alone (`shardlab train --nproc 1 --max-restarts K` with
parallel.fault_tolerant=true): it restarts the replica's process when it dies; the new process rejoins the
job (parallel/ft/periodic.py holds the replicas' side, docs/sync.md the design)."""
from __future__ import annotations

import os
import sys

from shardlab.parallel.ft.periodic import log_replica as _log


def supervise(cfg, run_dir, max_restarts: int, main) -> int:
    """`shardlab train --nproc 1 --max-restarts K` of a fault-tolerant replica: run the replica in a child process
    and start a new one each time it dies, at most K times. (torchrun restarts a whole process group; a replica
    here is alone, so restarting it is all there is to do.) The new process finds the job under way and joins.
    `main(cfg, run_dir)`: what the replica's process runs (the trainer's entry point, given by the CLI)."""
    import multiprocessing as mp
    import signal

    rid = cfg.parallel.replica_id
    ctx = mp.get_context("fork")  # the launcher has imported shardlab and run no training: a quick, clean start
    for attempt in range(max_restarts + 1):
        os.environ["SHARDLAB_FT_RESTARTS"] = str(attempt)  # the child's summary.json says `restarts`
        proc = ctx.Process(target=main, args=(cfg, run_dir))
        proc.start()
        proc.join()
        code = proc.exitcode
        if code == 0:
            return 0
        why = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        if attempt == max_restarts or code == 2:  # out of restarts, or bad input a restart would repeat
            print(f"shardlab: error: replica {rid}'s process ended ({why}) after {attempt} restart(s) of "
                  f"--max-restarts {max_restarts}", file=sys.stderr, flush=True)
            return 1 if code < 0 else code
        _log(rid, f"its process ended ({why}); restarting it ({attempt + 1} of {max_restarts})")
    return 1
