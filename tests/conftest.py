import sys
from pathlib import Path

import pytest

# the shared drivers (tests/drivers/*_harness.py) are imported by name from every test folder
sys.path.insert(0, str(Path(__file__).resolve().parent / "drivers"))

from shardlab.testing import WorkerPool

from pool_harness import footprint  # noqa: E402 (the drivers' folder is on the path from here)

# A worker that has grown past this much resident memory, or holds this many threads (every process group a
# test makes is a gloo mesh with threads of its own, kept until the process ends), is started afresh at the
# end of the module that grew it: a long-lived pool must not carry one module's footprint through the suite.
RECYCLE_RSS_BYTES = 1 << 30
RECYCLE_THREADS = 400


class _SharedPools:
    """One WorkerPool per world size for the whole session. Starting W ranks (torch's import and a gloo
    rendezvous in each) costs seconds per module on 2 cores; the modules share the ranks instead. A run that
    fails tears its pool down (WorkerPool.run) and the next run starts a fresh one, so nothing a failure leaves
    behind reaches the next module."""

    def __init__(self):
        self.pools: dict[int, WorkerPool] = {}

    def get(self, world: int) -> WorkerPool:
        if world not in self.pools:
            self.pools[world] = WorkerPool(world)
        return self.pools[world]

    def recycle_if_grown(self, world: int) -> None:
        pool = self.pools.get(world)
        if pool is None or not pool.procs:
            return
        try:
            sizes = pool.run(footprint, timeout=30)
        except Exception:  # noqa: BLE001 - a pool that cannot answer is closed either way (run did it)
            return
        if any(rss > RECYCLE_RSS_BYTES or threads > RECYCLE_THREADS for rss, threads in sizes):
            pool.close(force=True)

    def close(self) -> None:
        for pool in self.pools.values():
            # The ranks are idle and hold nothing: killing them is instant, where a clean exit (a barrier,
            # then torch's interpreter teardown) takes seconds.
            pool.close(force=True)


@pytest.fixture(scope="session")
def _shared_pools():
    pools = _SharedPools()
    try:
        yield pools
    finally:
        pools.close()


def _module_pool(pools: _SharedPools, world: int):
    yield pools.get(world)
    pools.recycle_if_grown(world)


@pytest.fixture(scope="module")
def pool2(_shared_pools):
    yield from _module_pool(_shared_pools, 2)


@pytest.fixture(scope="module")
def pool4(_shared_pools):
    yield from _module_pool(_shared_pools, 4)
