"""No process outlives its parent: shardlab train -> torchrun's agent -> the ranks.

Each level asks the kernel to SIGKILL it when its parent dies (prctl PR_SET_PDEATHSIG), so a launcher
killed with SIGKILL (which it cannot catch) takes the agent and the ranks with it, and none of them
writes anything further. The ranks and the agent run in sessions of their own (a terminal's Ctrl-C
reaches only the launcher, which forwards it once), so the kernel's parent-death signal, not the
terminal, is what ties them together.

    orphans.die_with_parent(os.environ.get(PARENT_ENV))   # first thing in the agent and in each rank
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys

PARENT_ENV = "SHARDLAB_PARENT_PID"  # the pid the child expects as its parent (set by who starts it)
_PR_SET_PDEATHSIG = 1


def die_with_parent(expected_parent: str | int | None = None) -> bool:
    """SIGKILL this process when its parent exits. Returns False where the kernel offers no such thing
    (not Linux). When the parent is already gone (it died before we got here), exit now."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    # The parent may have died between our fork and the prctl: then we were re-parented already.
    if expected_parent and os.getppid() != int(expected_parent):
        os._exit(128 + signal.SIGKILL)
    return True
