"""Run the shardlab CLI in a subprocess, with a hard timeout (for tests)."""
from __future__ import annotations

import os
import subprocess
import sys


def run_cli(args: list[str], timeout: float = 180, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    """Run `python -m shardlab ARGS` in a subprocess with a hard timeout (kills the process group)."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    proc = subprocess.Popen([sys.executable, "-m", "shardlab", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=full_env, cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        raise TimeoutError(f"shardlab {' '.join(args)} timed out after {timeout}s\n{out[-2000:]}\n{err[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
