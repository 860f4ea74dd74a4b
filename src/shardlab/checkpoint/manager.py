"""CheckpointManager: the trainer's one handle on checkpoints.

    mgr = CheckpointManager(run_dir, cfg)   # on every rank
    start_step = mgr.resume(state)          # restore everything when asked to (or after an elastic restart)
    mgr.maybe_save(state)                   # after each optimizer step
    mgr.close(state)                        # final save if configured; waits for an async save

`state` has `strategy`, `optimizer`, `sampler`, `scaler` (or None), `step` (completed optimizer steps)
and `cfg`. The save protocol (docs/checkpoint.md):

  1. rank 0 creates `step_N.tmp/`; every rank writes its own shards into it with DCP;
  2. every rank reports success or its error (all_gather over the checkpoint group);
  3. all succeeded: rank 0 hashes what is left unhashed, writes MANIFEST.json, renames `step_N.tmp`
     to `step_N`, replaces `latest`, applies retention (retention.py). Any rank failed: rank 0 deletes
     the `.tmp`, `latest` is untouched, and every rank logs who failed and carries on training.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import shutil
import threading
import time
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException  # a BaseException

from shardlab import comm
from shardlab.checkpoint import manifest as mf
from shardlab.checkpoint import retention
from shardlab.checkpoint import state as st
from shardlab.checkpoint.reader import Reader
from shardlab.checkpoint.retention import log
from shardlab.checkpoint.storage import FAIL_ENV, Planner, Writer
from shardlab.checkpoint.resume_path import (CheckpointError, CorruptShards,  # noqa: F401 (re-exported)
                                             check_resume, no_intact_message, resolve_resume_path)


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


def _inner(exc: BaseException) -> BaseException:
    """The exception a rank-local DCP call wrapped into a CheckpointException (its only failure)."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and len(failures) == 1:
        w = next(iter(failures.values()))
        inner = w[0] if isinstance(w, tuple) and w else getattr(w, "exc", w)
        if isinstance(inner, BaseException):
            return inner
    return exc


