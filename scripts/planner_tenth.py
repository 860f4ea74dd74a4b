"""The planner against the tenth set (plan/published_gpu_tenth.py): Megatron-Bridge's dense Llama 3 rows in MXFP8
on B200, GB200 and GB300 (Megatron-Core with Transformer Engine, MXFP8 block scaling), frozen in a commit before the
planner was first run on them. Evaluate once per committed change of the planner.

    PYTHONPATH=src python scripts/planner_tenth.py            # the whole table
    PYTHONPATH=src python scripts/planner_tenth.py --summary  # the means only
"""
from __future__ import annotations

import argparse

from shardlab.plan.published_gpu import print_set
from shardlab.plan.published_gpu_tenth import TENTH, evaluate_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summary", action="store_true", help="the means only")
    print_set(evaluate_rows(TENTH), ap.parse_args().summary)


if __name__ == "__main__":
    main()
