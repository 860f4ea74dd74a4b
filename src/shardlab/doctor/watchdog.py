"""The hang watchdog: a thread that ends a rank which has made no progress for `doctor.hang_timeout_s`.

Progress = a collective completed, a phase change (`comm.set_phase`), or a heartbeat (`beat()`).
On a hang it writes the flight recorder (comm's ring buffer of recent collectives, plus the main
thread's Python stack) to `RUN/doctor/flight_rank{R}.json`, prints one clear line, and calls
`os._exit`: the main thread may be blocked inside a collective forever, so only a hard exit ends the
process. torchrun then sees a failed rank and terminates the others.

Those others are usually blocked in a C++ collective, where a Python SIGTERM handler would never run.
So the watchdog also catches SIGTERM through `signal.set_wakeup_fd`: the C-level handler writes the
signal number into a pipe that this thread watches, and the rank dumps its own flight record before
exiting. That is how `shardlab doctor hang` gets every rank's view, not just the first to time out.
In a rank that stops on SIGTERM at a step boundary instead (shardlab.launch.interrupt installed its handler
first), the watchdog leaves SIGTERM alone: a rank truly blocked is ended by its own timeout, or by the
interrupt's grace (ckpt.signal_grace_s).
"""
from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
import traceback
import weakref
from pathlib import Path

from shardlab import comm
from shardlab.doctor.hang import describe_op

EXIT_HANG = 3  # the process exit code of a rank ended by the watchdog

# The watchdogs of this process not stopped yet. A process that outlives the runs it hosts (a test pool's
# rank runs one trainer after another) stops what a run left running: an idle rank sees no progress, and a
# forgotten watchdog would end it `doctor.hang_timeout_s` later, in the middle of someone else's work.
_RUNNING: "weakref.WeakSet[Watchdog]" = weakref.WeakSet()


def stop_all() -> int:
    """Stop every watchdog of this process still running (from the main thread); returns how many."""
    # the newest first: each puts back the SIGTERM handler it found
    left = sorted(_RUNNING, key=lambda wd: wd.started, reverse=True)
    for wd in left:
        wd.stop()
    return len(left)


class Watchdog:
    def __init__(self, run_dir: Path, rank: int, world: int, timeout_s: float, extra: dict | None = None,
                 exit_on_hang: bool = True):
        self.path = Path(run_dir) / "doctor" / f"flight_rank{rank}.json"
        self.rank, self.world, self.timeout_s = rank, world, timeout_s
        self.extra = extra or {}
        self.exit_on_hang = exit_on_hang  # tests of the watchdog itself keep the process alive
        self.interval = max(0.05, min(1.0, timeout_s / 10))
        self._beat = self.started = time.monotonic()
        self._stop = threading.Event()
        self._dumped = threading.Lock()
        self.fired: str | None = None
        self.where: str | None = None  # what the message said this rank was doing when it fired
        self._main_ident = threading.main_thread().ident
        self._pipe = None
        self._old = None
        self._sigterm_ours = False  # SIGTERM ends this rank here (no other handler: see the docstring)
        if threading.current_thread() is threading.main_thread():
            r, w = os.pipe()
            os.set_blocking(w, False)
            self._pipe = (r, w)
            current = signal.getsignal(signal.SIGTERM)
            self._sigterm_ours = current in (signal.SIG_DFL, None)
            handler = self._on_sigterm if self._sigterm_ours else current
            self._old = (signal.signal(signal.SIGTERM, handler), signal.set_wakeup_fd(w))
        self.thread = threading.Thread(target=self._run, name=f"shardlab-watchdog-rank{rank}", daemon=True)
        self.thread.start()
        _RUNNING.add(self)

    def beat(self) -> None:
        self._beat = time.monotonic()

    def idle_s(self) -> float:
        return time.monotonic() - max(self._beat, comm.RECORDER.last_progress)

    # --- the thread --------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            if self._pipe is not None:
                ready, _, _ = select.select([self._pipe[0]], [], [], self.interval)
                if ready:
                    data = os.read(self._pipe[0], 64)
                    if signal.SIGTERM in data and self._sigterm_ours and not self._stop.is_set():
                        self.fire("terminated by SIGTERM (the launcher stops the job after another rank failed)",
                                  exit_code=128 + signal.SIGTERM)
            else:
                self._stop.wait(self.interval)
            if not self._stop.is_set() and self.idle_s() > self.timeout_s:
                self.fire(f"no progress for {self.idle_s():.1f} s (doctor.hang_timeout_s={self.timeout_s:g})",
                          exit_code=EXIT_HANG)

    def _on_sigterm(self, signum, frame) -> None:
        # Runs in the main thread when it is in Python code; the wakeup pipe covers the blocked case.
        self.fire("terminated by SIGTERM", exit_code=128 + signum)

    def dump(self, reason: str) -> Path:
        """Write this rank's flight record (also used on errors, not only hangs)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        frame = sys._current_frames().get(self._main_ident)
        stack = [f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in traceback.extract_stack(frame)][-12:] \
            if frame is not None else []
        comm.RECORDER.dump(self.path, rank=self.rank, world=self.world, reason=reason, main_stack=stack,
                           timeout_s=self.timeout_s, **self.extra)
        return self.path

    def fire(self, reason: str, exit_code: int) -> None:
        if not self._dumped.acquire(blocking=False):
            return  # another thread is already dumping and exiting
        self.fired = reason
        rec = comm.RECORDER
        # the record `doctor hang` names too (the oldest this rank waits in), in the same words
        blocked = rec.blocked_in()
        where = f"blocked in {describe_op(blocked.as_dict(), self.rank)}" if blocked else f"in: {rec.phase}"
        self.where = where
        try:
            path = self.dump(reason)
            print(f"[shardlab doctor] rank {self.rank}: {reason}; step {rec.step}, {where}. Flight record: {path}. "
                  f"Run `shardlab doctor hang {self.path.parent.parent}` to line up all ranks.",
                  file=sys.stderr, flush=True)
        except Exception as e:  # noqa: BLE001 - we are exiting anyway; say why the dump is missing
            print(f"[shardlab doctor] rank {self.rank}: {reason}; could not write the flight record: {e}",
                  file=sys.stderr, flush=True)
        if self.exit_on_hang:
            os._exit(exit_code)

    def stop(self) -> None:
        _RUNNING.discard(self)
        self._stop.set()
        if self._pipe is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old[0])
            signal.set_wakeup_fd(self._old[1])
            os.write(self._pipe[1], b"\0")  # wake the thread so it sees the stop flag
        self.thread.join(timeout=5)
        if self._pipe is not None and not self.thread.is_alive():
            # (A thread still alive may yet select() on these fds: closing them could let a later file
            # or socket reuse the numbers under it. Leaking two fds is the lesser harm.)
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None
