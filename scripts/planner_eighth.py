"""The planner against the eighth set (plan/published_gpu_eighth.py): Megatron-Bridge's dense Llama 3 rows on DGX
H100 and DGX B200 (Megatron-Core with Transformer Engine, FP8 current scaling), frozen in a commit before the planner
was first run on them. Evaluate once per committed change of the planner.

    PYTHONPATH=src python scripts/planner_eighth.py            # the whole table
    PYTHONPATH=src python scripts/planner_eighth.py --summary  # the means only
"""
from __future__ import annotations

import argparse

from shardlab.plan.published_gpu import print_set
from shardlab.plan.published_gpu_eighth import EIGHTH, evaluate_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summary", action="store_true", help="the means only")
    print_set(evaluate_rows(EIGHTH), ap.parse_args().summary)


if __name__ == "__main__":
    main()
