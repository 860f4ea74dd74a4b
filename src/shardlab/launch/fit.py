"""Will the ranks fit this machine? Checked before any rank starts (mpirun's rule: no more ranks than slots
unless told `--oversubscribe`), so a typo such as `--nproc 64` is one line and exit 2, not a machine whose
memory the ranks exhaust until the kernel's out-of-memory killer takes them and other users' processes.

Two checks, for the ranks of this host (`--nproc`; other nodes check their own):

- cores: more than OVERSUBSCRIBE_FACTOR x the usable cores of rank threads (nproc x train.threads) is refused
  unless `--oversubscribe`. Up to that factor the launcher only warns (launch/notes.py): the tests and quick
  drills run 2-4 ranks on 2 cores, slow but fine; at 32x each step takes minutes.
- memory: each rank needs the planner's estimate of its memory for this model, layout and batch
  (plan.memory, the lines `shardlab plan` and `explain` print) plus RANK_FLOOR_BYTES, what a training rank's
  process takes before its model (torch, gloo, the trainer, the data and tokenizer). That times the ranks
  must fit in /proc/meminfo's MemAvailable. `--oversubscribe` does not lift it: ranks that share cores are
  slow, ranks that exhaust memory take the machine down (fewer ranks, a smaller model or micro batch do).
  With GPUs the planner's estimate is GPU memory (`shardlab plan` checks it there): the host then needs the
  floor per rank only.

Pure Python: the launcher of a multi-rank run must not load torch (seconds on every launch).
"""
from __future__ import annotations

import dataclasses
import os

from shardlab.errors import ConfigError

OVERSUBSCRIBE_FACTOR = 4  # rank threads per usable core beyond which --oversubscribe is required

# A training rank's own memory beyond what the planner counts. Measured on the 2-core CPU machine (torch 2.13):
# the peak RSS (VmHWM in /proc/PID/status, polled every 0.2 s) of each rank of `shardlab train --config
# configs/tiny.toml --nproc 2` was 408 MiB (rank 0; 378 MiB rank 1) for a planner estimate of 8 MiB, and of
# model.preset=small (micro batch 8) 540 MiB for an estimate of 171 MiB. A process that only imports torch and
# initialises gloo takes 220 MiB; the rest is the trainer's imports, the data, the tokenizer, the allocator.
RANK_FLOOR_BYTES = 400 * 2**20

MiB, GiB = 2**20, 2**30


def _size(b: float) -> str:
    return f"{b / GiB:.1f} GiB" if b >= GiB else f"{b / MiB:.0f} MiB"


