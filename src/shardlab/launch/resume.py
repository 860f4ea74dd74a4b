"""Resuming a run by its directory: start from that run's resolved config, apply the new overrides on
top, and say what differs before anything is written.

    shardlab resume RUN [key=value ...]              # = shardlab train --out RUN ckpt.resume=latest ...
    shardlab train --out RUN ckpt.resume=latest ...  # the same
    shardlab train --out NEW ckpt.resume=RUN ...     # continue RUN's training in a new directory

The base is RUN/config.toml (train.grad_accum is derived again from train.global_batch at the new
world size); the world size defaults to the checkpoint's. Every difference is printed, and those that
change what the model learns are named as such. When the new config is written over RUN/config.toml,
the old one is kept first in RUN/config_history/ (a run directory stays a record of how each part of
it was trained).
"""
from __future__ import annotations

import copy
import os
import sys
import time
from pathlib import Path

from shardlab import config as config_mod
from shardlab.checkpoint import manifest as mf

# Keys whose change alters the optimisation itself (what the model learns), beyond rounding.
TRAJECTORY = {
    "train.steps": "the cosine LR schedule now ends at the new step count",
    "train.global_batch": "another batch per step: other samples per step and another gradient noise",
    "train.seq_len": "other sequences",
    "train.seed": "another sample order and initialisation stream",
    "train.lr": "another learning rate", "train.min_lr": "another learning-rate floor",
    "train.warmup_steps": "another LR warm-up", "train.weight_decay": "another weight decay",
    "train.beta1": "another AdamW beta1", "train.beta2": "another AdamW beta2",
    "train.grad_clip": "another clipping threshold", "train.dtype": "another compute precision",
    "parallel.comm_dtype": "gradients communicated at another precision",
    "parallel.compress": "gradients compressed differently", "parallel.powersgd_rank": "another PowerSGD rank",
    "doctor.on_anomaly": "anomalies handled differently",
    # local SGD / DiLoCo (docs/sync.md): another algorithm, or the same one synchronising otherwise
    "parallel.sync": "replicas synchronised another way", "parallel.sync_every": "another period H",
    "parallel.outer_lr": "another outer learning rate", "parallel.outer_momentum": "another outer momentum",
    "parallel.outer_dtype": "pseudo-gradients averaged at another precision",
}
# Same maths, different summation order: equal up to floating-point rounding, not bitwise.
REORDER = {"parallel.strategy", "train.micro_batch", "train.grad_accum", "parallel.bucket_mb",
           "parallel.first_bucket_mb", "parallel.last_bucket_mb", "parallel.wrap", "parallel.dp_replicate"}
# where the global batch is cut between data-parallel ranks (docs/balance.md): the same samples per step
REORDER |= {"data.shares", "data.shares_window", "data.shares_drift", "data.shares_resume"}
_IGNORED = {"ckpt.resume"}


def source_run(target: str, out: str | Path | None) -> Path | None:
    """The run directory being resumed (one with a config.toml), or None when not resuming a run."""
    if not target:
        return None
    if target in ("latest", "none"):  # none: the run's own config, from step 0 on purpose
        candidates = [Path(out)] if out else []
    else:
        p = Path(target)
        candidates = [p, p.parent, p.parent.parent]  # a run, its checkpoints/, one step_NNNNNN
    return next((c for c in candidates if (c / "config.toml").is_file()), None)


def checkpoint_of(target: str, run: Path) -> Path | None:
    """The committed checkpoint `ckpt.resume` will load, as far as the launcher can tell."""
    if target == "none":
        return None
    try:
        if target == "latest":
            found = mf.resume_candidates(run / "checkpoints")
            return found[0] if found else None
        p, kind = mf.resolve(target)
    except (FileNotFoundError, OSError):
        return None
    if kind == "ckpts":
        found = mf.resume_candidates(p)
        return found[0] if found else None
    return p


def saved_world(checkpoint: Path | None) -> int | None:
    m = mf.read_manifest(checkpoint) if checkpoint is not None else None
    return m.get("world_size") if m else None


