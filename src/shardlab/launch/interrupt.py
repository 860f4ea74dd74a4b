"""SIGINT and SIGTERM on a rank: stop at a step boundary, save, exit 130 / 143 (docs/training.md,
"When a run is interrupted").

    interrupt.install()                  # as early as possible in a rank (and in a one-process run)
    vote = interrupt.StopVote(group)     # before the first step
    sig = vote.check()                   # at every step boundary: 0, or the signal every rank stops for

The handler only notes the signal: Python's defaults (KeyboardInterrupt anywhere, or death on SIGTERM)
would leave the ranks at different steps and the checkpoint half-written. The ranks agree on the step
without a blocking collective of their own: each boundary starts a non-blocking MAX of "the signal I
have seen" (comm.Vote) and the next boundary reads it, so a signal seen anywhere during step k stops
every rank after step k+1, at the same step.

A second signal ends the process at once (os._exit: nothing more is written; a save in progress stays
a `step_N.tmp` directory that `latest` never names). The same signal arriving twice within DUPLICATE_S
is one event delivered twice: a scheduler that signals every process of a job (Slurm's scancel) while
the launcher forwards its own copy.
"""
from __future__ import annotations

import os
import signal
import threading
import time


DUPLICATE_S = 2.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)
_seen: tuple[int, float] | None = None  # (the first signal, when)
_grace_s = 0.0  # ckpt.signal_grace_s: from the first signal to the end of the process, at most
_cut: threading.Timer | None = None  # ends the process when the grace is over


class Interrupted(Exception):
    """Every rank stopped at `step` for `signum`; `checkpoint` is what the signal save committed."""

    def __init__(self, signum: int, step: int, checkpoint=None, save_s: float = 0.0, note: str = ""):
        super().__init__(f"{name(signum)} at step {step}")
        self.signum, self.step, self.checkpoint, self.save_s, self.note = signum, step, checkpoint, save_s, note


def name(signum: int) -> str:
    return signal.Signals(signum).name


def exit_code(signum: int) -> int:
    return 128 + int(signum)  # what a shell reports for a process ended by that signal: 130, 143


def _handler(signum, frame) -> None:
    global _seen, _cut
    now = time.monotonic()
    if _seen is None:
        _seen = (signum, now)
        if _grace_s > 0:  # the scheduler's SIGKILL comes after its grace: end before it, `latest` intact
            _cut = threading.Timer(_grace_s, os._exit, (exit_code(signum),))
            _cut.daemon = True
            _cut.start()
    elif signum != _seen[0] or now - _seen[1] > DUPLICATE_S:
        os._exit(exit_code(signum))  # the second signal: abort now, write nothing more


def install(grace_s: float | None = None) -> None:
    """Note SIGINT/SIGTERM instead of dying; `grace_s` (ckpt.signal_grace_s; 0 = no limit) bounds the
    time from the first signal to the exit. Call again once the config is known to set the grace."""
    global _grace_s
    if grace_s is not None:
        _grace_s = float(grace_s)
    for s in SIGNALS:
        signal.signal(s, _handler)


def installed() -> bool:
    """Whether this process stops on signals at step boundaries (a rank of `shardlab train`)."""
    return signal.getsignal(signal.SIGTERM) is _handler


def pending() -> int:
    """The signal this process has seen (0: none)."""
    return _seen[0] if _seen is not None else 0


def reset() -> None:
    """Forget the signal (a one-process run returning to its caller, tests), and the grace's deadline."""
    global _seen, _cut
    _seen = None
    if _cut is not None:
        _cut.cancel()
        _cut = None


def _vote(signum: int, group):
    # comm (and torch) only where ranks vote: the launcher installs this module's handler before the
    # ranks exist, and must not spend seconds importing torch to do so
    from shardlab import comm

    return comm.Vote(signum, group)


class StopVote:
    """The ranks' agreement to stop, read one step after it is started (see the module docstring).
    Inert (always 0, no collective) where the handler is not installed: trainers in a test's or a
    bench's worker pool, which nobody signals."""

    def __init__(self, group=None):
        self.group = group
        self.vote = _vote(pending(), group) if installed() else _Done(0)

    def check(self) -> int:
        if isinstance(self.vote, _Done):
            return self.vote.value
        agreed = self.vote.result()
        self.vote = _vote(pending(), self.group) if not agreed else _Done(agreed)
        return agreed

    def finish(self) -> int:
        """At the end of the run (one blocking vote, once): a signal during the last step or the final save."""
        if isinstance(self.vote, _Done):
            return self.vote.value
        return self.vote.result() or _vote(pending(), self.group).result()


class _Done:
    def __init__(self, value: int):
        self.value = value

    def result(self) -> int:
        return self.value
