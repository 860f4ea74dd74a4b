"""The ring/Ulysses crossover: each context-parallel implementation over a sequence-length sweep at one cp
degree (tiny model, gloo on CPU), against the planner's prediction for the same setup. `shardlab bench
context` runs it at cp = 2 and 4 (bench/context.py); alone:

    python -m shardlab.bench.context_crossover --cp 2 --seqs 256,1024,2048 --rounds 5
    python -m shardlab.bench.context_crossover --cp 4 --seqs 256,1024 --impls own,ulysses,hybrid:2

Method: one pool of `cp` ranks, one sequence per step split over them (`parallel.cp=cp`, ddp over dp_cp).
Per length and implementation, one untimed step whose cp bytes comm records (ring sends, all-to-all payloads:
against parallel/cp/cost.py's formulas) and the exact activation bytes the blocks keep for backward; then
rounds in rotating order (A B, B A, ...; with three, A B C, B C A, C A B), a barrier before each timed step:
per implementation the median step and the paired median ratio against the ring with its 90% interval and the
load average. The planner evaluates the same layout (tiny model, micro batch 1, fp32) on `cluster` (default
`this`: the calibrated CPU profile, calibrated once when missing). The crossover of an implementation is the
shortest length from which on it stays ahead of the ring (measured: its paired ratio below 1; predicted: its
planned step shorter), None when it is behind at the longest length.
"""
from __future__ import annotations

import os
import time

import torch

MODEL = dict(n_layer=2, n_head=4, d_model=64)  # the tiny preset
CP_OPS = ("send", "all_to_all")  # what the cp implementations record: ring sends, all-to-all payloads


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


def activation_bytes(par, x: torch.Tensor) -> int:
    """Exact bytes the blocks keep for backward on this rank (one forward, a backward to free the graph, no
    update), the input cut to this rank's tokens as the step cuts it."""
    from shardlab.observe.activations import ActivationBytes

    if par.shard_batch is not None:
        x, _ = par.shard_batch(x, x)
    with ActivationBytes(par.model) as acts:
        out = par.module(x)
    out.float().sum().mul(0.0).backward()  # through the graph once (the ring's backward too), no update
    par.finish()  # a measurement, not a step: sync the backward's gradients, drop them
    par.zero_grad()
    return sum(acts.held.values())


def _tokens(seq: int, r: int) -> torch.Tensor:
    return torch.randint(0, 256, (1, seq + 1), generator=torch.Generator().manual_seed(seq + r))


def _ranks(seqs: list[int], cp: int, impls: list[str], rounds: int) -> list | None:
    """On every rank: {seq: {"times": {impl: [s]}, "bytes": {impl: cp bytes of one step}, "acts": {impl: bytes},
    "load": load average before and after}}; rank 0 returns every rank's."""
    from shardlab import comm

    out = {}
    for seq in seqs:
        pars = {i: _build(seq, cp, i) for i in impls}
        res = {"times": {i: [] for i in impls}, "bytes": {}, "acts": {}, "load": [os.getloadavg()]}
        for i in impls:  # one untimed step each (the warm-up): the bytes it records; then the activations
            data = _tokens(seq, -1)
            first = comm.RECORDER.order
            pars[i].step([(data[:, :-1], data[:, 1:])], max_norm=1.0, global_tokens=seq)
            res["bytes"][i] = sum(rec.bytes for rec in comm.RECORDER.ring if rec.order > first
                                  and rec.op in CP_OPS and rec.tag.startswith("cp."))
            res["acts"][i] = activation_bytes(pars[i], _tokens(seq, -2)[:, :-1])
        for r in range(rounds):
            data = _tokens(seq, r)
            for i in impls[r % len(impls):] + impls[:r % len(impls)]:
                comm.barrier()
                t0 = time.perf_counter()
                pars[i].step([(data[:, :-1], data[:, 1:])], max_norm=1.0, global_tokens=seq)
                res["times"][i].append(time.perf_counter() - t0)
        res["load"].append(os.getloadavg())
        out[seq] = res
        del pars
    every = comm.all_gather_object(out)
    return every if comm.rank() == 0 else None


