"""Resuming and loading, the half of the checkpoint manager that reads (manager.py saves): which checkpoint
to resume from (the newest intact one every rank agrees on), verifying it against its manifest, planning
this rank's reads for any layout, reading them with DCP, and applying model, optimizer, RNG, sampler and
scheduler state. `CheckpointManager` inherits this; the attributes it uses (`dir`, `pg`, `rank`, `world`,
`wait`, `_note`) are the manager's.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import time
import warnings
from itertools import repeat
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException  # a BaseException

from shardlab import comm
from shardlab.checkpoint import hf_dcp
from shardlab.checkpoint import manifest as mf
from shardlab.checkpoint import state as st
from shardlab.model import anatomy
from shardlab.parallel.dp import in_place
from shardlab.checkpoint.index import Index
from shardlab.checkpoint.reader import Planner, Reader
from shardlab.checkpoint.resume_path import (CheckpointError, CorruptShards, imported_message, no_intact_message,
                                             resolve_resume_path)
from shardlab.config.init_from import TRAINING_KEYS, is_hf_dir


_SHARD_RE = re.compile(r"^__(\d+)_\d+\.distcp$")  # DCP's shard file of rank R: __R_0.distcp


def _inner(exc: BaseException) -> BaseException:
    """The exception a rank-local DCP call wrapped into a CheckpointException (its only failure)."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and len(failures) == 1:
        w = next(iter(failures.values()))
        inner = w[0] if isinstance(w, tuple) and w else getattr(w, "exc", w)
        if isinstance(inner, BaseException):
            return inner
    return exc



