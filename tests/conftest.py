import pytest

from shardlab.testing import WorkerPool


@pytest.fixture(scope="module")
def pool2():
    with WorkerPool(2) as pool:
        yield pool


@pytest.fixture(scope="module")
def pool4():
    with WorkerPool(4) as pool:
        yield pool
