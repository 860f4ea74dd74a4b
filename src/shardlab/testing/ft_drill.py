"""Helpers shared by the fault-tolerance tests and `shardlab bench faults`: a lighthouse and replicas as the
user starts them (`shardlab lighthouse`, `shardlab train --nproc N ... parallel.replica_id=i`), each in a
session of its own so a drill can signal one rank (SIGKILL, SIGSTOP) and kill everything at the end. Every
wait has a deadline."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[2]  # the directory holding this shardlab package: the replicas import it
ENV = dict(os.environ, PYTHONPATH=f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", OMP_NUM_THREADS="1",
           PYTHONUNBUFFERED="1")


class Deadline(AssertionError):
    pass


class Proc:
    """A command in a session of its own, its output in `log`."""

    def __init__(self, argv: list[str], log: Path, t_end: float, env: dict | None = None):
        self.log, self.t_end = log, t_end
        self._fh = open(log, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "shardlab", *argv], stdout=self._fh,
                                     stderr=subprocess.STDOUT, env={**ENV, **(env or {})}, start_new_session=True)

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def wait_for(self, pattern: str, count: int = 1) -> list[re.Match]:
        """The first `count` matches of `pattern` in the log, once there are that many."""
        while True:
            found = list(re.finditer(pattern, self.text()))
            if len(found) >= count:
                return found[:count]
            if self.proc.poll() is not None:
                found = list(re.finditer(pattern, self.text()))
                if len(found) >= count:
                    return found[:count]
                raise Deadline(f"{self.log.name} exited ({self.proc.returncode}) without {count} x {pattern!r}:\n"
                               f"{self.text()[-6000:]}")
            if time.monotonic() > self.t_end:
                raise Deadline(f"{self.log.name}: no {count} x {pattern!r} before the deadline:\n{self.text()[-6000:]}")
            time.sleep(0.05)

    def exitcode(self) -> int | None:
        try:
            return self.proc.wait(timeout=max(1.0, self.t_end - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise Deadline(f"{self.log.name} still running at the deadline:\n{self.text()[-6000:]}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGCONT)
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)
        self._fh.close()


def lighthouse(tmp: Path, port: int, t_end: float, name: str = "lighthouse") -> Proc:
    lh = Proc(["lighthouse", "--port", str(port), "--host", "127.0.0.1"], tmp / f"{name}.log", t_end)
    lh.wait_for(r"store at")
    return lh


def replica(tmp: Path, name: str, rid: int, nproc: int, overrides: list[str], t_end: float,
            max_restarts: int = 0, env: dict | None = None) -> Proc:
    argv = ["train", "--nproc", str(nproc), "--out", str(tmp / name), *overrides, f"parallel.replica_id={rid}"]
    if max_restarts:
        argv += ["--max-restarts", str(max_restarts)]
    return Proc(argv, tmp / f"{name}.log", t_end, env)


def rank_pids(p: Proc, rid: int, nproc: int) -> dict[int, int]:
    """{rank: pid} of the replica's ranks, from their founding lines."""
    found = p.wait_for(rf"replica {rid}: rank (\d+) founding member \(process (\d+)\)", nproc)
    return {int(m.group(1)): int(m.group(2)) for m in found}


def signal_ranks(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def losses(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r["loss"] for r in rows if r.get("loss") is not None}


def quorums(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "quorum.jsonl").read_text().splitlines() if line.strip()]


def absent_steps(run_dir: Path, rid: int) -> list[int]:
    """Steps whose last decision (the one the step completed with) has replica `rid` not among its
    participants (a joiner is healed at the start of the step it is admitted to, and contributes to it)."""
    last = {}
    for q in quorums(run_dir):
        last[q["step"]] = q
    return sorted(s for s, q in last.items() if rid not in q["participants"])


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())
