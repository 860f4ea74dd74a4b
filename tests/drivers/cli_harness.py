"""A `shardlab` command as one of its ranks runs it, on a rank of a pool (the session's, tests/conftest.py):
the same CLI entry point with torchrun's RANK/WORLD_SIZE set, i.e. the launcher's re-execution without the
launcher, the agent and a fresh interpreter per rank (seconds each on 2 cores). The re-execution itself is a
real process in tests/launch/test_launch.py, test_resume.py and test_generate.py."""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def as_rank(argv: list[str]) -> tuple[int, str, str]:
    """`shardlab ARGV` on this pool rank: (exit code, stdout, stderr). The checkout is the working directory
    (the configs' relative paths); the pool's process group outlives the run."""
    from shardlab import comm

    os.chdir(ROOT)
    leave = comm.shutdown
    comm.shutdown = lambda clean=True: None
    try:
        return in_process(argv)
    finally:
        comm.shutdown = leave


def in_process(argv: list[str]) -> tuple[int, str, str]:
    """`shardlab ARGV` through its main in this process: (exit code, stdout, stderr)."""
    from shardlab import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(argv)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def run_in_process(argv: list[str]) -> subprocess.CompletedProcess:
    """`shardlab ARGV` through its main in this process, answered as run_cli answers (returncode, stdout,
    stderr): for a command that reads or writes files only (trace, doctor, ckpt ...), where a subprocess adds
    nothing but a fresh interpreter and torch's import (seconds on 2 cores)."""
    code, out, err = in_process(argv)
    return subprocess.CompletedProcess(["shardlab", *argv], code, out, err)
