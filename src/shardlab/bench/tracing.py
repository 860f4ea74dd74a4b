"""The cost of tracing (figure `trace_overhead` = tokens/s traced ÷ untraced, reported by `bench ddp`).

Paired per step in one process group: the same `ddp` replica trains with recording on, then off
(order swapped every step), a barrier lining the ranks up before each timed step. The traced step
records what a traced training run records: the trainer's spans, every collective, the bucket-ready
instants. Tokens per step are equal on both sides, so tokens/s traced ÷ untraced = t_untraced ÷ t_traced.
"""
from __future__ import annotations

import tempfile
import time

import torch

from shardlab.bench import common


def traced_step(par, x, y, step: int, **labels) -> None:
    """One training step (clip 1.0) inside the timeline's step span, as the trainer takes it: `par.step`
    opens the forward/backward spans and the optimizer span (finish, clip, AdamW, zero_grad). `labels` go
    on the step span (e.g. which layout ran it)."""
    from shardlab.observe import timeline

    with timeline.span("step", cat="step", step=step, **labels):
        par.step([(x, y)], 1.0 / y.numel(), max_norm=1.0)


def paired_trace_fn(steps: int, model_kw: dict, micro_batch: int = 8, seq: int = 128) -> dict:
    from shardlab import comm, parallel
    from shardlab.config import Config
    from shardlab.data.corpus import load_tokens
    from shardlab.data.dataset import TokenDataset, get_batch
    from shardlab.model.gpt import GPTConfig, build_model
    from shardlab.observe import timeline

    rank, world = comm.rank(), comm.world_size()
    data = TokenDataset(load_tokens("stdlib"), seq)
    cfg = Config()
    cfg.parallel.strategy = "ddp"
    model = build_model(GPTConfig(vocab_size=256, max_seq_len=seq, **model_kw), seed=1337)
    par = parallel.build(cfg, torch.device("cpu"), model)
    g = torch.Generator().manual_seed(0)
    times = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        timeline.enable(tmp, rank)
        for step in range(steps):
            for traced in ((True, False) if step % 2 == 0 else (False, True)):
                idx = torch.randint(0, len(data), (world, micro_batch), generator=g)[rank]
                x, y = get_batch(data, idx.tolist())
                timeline.set_recording(traced)
                comm.barrier()
                t0 = time.perf_counter()
                traced_step(par, x, y, step)
                times[traced].append(time.perf_counter() - t0)
        timeline.set_recording(True)
        timeline.dump()  # writing the files is part of the cost a traced run pays once, at the end
        timeline.disable()
    return {"traced": times[True], "untraced": times[False]}


def figures(result: dict, warm: int) -> dict:
    ratio = common.median_ci([u / t for t, u in zip(result["traced"][warm:], result["untraced"][warm:])])  # noqa: E501
    return {"trace_overhead": ratio["median"], "trace_overhead_min": ratio["min"], "trace_overhead_max": ratio["max"],
            "trace_overhead_ci90": ratio["ci90"], "trace_overhead_load_avg": ratio["load_avg"]}
