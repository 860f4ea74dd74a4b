"""The planner against the ninth set (plan/published_gpu_ninth.py): Megatron-Bridge's dense Llama 3 rows on GB200
and GB300 (the NVL72 racks' GPUs; Megatron-Core with Transformer Engine, FP8 current scaling), frozen in a commit
before the planner was first run on them. Evaluate once per committed change of the planner.

    PYTHONPATH=src python scripts/planner_ninth.py            # the whole table
    PYTHONPATH=src python scripts/planner_ninth.py --summary  # the means only
"""
from __future__ import annotations

import argparse

from shardlab.plan.published_gpu import print_set
from shardlab.plan.published_gpu_ninth import NINTH, evaluate_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summary", action="store_true", help="the means only")
    print_set(evaluate_rows(NINTH), ap.parse_args().summary)


if __name__ == "__main__":
    main()
