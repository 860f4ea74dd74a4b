"""`shardlab train ARGS` for the tests that compare runs through their run directories (metrics.jsonl,
summary.json, checkpoints): a one-process single-device run through the CLI entry in the test's own process,
and a run of several ranks as what each of its ranks runs (the same CLI entry with torchrun's variables set) on
the session's pool of that many ranks (tests/drivers/cli_harness.py), or, without a pool, as a real
`python -m shardlab train --nproc N` (torchrun's agent and rank processes).

The launcher runs a one-rank single-device run in its own process either way (launch/launcher.py,
_in_process), and a rank of a pool runs the rank's own program, so a subprocess adds only fresh interpreters
and torch's import: seconds on 2 cores per process, for the same run directory. The launch itself is a real
process in tests/launch/test_launch.py, tests/checkpoint/test_resume.py and the drills."""
from __future__ import annotations

from shardlab.testing import run_cli


def train(args: list[str], timeout: float = 400, pool=None) -> None:
    """Run `shardlab train ARGS` to the end (exit code 0 asserted); `pool`, the session's pool of --nproc
    ranks, runs a multi-rank run's ranks."""
    nproc = int(args[args.index("--nproc") + 1]) if "--nproc" in args else 1
    # only single-device runs in this process: a one-rank data-parallel run sets the process group's variables
    # (MASTER_ADDR, RANK, ...) in the environment of the process it runs in
    if nproc == 1 and "parallel.strategy=single" in args:
        from shardlab.cli import cmd_train

        code = cmd_train(args)
        assert code == 0, f"shardlab train {' '.join(args)}: exit code {code} (its output is above)"
        return
    if pool is not None and nproc > 1:
        from cli_harness import as_rank

        assert pool.world_size == nproc, (pool.world_size, nproc)
        ranks = pool.run(as_rank, ["train", *args], timeout=timeout)
        codes = [code for code, _, _ in ranks]
        assert codes == [0] * nproc, f"shardlab train {' '.join(args)}: exit codes {codes}: {ranks[0][2][-2000:]}"
        return
    proc = run_cli(["train", *args], timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
