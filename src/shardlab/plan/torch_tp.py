"""What torch's DTensor tensor parallelism (`tp_impl=dtensor`: `parallelize_module`, as torchtitan applies it)
sends beyond comm.py's Megatron count of the sequence-parallel regions, from the sources of the runs:

- selective-op recompute (torchtitan's op-level policy) reruns the regions' forward all-gathers in the
  backward: its save list (`_save_list`, `models/llama3/parallelize_llama.py` at e7c0cae, the same at 9dec370)
  names `_c10d_functional.reduce_scatter_tensor` and no all-gather, and every op not saved is recomputed
  (PREFER_RECOMPUTE); the gathered input of q, k, v and of w1, w3 is needed by their weight gradients, so the
  block's two all-gathers run again, its reduce-scatters do not. (comm.py's `rerun` is for full and shardlab's
  selective recompute, which rerun both.)
The embedding's and the head's collectives are not in a block: never rerun.
"""
from __future__ import annotations


def applies(lay) -> bool:
    return lay.tp > 1 and lay.sp and getattr(lay, "tp_impl", "own") == "dtensor"


def rerun_gathers(lay) -> bool:
    """torchtitan's op-level policy reruns the block's two forward all-gathers (module docstring)."""
    return applies(lay) and lay.recompute == "selective-op"


def sp_all_gather(train, lay, layers: int, m: int, act: float, n: int) -> tuple[float, int, str]:
    """(payload, calls, why) of the sequence-parallel all-gathers: comm.py's n calls of `act` bytes, plus the
    rerun ones."""
    extra = 2 * layers * m if rerun_gathers(lay) else 0
    why = f" + {extra} rerun by selective-op recompute (torchtitan's save list: no all-gather)" if extra else ""
    return act * (n + extra), n + extra, why
