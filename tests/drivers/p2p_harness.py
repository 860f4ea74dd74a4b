"""Rank-side helpers for the CUDA-path tests: run any rank-side helper with comm's posting log on and
return the log (what this rank posted and waited for, in order), for parallel/p2p_order.py to replay;
or with comm's staged mode on."""
from __future__ import annotations

import importlib


def logged(module: str, fn: str, *args) -> tuple[int, list]:
    """(global rank, posting log) of `module.fn(*args)` on this rank."""
    from shardlab import comm

    with comm.log_p2p() as log:
        getattr(importlib.import_module(module), fn)(*args)
    return comm.rank(), log


def staged(module: str, fn: str, *args):
    """`module.fn(*args)` with comm in staged mode (every op but all_reduce and broadcast through host
    copies, as gloo-staged does for CUDA tensors; here the CPU rehearsal of it)."""
    from shardlab import comm

    comm._STAGED = comm._STAGE_HOST = True
    try:
        return getattr(importlib.import_module(module), fn)(*args)
    finally:
        comm._STAGED = comm._STAGE_HOST = False