def _human(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


_SHARD_RE = re.compile(r"^__(\d+)_\d+\.distcp$")  # DCP's shard file of rank R: __R_0.distcp
_managers = itertools.count()  # numbers this process's managers (their plan-cache keys)


class CheckpointManager:
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
        if self.rank == 0:
            retention.remove_leftovers(self.dir)
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
                mf.write_json_atomic(tmp / st.STATE_FILE, meta)
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

    @staticmethod
    def _phases(writer, t0, t_dcp, t_meta, waited_s, commit_s, t_end) -> dict:
        """Where this rank's save time went, in seconds (the bench's `save_fixed_ms` breakdown).
        planning: DCP's local and global plan exchange; write: the shard file's bytes into the page cache
        (hashing hidden under it included); hash: hashing the write did not hide; fsync; metadata: DCP's
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
                for p in tmp.iterdir():  # DCP's .metadata, train_state.json, anything no rank claimed
                    if p.is_file() and p.name not in files and p.name != mf.MANIFEST:
                        files[p.name] = mf.file_entry(p)
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
    def resume(self, state) -> int:
        """Restore `state` from `ckpt.resume` (latest | PATH), or from `latest` after an elastic restart.
        Returns the step to continue from (0 = fresh start)."""
        target = self.ccfg.resume
        # torchrun counts restarts per node (pytorch/pytorch#108158): a healthy node's ranks may still say 0,
        # so the job resumes when any rank was restarted, and every rank takes the same decision.
        restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0
        restarted = any(comm.all_gather_object(restarted, group=self.pg))
        if target in ("", "none") and restarted:  # (none: the first attempt started from step 0 on purpose)
            target = "latest"
            if self.rank == 0:
                self._note("elastic restart: resuming from the latest checkpoint")
        if target in ("", "none"):
            return 0
        found = self.load_first(target, state)
        return found[1] if found is not None else 0

    def load_first(self, target: str, state) -> tuple[Path, int] | None:
        """Load the first intact checkpoint of `target` (latest | PATH) into `state`: (its path, its step),
        or None when there is no committed checkpoint (`latest` only; state untouched). Verification:
        every rank rechecks a share of the small files first, then the shard files while DCP reads them
        (reader.Reader). A corrupt shard is found only after some of its bytes were loaded: for `latest`
        the next older checkpoint then overwrites everything. When none is intact the job stops
        (CheckpointError, exit 2) rather than train on a half-loaded state or start again from step 0."""
        if target == "latest":
            candidates = mf.resume_candidates(self.dir) if self.rank == 0 else None
            explicit = False
        else:
            candidates, explicit = self._explicit(target) if self.rank == 0 else None, True
        candidates = comm.broadcast_object(candidates, group=self.pg)
        if isinstance(candidates, str):  # rank 0's error message for a bad PATH
            raise CheckpointError(candidates)
        damaged = []  # (checkpoint, its problems), newest first
        for i, path in enumerate(candidates):
            problems = self._verify_distributed(path)
            if not problems:
                try:
                    return path, self.load(path, state)
                except CorruptShards as e:  # found while loading: the state holds some of its bytes
                    if explicit:
                        raise
                    problems = e.problems
            damaged.append((path, problems))
            nxt = (f"falling back to {candidates[i + 1].name}" if i + 1 < len(candidates)
                   else "no older checkpoint to fall back to")
            if explicit:
                raise CheckpointError(f"checkpoint {path} failed verification: {problems[0]}")
            if self.rank == 0:
                self._note(f"checkpoint {path.name} failed verification: {'; '.join(problems)}; {nxt}")
        if damaged:  # the run has checkpoints and none is intact: stop (exit 2), never a silent step 0
            raise CheckpointError(no_intact_message(self.dir, damaged))
        return None

    def _explicit(self, target: str):
        found = resolve_resume_path(target)
        return found if isinstance(found, str) else [found]

    def _shares(self, manifest: dict) -> tuple[dict, dict]:
        """(the small files this rank rechecks before loading, the shard files it rechecks while loading).
        Shard file __R_*.distcp goes to rank R (mod world): with the same layout, the rank that reads it
        anyway; the other files round-robin."""
        files = manifest["files"]
        writer = {n: int(m.group(1)) for n in files if (m := _SHARD_RE.match(n))}
        small = sorted(n for n in files if n not in writer)
        mine_small = {n: files[n] for i, n in enumerate(small) if i % self.world == self.rank}
        return mine_small, {n: files[n] for n, r in writer.items() if r % self.world == self.rank}

    def _verify_distributed(self, path: Path) -> list[str]:
        """Every rank rechecks the checksums of its share of the small files and the presence and size of
        its shard files (their checksums are checked while they are loaded); all ranks get all problems."""
        manifest, problem = mf.load_manifest(path)
        if manifest is None:  # every rank read the same file: the same problem everywhere
            problems = [problem] if self.rank == 0 else []
        else:
            small, shards = self._shares(manifest)
            problems = mf.verify_files(path, small)
            problems += [p for n, e in shards.items() if (p := mf.check_size(path / n, e)) is not None]
            problems += mf.unlisted(path, manifest) if self.rank == 0 else []
        return [p for ps in comm.all_gather_object(problems, group=self.pg) for p in ps]

    def load(self, path: Path, state) -> int:
        """Load checkpoint `path` (verified) into `state`, at any world size and strategy."""
        self.wait()  # an async save may still be copying the tensors we are about to overwrite
        meta = json.loads((Path(path) / st.STATE_FILE).read_text())
        _check_model(path, meta, state)
        reader, tensors, same_layout, rng_key = self._plan_reads(path, meta, state)
        t0 = time.perf_counter()
        self._read(path, reader, tensors)
        t1 = time.perf_counter()
        _apply(state, tensors, meta)
        self.load_timing = {"read_s": t1 - t0, "apply_s": time.perf_counter() - t1,
                            "direct_bytes": reader.direct_bytes}
        if same_layout:
            st.set_rng(tensors["rng"][rng_key])
        else:
            st.reseed_rng(state.cfg.train.seed, meta["step"], self.rank)
        if self.rank == 0:
            how = "" if same_layout else _resharded(meta)
            self._note(f"resumed from {path} at step {meta['step']}{how}")
        self.last_saved_step = meta["step"]
        return meta["step"]

    def _plan_reads(self, path: Path, meta: dict, state) -> tuple[Reader, dict, bool, str]:
        """(the reader, the tensors to read into, whether this rank's RNG stream is in the checkpoint,
        its key there). The reader verifies this rank's share of the shard files as DCP reads them."""
        manifest = mf.read_manifest(path)
        reader = Reader(path, self._shares(manifest)[1] if manifest is not None else {})
        md_keys = reader.read_metadata().state_dict_metadata  # read once (DCP's load asks the reader again)
        if any(k.endswith(".attn.qkv.weight") for k in md_keys):
            raise CheckpointError(f"checkpoint {path} holds the fused attention projection attn.qkv (shardlab 0.1; "
                                  "now attn.q, attn.k, attn.v); export it with `shardlab ckpt export --hf` or retrain")
        # RNG streams are saved per mesh coordinate: the same degrees find this rank's stream wherever
        # torchrun placed it; another layout has none to continue (reseeded by load). A checkpoint without
        # a layout (written before layouts were recorded) keyed them by global rank.
        layout = st.layout(state.strategy.dims)
        if "layout" in meta:
            same_layout, rng_key = meta["layout"] == layout, st.rng_key(state.strategy.dims)
        else:
            same_layout, rng_key = meta["world_size"] == self.world, f"rank_{self.rank}"
        tensors = st.tensor_state(state)
        del tensors["rng"]
        if same_layout:
            tensors["rng"] = {rng_key: torch.empty(tuple(md_keys[f"rng.{rng_key}"].size), dtype=torch.uint8)}
        if "sync" in tensors:  # what the checkpoint has of local SGD / DiLoCo state (none: a fresh period)
            tensors["sync"] = st.present(tensors["sync"], md_keys, "sync")
        return reader, tensors, same_layout, rng_key

    def _read(self, path: Path, reader: Reader, tensors: dict) -> None:
        """Read `tensors` from `path` on every rank, then agree on the verdict: any rank's corrupt shard
        (CorruptShards) comes before this rank's own failure, which comes before another rank's."""
        # Every rank plans its reads alone (no_dist): they depend only on the global .metadata and the
        # rank's own tensors (a DTensor's local shard), and DCP's load-plan exchange (rank 0 gathers every
        # rank's pickled plan and scatters it back unchanged) cost 0.4 s of a 1.7 s load at gpt2 size.
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="torch.distributed is disabled")
                dcp.load(tensors, storage_reader=reader, no_dist=True)
            failure = None
        except (Exception, CheckpointException) as e:  # a corrupt file may break the parse: the hashes say
            failure = _inner(e)                         # which; every rank reaches the exchange below
        why = None
        if failure is not None:
            why = f"rank {self.rank}: {type(failure).__name__}: {(str(failure) + chr(10)).splitlines()[0]}"
        reports = comm.all_gather_object((reader.problems, why), group=self.pg)
        problems = [p for ps, _ in reports for p in ps]
        if problems:
            raise CorruptShards(path, problems)
        if failure is not None:
            raise failure
        failed = [w for _, w in reports if w is not None]
        if failed:
            raise CheckpointError(f"loading {path} failed on another rank ({failed[0]})")


