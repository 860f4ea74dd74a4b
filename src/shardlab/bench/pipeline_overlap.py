"""DualPipe's overlap, as far as shardlab can express it: an expert-parallel all-to-all hidden under another
microbatch's compute.

DualPipe (DeepSeek-V3) runs the forward chunk of one microbatch beside the backward chunk of another so that
the all-to-all of one (dispatch, combine) travels while the other computes. The own engine cannot run that
pair (docs/pipeline.md, "DualPipe's overlap": no MoE inside pipeline stages, one instruction at a time), so
`bench pipeline` measures the mechanism the pair would rest on instead: comm's asynchronous all-to-all
(`comm.all_to_all_single(..., async_op=True)`) launched before an emulated compute of the other microbatch
(a sleep, as the pipeline emulation's stages: the compute holds no core, as on an accelerator) and waited
after it. Per round, alternated: the all-to-all alone, the compute then the all-to-all (serial, what the
engine does today), and the two overlapped. Hidden fraction = (serial - overlapped) / all-to-all alone:
1 when the all-to-all travels entirely under the compute, 0 when it waits for it.
"""
from __future__ import annotations

import statistics
import time

import torch


def a2a_under_compute(rounds: int, compute_s: float, numel: int) -> list[tuple[float, float, float]]:
    """Rank-side (the world is the expert-parallel group): per round, (all-to-all alone, serial,
    overlapped) wall seconds, each from a common barrier."""
    from shardlab import comm

    x = torch.randn(numel)
    out = torch.empty_like(x)

    def alone():
        comm.all_to_all_single(out, x, tag="dispatch")

    def serial():
        time.sleep(compute_s)  # the other microbatch's chunk, then this one's all-to-all
        comm.all_to_all_single(out, x, tag="dispatch")

    def overlapped():
        handle = comm.all_to_all_single(out, x, async_op=True, tag="dispatch")
        time.sleep(compute_s)  # travels while the other microbatch's chunk computes
        handle.wait()

    got = []
    for r in range(rounds + 1):
        times = {}
        for fn in (alone, serial, overlapped) if r % 2 == 0 else (overlapped, serial, alone):
            comm.barrier()
            t0 = time.perf_counter()
            fn()
            times[fn] = time.perf_counter() - t0
        if r:  # the first round sets up the connections
            got.append((times[alone], times[serial], times[overlapped]))
    return got


def measure(pool, rounds: int, compute_s: float, numel: int) -> dict:
    """The overlap row: medians over the rounds (the slowest rank's time per round) and the hidden fraction."""
    ranks = pool.run(a2a_under_compute, rounds, compute_s, numel)
    per_round = [tuple(max(r[k][j] for r in ranks) for j in range(3)) for k in range(rounds)]
    a2a, serial, both = (statistics.median(x[j] for x in per_round) for j in range(3))
    hidden = [(s - o) / a for a, s, o in per_round if a > 0]
    return {"kind": "a2a_overlap", "ep": len(ranks), "bytes_per_rank": numel * 4, "compute_s": compute_s,
            "a2a_s": a2a, "serial_s": serial, "overlapped_s": both,
            "hidden_fraction": statistics.median(hidden), "hidden_fractions": hidden}
