"""A training process outlives the reader of its output: `shardlab train ... | head` must not kill the ranks.

Python ignores SIGPIPE, so a write to a pipe whose reader has exited raises BrokenPipeError; in a rank that
was a crash (a failure record, exit 1, the job torn down) for what is only a closed view of the log. Like
other tools that write a log beside their real work (rsync, make's children under `| head`), a training
process here stops writing to a stream once its reader is gone and goes on: from then on that stream goes
to /dev/null (at the descriptor, so gloo's and torch's C++ messages too), and the run directory still gets
everything (metrics.jsonl, summary.json, checkpoints). The exit code is the run's own.
"""
from __future__ import annotations

import os
import sys


class _SurvivesClosedPipe:
    """A text stream whose writes continue, into /dev/null, once its pipe's reader has gone."""

    def __init__(self, stream):
        self._stream = stream

    def _reader_gone(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())  # what is still buffered now goes nowhere, without an error
        os.close(devnull)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_gone()
            self._stream.flush()

    def __getattr__(self, name):  # fileno, isatty, encoding, buffer, ...: the stream's own
        return getattr(self._stream, name)


def survive_closed_pipes() -> None:
    """Make sys.stdout and sys.stderr survive a closed pipe (once per process; streams without a descriptor,
    e.g. a test's capture, are left alone)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, _SurvivesClosedPipe):
            continue
        try:
            stream.fileno()
        except (AttributeError, OSError, ValueError):
            continue
        setattr(sys, name, _SurvivesClosedPipe(stream))
