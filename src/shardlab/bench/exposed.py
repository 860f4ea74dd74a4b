"""Exposed communication (figure `exposed_comm_frac`, reported by `bench ddp`).

Exposed communication is the part of a step's gradient communication that no computation hides:
the union of the collectives' launch -> completion intervals minus the compute spans, from the trace
(observe/analysis.py). What remains is time the step waits for the wire, mostly the all-reduce of the
last bucket, launched when backward ends. `exposed_comm_frac` = exposed comm / step time.

Two measurements:
- of record: a traced `ddp` training run with the default configuration (world 2, micro batch 8,
  default buckets) through the real trainer; per step (mean over ranks) exposed / step, the median
  over steps after warm-up with a bootstrap 90% interval, and the load average at start and end.
- levers, paired: one process group holds one `ddp` replica per bucket layout (same init, same
  batches) and trains them in rotation (A B C, then B C A, ...), a barrier before each step, every
  step traced. Per layout the median exposed fraction and its interval, and per pair of steps the
  step-time ratio against the first layout. Absolute times drift with the machine's load; pairs do not.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from shardlab.bench import common
from shardlab.bench.common import bootstrap_median
from shardlab.bench.tracing import traced_step


def frac_stats(xs: list[float]) -> dict:
    """Median, bootstrap 90% interval of the median, min-max and n."""
    s = common.stats(xs)
    s["ci90"] = list(bootstrap_median(xs)) if xs else [None, None]
    return s


def _key(c: dict) -> tuple:
    a = c["args"]
    return a["group"], tuple(a.get("group_ranks") or ()), a["seq"]


def step_fractions(traces: dict, key=None) -> dict:
    """Per step span: exposed / step (each the mean over ranks), grouped by `key(span args)`; also the
    exposed time split by collective tag, and the part of it spent waiting for a peer: before the
    last member launched the same collective (on a loaded machine, a rank the scheduler held back)."""
    from shardlab.observe import analysis
    from shardlab.observe.intervals import clip, total

    last_launch: dict = {}
    for rt in traces.values():
        for c in rt.comms:
            last_launch[_key(c)] = max(last_launch.get(_key(c), c["t0"]), c["t0"])
    per: dict = {}
    for rt in traces.values():
        for s in (x for x in rt.spans if x["cat"] == "step"):
            pieces = analysis.exposed_pieces(rt, s["t0"], s["t1"])
            tags: dict = {}
            for c, mine in pieces:
                tag = c["args"].get("tag") or c["name"]
                tags[tag] = tags.get(tag, 0.0) + total(mine)
            wait = sum(total(clip(mine, c["t0"], last_launch[_key(c)])) for c, mine in pieces)
            k = (key(s["args"]) if key else None, s["args"].get("step"))
            per.setdefault(k, []).append((sum(tags.values()), s["t1"] - s["t0"], tags, wait))
    out: dict = {}
    for (group, step), xs in sorted(per.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        exposed = statistics.fmean(x[0] for x in xs)
        step_s = statistics.fmean(x[1] for x in xs)
        tags = {t: statistics.fmean(x[2].get(t, 0.0) for x in xs) for t in dict.fromkeys(t for x in xs for t in x[2])}
        out.setdefault(group, []).append({"step": step, "exposed_s": exposed, "step_s": step_s,
                                          "frac": exposed / step_s, "exposed_by_tag_s": tags,
                                          "wait_s": statistics.fmean(x[3] for x in xs)})
    return out


def of_record(work: Path, quick: bool) -> dict:
    """The traced default `ddp` run at world 2 (micro batch 8): the figure of record."""
    from shardlab.observe import analysis

    steps = 16 if quick else 60
    load = {"start": os.getloadavg()[0]}
    run = common.run_jobs([{"name": "ddp", "out": work / "exposed-ddp",
                            "overrides": [*common.BASE, *common.model_overrides(quick), "parallel.strategy=ddp",
                                          "train.micro_batch=8", "trace.enabled=true", f"train.steps={steps}"]}],
                          2, work)[0]
    load["end"] = os.getloadavg()[0]
    rows = step_fractions(analysis.load(run["dir"]))[None]
    warm = max(3, steps // 10)  # as the trainer's and the trace's warm-up: the first steps are not typical
    kept = [r for r in rows if r["step"] is not None and r["step"] >= warm] or rows
    return {"frac": frac_stats([r["frac"] for r in kept]),
            "exposed_ms": frac_stats([1e3 * r["exposed_s"] for r in kept]),
            "wait_frac": frac_stats([r["wait_s"] / r["step_s"] for r in kept]),
            "step_ms": frac_stats([1e3 * r["step_s"] for r in kept]), "steps": len(kept), "warm": warm,
            "load": load,
            "summary": {k: run["summary"].get(k) for k in ("overlap_pct", "exposed_comm_s", "step_time_s")}}


def paired_layouts_fn(steps: int, model_kw: dict, layouts: dict, micro_batch: int = 8, seq: int = 128,
                      keep: bool = False) -> dict:
    """On every rank: one traced `ddp` replica per layout (name -> parallel.* overrides), trained in
    rotation on the same batches. Rank 0 analyses every rank's trace."""
    from shardlab import comm, parallel
    from shardlab.config import Config
    from shardlab.data.corpus import load_tokens
    from shardlab.data.dataset import TokenDataset, get_batch
    from shardlab.model.gpt import GPTConfig, build_model
    from shardlab.observe import analysis, timeline

    rank, world = comm.rank(), comm.world_size()
    data = TokenDataset(load_tokens("stdlib"), seq)
    runs = {}
    for name, overrides in layouts.items():
        cfg = Config()
        cfg.parallel.strategy = "ddp"
        for k, v in overrides.items():
            setattr(cfg.parallel, k, v)
        model = build_model(GPTConfig(vocab_size=256, max_seq_len=seq, **model_kw), seed=1337)
        runs[name] = parallel.build(cfg, torch.device("cpu"), model)
    names = list(runs)
    tmp = comm.broadcast_object(tempfile.mkdtemp(prefix="shardlab-exposed-") if rank == 0 else None, src=0)
    g = torch.Generator().manual_seed(0)
    load = {"start": os.getloadavg()[0]}
    timeline.enable(tmp, rank)
    for step in range(steps):
        idx = torch.randint(0, len(data), (world, micro_batch), generator=g)[rank]
        x, y = get_batch(data, idx.tolist())
        for name in names[step % len(names):] + names[:step % len(names)]:
            par = runs[name]
            comm.barrier()
            traced_step(par, x, y, step, layout=name)
    timeline.dump()
    timeline.disable()
    comm.barrier()
    load["end"] = os.getloadavg()[0]
    if rank != 0:
        return {}
    per = step_fractions(analysis.load(tmp), key=lambda a: a.get("layout"))
    if not keep:  # (keep: the trace stays for a closer look, its path in the result)
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return {"per_step": per, "load": load, "trace_dir": tmp if keep else None,
            "layouts": {n: [b["bytes"] for b in runs[n].dp.bucket_layout()] for n in names}}


