"""What a checkpoint costs (figures `save_bw_ratio`, `async_block_ratio`).

Two ranks (torch-ddp, world 2) train a model for a few steps so the AdamW state exists, then:

- save_bw_ratio: a full synchronous shardlab save (every rank writes its DCP shards with fsync and hashes
  them, rank 0 writes the manifest, renames, replaces `latest`) against a plain write of the same bytes
  by the same writers: every rank writes the bytes it wrote in that save (its shard files; rank 0 also
  .metadata and train_state.json) as one file, 8 MiB writes, fsync, all ranks at once. Both are timed
  on rank 0 from a barrier to a barrier, and both are durable when timed. Deleting old checkpoints
  (retention) is not saving: it runs after the commit and is finished, untimed, before the next
  measurement. Ratio = t_plain / t_save = save bandwidth / plain bandwidth, per pair (alternating
  A B, B A), median with min-max. Goal >= 0.8.
- async_block_ratio: how long an async save holds the training loop (in `save()`: take the state dicts and
  start the writer thread; plus any wait of the next optimizer step for the writer's copy of the tensors)
  against a synchronous save, per pair. Between
  async saves the loop trains `gap` steps, so the background write has finished before the next save (a
  save waits for the previous one). Goal <= 0.1. Also reported: the first step after an async save (it
  overlaps the background write, which shares the CPUs) against the first step after a sync save.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from shardlab.bench import common

SIZES = {"quick": ["model.preset=small"],  # 3.2M params -> ~39 MB of checkpoint
         "full": ["model.preset=custom", "model.n_layer=6", "model.n_head=6", "model.d_model=384"]}  # ~11M


def _plain_write(path: Path, nbytes: int, buf: bytes) -> None:
    """Write `nbytes` (repeats of `buf`) sequentially to a new file and fsync it."""
    with open(path, "wb", buffering=0) as f:
        left = nbytes
        while left > 0:
            left -= f.write(buf[:min(left, len(buf))])
        os.fsync(f.fileno())


def _rank_main(work: str, overrides: list[str], pairs: int, gap: int) -> dict:
    """Runs on every rank of a 2-rank pool."""
    from shardlab import comm, config as config_mod
    from shardlab.bench.overhead import shardlab_step
    from shardlab.checkpoint import manifest as mf
    from shardlab.train.trainer import Trainer

    work = Path(work)
    cfg = config_mod.load(None, common.BASE + overrides)
    config_mod.validate(cfg, comm.world_size())
    run = work / "run"
    run.mkdir(parents=True, exist_ok=True)
    tr = Trainer(cfg, run)
    mgr, st = tr.ckpt, tr.state
    for _ in range(3):  # optimizer state exists after the first step
        shardlab_step(tr)
    rows, bw, block = [], [], []

    def timed_save() -> tuple[float, dict]:
        """A synchronous save; returns its manifest (which files, how many bytes)."""
        comm.barrier()
        t0 = time.perf_counter()
        mgr.save(st, async_=False)  # returns once committed
        comm.barrier()
        dt = time.perf_counter() - t0
        assert mgr.last_outcome is None, mgr.last_outcome
        mgr.wait()  # retention of older checkpoints: not part of the save, must not overlap what comes next
        comm.barrier()
        return dt, mf.read_manifest(mf.read_latest(mgr.dir))

    def my_bytes(manifest: dict) -> int:
        """The bytes this rank wrote in that save: its shard files; rank 0 also the files it wrote alone."""
        files = manifest["files"]
        if comm.rank() == 0:
            return sum(e["size"] for n, e in files.items() if n.startswith("__0_") or not n.startswith("__"))
        return sum(e["size"] for n, e in files.items() if n.startswith(f"__{comm.rank()}_"))

    buf = os.urandom(8 << 20)  # incompressible; made once, outside the timing

    def plain(nbytes: int) -> float:
        path = work / f"plain_{comm.rank()}.bin"
        comm.barrier()
        t0 = time.perf_counter()
        _plain_write(path, nbytes, buf)
        comm.barrier()
        dt = time.perf_counter() - t0
        path.unlink()
        return dt

    _, manifest = timed_save()  # warm-up (file creation paths, DCP's plan cache)
    for i in range(pairs):
        st.step += 1  # a new checkpoint name each time (retention keeps the directory small)
        if i % 2 == 0:
            t_plain = plain(my_bytes(manifest))
            t_save, manifest = timed_save()
        else:
            t_save, manifest = timed_save()
            t_plain = plain(my_bytes(manifest))
        bw.append(t_plain / t_save)
        nbytes = manifest["total_bytes"]
        rows.append({"test": "save_bw", "pair": i, "bytes": nbytes, "t_save_s": t_save, "t_plain_s": t_plain,
                     **{f"rank0_{k}": v for k, v in mgr.timing.items()},
                     "save_MBps": nbytes / t_save / 1e6, "plain_MBps": nbytes / t_plain / 1e6})
    steps_busy, steps_idle = [], []
    for i in range(pairs):
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
                    (steps_busy if async_ else steps_idle).append(time.perf_counter() - t1)
            mgr.wait()
            assert mgr.last_outcome is None, mgr.last_outcome
            if async_:  # the next optimizer step may have waited for the background copy: loop time too
                got[True] += mgr.hook_wait_s
            st.step += 1
        block.append(got[True] / got[False])
        rows.append({"test": "async_block", "pair": i, "blocked_async_s": got[True], "blocked_sync_s": got[False]})
    mgr.close(st)
    return {"rows": rows, "bw": bw, "block": block, "steps_busy": steps_busy, "steps_idle": steps_idle}


def run(out_dir: Path, quick: bool) -> dict:
    from shardlab.workers import WorkerPool

    out_dir = Path(out_dir)
    work = out_dir / "work"
    shutil.rmtree(work, ignore_errors=True)
    overrides = ["parallel.strategy=torch-ddp", "train.micro_batch=4", "ckpt.keep=2", "train.steps=10000",
                 *SIZES["quick" if quick else "full"]]
    pairs, gap = (4, 10) if quick else (8, 15)
    with WorkerPool(2, timeout=1800) as pool:
        res = pool.run(_rank_main, str(work), overrides, pairs, gap)[0]
    shutil.rmtree(work, ignore_errors=True)
    bw, block = common.stats(res["bw"]), common.stats(res["block"])
    busy, idle = common.stats(res["steps_busy"]), common.stats(res["steps_idle"])
    figures = {"save_bw_ratio": round(bw["median"], 3), "async_block_ratio": round(block["median"], 4)}
    rows = res["rows"]
    doc = common.write_results(out_dir, "checkpoint", figures, rows)
    save_rows = [r for r in rows if r["test"] == "save_bw"]
    async_rows = [r for r in rows if r["test"] == "async_block"]
    sections = [
        "Two ranks (torch-ddp) save their full training state (model, AdamW state, RNG, sampler) with "
        "shardlab's checkpoint manager. See `shardlab/bench/checkpoint.py` for the method.",
        f"**save_bw_ratio = {common.fmt_stats(bw, digits=3)}** (save bandwidth / bandwidth of a plain write "
        f"of the same bytes by the same two writers, both with fsync; median (min–max) over {bw['n']} "
        f"alternating pairs; goal ≥ 0.8)\n\n"
        + common.md_table(["pair", "bytes", "save s", "of which DCP write + sha256", "plain s", "save MB/s",
                           "plain MB/s"],
                          [[r["pair"], f"{r['bytes']:,}", f"{r['t_save_s']:.3f}", f"{r['rank0_write_s']:.3f}",
                            f"{r['t_plain_s']:.3f}", f"{r['save_MBps']:.0f}", f"{r['plain_MBps']:.0f}"]
                           for r in save_rows])
        + "\n\nThe DCP column is rank 0's (the sha256 is computed as the bytes are written). DCP serialises "
          "every tensor as its own torch.save record (with its own pickled metadata) so that any world size can "
          "later read any slice of it; that, sha256 (about 1 GB/s on one core) and the exchanges between ranks "
          "(planning, reports, commit) are what a plain write of opaque bytes does not pay. On this machine the "
          "plain write goes to the page cache at ~1 GB/s, so these fixed costs dominate; on a disk slower than "
          "DCP's serialisation the ratio approaches the write share.",
        f"**async_block_ratio = {common.fmt_stats(block, digits=4)}** (time the loop is held by an async "
        f"save / by a synchronous save; goal ≤ 0.1)\n\n"
        + common.md_table(["pair", "async: loop held s", "sync: loop held s"],
                          [[r["pair"], f"{r['blocked_async_s']:.4f}", f"{r['blocked_sync_s']:.3f}"]
                           for r in async_rows])
        + f"\n\nThe writer thread shares the CPUs with training: the first step after an async save (it overlaps "
          f"the background write) takes {common.fmt_stats(busy, 1e3, 1)} ms, the first step after a synchronous "
          f"save {common.fmt_stats(idle, 1e3, 1)} ms (n={busy['n']} each).",
    ]
    common.write_report(out_dir, "Checkpoint cost", sections)
    return doc
