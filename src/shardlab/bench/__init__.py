"""Benchmark suites: `shardlab bench SUITE --out DIR [--quick]` (see docs/bench.md and bench/common.py)."""
