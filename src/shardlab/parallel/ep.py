"""Expert parallelism (placeholder replaced below)."""
EP_WITH_DP = ("single", "ddp")
