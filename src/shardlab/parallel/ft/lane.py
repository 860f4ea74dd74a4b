"""The one thread of a rank that talks to the lighthouse (parallel/ft/manager.py): every store operation
of the quorum runs there under a deadline, so a lighthouse that stopped answering costs a rank a deadline and
not the job."""
from __future__ import annotations

import queue
import threading

# An operation past its deadline is given this much more: a process resumed after a SIGSTOP finds every
# deadline passed although the answer arrived the moment it resumed.
_GRACE_S = 1.0


class _Unreachable(ConnectionError):
    """The lighthouse did not answer in time, or an earlier operation on it has not returned yet."""


class _Job:
    def __init__(self, fn):
        self.fn, self.done, self.outcome = fn, threading.Event(), None

    def run(self) -> None:
        try:
            self.outcome = (True, self.fn())
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            self.outcome = (False, e)
        self.done.set()

    def wait(self, timeout_s: float) -> bool:
        return self.done.wait(timeout_s) or self.done.wait(_GRACE_S)

    def result(self):
        ok, value = self.outcome
        if ok:
            return value
        raise value


class _Lane:
    """The one thread that talks to the lighthouse, so that an operation that never returns costs its caller a
    deadline and not the job: TCPStore's check, set and compare_set, and its connect, wait for the answer
    without any timeout (only get and wait honour the client's), so a stopped or partitioned lighthouse would
    hold a rank forever. Nothing can interrupt an operation that missed its deadline: it keeps the thread, and
    until it returns every new one fails at once (the lighthouse still does not answer)."""

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._current: _Job | None = None
        threading.Thread(target=self._serve, name="shardlab-lighthouse", daemon=True).start()

    def _serve(self) -> None:
        while True:
            self._jobs.get().run()

    def submit(self, fn) -> _Job:
        if self._current is not None and not self._current.done.is_set():
            raise _Unreachable("an earlier request to the lighthouse has not returned")
        job = self._current = _Job(fn)
        self._jobs.put(job)
        return job

    def call(self, fn, timeout_s: float):
        job = self.submit(fn)
        if not job.wait(timeout_s):
            raise _Unreachable(f"no answer within {timeout_s:g} s")
        return job.result()
