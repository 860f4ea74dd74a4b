"""torchrun's agent, run by `shardlab train --nproc N` with its own messages sent to a log file.

    python -m shardlab.launch.agent LOG FAILURES torch.distributed.run [torchrun arguments ...]

The ranks inherit this process's file descriptors 1 and 2, so what they print reaches the terminal as
before; only the agent's Python-level stderr (its logging, warnings and the ChildFailedError report
that contradicts the doctor with its "first observed failure") goes to LOG. When ranks fail, their exit
codes and signals go to FAILURES (JSON), from which the launcher writes shardlab's verdict.

The agent dies with the launcher (shardlab.launch.orphans), and the ranks die with the agent. Of SIGINT and
SIGTERM it acts on the first only (torchrun forwards it to the ranks and waits --shutdown-timeout for
them): a scheduler that signals every process of the job and the launcher's forwarded copy are one
event, and the launcher itself handles a real second signal.
"""
from __future__ import annotations

import json
import os
import sys
import traceback

from shardlab.launch import orphans


def main(argv: list[str]) -> int:
    orphans.die_with_parent(os.environ.get(orphans.PARENT_ENV))
    os.environ[orphans.PARENT_ENV] = str(os.getpid())  # what the ranks check (the same, one level down)
    log_path, failures_path, module, *torchrun_args = argv
    log = _LazyLog(log_path)  # a run with nothing to say leaves no empty launcher.log
    sys.stderr = log  # before torch is imported: its log handlers keep the stream they were created with

    import torch.distributed.run as torchrun
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    assert module == torchrun.__name__, module
    _first_signal_only()
    torchrun_args = shutdown_timeout_compat(torchrun_args, torchrun.get_args_parser())
    try:
        torchrun.run(torchrun.parse_args(torchrun_args))
        return 0
    except ChildFailedError as e:
        print(f"{type(e).__name__}:\n{e.format_msg()}", file=log)
        failures = {str(rank): {"local_rank": f.local_rank, "exitcode": f.exitcode, "pid": f.pid,
                                "time": f.timestamp,
                                "signal": f.signal_name() if f.exitcode is not None and f.exitcode < 0 else None}
                    for rank, f in e.failures.items()}
        _write(failures_path, {"failures": failures})
        return 1
    except BaseException as e:  # rendezvous errors, a signal to the agent (Ctrl-C), ...
        traceback.print_exc(file=log)
        _write(failures_path, {"agent_error": f"{type(e).__name__}: {e}"})
        return 1


def _first_signal_only() -> None:
    """torchrun raises SignalException from its handler on every signal; a second one inside its
    shutdown would cut the forwarding short (some ranks never told). Keep the first, ignore the rest."""
    from torch.distributed.elastic.multiprocessing import api

    handler = api._terminate_process_handler
    seen = []

    def once(signum, frame):
        if not seen:
            seen.append(signum)
            handler(signum, frame)

    api._terminate_process_handler = once  # looked up when torchrun installs its handlers (pcontext.start)


def shutdown_timeout_compat(args: list[str], parser) -> list[str]:
    """torchrun's `--shutdown-timeout` is new in torch 2.12; the torch of a GPU machine may be older (2.11 on
    the first one: its argument parser exits 2 on the unknown option, and no rank starts). There the option
    is taken out and its value made the default of PContext.close's timeout, which is what the older agent
    waits between forwarding a signal and killing the workers (30 s, fixed)."""
    if any("--shutdown-timeout" in a.option_strings for a in parser._actions):
        return args
    out, timeout = [], None
    for a in args:
        if a.startswith("--shutdown-timeout=") or a.startswith("--shutdown_timeout="):
            timeout = int(a.split("=", 1)[1])
        else:
            out.append(a)
    if timeout is not None:
        from torch.distributed.elastic.multiprocessing import api

        close = api.PContext.close

        def close_with_grace(self, death_sig=None, timeout: int = timeout):
            return close(self, death_sig, timeout)

        api.PContext.close = close_with_grace
    return out


class _LazyLog:
    """The agent's stderr: LOG, created on the first thing written to it (appended to, as a restarted job's
    agent writes after the first one's)."""

    def __init__(self, path: str):
        self.path, self.file = path, None

    def _open(self):
        if self.file is None:
            self.file = open(self.path, "a", buffering=1)
        return self.file

    def write(self, text: str) -> int:
        return self._open().write(text) if text else 0

    def flush(self) -> None:
        if self.file is not None:
            self.file.flush()

    def fileno(self) -> int:  # someone wants the descriptor itself (faulthandler): the file it is
        return self._open().fileno()

    def isatty(self) -> bool:
        return False


def _write(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)  # RUN/failures/ exists only when a run failed
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
