"""The planner against the sixth set (plan/published_gpu_unseen.py): published GPU runs from sources the project
had never used, frozen in a commit before the planner was first run on them. The same table and summary as
scripts/planner_heldout.py (its printing functions, called on these rows).

    PYTHONPATH=src python scripts/planner_unseen.py            # the whole table
    PYTHONPATH=src python scripts/planner_unseen.py --summary  # the means only

The figure is only an estimate of the error on unseen runs while no planner term is chosen by looking at it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is no package: its sibling, imported by path

from planner_heldout import summary, table  # noqa: E402

from shardlab.plan.published_gpu_unseen import UNSEEN, evaluate_rows  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summary", action="store_true", help="the means only")
    args = ap.parse_args()
    rows = evaluate_rows(UNSEEN)
    if not args.summary:
        print("\n".join(table(rows)))
        print()
    print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
