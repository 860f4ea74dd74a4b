import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # slurm_local, netns


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A private one-node Slurm for the session; skipped with the reason when it cannot run here."""
    from slurm_local import LocalSlurm, Unavailable

    try:
        cluster = LocalSlurm.start(tmp_path_factory.mktemp("slurm"))
    except Unavailable as e:
        print(f"\n[slurm tests skipped] {e}")
        pytest.skip(str(e))
    try:
        yield cluster
    finally:
        cluster.stop()