class Loading:
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
            if self.rank == 0:  # say what really happens: a job that failed before its first save starts over
                self._note("elastic restart: resuming from the latest checkpoint" if mf.resume_candidates(self.dir)
                           else "elastic restart: no checkpoint yet, restarting from step 0"
                           + (" (ckpt.init_from's weights)" if self.ccfg.init_from else ""))
        found = None if target in ("", "none") else self.load_first(target, state)
        if found is None and self.ccfg.init_from:  # nothing of its own to resume: the given weights, step 0
            self.init_weights(self.ccfg.init_from, state)
        return found[1] if found is not None else 0

    def init_weights(self, target: str, state) -> Path:
        """`ckpt.init_from`: the model weights of checkpoint `target` (verified, read for this layout as a
        resume reads them), nothing else: the optimizer stays fresh, the step 0, the sampler at its start,
        the RNG streams as seeded. Any checkpoint will do: an imported model's, or another run's, or a
        Hugging Face model directory (read straight into this layout: hf_dcp.py)."""
        if Path(target).is_dir() and is_hf_dir(Path(target)):
            return self._init_hf(Path(target), state)
        found = resolve_resume_path(target) if self.rank == 0 else None
        found = comm.broadcast_object(found, group=self.pg)
        if isinstance(found, str):  # rank 0's line for a bad PATH
            raise CheckpointError(found.replace("ckpt.resume=", "ckpt.init_from=", 1))
        problems = self._verify_distributed(found)
        if problems:
            raise CheckpointError(f"ckpt.init_from={target}: checkpoint {found} failed verification: {problems[0]}")
        self.wait()
        meta = json.loads((found / st.STATE_FILE).read_text())
        _check_model(found, meta, state, ignore=TRAINING_KEYS)
        tensors = {"model": state.strategy.model_state_dict()}
        self._read(found, self._reader(found), tensors)
        state.strategy.load_model_state_dict(tensors["model"])
        if self.rank == 0:
            self._note(f"initialised the model from {found} (fresh optimizer, step 0)")
        return found

    def _init_hf(self, hf_dir: Path, state) -> Path:
        self.wait()
        try:
            hf_dcp.load(hf_dir, state)
        except CheckpointError:
            raise
        except (Exception, CheckpointException) as e:  # one line: which tensor, which file
            raise CheckpointError(f"ckpt.init_from={hf_dir}: {type(_inner(e)).__name__}: "
                                  f"{(str(_inner(e)) + chr(10)).splitlines()[0]}") from None
        if self.rank == 0:
            self._note(f"initialised the model from the Hugging Face directory {hf_dir} (fresh optimizer, step 0)")
        return hf_dir

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
        anyway; the other files round-robin, from the last rank (rank 0 has the checkpoint's listing and
        the messages to do besides)."""
        files = manifest["files"]
        writer = {n: int(m.group(1)) for n in files if (m := _SHARD_RE.match(n))}
        small = sorted(n for n in files if n not in writer)
        mine_small = {n: files[n] for i, n in enumerate(small) if (i + 1) % self.world == self.rank}
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
        return [p for ps in self._gather_if_any(problems, bool(problems)) or [] for p in ps]

    def _gather_if_any(self, mine, flagged: bool) -> list | None:
        """Every rank's `mine` (rank order) when any rank `flagged` something, else None: one small
        all-reduce of the flags, and the objects themselves only when there is something to tell (an
        object all-gather is two collectives and a pickle each way)."""
        if self.world == 1:
            return [mine] if flagged else None
        flag = torch.tensor([int(flagged)])
        comm.all_reduce(flag, group=self.pg, tag="control")
        return comm.all_gather_object(mine, group=self.pg) if flag.item() else None

    def load(self, path: Path, state) -> int:
        """Load checkpoint `path` (verified) into `state`, at any world size and strategy."""
        self.wait()  # an async save may still be copying the tensors we are about to overwrite
        meta = json.loads((Path(path) / st.STATE_FILE).read_text())
        if meta.get("imported"):
            raise CheckpointError(imported_message(path))
        _check_model(path, meta, state)
        with in_place.held_still():  # nothing but the load touches the modules until the state is applied
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
        reader = self._reader(path)
        md_keys = reader.stored_keys()  # the shard index's, or .metadata's (read once: DCP's load asks again)
        fused = tuple(f".{name}.weight" for a in anatomy.ANATOMIES.values() for name in a.fused)  # attn.qkv
        if any(map(str.endswith, md_keys, repeat(fused))):  # (a C loop over ~800 keys)
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
        tensors = st.tensor_state(state, rng=False)
        if same_layout:
            tensors["rng"] = {rng_key: torch.empty(reader.stored_size(f"rng.{rng_key}"), dtype=torch.uint8)}
        if "sync" in tensors:  # what the checkpoint has of local SGD / DiLoCo state (none: a fresh period)
            tensors["sync"] = st.present(tensors["sync"], md_keys, "sync")
        return reader, tensors, same_layout, rng_key

    def _reader(self, path: Path) -> Reader:
        """The reader of checkpoint `path` on this rank: the shard files it verifies while reading them, and
        the shard files' index (index.py) when the checkpoint has one (else it reads `.metadata`)."""
        manifest = mf.read_manifest(path)
        return Reader(path, self._shares(manifest)[1] if manifest is not None else {},
                      index=Index.read(path, manifest))

    def _read(self, path: Path, reader: Reader, tensors: dict) -> None:
        """Read `tensors` from `path` on every rank, then agree on the verdict: any rank's corrupt shard
        (CorruptShards) comes before this rank's own failure, which comes before another rank's."""
        # Every rank plans its reads alone (no_dist): they depend only on the global .metadata and the
        # rank's own tensors (a DTensor's local shard), and DCP's load-plan exchange (rank 0 gathers every
        # rank's pickled plan and scatters it back unchanged) cost 0.4 s of a 1.7 s load at gpt2 size.
        # The plain tensors stored whole, and with the shard index the bytes items, are read without DCP's
        # load (reader.split: from the index, else from .metadata); DCP plans the rest, and its reads join
        # theirs in one pass per file.
        try:
            rest = reader.split(tensors)
            if rest:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
                    dcp.load(rest, storage_reader=reader, planner=Planner(), no_dist=True)
            else:
                reader.read_direct()
            failure = None
        except (Exception, CheckpointException) as e:  # a corrupt file may break the parse: the hashes say
            failure = _inner(e)                         # which; every rank reaches the exchange below
        why = None
        if failure is not None:
            why = f"rank {self.rank}: {type(failure).__name__}: {(str(failure) + chr(10)).splitlines()[0]}"
        reports = self._gather_if_any((reader.problems, why), bool(reader.problems) or why is not None) or []
        problems = [p for ps, _ in reports for p in ps]
        if problems:
            raise CorruptShards(path, problems)
        if failure is not None:
            raise failure
        failed = [w for _, w in reports if w is not None]
        if failed:
            raise CheckpointError(f"loading {path} failed on another rank ({failed[0]})")


def _check_model(path: Path, meta: dict, state, ignore=("dropout",)) -> None:
    """CheckpointError when the checkpoint was saved for other model dimensions (dropout may differ; for
    ckpt.init_from every training-only key, `ignore`)."""
    model_cfg = getattr(state.strategy.model, "cfg", None)
    if meta.get("model") and model_cfg is not None:
        now = dataclasses.asdict(model_cfg)
        diff = [k for k in meta["model"] if k in now and meta["model"][k] != now[k] and k not in ignore]
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
