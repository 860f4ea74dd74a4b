"""What the GPU check's runs share: a case, its result, and running `python -m shardlab` for it (the
environment a case runs in, the output's tail that a failed run reports)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from shardlab.testing.cli import run_shardlab

SRC = Path(__file__).resolve().parents[2]  # .../src
REPO = SRC.parent


@dataclass
class Case:
    name: str
    world: int
    keys: list[str] = field(default_factory=list)
    cmd: str = "train"  # or "generate" (from the run of the case named in `source`), or "ft" (two replicas)
    source: str = ""
    timeout: float = 240.0
    cuda_only: bool = False  # refused without an accelerator (skipped in the CPU rehearsal)

    @property
    def staged(self) -> bool:
        return self.world > 1


@dataclass
class Result:
    case: Case
    status: str  # ok | FAIL | skip
    loss: float | None = None
    tokens_per_s: float | None = None
    seconds: float = 0.0
    note: str = ""
    log: str = ""  # a failed run's output tail (written to OUT/fail-<case>.txt)
    extra: dict = field(default_factory=dict)  # a performance run's figures (OUT/perf.json)


def _env(case_staged: bool, device: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONUNBUFFERED="1")
    env["SHARDLAB_BACKEND"] = "gloo-staged" if case_staged else ("nccl" if device == "cuda" else "gloo")
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # a rehearsal: the same cases, nothing on a device
    return env


def _tail(text: str, lines: int = 80) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _launcher_log(run_dir: Path) -> str:
    """torchrun's own messages (RUN/launcher.log): why a multi-rank run stopped before its ranks said anything."""
    log = run_dir / "launcher.log"
    return f"\n--- {log} ---\n{_tail(log.read_text(errors='replace'), 30)}" if log.exists() else ""


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:160] if lines else ""


def _run(args: list[str], env: dict, timeout: float, cwd: Path) -> tuple[int, str, str]:
    rc, out, err = run_shardlab(args, env, timeout, cwd)
    if rc is None:  # timeout(1)'s exit code
        return 124, out, err + f"\ntimed out after {timeout:.0f}s"
    return rc, out, err


def _gpu_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(0) if device == "cuda" else "cpu (rehearsal)"