def summarize_layouts(result: dict, warm: int) -> list[dict]:
    per = result["per_step"]
    names = list(result["layouts"])
    base = {r["step"]: r["step_s"] for r in per[names[0]]}
    rows = []
    for n in names:
        kept = [r for r in per[n] if r["step"] >= warm]
        rows.append({"layout": n, "bucket_bytes": result["layouts"][n],
                     "exposed_comm_frac": frac_stats([r["frac"] for r in kept]),
                     "exposed_ms": frac_stats([1e3 * r["exposed_s"] for r in kept]),
                     "wait_ms": frac_stats([1e3 * r["wait_s"] for r in kept]),
                     "step_ratio_vs_first": frac_stats([r["step_s"] / base[r["step"]] for r in kept]),
                     "exposed_ms_by_tag": {t: statistics.median(1e3 * r["exposed_by_tag_s"].get(t, 0.0) for r in kept)
                                           for t in dict.fromkeys(t for r in kept for t in r["exposed_by_tag_s"])}})
    return rows


def fmt(s: dict, scale: float = 1.0, digits: int = 3) -> str:
    """median [90% interval]"""
    if s["median"] is None:
        return "-"
    lo, hi = s["ci90"]
    return f"{s['median'] * scale:.{digits}f} [{lo * scale:.{digits}f}, {hi * scale:.{digits}f}]"


if __name__ == "__main__":  # exploration: python -m shardlab.bench.exposed STEPS name=k:v,k:v ...
    import sys

    layouts = {}
    for arg in sys.argv[2:]:
        name, _, kv = arg.partition("=")
        layouts[name] = {k: float(v) for k, v in (p.split(":") for p in kv.split(",") if p)}
    t0 = time.time()
    res = common.run_on_ranks(paired_layouts_fn, int(sys.argv[1]), common.MODEL_KW["full"], layouts, 8, 128, True)
    for row in summarize_layouts(res, 4):
        print(row["layout"], [round(b / 2**20, 2) for b in row["bucket_bytes"]], "frac", fmt(row["exposed_comm_frac"]),
              "exposed ms", fmt(row["exposed_ms"], 1, 1), "of which waiting for the peer", fmt(row["wait_ms"], 1, 1),
              "step/first", fmt(row["step_ratio_vs_first"]))
        print("   by tag (median ms):", {t: round(v, 1) for t, v in row["exposed_ms_by_tag"].items()})
    print("load", res["load"], f"{time.time() - t0:.0f} s", res["trace_dir"])
