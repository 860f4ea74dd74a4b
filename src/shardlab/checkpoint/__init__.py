"""Distributed checkpoints: DCP storage + full training state, atomic commit, checksums, retention,
async save, reshard on load, HF export. See docs/checkpoint.md."""
import warnings

# DCP warns on every save/load without a process group, even when asked for one process with
# `no_dist=True`; shardlab says so on purpose (one-process runs, `shardlab ckpt`), so the line is noise.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized",
                        category=UserWarning)

from shardlab.checkpoint.manager import CheckpointError, CheckpointManager, check_resume

__all__ = ["CheckpointManager", "CheckpointError", "check_resume"]
