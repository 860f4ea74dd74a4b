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
# Eight gloo ranks on a small machine: a run there may take minutes (each rank gets a fraction of a core).
POOL_TIMEOUT_S = {8: 600.0}
MAX_RANKS = 8  # rank processes alive at once, every pool together


class _SharedPools:
    """One WorkerPool per world size for the whole session. Starting W ranks (torch's import and a gloo
    rendezvous in each) costs seconds per module on 2 cores; the modules share the ranks instead. A run that
    fails tears its pool down (WorkerPool.run) and the next run starts a fresh one, so nothing a failure leaves
    behind reaches the next module."""

    def __init__(self):
        self.pools: dict[int, WorkerPool] = {}

    def get(self, world: int) -> WorkerPool:
        if world not in self.pools:  # started by its first run: a selection that never needs it never starts it
            # At most MAX_RANKS rank processes alive at once, idle or not (the machine's rule: a large world
            # exhausts memory): the other pools are idle between modules, so they go first, largest first, and
            # start again when next used.
            for other in sorted(self.pools, reverse=True):
                if sum(self.pools) + world <= MAX_RANKS:
                    break
                self.release(other)
            self.pools[world] = WorkerPool(world, timeout=POOL_TIMEOUT_S.get(world, 120.0))
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

    def release(self, world: int) -> None:
        if world in self.pools:
            self.pools.pop(world).close(force=True)

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


# The modules that use pool8, in the order they run (set once the selection is final): the 8 ranks are shared by
# the few world-8 tests and stopped after the last of them, not kept idle through the rest of the session.
_POOL8_MODULES: list[str] = []


@pytest.hookimpl(trylast=True)  # after -k / -m have deselected
def pytest_collection_modifyitems(items):
    # The world-8 tests run one after the other, where the last of them runs: 8 ranks are started once (and the
    # idle pools stopped for them, MAX_RANKS, started again once), not once per module that has such a test,
    # with every other module's pools in between (~15 s each time on 2 cores).
    eight = [item for item in items if "pool8" in getattr(item, "fixturenames", ())]
    if len(eight) > 1:
        rest = [item for item in items if item not in eight[:-1]]
        at = rest.index(eight[-1])
        items[:] = rest[:at] + eight[:-1] + rest[at:]
    _POOL8_MODULES[:] = list(dict.fromkeys(item.getparent(pytest.Module).nodeid for item in eight))


@pytest.fixture(scope="module")
def pool8(_shared_pools, request):
    yield _shared_pools.get(8)
    if not _POOL8_MODULES or request.node.nodeid == _POOL8_MODULES[-1]:
        _shared_pools.release(8)
    else:
        _shared_pools.recycle_if_grown(8)


@pytest.fixture
def bench_on_session_pools(_shared_pools, monkeypatch):
    """A `shardlab bench` suite run through bench's main in the test process measures on the session's pools
    instead of a fresh pool per measurement (common.run_on_ranks starts and stops one each time: seconds of
    start-up, torch's import and shardlab's in every rank), and runs its training jobs there too
    (common.run_jobs launches torchrun and a worker per call). The functions and the ranks are as real; what
    differs is only the allocator setting run_on_ranks gives its own ranks so that frees show in RSS, which
    moves peak-RSS figures, never asserted in a test, and the progress lines run_jobs prints per finished job."""
    from shardlab.bench import common

    used = set()

    def run_on_ranks(fn, *args, world: int = 2, timeout: float = 1800):
        used.add(world)
        return _shared_pools.get(world).run(fn, *args, timeout=timeout)[0]

    def run_jobs(jobs: list[dict], nproc: int, work, timeout: float = 900) -> list[dict]:
        # what `python -m shardlab.bench.worker JOBS.json` runs on each of its ranks (bench/worker.py's
        # run_job, every job in order), on the session's pool of nproc ranks; one rank runs in this process
        # (the worker's one-process launch has no process group either)
        import shutil

        from shardlab.bench.worker import run_job

        work.mkdir(parents=True, exist_ok=True)
        for j in jobs:  # a fresh run directory: the trainer appends to metrics.jsonl
            shutil.rmtree(j["out"], ignore_errors=True)
        if nproc == 1:
            for j in jobs:
                run_job(j)
        else:
            used.add(nproc)
            from bench_harness import run_jobs as on_each_rank

            _shared_pools.get(nproc).run(on_each_rank, jobs, timeout=timeout)
        return [common.load_run(Path(j["out"]), j.get("name", "")) for j in jobs]

    monkeypatch.setattr(common, "run_on_ranks", run_on_ranks)
    monkeypatch.setattr(common, "run_jobs", run_jobs)
    yield
    for world in sorted(used):
        _shared_pools.recycle_if_grown(world)
