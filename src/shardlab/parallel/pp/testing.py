"""Rank-side helpers for the pipeline tests: run one pipeline step of a tiny GPT and return what the
tests compare with one device (loss, every gradient by name)."""
from __future__ import annotations

import torch

from shardlab import comm
from shardlab.model.gpt import GPTConfig, build_model
from shardlab.model.loss import cross_entropy
from shardlab.parallel.pp import registry
from shardlab.parallel.pp.engine import PipelineEngine
from shardlab.parallel.pp.schedule import build
from shardlab.parallel.pp.stage import build_stage, stage_ranges

TINY4 = dict(n_layer=4, n_head=2, d_model=32, vocab_size=256, max_seq_len=16)


def batch(m: int, micro: int = 2, seed: int = 0, kw: dict = TINY4):
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(0, kw["vocab_size"], (m, micro, kw["max_seq_len"] + 1), generator=g)
    return [(d[:, :-1], d[:, 1:]) for d in data]


def single_grads(m: int, kw: dict = TINY4) -> tuple[float, dict]:
    """The reference: one device, the same microbatches, loss = mean over every token."""
    model = build_model(GPTConfig(**kw), seed=0)
    mbs = batch(m, kw=kw)
    weight = 1.0 / sum(y.numel() for _, y in mbs)
    total = 0.0
    for x, y in mbs:
        loss = cross_entropy(model(x), y)
        (loss * weight).backward()
        total += loss.item()
    return total * weight, {n: p.grad.clone() for n, p in model.named_parameters()}


def pipeline_engine(name: str, m: int, virtual: int = 1, kw: dict = TINY4, layout: str | None = None):
    """This rank's engine (own, or torch's for a `torch-` name) over its stages of a fresh tiny GPT;
    pp = world size, the tied embedding summed by the engine itself. `layout`: place the stages other than
    the row says ("v": any own program on the V placement)."""
    pp, rank = comm.world_size(), comm.rank()
    row = registry.spec(name)
    sched = build(row.order, pp, m, virtual, layout=layout or row.layout)  # a torch row's stage layout is its order's
    model = build_model(GPTConfig(**kw), seed=0)
    n = sched.n_stages
    ranges = stage_ranges(kw["n_layer"], n)
    stages = {s: build_stage(model, s, n, ranges[s]) for s in sched.stages_of(rank)}
    ends = sorted({sched.rank_of(0), sched.rank_of(n - 1)})
    embed_group = comm.new_group(ends) if len(ends) > 1 else None
    if row.runner == "torch":
        from shardlab.parallel.pp.native import TorchPipeline
        return TorchPipeline(name, stages, n, m, cross_entropy, torch.device("cpu"), embed_group=embed_group)
    return PipelineEngine(sched, stages, stage_rank=sched.rank_of, pp_rank=rank, loss_fn=cross_entropy,
                          act_shape=lambda x: (*x.shape[:2], kw["d_model"]), device=torch.device("cpu"),
                          embed_group=embed_group)


def pipeline_grads(name: str, m: int, virtual: int = 1, kw: dict = TINY4,
                   layout: str | None = None) -> tuple[float, dict]:
    """One step of schedule `name` over the world (pp = world size); every rank returns the loss (from
    the last stage) and the gradients of the parameters its stages hold (a parameter two of its stages
    hold, the tied embedding of a V's first and last stage: the two copies' gradients summed)."""
    engine = pipeline_engine(name, m, virtual, kw, layout)
    mbs = batch(m, kw=kw)
    weight = 1.0 / sum(y.numel() for _, y in mbs)
    loss = engine.step(mbs, weight) * weight
    comm.all_reduce(loss)  # only the last stage's rank holds it
    grads: dict = {}
    for st in engine.stages.values():
        for nm, p in st.named_parameters():
            if p.grad is not None:
                grads[nm] = grads[nm] + p.grad if nm in grads else p.grad.clone()
    return loss.item(), grads


def held_activations(name: str, m: int, virtual: int = 1, kw: dict = TINY4) -> dict:
    """One step of own schedule `name` with the saved tensors counted (observe.activations.HeldActivations):
    this rank's peak microbatches held, peak bytes and one microbatch's bytes."""
    from shardlab.observe.activations import HeldActivations

    engine = pipeline_engine(name, m, virtual, kw)
    engine.activations = held = HeldActivations()
    mbs = batch(m, kw=kw)
    engine.step(mbs, 1.0 / sum(y.numel() for _, y in mbs))
    return {"peak_microbatches": held.peak_microbatches, "peak_bytes": held.peak_bytes,
            "bytes_per_microbatch": held.bytes_per_microbatch, "after_step": sum(held.sample().values())}


def p2p_bytes(name: str, m: int, virtual: int = 1, kw: dict = TINY4) -> dict:
    """One step of own schedule `name`; the point-to-point payload bytes comm recorded on this rank
    (op -> bytes: send, recv), as summary.json's comm.bytes_per_step counts them."""
    engine = pipeline_engine(name, m, virtual, kw)
    mbs = batch(m, kw=kw)
    comm.RECORDER.reset_step()
    engine.step(mbs, 1.0 / sum(y.numel() for _, y in mbs))
    got = comm.RECORDER.step_stats()["bytes"]
    return {op: got.get(op, 0) for op in ("send", "recv")}
