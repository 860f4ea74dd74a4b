"""`shardlab train ARGS` for the tests that compare runs through their run directories (metrics.jsonl,
summary.json, checkpoints): several ranks as a real `python -m shardlab train --nproc N` (torchrun's agent and
rank processes), a one-process single-device run through the same CLI entry in the test's own process.

There the launcher runs the rank in its own process either way (launch/launcher.py, _in_process), so a
subprocess adds only a fresh interpreter and torch's import: seconds on 2 cores, for the same run directory."""
from __future__ import annotations

from shardlab.testing import run_cli


def train(args: list[str], timeout: float = 400) -> None:
    """Run `shardlab train ARGS` to the end (exit code 0 asserted)."""
    nproc = int(args[args.index("--nproc") + 1]) if "--nproc" in args else 1
    # only single-device runs in this process: a one-rank data-parallel run sets the process group's variables
    # (MASTER_ADDR, RANK, ...) in the environment of the process it runs in
    if nproc == 1 and "parallel.strategy=single" in args:
        from shardlab.cli import cmd_train

        code = cmd_train(args)
        assert code == 0, f"shardlab train {' '.join(args)}: exit code {code} (its output is above)"
        return
    proc = run_cli(["train", *args], timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
