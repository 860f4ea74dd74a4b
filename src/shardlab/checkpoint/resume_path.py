"""What a user asked to resume from, checked before anything runs: `ckpt.resume=PATH` resolved to one committed
checkpoint (or one line saying why not), and the errors every checkpoint path raises. The CLI calls
`check_resume` before launching; the manager (manager.py) calls `resolve_resume_path` when it loads."""
from __future__ import annotations

import json
from pathlib import Path

from shardlab.checkpoint import manifest as mf
from shardlab.config import ConfigError


class CheckpointError(ConfigError):
    """A checkpoint that cannot be used (missing, incomplete, corrupt, incompatible): one line for the user."""


class CorruptShards(CheckpointError):
    """A shard file failed verification while it was being loaded: the state it was loaded into now holds
    some of its bytes and must be overwritten by another checkpoint before anyone trains on it."""

    def __init__(self, path: Path, problems: list[str]):
        super().__init__(f"checkpoint {path} failed verification: {problems[0]}")
        self.problems = problems


def resolve_resume_path(target: str) -> Path | str:
    """`ckpt.resume=PATH` (a run, its checkpoints/ or one checkpoint) -> the checkpoint, or an error line."""
    try:
        path, kind = mf.resolve(target)
    except FileNotFoundError as e:
        return f"ckpt.resume={target}: {e}"
    if kind == "ckpts":
        found = mf.resume_candidates(path)
        return found[0] if found else f"ckpt.resume={target}: no committed checkpoint in {path}"
    manifest, problem = mf.load_manifest(path)
    if manifest is None and not (path / mf.MANIFEST).exists():
        return (f"ckpt.resume={target}: {path} has no {mf.MANIFEST}, so it is not a committed checkpoint "
                f"(an interrupted or failed save); pick a committed one (`shardlab ckpt ls`)")
    if manifest is None:
        return f"ckpt.resume={target}: {problem}; pick another checkpoint (`shardlab ckpt ls`)"
    return path


def imported_message(path) -> str:
    return (f"checkpoint {path} is an imported model (`shardlab ckpt import`: weights only, no optimizer state or "
            f"data position): start a run from it with ckpt.init_from={path} instead of resuming it")


def check_resume(cfg, num_samples: int | None = None) -> None:
    """For the CLI, before anything is launched or written: a bad `ckpt.resume=PATH` is a CheckpointError
    (a ConfigError: one line, exit 2). `latest` needs no check: no checkpoint yet means a fresh start.
    The sample order continues only with the same global batch and data: say so now, not in every rank."""
    target = cfg.ckpt.resume
    if target and target not in ("latest", "none"):
        found = resolve_resume_path(target)
        if isinstance(found, str):
            raise CheckpointError(found)
        try:
            meta = json.loads((found / "train_state.json").read_text())
            sampler = meta["sampler"]
        except (OSError, ValueError, KeyError, TypeError):
            return  # unreadable state is reported, with its file, by the verified load
        if isinstance(meta, dict) and meta.get("imported"):
            raise CheckpointError(f"ckpt.resume={target}: {imported_message(found)}")
        ours = {"global_batch": cfg.train.global_batch, "num_samples": num_samples}
        for key, value in ours.items():
            if value is not None and sampler.get(key) != value:
                raise CheckpointError(
                    f"ckpt.resume={target}: the checkpoint was trained with {key}={sampler.get(key)} but this run "
                    f"has {value}; resume with the same data, train.seq_len and train.global_batch "
                    f"(set train.global_batch={sampler.get('global_batch')} at any world size)")


def _short(step_dir: Path, problem: str) -> str:
    """A verification problem without its checkpoint's path (the line names the checkpoint once)."""
    for prefix in (f"{step_dir}/", f"{step_dir}: "):
        if problem.startswith(prefix):
            return problem[len(prefix):]
    return problem


def describe_damaged(damaged: list[tuple[Path, list[str]]]) -> str:
    """`step_000004 (__1_0.distcp: size 1000 != 982028 in the manifest), step_000002 (...)`"""
    return ", ".join(f"{p.name} ({'; '.join(_short(p, x) for x in problems)})" for p, problems in damaged)


def no_intact_message(where: Path, damaged: list[tuple[Path, list[str]]], unchanged: bool = False) -> str:
    """The one line for a run whose checkpoints are all damaged: what, which files, what to do."""
    run = where.parent if where.name == "checkpoints" else where
    return (f"cannot resume {run}: it has checkpoints but none is intact: {describe_damaged(damaged)}; "
            f"{'nothing was changed; ' if unchanged else ''}`shardlab ckpt verify {run}` checks each; restore or "
            "remove the damaged files, or start from step 0 on purpose with ckpt.resume=none")


def verify_before_resume(target: str, out: str | Path | None) -> Path | None:
    """For the launcher, before anything is written: the checkpoint `ckpt.resume` will load, every file's
    checksum rechecked (the ranks check them again while loading; this pass makes sure a damaged
    checkpoint is named before config.toml, config_history/ or metrics.jsonl change). None: nothing to
    resume (no ckpt.resume, `none`, or a run without a checkpoint yet: a fresh start). A run whose
    checkpoints are all damaged, or a damaged ckpt.resume=PATH, is a CheckpointError (exit 2): never a
    silent restart from step 0. A PATH that does not resolve is left to check_resume, which says why."""
    if not target or target == "none":
        return None
    if target == "latest":
        if not out:
            return None
        ckpt_dir, explicit = Path(out) / "checkpoints", False
        candidates = mf.resume_candidates(ckpt_dir)
    else:
        found = resolve_resume_path(target)
        if isinstance(found, str):
            return None
        ckpt_dir, explicit, candidates = found.parent, True, [found]
    damaged = []
    for path in candidates:
        problems = mf.verify(path)
        if not problems:
            return path
        damaged.append((path, problems))
        if explicit:
            raise CheckpointError(f"ckpt.resume={target}: checkpoint {path} is damaged "
                                  f"({'; '.join(_short(path, p) for p in problems)}); nothing was changed; pick "
                                  "another checkpoint (`shardlab ckpt ls`) or restore it")
    # A step directory without its manifest was renamed from .tmp only after the manifest was written
    # (the commit protocol), so it is a damaged checkpoint, not an absent one.
    damaged += [(c.path, [f"{c.path}: no {mf.MANIFEST}"]) for c in mf.list_checkpoints(ckpt_dir)
                if not c.committed and not c.path.name.endswith(".tmp")]
    if damaged:
        raise CheckpointError(no_intact_message(ckpt_dir, damaged, unchanged=True))
    return None
