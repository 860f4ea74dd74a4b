"""The planner against the seventeenth set (plan/published_gpu_seventeenth.py): OLMo-core's official training
scripts on 8 H100s, a source the project had never used, frozen in a commit before the planner was first run on
them. The same table and summary as scripts/planner_heldout.py (its printing functions, called on these rows).

    PYTHONPATH=src python scripts/planner_seventeenth.py            # the whole table
    PYTHONPATH=src python scripts/planner_seventeenth.py --summary  # the means only
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is no package: its sibling, imported by path

from planner_heldout import main  # noqa: E402

from shardlab.plan.published_gpu_seventeenth import SEVENTEENTH  # noqa: E402

if __name__ == "__main__":
    main(SEVENTEENTH, __doc__)
