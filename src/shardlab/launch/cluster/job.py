"""What every recipe needs of a run: the `shardlab train` arguments each node runs, checked before anything is
written (bad input: one line, exit code 2, as `shardlab train` itself)."""
from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from shardlab import config as config_mod
from shardlab.errors import ConfigError

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class Run:
    nodes: int
    nproc: int  # processes (ranks) per node: one per GPU on a GPU node
    out: str  # the run directory, absolute: on storage every node mounts
    config: str | None = None
    overrides: list[str] = field(default_factory=list)
    iface: str | None = None  # the socket interface: GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME
    env: dict[str, str] = field(default_factory=dict)  # NCCL options and whatever else the nodes need
    timeout_s: int = 600  # the head node reached / every node joined within this, or one line
    python: str = sys.executable

    def train_args(self) -> list[str]:
        """What `shardlab launch node ... --` hands to `shardlab train` on every node: a first attempt starts
        from step 0, a requeued or restarted one from the run's latest checkpoint (ckpt.resume=latest)."""
        config = ["--config", self.config] if self.config else []
        return ["--nproc", str(self.nproc), "--out", self.out, *config, "ckpt.resume=latest", *self.overrides]


def check(run: Run):
    """The run's config as every node will load it (ConfigError: one line). Returns the validated config."""
    if run.nodes < 1 or run.nproc < 1:
        raise ConfigError(f"--nodes {run.nodes} and --nproc {run.nproc}: both must be at least 1")
    for o in run.overrides:
        if "=" not in o or o.startswith("-"):
            raise ConfigError(f"{o!r}: the run's settings are key=value overrides (and --config FILE)")
    for key, value in run.env.items():
        if not _ENV_NAME.fullmatch(key) or "\n" in value:
            raise ConfigError(f"--env {key}={value!r}: must be NAME=VALUE, NAME a shell variable name")
    if run.config and not Path(run.config).is_file():
        raise ConfigError(f"--config {run.config}: no such file")
    cfg = config_mod.load(run.config, run.overrides)
    cfg = config_mod.validate(cfg, run.nodes * run.nproc)
    return cfg


def env_pairs(values: list[str], prefix: str = "") -> dict[str, str]:
    """`KEY=VALUE` options (`--nccl IB_HCA=mlx5` is NCCL_IB_HCA=mlx5) as a dict, in order."""
    out = {}
    for v in values:
        key, sep, value = v.partition("=")
        if not sep:
            raise ConfigError(f"{v!r}: must be KEY=VALUE")
        if prefix and not key.startswith(prefix):
            key = prefix + key
        out[key] = value
    return out


def quote(args: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)