def formula_bytes(seq: int, cp: int, spec: str) -> int:
    """parallel/cp/cost.py's bytes per rank per step (one microbatch of one sequence, fp32, every layer)."""
    from shardlab.parallel.cp.cost import comm_bytes

    name, u = _impl(spec)
    h, d = MODEL["n_head"], MODEL["d_model"] // MODEL["n_head"]
    return sum(comm_bytes(name, 1, seq, h, h, d, cp, u or cp, 4, MODEL["n_layer"]).values())


def predicted(seq: int, cp: int, spec: str, cluster) -> float:
    """The planner's step seconds for this layout."""
    from shardlab.plan.layout import Layout
    from shardlab.plan.train_spec import TrainSpec
    from shardlab.plan.presets import model_from_args
    from shardlab.plan.step import evaluate

    name, u = _impl(spec)
    lay = Layout(dp=1, cp=cp, cp_impl=name, cp_ulysses=u)
    train = TrainSpec(global_batch=1, micro_batch=1, seq=seq, precision="fp32")
    return evaluate(model_from_args("tiny", seq=seq), train, lay, cluster).step_time


def planner_cluster(name: str, cp: int):
    """The planner's cluster with room for `cp` ranks: `this` is the machine's calibrated profile (calibrated
    once when missing, its collectives measured at `cp` ranks: plan/auto.py), else a preset or a file."""
    from dataclasses import replace

    from shardlab.plan.hardware import load_cluster

    if name == "this":
        from shardlab.plan.auto import machine_cluster
        cluster = machine_cluster(cp)
    else:
        cluster = load_cluster(name)
    return replace(cluster, num_gpus=max(cluster.num_gpus, cp), gpus_per_node=max(cluster.gpus_per_node, cp))


def crossover(rows: list[dict], ahead) -> int | None:
    """The shortest length from which on `ahead(row)` holds at every longer length of the sweep; None when it
    does not hold at the longest."""
    found = None
    for row in reversed(rows):
        if not ahead(row):
            break
        found = row["seq_len"]
    return found


def measure(seqs: list[int], cp: int, impls: list[str], rounds: int, cluster_name: str = "this") -> dict:
    """{"rows": per length and implementation, "crossover": {impl: {"measured", "predicted"}}, "cluster"}."""
    from shardlab.bench import common

    cluster = planner_cluster(cluster_name, cp)
    every = common.run_on_ranks(_ranks, seqs, cp, impls, rounds, world=cp)
    ring, rows = impls[0], []
    for seq in seqs:
        per = [e[seq] for e in every]
        t = per[0]["times"]
        row = {"seq_len": seq, "cp": cp, "load_avg": [list(x) for x in per[0]["load"]]}
        for i in impls:
            formula = formula_bytes(seq, cp, i)
            row[i] = {"step_s": common.stats(t[i]), "predicted_s": predicted(seq, cp, i, cluster),
                      "paired_vs_ring": common.median_ci([b / a for a, b in zip(t[ring], t[i])]),
                      "bytes": [p["bytes"][i] for p in per], "formula_bytes": formula,
                      "bytes_exact": all(p["bytes"][i] == formula for p in per),
                      "act_bytes": max(p["acts"][i] for p in per)}
        rows.append(row)
    cross = {i: {"measured": crossover(rows, lambda r, i=i: r[i]["paired_vs_ring"]["median"] < 1),
                 "predicted": crossover(rows, lambda r, i=i: r[i]["predicted_s"] < r[ring]["predicted_s"]),
                 "ahead_everywhere_measured": all(r[i]["paired_vs_ring"]["median"] < 1 for r in rows),
                 "ahead_everywhere_predicted": all(r[i]["predicted_s"] < r[ring]["predicted_s"] for r in rows)}
             for i in impls[1:]}
    return {"cp": cp, "impls": impls, "rows": rows, "crossover": cross, "cluster": cluster.source,
            "bytes_exact": all(r[i]["bytes_exact"] for r in rows for i in impls)}


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
