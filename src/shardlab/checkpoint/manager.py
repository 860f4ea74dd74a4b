"""CheckpointManager: the trainer's one handle on checkpoints.

    mgr = CheckpointManager(run_dir, cfg)   # on every rank
    start_step = mgr.resume(state)          # restore everything when asked to (or after an elastic restart)
    mgr.maybe_save(state)                   # after each optimizer step
    mgr.close(state)                        # final save if configured; waits for an async save

`state` has `strategy`, `optimizer`, `sampler`, `scaler` (or None), `step` (completed optimizer steps)
and `cfg`. This file saves; resuming and loading are loading.py's (the manager's base class). The save
protocol (docs/checkpoint.md):

  1. rank 0 creates `step_N.tmp/`; every rank writes its own shards into it with DCP;
  2. every rank reports success or its error (all_gather over the checkpoint group);
  3. all succeeded: rank 0 hashes what is left unhashed, writes MANIFEST.json, renames `step_N.tmp`
     to `step_N`, replaces `latest`, applies retention (retention.py). Any rank failed: rank 0 deletes
     the `.tmp`, `latest` is untouched, and every rank logs who failed and carries on training.
"""
from __future__ import annotations

import itertools
import os
import shutil
import threading
import time
from pathlib import Path

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException  # a BaseException

from shardlab import comm
from shardlab.checkpoint import hf_dcp
from shardlab.checkpoint import manifest as mf
from shardlab.checkpoint import retention
from shardlab.checkpoint import state as st
from shardlab.checkpoint.loading import Loading
from shardlab.checkpoint.retention import log
from shardlab.checkpoint.storage import FAIL_ENV, Planner, Writer
from shardlab.checkpoint.resume_path import CheckpointError, check_resume  # noqa: F401 (re-exported)


