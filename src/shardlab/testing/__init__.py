"""Helpers for shardlab's own multi-process tests (and anyone testing a strategy): a pool of gloo
workers that stays up for a whole test session, so process start-up is paid once, not per test, and the
portable comparisons of two runs (compare.py)."""
from shardlab.testing.compare import assert_float64_equal, assert_fp32_within_error_model, in_float64
from shardlab.testing.cli import run_cli
from shardlab.launch.workers import WorkerPool, free_port

__all__ = ["WorkerPool", "assert_float64_equal", "assert_fp32_within_error_model", "free_port", "in_float64",
           "run_cli"]
