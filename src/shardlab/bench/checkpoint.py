"""What a checkpoint costs: figures `save_bw_ratio`, `async_block_ratio` (small model), the same with
`_gpt2` (the gpt2 preset, 124M parameters: ~1.5 GB of model + AdamW state at world 2), `load_bw_ratio_gpt2`,
and `save_fixed_ms` (a tiny model's save, with where its time goes).

Two ranks (torch-ddp, world 2) train a model for a step so the AdamW state exists, then, per model:

- save_bw_ratio: a full synchronous shardlab save (every rank writes its DCP shards, hashing them as it
  writes, fsync; rank 0 writes the manifest, renames, replaces `latest`) against a plain write of the same
  bytes by the same writers: every rank writes the bytes it wrote in that save (its shard files; rank 0 also
  .metadata and train_state.json) as one file, 8 MiB writes, the kernel asked to start writing every 32 MiB
  as they are written (as the save's stream does since 2026-12-06), fsync, all ranks at once. Both are
  timed on rank 0 from a barrier to a barrier, and both are durable when timed. Deleting old checkpoints
  (retention) is not saving: it runs after the commit and is finished, untimed, before the next
  measurement. Ratio = t_plain / t_save = save bandwidth / plain bandwidth, per pair (alternating A B, B A).
  Also reported, paired in the same rounds and without a goal: `save_fsync_ratio` against the plain write
  that leaves the whole file to its fsync (the plain write until 2026-12-06: slower on this machine's disk
  than writing out as it goes, so once the save wrote out early it flattered the save).
- load_bw_ratio: shardlab's load of that checkpoint as a resume does it (every rank re-verifies the
  checksums of its share of the files, the shard files while DCP reads them, and DCP reads what the rank
  holds, straight into the live tensors where the layout is the same: under DDP every rank holds everything)
  against a plain read of the same bytes by the same readers: every rank reads every file once, each into
  its own place in one resident buffer as large as the checkpoint (allocated and touched before timing, as
  the live state is), so that afterwards the bytes are in memory, as after a load. Both read the files just
  written, from the page cache: what is compared is the work on top of the bytes, not the disk. Also
  reported, paired in the same rounds and without a goal: `load_stream_ratio` against a read that streams
  every file through one reused 8 MiB buffer (the kernel's page-cache copy alone: the destination stays in
  the CPU cache, so it does not pay for writing 1.6 GB into memory; it bounds what any load can reach);
  and `load_cpu_ratio`, the plain read's CPU time over the load's, in rank 0's process (time.process_time,
  barriers excluded): the same comparison without the machine's scheduling, which moves the wall-clock
  ratio on a shared 2-core machine.
- async_block_ratio: how long an async save holds the training loop (in `save()`: take the state dicts and
  start the writer thread; plus any wait of the next optimizer step for the writer's copy of the tensors)
  against a synchronous save, per pair. Between saves the loop trains `gap` steps, then waits for the
  background save (a save waits for the previous one anyway).
- save_fixed_ms: a synchronous save of the tiny model (~1 MB): what a save costs whatever its size, split
  into the manager's phases on rank 0 (CheckpointManager._phases), and the copy an async save makes first.

Every ratio: median over the pairs with a bootstrap 90% interval and min-max; the load average (1 min) at
the start and end of each model's measurement. A figure whose interval spans its goal says so.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from shardlab.bench import common
from shardlab.bench.checkpoint_probes import Probes

MODELS = {"tiny": ["model.preset=tiny"], "small": ["model.preset=small"], "gpt2": ["model.preset=gpt2"]}
# (model, pairs, steps between async saves, micro batch); --quick measures the tiny model in the small
# model's place so that it runs in seconds (a smoke test of the method, not figures of record).
PLAN = {"quick": [("tiny", 2, 1, 4)],
        "full": [("small", 8, 4, 4), ("gpt2", 8, 1, 1)]}
FIXED_SAVES = {"quick": 2, "full": 9}
RESTARTS = {"quick": 1, "full": 3}  # resumed runs timed per model (restart_s)
GOALS = {"save_bw_ratio": (0.8, True), "async_block_ratio": (0.1, False), "load_bw_ratio": (0.8, True)}
PHASES = ("planning_s", "write_s", "hash_s", "fsync_s", "metadata_s", "barrier_s", "commit_s", "other_s")


def _nbytes(obj) -> int:
    """Bytes of the tensors in a (nested) state dict; a DTensor counts its local shard."""
    import torch

    if torch.is_tensor(obj):
        local = obj.to_local() if hasattr(obj, "to_local") else obj
        shards = local.local_shards() if hasattr(local, "local_shards") else [local]
        return sum(t.numel() * t.element_size() for t in shards)
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v) for v in obj)
    return 0


def _trainer(work: Path, overrides: list[str]):
    from shardlab import comm, config as config_mod
    from shardlab.bench.measure import shardlab_step
    from shardlab.train.trainer import Trainer

    cfg = config_mod.load(None, common.BASE + overrides)
    cfg = config_mod.validate(cfg, comm.world_size())
    run = work / "run"
    shutil.rmtree(run, ignore_errors=True)
    comm.barrier()
    run.mkdir(parents=True, exist_ok=True)
    tr = Trainer(cfg, run)
    shardlab_step(tr)  # the optimizer state exists after the first step
    return tr


def _overrides(model: str, micro_batch: int) -> list[str]:
    return ["parallel.strategy=torch-ddp", f"train.micro_batch={micro_batch}", "ckpt.keep=2",
            "train.steps=10000", *MODELS[model]]


def _save_pairs(probe: Probes, model: str, pairs: int, say) -> tuple[list, list, list, dict]:
    """save_bw: shardlab's save against a plain write of the bytes this rank wrote in it (its write-out
    started as it goes, as the save's is), alternating A B, B A; and against the plain write that leaves
    everything to the fsync (save_fsync_ratio, the plain write until 2026-12-06). Returns (rows, ratios
    t_plain / t_save, ratios t_fsync_only / t_save, the last save's manifest)."""
    rows, bw, bw_fsync = [], [], []
    _, manifest = probe.save()  # warm-up (file creation paths, DCP's plan cache)
    for i in range(pairs):
        say(f"save vs plain write, pair {i + 1}/{pairs}")
        probe.st.step += 1  # a new checkpoint name each time (retention keeps the directory small)
        if i % 2 == 0:
            t_plain = probe.plain_write(probe.my_bytes(manifest))
            t_fsync = probe.plain_write(probe.my_bytes(manifest), early=False)
            t_save, manifest = probe.save()
        else:
            t_save, manifest = probe.save()
            t_fsync = probe.plain_write(probe.my_bytes(manifest), early=False)
            t_plain = probe.plain_write(probe.my_bytes(manifest))
        bw.append(t_plain / t_save)
        bw_fsync.append(t_fsync / t_save)
        nbytes = manifest["total_bytes"]
        rows.append({"test": "save_bw", "model": model, "pair": i, "bytes": nbytes, "t_save_s": t_save,
                     "t_plain_s": t_plain, "t_plain_fsync_only_s": t_fsync,
                     **{f"rank0_{k}": v for k, v in probe.mgr.timing.items()},
                     "save_MBps": nbytes / t_save / 1e6, "plain_MBps": nbytes / t_plain / 1e6})
    return rows, bw, bw_fsync, manifest


def _load_pairs(probe: Probes, model: str, pairs: int, say) -> tuple[list, list, list]:
    """load_bw: shardlab's load of the latest checkpoint against a resident and a streamed plain read of
    it. Returns (rows, ratios t_plain / t_load, ratios t_stream / t_load, the plain read's / the load's CPU
    time on rank 0)."""
    from shardlab.checkpoint import manifest as mf

    rows, rd, rd_stream, rd_cpu = [], [], [], []
    latest = mf.read_latest(probe.mgr.dir)
    for i in range(pairs):
        say(f"load vs plain read, pair {i + 1}/{pairs}")
        if i % 2 == 0:
            t_plain = probe.plain_read(latest, stream=False)
            cpu_plain = probe.cpu_s
            t_stream = probe.plain_read(latest, stream=True)
            t_load, phases = probe.load(latest)
        else:
            t_load, phases = probe.load(latest)
            t_stream = probe.plain_read(latest, stream=True)
            t_plain = probe.plain_read(latest, stream=False)
            cpu_plain = probe.cpu_s
        rd.append(t_plain / t_load)
        rd_cpu.append(cpu_plain / phases["cpu_s"])
        rd_stream.append(t_stream / t_load)
        nbytes = mf.read_manifest(latest)["total_bytes"]
        rows.append({"test": "load_bw", "model": model, "pair": i, "bytes_per_rank": nbytes, "t_load_s": t_load,
                     "t_plain_s": t_plain, "t_stream_s": t_stream, **{f"rank0_{k}": v for k, v in phases.items()}})
    probe.resident = None  # the checkpoint-sized buffer goes before the async measurement
    return rows, rd, rd_stream, rd_cpu


def _async_pairs(probe: Probes, tr, model: str, pairs: int, gap: int, manifest: dict, say) -> tuple[list, list, dict]:
    """async_block: how long an async save holds the loop against a synchronous one, `gap` training steps
    after each. Returns (rows, ratios async / sync, the first step's seconds after each kind of save)."""
    from shardlab import comm
    from shardlab.bench.measure import shardlab_step

    mgr, st = probe.mgr, probe.st
    rows, block, first_step = [], [], {True: [], False: []}  # async_ -> the first step's seconds after the save
    for i in range(pairs):
        say(f"async vs sync save, pair {i + 1}/{pairs}")
        st.step += 1
        order = (True, False) if i % 2 == 0 else (False, True)
        got = {}
        for async_ in order:
            comm.barrier()
            t0 = time.perf_counter()
            mgr.save(st, async_=async_)
            got[async_] = time.perf_counter() - t0
            for k in range(gap):  # training continues; after an async save the first step overlaps the write
                t1 = time.perf_counter()
                shardlab_step(tr)
                if k == 0:
                    first_step[async_].append(time.perf_counter() - t1)
            mgr.wait()
            assert mgr.last_outcome is None, mgr.last_outcome
            if async_:  # the next optimizer step may have waited for the background copy: loop time too
                got[True] += mgr.hook_wait_s
                stage_s = mgr.timing.get("stage_s")
                staged_bytes = mgr.staged_bytes  # the extra host memory an async save keeps
            st.step += 1
        block.append(got[True] / got[False])
        rows.append({"test": "async_block", "model": model, "pair": i, "blocked_async_s": got[True],
                     "blocked_sync_s": got[False], "stage_s": stage_s,
                     "staged_bytes_rank0": staged_bytes, "written_bytes_rank0": probe.my_bytes(manifest)})
    return rows, block, first_step


def _rank_main(work: str, model: str, pairs: int, gap: int, micro_batch: int) -> dict:
    """Runs on every rank of a 2-rank pool: save vs plain write, load vs plain read, async vs sync. The run
    directory stays (its latest checkpoint is what the restart measurement resumes from)."""
    from shardlab import comm

    work = Path(work)
    load = {"start": os.getloadavg()[0]}
    tr = _trainer(work, _overrides(model, micro_batch))
    probe = Probes(work, tr)
    say = (lambda msg: common.progress(f"  {model}: {msg}")) if comm.rank() == 0 else (lambda msg: None)
    save_rows, bw, bw_fsync, manifest = _save_pairs(probe, model, pairs, say)
    load_rows, rd, rd_stream, rd_cpu = _load_pairs(probe, model, pairs, say)
    async_rows, block, first_step = _async_pairs(probe, tr, model, pairs, gap, manifest, say)
    tr.ckpt.close(tr.state)
    load["end"] = os.getloadavg()[0]
    from shardlab.checkpoint import manifest as mf
    return {"rows": save_rows + load_rows + async_rows, "bw": bw, "bw_fsync": bw_fsync, "read": rd,
            "read_stream": rd_stream,
            "read_cpu": rd_cpu,
            "block": block, "steps_busy": first_step[True], "steps_idle": first_step[False], "load_avg": load,
            "latest": str(mf.read_latest(tr.ckpt.dir)), "t_load": [r["t_load_s"] for r in load_rows]}


def _restart(work: Path, ckpt: Path, model: str, micro_batch: int, rounds: int) -> dict:
    """restart_s: a resumed run as a user starts one, `shardlab train --nproc 2 ... ckpt.resume=CKPT` in a
    fresh process, from the launch to its first step (the first row of its metrics.jsonl, polled every
    10 ms): interpreter and torch import, the launcher's check of the checkpoint (every file's checksum,
    checkpoint/resume_path.py), torchrun, process groups, the model, the load, one step. Also timed here:
    that launcher check alone (`verify_s`, in this process, the files in the page cache as they are then)."""
    import subprocess
    import sys

    from shardlab.checkpoint import manifest as mf

    out = {"restart_s": [], "verify_s": []}
    for i in range(rounds):
        t0 = time.perf_counter()
        assert not mf.verify(ckpt)
        out["verify_s"].append(time.perf_counter() - t0)
        run = work / f"restart_{i}"
        shutil.rmtree(run, ignore_errors=True)
        step = mf.read_manifest(ckpt)["step"]
        cmd = [sys.executable, "-m", "shardlab", "train", "--nproc", "2", "--out", str(run),
               *common.BASE, *_overrides(model, micro_batch), f"train.steps={step + 1}", f"ckpt.resume={ckpt}"]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        first = None
        while first is None and proc.poll() is None:
            try:
                if '"step"' in (run / "metrics.jsonl").read_text():
                    first = time.perf_counter() - t0
            except OSError:
                pass
            time.sleep(0.01)
        _, err = proc.communicate(timeout=600)
        if first is None or proc.returncode != 0:
            raise RuntimeError(f"the resumed run failed (exit {proc.returncode}): {err[-2000:]}")
        out["restart_s"].append(first)
        shutil.rmtree(run, ignore_errors=True)
    return out


def _fixed_main(work: str, saves: int) -> dict:
    """Where a tiny save's time goes: `saves` synchronous saves (rank 0's phases), then as many async
    ones (the copy they make first)."""
    from shardlab import comm

    work = Path(work)
    tr = _trainer(work, _overrides("tiny", 4))
    mgr, st = tr.ckpt, tr.state
    mgr.save(st, async_=False)  # warm-up
    mgr.wait()
    totals, phases, stage = [], [], []
    for _ in range(saves):
        st.step += 1
        comm.barrier()
        t0 = time.perf_counter()
        mgr.save(st, async_=False)
        comm.barrier()
        totals.append(time.perf_counter() - t0)
        phases.append(dict(mgr.timing))
        mgr.wait()
    for _ in range(saves):
        st.step += 1
        mgr.save(st, async_=True)
        mgr.wait()
        stage.append(mgr.timing["stage_s"])
    mgr.close(st)
    shutil.rmtree(work / "run", ignore_errors=True)
    return {"totals": totals, "phases": phases, "stage": stage}


def _figure(figures: dict, name: str, s: dict, digits: int = 4) -> None:
    figures[name] = round(s["median"], digits)
    figures[f"{name}_lo90"], figures[f"{name}_hi90"] = (round(x, digits) for x in s["ci90"])
    figures[f"{name}_min"], figures[f"{name}_max"] = round(s["min"], digits), round(s["max"], digits)


def run(out_dir: Path, quick: bool, pool=None) -> dict:
    """`pool`: a running 2-rank WorkerPool to use (the tests pass theirs), else one is started."""
    import contextlib

    from shardlab.launch.workers import WorkerPool

    out_dir = Path(out_dir)
    work = out_dir / "work"
    shutil.rmtree(work, ignore_errors=True)
    plan = PLAN["quick" if quick else "full"]
    limit = 300 if quick else 3600  # seconds per measurement on the ranks: never hang
    figures, rows, verdicts, loads, per_model = {}, [], {}, {}, {}
    with contextlib.nullcontext(pool) if pool is not None else WorkerPool(2, timeout=limit) as pool:
        common.progress(f"fixed cost: {FIXED_SAVES['quick' if quick else 'full']} saves of the tiny model")
        fixed = pool.run(_fixed_main, str(work), FIXED_SAVES["quick" if quick else "full"], timeout=limit)[0]
        for model, pairs, gap, micro_batch in plan:
            common.progress(f"{model}: {pairs} pairs each of save/plain write, load/plain read, async/sync save "
                            f"(2 ranks, torch-ddp); load average {os.getloadavg()[0]:.2f}")
            res = pool.run(_rank_main, str(work), model, pairs, gap, micro_batch, timeout=limit)[0]
            suffix = "" if model in ("small", "tiny") else f"_{model}"
            stats = {"save_bw_ratio": common.ratio_stats(res["bw"]),
                     "load_bw_ratio": common.ratio_stats(res["read"]),
                     "async_block_ratio": common.ratio_stats(res["block"])}
            _figure(figures, "load_stream_ratio" + suffix, common.ratio_stats(res["read_stream"]))  # no goal
            _figure(figures, "load_cpu_ratio" + suffix, common.ratio_stats(res["read_cpu"]))  # no goal
            _figure(figures, "save_fsync_ratio" + suffix, common.ratio_stats(res["bw_fsync"]))  # no goal
            for name, s in stats.items():
                _figure(figures, name + suffix, s)
                goal, higher = GOALS[name]
                verdicts[name + suffix] = common.goal_verdict(s["ci90"], goal, ">=" if higher else "<=")
            rounds = RESTARTS["quick" if quick else "full"]
            common.progress(f"{model}: {rounds} resumed runs, launch to first step; load average "
                            f"{os.getloadavg()[0]:.2f}")
            rs = _restart(work, Path(res["latest"]), model, micro_batch, rounds)
            shutil.rmtree(work / "run", ignore_errors=True)
            restart = common.ratio_stats(rs["restart_s"])
            _figure(figures, "restart_s" + suffix, restart, digits=3)
            t_load, t_verify = common.stats(res["t_load"])["median"], common.stats(rs["verify_s"])["median"]
            figures["restart_load_share" + suffix] = round(t_load / restart["median"], 4)
            figures["restart_verify_share" + suffix] = round(t_verify / restart["median"], 4)
            res["load_avg"]["after_restarts"] = os.getloadavg()[0]
            rows += [{"test": "restart", "model": model, "round": i, "t_restart_s": t, "t_verify_s": v}
                     for i, (t, v) in enumerate(zip(rs["restart_s"], rs["verify_s"]))]
            rows += res["rows"]
            loads[model] = res["load_avg"]
            per_model[model] = {"stats": stats, "busy": common.stats(res["steps_busy"]),
                                "idle": common.stats(res["steps_idle"])}
    shutil.rmtree(work, ignore_errors=True)
    _figure(figures, "save_fixed_ms", common.ratio_stats([t * 1e3 for t in fixed["totals"]]), digits=2)
    breakdown = {p: common.stats([ph.get(p, 0.0) for ph in fixed["phases"]])["median"] * 1e3 for p in PHASES}
    breakdown["stage_s"] = common.stats(fixed["stage"])["median"] * 1e3  # async saves only
    for p, ms in breakdown.items():
        figures[f"save_fixed_{p[:-2]}_ms"] = round(ms, 2)
    rows += [{"test": "fixed", "save": i, "t_save_s": t, **{f"rank0_{k}": v for k, v in ph.items()}}
             for i, (t, ph) in enumerate(zip(fixed["totals"], fixed["phases"]))]
    doc = common.write_results(out_dir, "checkpoint", figures, rows)
    doc.update(verdicts=verdicts, load_avg=loads)  # beside the contract's keys: what each goal's interval says
    (out_dir / "results.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    _report(out_dir, quick, figures, rows, verdicts, loads, per_model, breakdown)
    return doc


def _ci(figures: dict, name: str, digits: int = 3) -> str:
    f = f"{{:.{digits}f}}"
    return (f"{f.format(figures[name])} (90% CI {f.format(figures[name + '_lo90'])}–"
            f"{f.format(figures[name + '_hi90'])}; min–max {f.format(figures[name + '_min'])}–"
            f"{f.format(figures[name + '_max'])})")


def _report(out_dir, quick, figures, rows, verdicts, loads, per_model, breakdown) -> None:
    sections = ["Two ranks (torch-ddp) save their full training state (model, AdamW state, RNG, sampler) with "
                "shardlab's checkpoint manager. Method: `shardlab/bench/checkpoint.py`; what changed and why: "
                "docs/checkpoint.md. " + ("**--quick: the tiny model stands in for the small one; a smoke test "
                                          "of the method, not figures of record.**" if quick else "")]
    for model, pm in per_model.items():
        sfx = "" if model in ("small", "tiny") else f"_{model}"
        load = loads[model]
        save_rows = [r for r in rows if r["test"] == "save_bw" and r["model"] == model]
        load_rows = [r for r in rows if r["test"] == "load_bw" and r["model"] == model]
        async_rows = [r for r in rows if r["test"] == "async_block" and r["model"] == model]
        gb = save_rows[0]["bytes"] / 1e9 if save_rows else 0
        sections.append(
            f"## {model} ({gb:.3f} GB per checkpoint; load average {load['start']:.1f} at the start, "
            f"{load['end']:.1f} at the end, on {os.cpu_count()} cores)\n\n"
            f"- **save_bw_ratio{sfx} = {_ci(figures, 'save_bw_ratio' + sfx)}**, goal ≥ 0.8: "
            f"{verdicts['save_bw_ratio' + sfx]}; against a plain write that leaves the whole file to its fsync "
            f"(no goal: the plain write of the figures before 2026-12-06) save_fsync_ratio{sfx} = "
            f"{_ci(figures, 'save_fsync_ratio' + sfx)}\n"
            f"- **load_bw_ratio{sfx} = {_ci(figures, 'load_bw_ratio' + sfx)}**, goal ≥ 0.8: "
            f"{verdicts['load_bw_ratio' + sfx]}; against a read streamed through one reused 8 MiB buffer "
            f"(no goal: the page-cache copy alone) load_stream_ratio{sfx} = {_ci(figures, 'load_stream_ratio' + sfx)}; "
            f"in rank 0's CPU time (no goal: what the machine's scheduling does not move) "
            f"load_cpu_ratio{sfx} = {_ci(figures, 'load_cpu_ratio' + sfx)}\n"
            f"- **async_block_ratio{sfx} = {_ci(figures, 'async_block_ratio' + sfx, 4)}**, goal ≤ 0.1: "
            f"{verdicts['async_block_ratio' + sfx]}\n"
            f"- **restart_s{sfx} = {_ci(figures, 'restart_s' + sfx)}** s from launching a resumed run to its first "
            f"step; the load's share {figures['restart_load_share' + sfx]:.2f} (the load pairs' median), the "
            f"launcher's checksum pass's {figures['restart_verify_share' + sfx]:.2f}; load average "
            f"{load.get('after_restarts', 0):.1f} after them\n\n"
            + common.md_table(["pair", "save s", "plain write s", "fsync-only plain write s", "save MB/s", "plain MB/s", "rank 0: plan",
                               "write", "hash (not hidden)", "fsync", "barrier", "commit"],
                              [[r["pair"], f"{r['t_save_s']:.3f}", f"{r['t_plain_s']:.3f}",
                                f"{r['t_plain_fsync_only_s']:.3f}", f"{r['save_MBps']:.0f}",
                                f"{r['plain_MBps']:.0f}", f"{r['rank0_planning_s']:.3f}", f"{r['rank0_write_s']:.3f}",
                                f"{r['rank0_hash_s']:.3f}", f"{r['rank0_fsync_s']:.3f}", f"{r['rank0_barrier_s']:.3f}",
                                f"{r['rank0_commit_s']:.3f}"] for r in save_rows])
            + "\n\n"
            + common.md_table(["pair", "load s", "rank 0: DCP read (+ verify)", "apply state dicts",
                               "MB read straight into tensors", "plain read s", "streamed read s"],
                              [[r["pair"], f"{r['t_load_s']:.3f}", f"{r['rank0_read_s']:.3f}",
                                f"{r['rank0_apply_s']:.3f}", f"{r['rank0_direct_bytes'] / 1e6:,.0f}",
                                f"{r['t_plain_s']:.3f}", f"{r['t_stream_s']:.3f}"] for r in load_rows])
            + "\n\n"
            + common.md_table(["pair", "async: loop held s", "sync: loop held s", "async copy (background) s"],
                              [[r["pair"], f"{r['blocked_async_s']:.4f}", f"{r['blocked_sync_s']:.3f}",
                                f"{r['stage_s']:.3f}" if r["stage_s"] is not None else "-"] for r in async_rows])
            + (f"\n\nAn async save keeps a copy of what the rank writes in host memory: rank 0 copied "
               f"{async_rows[-1]['staged_bytes_rank0'] / 1e6:,.1f} MB and writes "
               f"{async_rows[-1]['written_bytes_rank0'] / 1e6:,.1f} MB (its shards; under DDP each replicated "
               f"tensor is written, and copied, by one rank)." if async_rows else "")
            + f"\n\nThe first step after an async save (it overlaps the background write) took "
              f"{common.fmt_stats(pm['busy'], 1e3, 1)} ms, the first after a synchronous save "
              f"{common.fmt_stats(pm['idle'], 1e3, 1)} ms.")
    sections.append(
        f"## Fixed cost of a save (tiny model)\n\n**save_fixed_ms = {_ci(figures, 'save_fixed_ms', 1)}** "
        f"(barrier to barrier, rank 0). Median of each phase on rank 0 (ms):\n\n"
        + common.md_table(["phase", "ms", "what"],
                          [[p[:-2], f"{breakdown[p]:.1f}", what] for p, what in (
                              ("planning_s", "DCP's local plans and their exchange (cached after the first save)"),
                              ("write_s", "serialising (one torch.save record per tensor) and writing the shard file; "
                                           "the hashing hidden under the write included"),
                              ("hash_s", "checksum (xxh3_128) the write did not hide"),
                              ("fsync_s", "fsync of the shard file"),
                              ("metadata_s", "DCP's .metadata and train_state.json (written and fsynced)"),
                              ("barrier_s", "waiting for the other rank: DCP's exchanges, the reports, the outcome"),
                              ("commit_s", "manifest (hashing the small files), rename, `latest`, directory fsyncs"),
                              ("other_s", "the rest (taking the state dicts, creating the directory)"),
                              ("stage_s", "async saves only: the copy of the tensors before the write"))]))
    common.write_report(out_dir, "Checkpoint cost", sections)
