import sys
from pathlib import Path

import pytest

# the shared drivers (tests/drivers/*_harness.py) are imported by name from every test folder
sys.path.insert(0, str(Path(__file__).resolve().parent / "drivers"))

from shardlab.testing import WorkerPool


@pytest.fixture(scope="module")
def pool2():
    with WorkerPool(2) as pool:
        yield pool


@pytest.fixture(scope="module")
def pool4():
    with WorkerPool(4) as pool:
        yield pool