def _describe(exc: BaseException) -> tuple[list[int], str]:
    """(culprit ranks, one-line reason). DCP reports other ranks' failures as CheckpointException."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        parts = []
        for r, w in sorted(failures.items()):
            inner = w[0] if isinstance(w, tuple) and w else getattr(w, "exc", w)  # (exc, traceback) without a group
            parts.append(f"rank {r}: {type(inner).__name__}: {inner}")
        return sorted(failures), "; ".join(parts)
    return [comm.rank()], f"rank {comm.rank()}: {type(exc).__name__}: {exc}"


def run_tokenizer(run_dir: Path, cfg):
    """The run's tokenizer (data.tokenizer, or the one a tokens: source carries), written to RUN/tokenizer/
    once; None for a config without a data section (tools building a manager by hand)."""
    from shardlab.data.tokenizer import run_tokenizer as of_source

    data = getattr(cfg, "data", None)
    if data is None:
        return None
    tok = of_source(data.source, getattr(data, "tokenizer", "bytes"))
    if not (run_dir / "tokenizer").is_dir():
        tok.save(run_dir / "tokenizer")
    return tok


def _human(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


_managers = itertools.count()  # numbers this process's managers (their plan-cache keys)


class CheckpointManager(Loading):
    def __init__(self, run_dir: Path, cfg, group=None):
        self.run_dir, self.cfg, self.ccfg = Path(run_dir), cfg, cfg.ckpt
        self.dir = self.run_dir / "checkpoints"
        # `group`: the ranks that hold the state, when not all do (the asynchronous parameter server saves
        # alone: a group of rank 0); only they construct the manager.
        self.rank, self.world = comm.rank(group), comm.world_size(group)
        # Checkpoint traffic gets its own gloo group (created by the first save, see save()); until then
        # (resume, verification: before training, on the main thread) the default group is fine.
        self.pg = group
        self._thread: threading.Thread | None = None
        self._staged: dict | None = None  # the async save's CPU copy, reused by the next async save
        self._staged_ready = threading.Event()  # set when that copy is complete (the optimizer may step)
        self._staged_ready.set()
        self._hooked = None  # the optimizer whose step waits for the copy
        self._written: set | None = None  # keys this rank wrote in the last committed save (DCP's plan)
        self._plan_key = f"shardlab-{next(_managers)}"  # see storage.Planner
        self._pruner = retention.Pruner(self.dir, self.ccfg)  # rank 0 deleting old checkpoints after a commit
        self.hook_wait_s = 0.0  # time the optimizer waited for the last async save's copy (for the bench)
        self.staged_bytes = 0  # what the last async save copied (the extra host memory it keeps)
        self.last_saved_step: int | None = None
        self.layout: dict | None = None  # the mesh degrees of the last save (for its manifest)
        self.last_outcome: str | None = None  # None = the last save committed, else why it did not
        self.failed: list[str] = []  # every abandoned save's reason: the run ends non-zero and summary.json says so
        self.blocked_s: list[float] = []  # time each save held the training loop (for the bench)
        self.timing: dict = {}  # seconds of the last save's phases on this rank (for the bench)
        # the last load on this rank: DCP's read (shard files verified as read), applying the state dicts,
        # and the bytes read straight into their tensors (reader.Reader)
        self.load_timing: dict = {}
        self.notes: list[str] = []  # what this manager told the user (rank 0), for tests and tools
        self.quiet = False  # no "saved" line (a signal save: the launcher's last lines name it)
        fail = os.environ.get(FAIL_ENV, "")
        self.fail_at = tuple(int(x) for x in fail.split("@")) if fail else None  # (rank, step)
        self.tokenizer = None
        if self.rank == 0:
            retention.remove_leftovers(self.dir)
            self.tokenizer = run_tokenizer(self.run_dir, cfg)
        comm.barrier(self.pg)

    def _note(self, msg: str) -> None:
        self.notes.append(msg)
        log(msg)

    # --- saving -------------------------------------------------------------------------------------
    def maybe_save(self, state) -> bool:
        if self.ccfg.every > 0 and state.step > 0 and state.step % self.ccfg.every == 0:
            self.save(state)
            return True
        return False

    def close(self, state) -> None:
        if self.ccfg.final and state.step > 0 and self.last_saved_step != state.step:
            self.save(state)
        self.wait()

    def wait(self) -> str | None:
        """Block until the in-flight async save (if any) has committed or been abandoned. Call it before
        changing parameters or optimizer state outside an optimizer step (e.g. loading a checkpoint)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._pruner.wait()
        return self.last_outcome

    def save(self, state, async_: bool | None = None) -> None:
        t0 = time.perf_counter()
        self.wait()  # one save in flight at a time: the next save waits for the previous one
        if self.pg is None and comm.is_initialized() and self.world > 1:
            # An async save runs DCP's collectives in a background thread: they must never interleave with
            # the training collectives on the default group. Every rank saves at the same step, so every
            # rank creates this group at the same point (new_group is collective).
            self.pg = dist.new_group(backend="gloo")
        step = int(state.step)
        if getattr(self.ccfg, "format", "dcp") == "hf":  # the model alone, as Hugging Face safetensors
            self._save_hf(state, t0)
            return
        self.layout = st.layout(state.strategy.dims)  # recorded in the manifest by the commit
        tensors = st.tensor_state(state)
        meta = st.train_meta(state, self.world) if self.rank == 0 else None
        if self.ccfg.async_ if async_ is None else async_:
            # The background thread first copies the tensors into private memory (the previous async save's
            # buffers: one extra copy of the state in host memory), then writes. Only the optimizer step
            # changes them, so the loop runs the next forward and backward meanwhile, and the next
            # optimizer step waits (a step pre-hook) until the copy is complete.
            self._hook(state.optimizer)
            self._staged_ready.clear()
            self.hook_wait_s = 0.0
            self._thread = threading.Thread(target=self._background, args=(step, tensors, meta),
                                            name=f"ckpt-{step}", daemon=True)
            self._thread.start()
        else:
            self._write_and_commit(step, tensors, meta)
        self.last_saved_step = step
        self.blocked_s.append(time.perf_counter() - t0)

    def _save_hf(self, state, t0: float) -> None:
        """`ckpt.format=hf` (hf_dcp.py): synchronous, every rank its own pieces, rank 0 consolidates."""
        outcome, path = hf_dcp.save(self, state)
        self.last_saved_step, self.last_outcome = int(state.step), outcome
        self.blocked_s.append(time.perf_counter() - t0)
        if outcome is not None:
            self.failed.append(outcome)
            if self.rank == 0:
                self._note(outcome)
        elif self.rank == 0 and not self.quiet:
            log(f"saved {path} (step {state.step}, Hugging Face safetensors, {time.perf_counter() - t0:.2f} s)")

    def _hook(self, optimizer) -> None:
        if self._hooked is not optimizer:
            def wait_for_copy(*_):
                if not self._staged_ready.is_set():
                    t0 = time.perf_counter()
                    self._staged_ready.wait()
                    self.hook_wait_s += time.perf_counter() - t0
            optimizer.register_step_pre_hook(wait_for_copy)
            self._hooked = optimizer

    def _background(self, step: int, tensors: dict, meta: dict | None) -> None:
        self.last_outcome = f"checkpoint at step {step} did not finish"
        try:
            t0 = time.perf_counter()
            # Copy only what this rank wrote last time (DCP's plan is cached, so it writes the same
            # tensors again; storage.Planner refuses a plan that would read one not copied).
            only = self._written
            live = tensors
            try:
                tensors = self._staged = st.stage(tensors, self._staged, only)
            finally:
                self._staged_ready.set()  # (on failure too: never leave the optimizer waiting)
            stage_s = time.perf_counter() - t0
            self.staged_bytes = st.copied_bytes(tensors, live)
            self._write_and_commit(step, tensors, meta, only)
            self.timing["stage_s"] = stage_s  # the copy before the write (not part of total_s)
        except BaseException as e:  # a collective of the commit failed (a peer died): the job is ending
            self.last_outcome = f"checkpoint at step {step} abandoned: {type(e).__name__}: {e}"
            self.failed.append(self.last_outcome)
            self._note(self.last_outcome)

    def _write_and_commit(self, step: int, tensors: dict, meta: dict | None, staged_only: set | None = None) -> None:
        name = mf.step_dirname(step)
        tmp, final = self.dir / f"{name}.tmp", self.dir / name
        problem = None
        if self.rank == 0:
            try:
                if tmp.exists():
                    shutil.rmtree(tmp)
                tmp.mkdir(parents=True)
            except OSError as e:  # e.g. a read-only or full file system: tell the others, don't leave them waiting
                problem = f"checkpoint at step {step} abandoned: rank 0 cannot create {tmp}: {e}; training continues"
        problem = comm.broadcast_object(problem, group=self.pg)
        if problem is not None:
            self.last_outcome = problem
            self.failed.append(problem)
            if self.rank == 0:
                self._note(problem)
            return
        error, files = None, {}
        t0 = time.perf_counter()
        writer = None
        try:
            fail = self.fail_at is not None and self.fail_at == (self.rank, step)
            writer, planner = Writer(tmp, fail), Planner(self._plan_key, staged_only)
            self._written = None  # unknown until this save succeeds (a failed one: the next copies everything)
            dcp.save(tensors, storage_writer=writer, planner=planner, process_group=self.pg,
                     no_dist=not comm.is_initialized())
            self._written = planner.written
            # Each rank's shard files were hashed while being written (in parallel across ranks); DCP's
            # .metadata is written as a temporary name and renamed, so rank 0's commit hashes it.
            files = {n: e for n, e in writer.fs.entries.items() if n.startswith(f"__{self.rank}_")}
            t_dcp = time.perf_counter()
            if self.rank == 0:
                self._write_small(tmp, meta)
            t_meta = time.perf_counter()
        except (Exception, CheckpointException) as e:  # any failure abandons this checkpoint, never the run
            error = _describe(e)
            t_dcp = t_meta = time.perf_counter()
        t_reports = time.perf_counter()
        reports = comm.all_gather_object((error, files), group=self.pg)
        t_reports = time.perf_counter() - t_reports
        outcome, commit_s = None, 0.0
        if self.rank == 0:
            t1 = time.perf_counter()
            outcome = self._commit(step, tmp, final, reports)
            commit_s = time.perf_counter() - t1
        t2 = time.perf_counter()
        # Also the barrier that makes save() return on every rank only after rank 0's commit (rename,
        # `latest`) is visible: the others wait here for the outcome that rank 0 sends after committing.
        outcome = comm.broadcast_object(outcome, group=self.pg)
        t_end = time.perf_counter()
        self.timing = self._phases(writer, t0, t_dcp, t_meta, t_reports + (t_end - t2), commit_s, t_end)
        self.last_outcome = outcome
        if outcome is not None:
            self.failed.append(outcome)
            if self.rank == 0:
                self._note(outcome)
        elif self.rank == 0 and not self.quiet:  # one line per checkpoint: what a user looks for when a run ends or dies
            log(f"saved {final} (step {step}, {_human(self.saved_bytes)}, {self.timing['total_s']:.2f} s)")

    def _write_small(self, tmp: Path, meta: dict) -> None:
        """Rank 0's files: train_state.json and the run's tokenizer (generate and export read it)."""
        mf.write_json_atomic(tmp / st.STATE_FILE, meta)
        if self.tokenizer is not None:
            self.tokenizer.save(tmp / "tokenizer")
            mf.fsync_tree(tmp / "tokenizer")  # before the manifest lists them (DCP's own files are fsynced)

    @staticmethod
    def _phases(writer, t0, t_dcp, t_meta, waited_s, commit_s, t_end) -> dict:
        """Where this rank's save time went, in seconds (the bench's `save_fixed_ms` breakdown).
        planning: DCP's local and global plan exchange; write: the shard file's bytes into the page cache
        and the requests that start their write-out to the disk (hashing hidden under it and the small
        records' hashing included); hash: hashing of large buffers the write did not hide; fsync: the
        shard file's, at close (what the early write-out left); metadata: DCP's
        .metadata (coordinator) and train_state.json (rank 0); barrier: waiting for the other ranks (DCP's
        exchanges after the write, the reports, the outcome); commit: rank 0's manifest (hashing the small
        files), rename and `latest`. They add up to total_s."""
        fs = writer.fs.timing if writer is not None else {}
        marks = writer.marks if writer is not None else {}
        w0, w1 = marks.get("write_start", t0), marks.get("write_end", t0)
        f0, f1 = marks.get("finish_start", w1), marks.get("finish_end", w1)
        hash_s = fs.get("hash_wait_s", 0.0) + fs.get("hash_inline_s", 0.0)
        fsync_s = fs.get("fsync_s", 0.0)
        write_phase = w1 - w0
        out = {"planning_s": w0 - t0,
               "write_s": max(write_phase - hash_s - fsync_s, 0.0),
               "hash_s": hash_s, "fsync_s": fsync_s,
               "metadata_s": (f1 - f0) + (t_meta - t_dcp),
               "barrier_s": (f0 - w1) + (t_dcp - f1) + waited_s,
               "commit_s": commit_s}
        out["total_s"] = t_end - t0
        out["other_s"] = out["total_s"] - sum(v for k, v in out.items() if k != "total_s")
        return out

    def _commit(self, step: int, tmp: Path, final: Path, reports: list) -> str | None:
        """Rank 0 only. Returns None when committed, else the reason the checkpoint was abandoned."""
        self._pruner.wait()  # the previous commit's clean-up, so that both never touch one directory
        errors = [e for e, _ in reports if e is not None]
        if not errors:
            try:
                files = {}
                for _, f in reports:
                    files.update(f)
                for name in mf.entry_names(tmp):  # .metadata, train_state.json, tokenizer/, what no rank claimed
                    if (tmp / name).is_file() and name not in files and name != mf.MANIFEST:
                        files[name] = mf.file_entry(tmp / name)
                manifest = mf.write_manifest(tmp, files, step=step, world_size=self.world, layout=self.layout,
                                             strategy=self.cfg.parallel.strategy, created=time.time())
                self.saved_bytes = manifest["total_bytes"]
                retention.publish(self.dir, tmp, final)
                # Committed. Deleting old checkpoints (unlinking their files is slow on ext4) need not
                # hold the save: it runs in the background until the next commit or wait().
                self._pruner.start(step)
                return None
            except Exception as e:  # noqa: BLE001
                errors = [([0], f"rank 0: committing: {type(e).__name__}: {e}")]
        retention.remove(tmp, "the abandoned save")
        ranks = sorted({r for rs, _ in errors for r in rs})
        previous = mf.read_latest(self.dir)
        keep = f"{previous.name} stays latest" if previous else "there is no previous checkpoint"
        return (f"checkpoint at step {step} abandoned: rank(s) {ranks} failed while saving "
                f"({errors[0][1]}); {keep}; training continues")

    # --- resuming ------------------------------------------------------------------------------------
