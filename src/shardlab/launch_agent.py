"""torchrun's agent, run by `shardlab train --nproc N` with its own messages sent to a log file.

    python -m shardlab.launch_agent LOG FAILURES torch.distributed.run [torchrun arguments ...]

The ranks inherit this process's file descriptors 1 and 2, so what they print reaches the terminal as
before; only the agent's Python-level stderr (its logging, warnings and the ChildFailedError report
that contradicts the doctor with its "first observed failure") goes to LOG. When ranks fail, their exit
codes and signals go to FAILURES (JSON), from which the launcher writes shardlab's verdict.
"""
from __future__ import annotations

import json
import sys
import traceback


def main(argv: list[str]) -> int:
    log_path, failures_path, module, *torchrun_args = argv
    log = open(log_path, "a", buffering=1)
    sys.stderr = log  # before torch is imported: its log handlers keep the stream they were created with

    import torch.distributed.run as torchrun
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    assert module == torchrun.__name__, module
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


def _write(path: str, data: dict) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
