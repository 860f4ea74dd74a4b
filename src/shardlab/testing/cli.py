"""Run the shardlab CLI in a subprocess, with a hard timeout (for tests)."""
from __future__ import annotations

import os
import subprocess
import sys


def run_shardlab(args: list[str], env: dict, timeout: float, cwd=None) -> tuple[int | None, str, str]:
    """`python -m shardlab ARGS` in its own session: (exit code, stdout, stderr); exit code None when it ran past
    `timeout` (its whole process group is killed, and what it printed until then is returned)."""
    proc = subprocess.Popen([sys.executable, "-m", "shardlab", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        return None, out, err
    return proc.returncode, out, err


def run_cli(args: list[str], timeout: float = 180, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    """Run `python -m shardlab ARGS` in a subprocess with a hard timeout (kills the process group)."""
    rc, out, err = run_shardlab(args, dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})), timeout, cwd)
    if rc is None:
        raise TimeoutError(f"shardlab {' '.join(args)} timed out after {timeout}s\n{out[-2000:]}\n{err[-2000:]}")
    return subprocess.CompletedProcess([sys.executable, "-m", "shardlab", *args], rc, out, err)
