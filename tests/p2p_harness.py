"""Rank-side helper for the NCCL-order tests: run any rank-side helper with comm's posting log on and
return the log (what this rank posted and waited for, in order), for parallel/p2p_order.py to replay."""
from __future__ import annotations

import importlib


def logged(module: str, fn: str, *args) -> tuple[int, list]:
    """(global rank, posting log) of `module.fn(*args)` on this rank."""
    from shardlab import comm

    with comm.log_p2p() as log:
        getattr(importlib.import_module(module), fn)(*args)
    return comm.rank(), log
