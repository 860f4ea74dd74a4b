"""The planner against the sixth set (plan/published_gpu_unseen.py): published GPU runs from sources the project
had never used, frozen in a commit before the planner was first run on them. The same table and summary as
scripts/planner_heldout.py (its printing functions, called on these rows).

    PYTHONPATH=src python scripts/planner_unseen.py            # the whole table
    PYTHONPATH=src python scripts/planner_unseen.py --summary  # the means only

The figure was an estimate of the error on unseen runs until its first evaluation; two inputs found by reading
why rows missed (the stage cut, the network) make the rows examined since (docs/planner.md, "The sixth set").
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is no package: its sibling, imported by path

from planner_heldout import main  # noqa: E402

from shardlab.plan.published_gpu_unseen import UNSEEN  # noqa: E402

if __name__ == "__main__":
    main(UNSEEN, __doc__)
