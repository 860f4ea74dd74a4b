import sys
from pathlib import Path

import pytest

# the shared drivers (tests/drivers/*_harness.py) are imported by name from every test folder
sys.path.insert(0, str(Path(__file__).resolve().parent / "drivers"))

from shardlab.testing import WorkerPool


def _module_pool(world: int):
    pool = WorkerPool(world)
    try:
        yield pool
    finally:
        # The ranks are idle and hold nothing: killing them is instant, where a clean exit (a barrier, then
        # torch's interpreter teardown) takes 1.5-3 s per module, a minute or two over the suite.
        pool.close(force=True)


@pytest.fixture(scope="module")
def pool2():
    yield from _module_pool(2)


@pytest.fixture(scope="module")
def pool4():
    yield from _module_pool(4)
