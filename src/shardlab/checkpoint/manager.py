"""CheckpointManager: the trainer's one handle on checkpoints (work in progress)."""
from __future__ import annotations

from pathlib import Path

from shardlab.config import ConfigError


class CheckpointError(ConfigError):
    """A checkpoint that cannot be used (missing, incomplete, corrupt): one line for the user."""


class CheckpointManager:
    def __init__(self, run_dir: Path, cfg):
        self.run_dir, self.cfg = Path(run_dir), cfg
        self.dir = self.run_dir / "checkpoints"

    def resume(self, state) -> int:
        return 0

    def maybe_save(self, state) -> bool:
        return False

    def close(self, state) -> None:
        pass
