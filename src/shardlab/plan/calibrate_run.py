"""Calibration one run's explanation needs beyond the machine's profile, measured once and cached
(`shardlab explain`, docs/explain.md):

- **collectives at the run's world size.** The profile fits gloo's alpha-beta at world 2 (`measured_world`);
  a run of 4 ranks on 2 cores is another machine for its collectives: every ring step waits for a peer that
  must first be scheduled. `collectives_at(world)` measures all_reduce / reduce_scatter / all_gather (and
  the overlap efficiency) at that world, as `shardlab plan calibrate` does at world 2.
- **the trainer's per-step cost of this layout.** The profile's trainer cost is the residual of a `ddp` /
  `single` miniature; a layout's own Python (FSDP2's hooks and DTensor dispatch, ZeRO's bucket packing,
  TP's f/g operators, a schedule's send and receive posts) and the latency and skew of its per-call
  collectives are not in it. `layout_overhead(run_dir, ...)` trains a miniature of the run itself (its
  config: layout, world, tracing, doctor; the same blocks at 1 dim per head, 8 positions, micro batch 1)
  and takes what the planner does not predict of that near-empty step. The residual is in CPU seconds
  (x the core share the miniature had), so a run on busier cores pays it at its own share.

Neither ever sees the run's model shape or micro batch: the prediction of the run's compute and transfer
times stays the profile's. Cached in $SHARDLAB_CACHE/explain_calibration.json, keyed by the profile (its
`source` stamp) and by the world or the layout; a new profile starts an empty cache.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from .hardware import Cluster, default_profile_path

MINI_STEPS = 30  # the miniature's steps; the trainer's summary takes the median after its warm-up


def _cache_path() -> Path:
    return default_profile_path().parent / "explain_calibration.json"


def _cache(cluster: Cluster) -> dict:
    """This profile's entries (an older profile's are dropped)."""
    try:
        data = json.loads(_cache_path().read_text())
    except (OSError, ValueError):
        data = {}
    return data if data.get("profile") == cluster.source else {"profile": cluster.source}


def _store(data: dict) -> None:
    path = _cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)  # a reader never sees half a file


def collectives_at(cluster: Cluster, world: int) -> Cluster:
    """`cluster` with its collectives and overlap efficiency measured at `world` ranks (cached)."""
    if world < 2 or world == cluster.measured_world:
        return cluster
    data = _cache(cluster)
    key = f"collectives/{world}"
    if key not in data:
        from .calibrate import measure_comm
        print(f"shardlab: calibrating this machine's collectives at world {world} once (seconds)...",
              file=sys.stderr, flush=True)
        got = measure_comm(world, quick=True)
        data[key] = {"collectives": {op: list(v) for op, v in got["collectives"].items()},
                     "overlap_efficiency": got["overlap_efficiency"]}
        _store(data)
    got = data[key]
    return replace(cluster, collectives={op: tuple(v) for op, v in got["collectives"].items()},
                   overlap_efficiency=got["overlap_efficiency"], measured_world=world)


def sync_wait_at_world(cluster: Cluster, world: int) -> Cluster:
    """`cluster` with the sync waits of `world` ranks on this machine (calibrate.measure_sync_wait, cached)."""
    if world < 2:
        return cluster
    data = _cache(cluster)
    key = f"sync/{world}"
    if key not in data:
        from .calibrate import measure_sync_wait
        print(f"shardlab: calibrating the ranks' sync waits at world {world} once (seconds)...", file=sys.stderr,
              flush=True)
        data[key] = measure_sync_wait(world)
        _store(data)
    return replace(cluster, sync_wait=tuple(tuple(p) for p in data[key]))


def mini_overrides(cfg, model) -> list[str]:
    """`shardlab train` overrides that turn the run's config into its miniature: same blocks and layout,
    1 dim per head (llama: 2, rotary needs pairs), 8 positions, micro batch 1, the run's accumulation."""
    llama = model.llama
    per_head = 2 if llama else 1
    out = ["model.preset=custom", f"model.arch={'llama' if llama else 'gpt2'}", f"model.n_layer={model.n_layer}",
           f"model.n_head={model.n_head}", f"model.d_model={model.n_head * per_head}", "train.seq_len=8",
           "train.micro_batch=1", f"train.grad_accum={cfg.train.grad_accum}", "train.global_batch=0",
           f"train.steps={MINI_STEPS}", "train.eval_every=0", f"train.log_every={MINI_STEPS}", "ckpt.final=false",
           "ckpt.every=0", "ckpt.resume=none", "ckpt.init_from=", "parallel.fault_tolerant=false"]
    if llama:
        out += [f"model.n_kv_heads={model.n_kv_heads}",
                f"model.intermediate_size={max(2, model.ffn * per_head * model.n_head // model.d_model)}"]
    return out


def _key(cfg, world: int, model) -> str:
    """What the miniature depends on: the run's config minus what the miniature replaces, and the world."""
    import dataclasses
    d = dataclasses.asdict(cfg)
    for section, drop in (("model", None), ("train", ("steps", "micro_batch", "global_batch", "seq_len", "lr",
                                                       "min_lr", "warmup_steps", "eval_every", "eval_seqs",
                                                       "log_every", "seed")),
                          ("ckpt", None), ("data", None)):
        if drop is None:
            d.pop(section, None)
        else:
            for k in drop:
                d[section].pop(k, None)
    d["blocks"] = [model.n_layer, model.n_head, model.n_kv_heads if model.llama else 0, model.arch]
    d["world"] = world
    return "layout/" + json.dumps(d, sort_keys=True, default=str)


def layout_overhead(run_dir: Path, cfg, model, world: int, cluster: Cluster, plan_of) -> dict:
    """{"cpu_s": the miniature's per-step residual in CPU seconds, "share": its core share, "step_s": its
    measured step} (cached), or {"error": why} when the miniature could not run. `cfg`, `model`: the run's
    config and the planner's model of it; `plan_of(run_dir, cluster, share)` is explain's own Plan of a run
    directory (the same prediction)."""
    data, key = _cache(cluster), _key(cfg, world, model)
    if key in data:
        return data[key]
    print(f"shardlab explain: measuring this layout's trainer cost once on a miniature ({model.n_layer} blocks, "
          f"world {world}, {MINI_STEPS} steps)...", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "mini"
        cmd = [sys.executable, "-m", "shardlab", "train", "--config", str(run_dir / "config.toml"),
               "--nproc", str(world), "--out", str(out), *mini_overrides(cfg, model)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                                  env=dict(os.environ, OMP_NUM_THREADS="1"))
        except subprocess.TimeoutExpired:
            return {"error": "the miniature did not finish within 600 s"}
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
            return {"error": f"the miniature failed: {tail[:200]}"}
        summary = json.loads((out / "summary.json").read_text())
        share = float(summary.get("core_share") or 1.0)
        plan = plan_of(out, cluster, share)
    residual = summary["step_time_s"] - (plan.step_time - plan.times["trainer"])
    got = {"cpu_s": max(0.0, residual) * share, "share": share, "step_s": summary["step_time_s"]}
    data = _cache(cluster)  # re-read: another explain may have added entries meanwhile
    data[key] = got
    _store(data)
    return got