def stored_config(run: Path) -> config_mod.Config:
    """RUN/config.toml as written (resolved)."""
    try:
        return config_mod.load(run / "config.toml")
    except config_mod.ConfigError as e:  # e.g. written by another shardlab version
        raise config_mod.ConfigError(f"resuming {run}: its config.toml cannot be used as the base: {e}") from None


def base_config(stored: config_mod.Config) -> config_mod.Config:
    """The base for the new config: the stored one, with grad_accum derived again from global_batch."""
    base = copy.deepcopy(stored)
    base.train.grad_accum = 1
    return base


def differences(old: config_mod.Config, new: config_mod.Config, old_world: int | None,
                new_world: int) -> tuple[list[str], list[str]]:
    """(lines describing every change, the keys among them that alter the trajectory)."""
    a, b = config_mod.to_dict(old), config_mod.to_dict(new)
    lines, trajectory = [], []
    for section in a:
        for name in a[section]:
            key = f"{section}.{name}"
            if key in _IGNORED or a[section][name] == b[section].get(name):
                continue
            if key in TRAJECTORY or (section in ("model", "data") and key not in REORDER):
                why = TRAJECTORY.get(key, "another model" if section == "model" else "other data")
                note = f"changes the trajectory: {why}"
                trajectory.append(key)
            elif key == "train.grad_accum" and old_world != new_world:
                note = f"derived: keeps train.global_batch={new.train.global_batch} at the new world size"
            elif key in REORDER:
                note = "same maths, another summation order: equal up to rounding, not bitwise"
            else:
                note = "does not change what is computed"
            lines.append(f"{key}: {a[section][name]!r} -> {b[section].get(name)!r}  ({note})")
    if old_world is not None and old_world != new_world:
        lines.insert(0, f"world size: {old_world} -> {new_world}  (state resharded on load, RNG streams reseeded; "
                        f"the same samples per step at train.global_batch={new.train.global_batch}; "
                        "equal up to rounding, not bitwise)")
    return lines, trajectory


def announce(run: Path, stored: config_mod.Config, new: config_mod.Config, old_world: int | None,
             new_world: int, checkpoint: Path | None, dest: Path, file=None) -> list[str]:
    """Print what the resumed run changes (to stderr), and keep RUN/config.toml in config_history/ before
    it is replaced. Only the launching process does this (not every rank)."""
    file = file or sys.stderr
    if os.environ.get("SHARDLAB_RESUME_ANNOUNCED") or int(os.environ.get("RANK", "0")) != 0:
        return []
    lines, trajectory = differences(stored, new, old_world, new_world)
    where = (f"{checkpoint.name}, " if checkpoint is not None else
             "from step 0 on purpose (ckpt.resume=none), " if new.ckpt.resume == "none" else
             "no checkpoint yet: from step 0, ")
    world = f"world size {old_world}" if old_world else "world size unknown"
    if Path(dest).resolve() != Path(run).resolve():
        world += f"; writing to {dest}"
    if not lines:
        print(f"[resume] {run} ({where}{world}) with its own config.toml: nothing changed", file=file, flush=True)
        return lines
    print(f"[resume] {run} ({where}{world}) with its config.toml and these changes:", file=file)
    for line in lines:
        print(f"[resume]   {line}", file=file)
    if trajectory:
        print(f"[resume] these change the trajectory (a different run from here on): {', '.join(trajectory)}",
              file=file)
    if Path(dest).resolve() == Path(run).resolve():
        kept = keep_history(run, lines)
        print(f"[resume] the previous config.toml is kept as {kept}", file=file)
    file.flush()
    return lines


def keep_history(run: Path, lines: list[str]) -> Path:
    """Copy RUN/config.toml into RUN/config_history/ with a header saying what replaced it."""
    hist = run / "config_history"
    hist.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path, i = hist / f"config-{stamp}.toml", 1
    while path.exists():
        path, i = hist / f"config-{stamp}-{i}.toml", i + 1
    header = [f"# {run}/config.toml until {time.strftime('%Y-%m-%d %H:%M:%S')}, when the run was resumed with:"]
    header += [f"#   {line}" for line in lines]
    path.write_text("\n".join(header) + "\n" + (run / "config.toml").read_text())
    return path
