"""DualPipe's overlap, as far as shardlab can express it: an expert-parallel all-to-all hidden under another
microbatch's compute.

DualPipe (DeepSeek-V3) runs the forward chunk of one microbatch beside the backward chunk of another so that
the all-to-all of one (dispatch, combine) travels while the other computes. The own engine cannot run that
pair (docs/pipeline.md, "DualPipe's overlap": no MoE inside pipeline stages, one instruction at a time), so
`bench pipeline` measures the mechanism the pair would rest on instead: comm's asynchronous all-to-all
(`comm.all_to_all_single(..., async_op=True)`) launched before an emulated compute of the other microbatch
(a sleep, as the pipeline emulation's stages: the compute holds no core, as on an accelerator) and waited
after it. Per round, alternated: the compute then the all-to-all (serial, what the engine does today), and
the two overlapped; in each, the all-to-all's exposed time is what the rank spends beyond its compute (the
sleep as it really took). Hidden fraction = 1 - exposed overlapped / exposed serial: 1 when the all-to-all
travels entirely under the compute, 0 when it costs as much as run after it.
"""
from __future__ import annotations

import statistics
import time

import torch


def a2a_under_compute(rounds: int, compute_s: float, numel: int) -> list[tuple[float, float]]:
    """Rank-side (the world is the expert-parallel group): per round, the all-to-all's exposed seconds
    (serial, overlapped), each from a common barrier."""
    from shardlab import comm

    x = torch.randn(numel)
    out = torch.empty_like(x)

    def compute() -> float:
        t0 = time.perf_counter()
        time.sleep(compute_s)  # the other microbatch's chunk
        return time.perf_counter() - t0

    def serial() -> float:
        took = compute()
        comm.all_to_all_single(out, x, tag="dispatch")
        return took

    def overlapped() -> float:
        handle = comm.all_to_all_single(out, x, async_op=True, tag="dispatch")
        took = compute()  # the all-to-all travels meanwhile
        handle.wait()
        return took

    got = []
    for r in range(rounds + 1):
        exposed = {}
        for fn in (serial, overlapped) if r % 2 == 0 else (overlapped, serial):
            comm.barrier()
            t0 = time.perf_counter()
            took = fn()
            exposed[fn] = time.perf_counter() - t0 - took
        if r:  # the first round sets up the connections
            got.append((exposed[serial], exposed[overlapped]))
    return got


def measure(pool, rounds: int, compute_s: float, numel: int) -> dict:
    """The overlap row: the exposed all-to-all (median over ranks and rounds) and the hidden fraction."""
    ranks = pool.run(a2a_under_compute, rounds, compute_s, numel)
    pairs = [pair for r in ranks for pair in r]
    serial, both = (statistics.median(x[j] for x in pairs) for j in range(2))
    return {"kind": "a2a_overlap", "ep": len(ranks), "bytes_per_rank": numel * 4, "compute_s": compute_s,
            "exposed_serial_s": serial, "exposed_overlapped_s": both,
            "hidden_fraction": statistics.median(1 - o / s for s, o in pairs if s > 0)}
