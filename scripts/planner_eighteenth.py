"""The planner against the eighteenth set (plan/published_gpu_eighteenth.py): Megatron-Bridge's matched Moonlight 16B
recompute study on 8 H100s (step time and peak allocated memory), a page the project had never used, frozen in a
commit before the planner was first run on it. The same table and summary as scripts/planner_heldout.py (its
printing functions, called on these rows).

    PYTHONPATH=src python scripts/planner_eighteenth.py            # the whole table
    PYTHONPATH=src python scripts/planner_eighteenth.py --summary  # the means only
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is no package: its sibling, imported by path

from planner_heldout import main  # noqa: E402

from shardlab.plan.published_gpu_eighteenth import EIGHTEENTH  # noqa: E402

if __name__ == "__main__":
    main(EIGHTEENTH, __doc__)
