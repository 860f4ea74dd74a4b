"""Distributed checkpoints: DCP storage + full training state, atomic commit, checksums, retention,
async save, reshard on load, HF export. See docs/checkpoint.md."""
from shardlab.checkpoint.manager import CheckpointError, CheckpointManager, check_resume

__all__ = ["CheckpointManager", "CheckpointError", "check_resume"]
