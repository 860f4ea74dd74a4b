"""shardlab: a PyTorch distributed-training runtime and laboratory."""
__version__ = "0.1.0"