def cores_fit(threads: int, ncores: int) -> int:
    """The most ranks of `threads` threads each that the cores check passes without --oversubscribe."""
    return max(1, OVERSUBSCRIBE_FACTOR * ncores // max(threads, 1))


def cores_refusal(nproc: int, threads: int, ncores: int, oversubscribe: bool) -> str | None:
    """The refusal when this host's rank threads exceed OVERSUBSCRIBE_FACTOR x its cores, else None."""
    want, most = nproc * threads, OVERSUBSCRIBE_FACTOR * ncores
    if oversubscribe or want <= most:
        return None
    fits = cores_fit(threads, ncores)
    per = f"{nproc} ranks x train.threads={threads} = {want} threads" if threads > 1 else f"{nproc} ranks"
    return (f"--nproc {nproc}: {per} on {ncores} core{'s' if ncores != 1 else ''} is more than "
            f"{OVERSUBSCRIBE_FACTOR}x the cores (each step about {want / ncores:.0f}x as slow as with a core per "
            f"rank): use --nproc {fits} or fewer, or add --oversubscribe to run them anyway")


def memory_refusal(nproc: int, planned: float, available: float, gpu: bool = False,
                   planned_note: str = "", most: int | None = None) -> str | None:
    """The refusal when nproc ranks of (planned + RANK_FLOOR_BYTES) bytes each exceed `available`, else None.
    `planned`: the planner's bytes per rank (on the host; 0 with GPUs, where the model's memory is not here).
    `most`: the ranks the cores check allows; the count suggested is the smaller one, so that following the
    advice is not refused by the next check."""
    per_rank = planned + RANK_FLOOR_BYTES
    if nproc * per_rank <= available:
        return None
    fits = int(available // per_rank)
    if most is not None and fits >= 1:
        fits = min(fits, most)
    what = (f"{_size(RANK_FLOOR_BYTES)} a rank process takes; its model's memory is on the GPU" if gpu else
            f"the planner's {_size(planned)} for this model, layout and batch{planned_note} + "
            f"{_size(RANK_FLOOR_BYTES)} a rank process takes")
    fewer = (f"use --nproc {fits} or fewer" if fits >= 1 else "not even one rank fits")
    return (f"--nproc {nproc} does not fit this machine's memory: each rank needs about {_size(per_rank)} ({what}), "
            f"x {nproc} ranks = {_size(nproc * per_rank)}, but {_size(available)} is available (MemAvailable): "
            f"{fewer}, or a smaller model, micro batch or sequence (--oversubscribe does not lift this)")


def planned_bytes(cfg, world: int, available: float | None = None) -> tuple[float, str]:
    """The planner's memory per rank for the run `cfg` describes at `world` ranks, on a CPU host: what the
    model, gradients, optimizer state, activations and buffers take (plan/memory.py), and a note when the
    planner has no model of the run (then 0: the floor alone is checked). When the model's 16-bit weights alone,
    fully sharded, exceed `available`, that lower bound, unwalked: a typo's model (model.n_layer=100000000) has
    its closed-form count at once, while the memory lines walk every parameter's shape (for such a model,
    minutes and more memory than the host has: the check itself was what the kernel killed)."""
    from shardlab.plan.from_config import from_config
    from shardlab.plan.layout import grad_accum
    from shardlab.plan.memory import memory_lines

    try:
        model, train, lay = from_config(cfg, world)
        weights = 2.0 * model.params / world  # below any layout's share: every rank holds at least this
        if available is not None and weights > available:
            return weights, " (its 16-bit weights alone, fully sharded: a lower bound)"
        if lay.offload != "none" and cfg.parallel.offload_to == "host":
            # the planner counts offloaded state as leaving the accelerator; on a CPU it stays in this memory
            lay = dataclasses.replace(lay, offload="none")
        return float(sum(line.bytes for line in memory_lines(model, train, lay, grad_accum(train, lay)))), ""
    except MemoryError:  # sizing the run took more memory than the host gives: the run itself would too
        return float(available or 0.0), " (at least all that is available: the planner ran out of memory sizing it)"
    except Exception:  # noqa: BLE001 - a run the planner does not model must still launch: the floor alone
        return 0.0, " (none: the planner has no model of this run)"


def mem_available() -> float | None:
    """Bytes of /proc/meminfo's MemAvailable (None where there is none: not Linux, not checked)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024.0
    except OSError:
        pass
    return None


def has_gpus() -> bool:
    """Whether the ranks will train on NVIDIA GPUs, told without torch: a driver with a device, not hidden."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    try:
        return bool(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return False


def check(cfg, nproc: int, nnodes: int, oversubscribe: bool) -> None:
    """Raise ConfigError (one line, exit 2, nothing started or written) when this host's `nproc` ranks
    will not fit: the memory first (nothing lifts it), then the cores (--oversubscribe lifts it)."""
    from shardlab.launch.notes import cores

    available = mem_available()
    if available is not None:
        gpu = has_gpus()
        planned, note = (0.0, "") if gpu else planned_bytes(cfg, nproc * nnodes, available)
        most = None if oversubscribe else cores_fit(cfg.train.threads, cores())
        refusal = memory_refusal(nproc, planned, available, gpu, note, most=most)
        if refusal:
            raise ConfigError(refusal)
    refusal = cores_refusal(nproc, cfg.train.threads, cores(), oversubscribe)
    if refusal:
        raise ConfigError(refusal)