def _check_model(path: Path, meta: dict, state) -> None:
    """CheckpointError when the checkpoint was saved for other model dimensions (dropout may differ)."""
    model_cfg = getattr(state.strategy.model, "cfg", None)
    if meta.get("model") and model_cfg is not None:
        now = dataclasses.asdict(model_cfg)
        diff = [k for k in meta["model"] if k in now and meta["model"][k] != now[k] and k != "dropout"]
        if diff:
            k = diff[0]
            raise CheckpointError(f"checkpoint {path} was saved for a different model: model {k} is "
                                  f"{meta['model'][k]} there and {now[k]} here")


def _apply(state, tensors: dict, meta: dict) -> None:
    """Put what was read (`tensors`) and the checkpoint's train_state.json (`meta`) into `state`."""
    state.strategy.load_model_state_dict(tensors["model"])
    st.load_optim_state_dict(state.strategy, state.optimizer, tensors["optim"])
    if "sync" in tensors:  # after the model and optimizer: this replica's own values override them
        state.strategy.load_sync_state_dict(tensors["sync"])
    if meta.get("sampler") and getattr(state, "sampler", None) is not None:
        state.sampler.load_state_dict(meta["sampler"])
    for attr in ("scaler", "scheduler"):
        obj = getattr(state, attr, None)
        if obj is not None and meta.get(attr):
            obj.load_state_dict(meta[attr])
    if getattr(state, "balance", None) is not None:  # data.shares (after the sampler: it sets its counts)
        state.balance.load_state_dict(meta.get("shares"))
    state.step = meta["step"]


def _resharded(meta: dict) -> str:
    """The resume note's account of a checkpoint saved at another layout."""
    degrees = ", ".join(f"{k}={v}" for k, v in meta.get("layout", {}).items() if v > 1)
    return (f" (saved at world size {meta['world_size']} with {meta['strategy']}"
            f"{f' ({degrees})' if degrees else ''}; resharded, RNG streams reseeded)")
