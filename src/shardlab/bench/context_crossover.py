"""The ring/Ulysses crossover: step time of each context-parallel implementation over a sequence-length
sweep at one cp degree (tiny model, gloo on CPU), against the planner's prediction for the same setup.

    python -m shardlab.bench.context_crossover --cp 2 --seqs 256,1024,2048 --rounds 5
    python -m shardlab.bench.context_crossover --cp 4 --seqs 256,1024 --impls own,ulysses,hybrid:2

Method: one pool of `cp` ranks, one sequence per step split over them (`parallel.cp=cp`, ddp over dp_cp),
the implementations' steps alternating in rotating order round by round, a barrier before each timed step;
per implementation the median step and the paired median ratio against the ring. The planner evaluates the
same layout (tiny model, micro batch 1, fp32) on `cluster` (default `this`, the calibrated CPU profile); the
crossover is the first length where Ulysses' step is shorter than the ring's, measured and predicted.
"""
from __future__ import annotations

import time

import torch

MODEL = dict(n_layer=2, n_head=4, d_model=64)  # the tiny preset


def _impl(spec: str) -> tuple[str, int]:
    name, _, u = spec.partition(":")
    return name, int(u or 0)


def _build(seq: int, cp: int, spec: str):
    from shardlab.config import Config
    from shardlab.model.gpt import GPTConfig, build_model
    from shardlab.parallel import build

    cfg = Config()
    cfg.train.seq_len, cfg.train.grad_clip, cfg.ckpt.final = seq, 1.0, False
    cfg.parallel.strategy, cfg.parallel.cp = "ddp", cp
    cfg.parallel.cp_impl, cfg.parallel.cp_ulysses = _impl(spec)
    model = build_model(GPTConfig(vocab_size=256, max_seq_len=seq, **MODEL), seed=1337)
    return build(cfg, torch.device("cpu"), model)


def _ranks(seqs: list[int], cp: int, impls: list[str], rounds: int) -> dict:
    """On every rank: {seq: {impl: [step seconds]}}; rank 0's."""
    from shardlab import comm

    out = {}
    for seq in seqs:
        pars = {i: _build(seq, cp, i) for i in impls}
        times = {i: [] for i in impls}
        for r in range(-1, rounds):  # round -1 warms up
            data = torch.randint(0, 256, (1, seq + 1), generator=torch.Generator().manual_seed(seq + r))
            order = impls[r % len(impls):] + impls[:r % len(impls)]
            for i in order:
                comm.barrier()
                t0 = time.perf_counter()
                pars[i].step([(data[:, :-1], data[:, 1:])], max_norm=1.0, global_tokens=seq)
                if r >= 0:
                    times[i].append(time.perf_counter() - t0)
        out[seq] = times
    return out


def predicted(seq: int, cp: int, spec: str, cluster) -> float:
    """The planner's step seconds for this layout."""
    from shardlab.plan.layout import Layout, TrainSpec
    from shardlab.plan.model import model_from_args
    from shardlab.plan.step import evaluate

    name, u = _impl(spec)
    lay = Layout(dp=1, cp=cp, cp_impl=name, cp_ulysses=u)
    train = TrainSpec(global_batch=1, micro_batch=1, seq=seq, precision="fp32")
    return evaluate(model_from_args("tiny", seq=seq), train, lay, cluster).step_time


def measure(seqs: list[int], cp: int, impls: list[str], rounds: int, cluster_name: str = "this") -> dict:
    from dataclasses import replace

    from shardlab.bench import common
    from shardlab.plan.hardware import load_cluster

    cluster = load_cluster(cluster_name)
    cluster = replace(cluster, num_gpus=max(cluster.num_gpus, cp), gpus_per_node=max(cluster.gpus_per_node, cp))
    got = common.run_on_ranks(_ranks, seqs, cp, impls, rounds, world=cp)
    rows = []
    for seq in seqs:
        t = got[seq]
        row = {"seq_len": seq, "cp": cp}
        for i in impls:
            row[i] = {"measured_s": common.stats(t[i])["median"], "predicted_s": predicted(seq, cp, i, cluster),
                      "paired_vs_ring": common.median_ci([b / a for a, b in zip(t[impls[0]], t[i])])["median"]}
        rows.append(row)
    other = impls[1]

    def first(key):
        return next((r["seq_len"] for r in rows if r[other][key] < r[impls[0]][key]), None)

    return {"rows": rows, "crossover_measured": first("measured_s"), "crossover_predicted": first("predicted_s"),
            "cluster": cluster.source}


if __name__ == "__main__":
    import argparse
    import json

    ap = argparse.ArgumentParser()
    ap.add_argument("--cp", type=int, default=2)
    ap.add_argument("--seqs", default="256,1024,2048")
    ap.add_argument("--impls", default="own,ulysses")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cluster", default="this")
    a = ap.parse_args()
    print(json.dumps(measure([int(s) for s in a.seqs.split(",")], a.cp, a.impls.split(","), a.rounds, a.cluster),
                     indent=1, default=str))
