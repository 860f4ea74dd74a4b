"""Helpers for shardlab's own multi-process tests (and anyone testing a strategy): a pool of gloo
workers that stays up for a whole test module, so process start-up is paid once, not per test."""
from shardlab.testing.compare import assert_params_close
from shardlab.testing.cli import run_cli
from shardlab.workers import WorkerPool, free_port

__all__ = ["WorkerPool", "assert_params_close", "free_port", "run_cli"]
