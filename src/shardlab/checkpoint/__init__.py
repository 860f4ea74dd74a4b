"""Distributed checkpoints: DCP storage + full training state, atomic commit, checksums, retention,
async save, reshard on load, HF export. See docs/checkpoint.md."""
import warnings

# DCP warns on every save/load without a process group, even when asked for one process with
# `no_dist=True`; shardlab says so on purpose (one-process runs, `shardlab ckpt`), so the line is noise.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized",
                        category=UserWarning)

__all__ = ["CheckpointManager", "CheckpointError", "check_resume"]


def __getattr__(name):
    # The manager (and torch) on first use: the launcher reads manifests through this package to verify a
    # resume before it starts the ranks, and must not spend seconds importing torch for that.
    if name == "CheckpointManager":
        from shardlab.checkpoint import manager
        return manager.CheckpointManager
    if name in __all__:  # the resume checks read manifests and JSON only
        from shardlab.checkpoint import resume_path
        return getattr(resume_path, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
