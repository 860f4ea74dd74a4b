"""One writer per run directory: RUN/.lock, held by the launcher for the life of the run.

    lock = runlock.acquire(run_dir, break_lock=False)   # RunLocked (bad input, exit 2) when it is taken
    ...
    lock.release()

The lock records who holds it: job id, host, pid and the pid's start time (field 22 of /proc/PID/stat,
clock ticks since boot), so a dead holder, or a pid the kernel has since given to another process, is
told apart from a live run. A stale lock on this host is taken over with one line saying so; a lock held
from another host cannot be checked from here and needs `--break-lock`. In a multi-node run node 0's
launcher holds it. Runs started under plain `torchrun` (no shardlab launcher) do not lock.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

NAME = ".lock"


class RunLocked(Exception):
    """The run directory is in use (or may be): the message says by whom and what to do."""


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may itself hold spaces and parentheses
    return int(stat[stat.rindex(")") + 2:].split()[19])


def _job_id() -> str:
    for key in ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "JOB_ID"):
        if os.environ.get(key):
            return os.environ[key]
    return f"pid-{os.getpid()}"


def holder_alive(entry: dict) -> bool:
    """On this host: is the process that wrote `entry` still the one running under its pid?"""
    started = start_time(int(entry.get("pid", -1)))
    return started is not None and started == entry.get("pid_start")


def _describe(entry: dict) -> str:
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.get("time", 0)))
    return f"pid {entry.get('pid')} on {entry.get('host')}, job {entry.get('job')}, since {since}"


class RunLock:
    def __init__(self, path: Path, entry: dict):
        self.path, self.entry = path, entry

    def release(self) -> None:
        """Remove the lock if it is still ours (a --break-lock elsewhere may have replaced it)."""
        try:
            held = json.loads(self.path.read_text())
            if (held.get("pid"), held.get("pid_start")) == (self.entry["pid"], self.entry["pid_start"]):
                self.path.unlink()
        except (OSError, ValueError):
            pass


def refuse_if_held(run_dir: Path) -> None:
    """Raise RunLocked when a live run on this host holds the lock (read only: `shardlab resume` says so
    before it reads anything else of the directory)."""
    try:
        held = json.loads((Path(run_dir) / NAME).read_text())
    except (OSError, ValueError):
        return
    if held.get("host") == socket.gethostname() and holder_alive(held) and held.get("pid") != os.getpid():
        raise RunLocked(f"{run_dir} is in use by a live run ({_describe(held)}); wait for it to end "
                        f"or stop it (kill -TERM {held.get('pid')})")


def acquire(run_dir: Path, break_lock: bool = False, file=None) -> RunLock:
    file = file or sys.stderr
    run_dir = Path(run_dir)
    path = run_dir / NAME
    pid = os.getpid()
    entry = {"job": _job_id(), "host": socket.gethostname(), "pid": pid, "pid_start": start_time(pid),
             "time": time.time(), "command": " ".join(sys.argv[1:])[:500]}
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f"{NAME}.{pid}"
    tmp.write_text(json.dumps(entry, indent=1) + "\n")
    try:
        for _ in range(3):  # a stale lock removed below, then created again by another launcher: re-check
            try:
                os.link(tmp, path)  # atomic: exactly one of two racing launchers gets the name
                return RunLock(path, entry)
            except FileExistsError:
                pass
            try:
                held = json.loads(path.read_text())
            except FileNotFoundError:
                continue  # released meanwhile
            except (OSError, ValueError):  # damaged (it is only ever written whole): stale, on this host
                held = {"host": entry["host"], "damaged": True}
            if held.get("host") != entry["host"]:
                if not break_lock:
                    raise RunLocked(f"{run_dir} is in use by {_describe(held)} (its lock {path}); this host "
                                    "cannot check that process: if that run is gone, pass --break-lock")
                print(f"[shardlab] breaking the lock of {run_dir} held by {_describe(held)} (--break-lock)",
                      file=file, flush=True)
            elif holder_alive(held):
                raise RunLocked(f"{run_dir} is in use by a live run ({_describe(held)}); wait for it to end "
                                f"or stop it (kill -TERM {held.get('pid')}), or write to another --out")
            else:
                print(f"[shardlab] taking over the stale lock of {run_dir}: {_describe(held)} is gone",
                      file=file, flush=True)
            _remove_if_same(path, None if held.get("damaged") else held)
        raise RunLocked(f"{run_dir}: could not take its lock {path}: other launchers keep taking it")
    finally:
        tmp.unlink(missing_ok=True)


def _remove_if_same(path: Path, held: dict | None) -> None:
    """Remove the stale lock, unless another launcher replaced it since we read it."""
    aside = path.with_name(f"{NAME}.stale.{os.getpid()}")
    try:
        os.rename(path, aside)  # only one of two launchers taking over the same stale lock succeeds
    except FileNotFoundError:
        return
    try:
        now = json.loads(aside.read_text())
    except (OSError, ValueError):
        now = {}
    if held and now != held:  # not the one we judged: put it back
        try:
            os.link(aside, path)
        except FileExistsError:
            pass
    aside.unlink(missing_ok=True)
