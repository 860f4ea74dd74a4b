"""Distributed checkpoints: DCP storage + full training state, atomic commit, checksums, retention,
async save, reshard on load, HF export. See docs/checkpoint.md."""
import warnings

from shardlab.lazy import lazy_names

# DCP warns on every save/load without a process group, even when asked for one process with
# `no_dist=True`; shardlab says so on purpose (one-process runs, `shardlab ckpt`), so the line is noise.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized",
                        category=UserWarning)

__all__ = ["CheckpointManager", "CheckpointError", "check_resume"]
# The manager (and torch) on first use: the launcher reads manifests through this package to verify a resume
# before it starts the ranks; the resume checks read manifests and JSON only.
__getattr__ = lazy_names(__name__, {"CheckpointManager": "manager", "CheckpointError": "resume_path",
                                    "check_resume": "resume_path"})
