"""The checkpoint directory's bookkeeping: which checkpoints stay, which go, and where `latest` points.

    remove_leftovers(ckpt_dir)       # at start-up: what a crashed save left (step_N.tmp)
    publish(ckpt_dir, tmp, final)    # a commit's last act: step_N.tmp -> step_N, `latest` -> step_N
    pruner = Pruner(ckpt_dir, ccfg)  # after each commit: old checkpoints deleted in the background
    pruner.start(step); pruner.wait()

Only rank 0 changes the directory; manager.py (the save and load orchestration) decides when.
"""
from __future__ import annotations

import os
import shutil
import sys
import threading
from pathlib import Path

from shardlab.checkpoint import manifest as mf


def log(msg: str) -> None:
    """A checkpoint line on stderr (here, below manager.py, because deleting logs its failures too)."""
    print(f"[ckpt] {msg}", file=sys.stderr, flush=True)


def remove(path: Path, why: str) -> None:
    """Delete a directory; a failure costs disk space, not the run, but is logged, never swallowed."""
    def report(func, p, exc):
        exc = exc[1] if isinstance(exc, tuple) else exc  # onerror passes exc_info, onexc the exception
        log(f"could not delete {p} ({why}): {exc}; delete it by hand")
    if Path(path).exists():
        shutil.rmtree(path, **{"onexc" if sys.version_info >= (3, 12) else "onerror": report})


def remove_leftovers(ckpt_dir: Path) -> None:
    """Delete the `.tmp` directories of saves that crashed: never committed, so never loaded."""
    for c in mf.list_checkpoints(ckpt_dir):
        if c.path.name.endswith(".tmp"):
            remove(c.path, "a crashed save's leftover")


def publish(ckpt_dir: Path, tmp: Path, final: Path) -> None:
    """Make the fully written `tmp` the committed checkpoint `final` and point `latest` at it."""
    if final.exists():  # a re-save of this step (after resuming from an older checkpoint)
        shutil.rmtree(final)
    os.replace(tmp, final)
    mf.fsync_dir(ckpt_dir)
    mf.write_latest(ckpt_dir, final)


class Pruner:
    """Deletes the checkpoints retention no longer keeps, in a background thread: unlinking their files
    is slow on ext4 and need not hold the save. At most one runs: wait() before the next commit."""

    def __init__(self, ckpt_dir: Path, ccfg):
        self.dir, self.ccfg = ckpt_dir, ccfg  # ccfg.keep and ccfg.keep_every are read when pruning
        self._thread: threading.Thread | None = None

    def start(self, step: int) -> None:
        self._thread = threading.Thread(target=self.prune, name=f"ckpt-retain-{step}", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def prune(self) -> None:
        """Keep the last `keep` committed checkpoints, every `keep_every`-th step, and `latest`."""
        committed = [c for c in mf.list_checkpoints(self.dir) if c.committed]
        keep = self.ccfg.keep
        kept = {c.step for c in (committed[-keep:] if keep > 0 else committed)}
        if self.ccfg.keep_every > 0:
            kept |= {c.step for c in committed if c.step % self.ccfg.keep_every == 0}
        latest = mf.read_latest(self.dir)
        for c in committed:
            if c.step not in kept and (latest is None or c.path.name != latest.name):
                remove(c.path, f"retention (ckpt.keep={keep})")
