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


def check_resume(cfg, num_samples: int | None = None) -> None:
    """For the CLI, before anything is launched or written: a bad `ckpt.resume=PATH` is a CheckpointError
    (a ConfigError: one line, exit 2). `latest` needs no check: no checkpoint yet means a fresh start.
    The sample order continues only with the same global batch and data: say so now, not in every rank."""
    target = cfg.ckpt.resume
    if target and target != "latest":
        found = resolve_resume_path(target)
        if isinstance(found, str):
            raise CheckpointError(found)
        try:
            sampler = json.loads((found / "train_state.json").read_text())["sampler"]
        except (OSError, ValueError, KeyError):
            return  # unreadable state is reported, with its file, by the verified load
        ours = {"global_batch": cfg.train.global_batch, "num_samples": num_samples}
        for key, value in ours.items():
            if value is not None and sampler.get(key) != value:
                raise CheckpointError(
                    f"ckpt.resume={target}: the checkpoint was trained with {key}={sampler.get(key)} but this run "
                    f"has {value}; resume with the same data, train.seq_len and train.global_batch "
                    f"(set train.global_batch={sampler.get('global_batch')} at any world size)")
