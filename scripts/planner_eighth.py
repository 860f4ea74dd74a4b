"""The planner against the eighth set (plan/published_gpu_eighth.py): Megatron-Bridge's dense Llama 3 rows on DGX
H100 and DGX B200 (Megatron-Core with Transformer Engine, FP8 current scaling), frozen in a commit before the planner
was first run on them. Evaluate once per committed change of the planner.

    PYTHONPATH=src python scripts/planner_eighth.py            # the whole table
    PYTHONPATH=src python scripts/planner_eighth.py --summary  # the means only
"""
from __future__ import annotations

import argparse

from shardlab.plan.published_gpu import error_stats as _stats
from shardlab.plan.published_gpu_eighth import EIGHTH, evaluate_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summary", action="store_true", help="the means only")
    args = ap.parse_args()
    rows = evaluate_rows(EIGHTH)
    if not args.summary:
        print("| case | published tok/s/GPU | planner | error | fits | seen |")
        print("| --- | --- | --- | --- | --- | --- |")
        for r in rows:
            print(f"| {r['case']} | {r['tokens_per_gpu']:,.0f} | {r['planner']:,.0f} | {r['err']:+.1%} | "
                  f"{'yes' if r['fits'] else 'no'} | {'yes' if r['seen'] else ''} |")
        print()
    print(f"tokens/s/GPU, all: {_stats([r['err'] for r in rows])}")
    print(f"  not seen before freezing: {_stats([r['err'] for r in rows if not r['seen']])}")
    for gpu in dict.fromkeys(r["cluster"] for r in rows):
        print(f"  {gpu}: {_stats([r['err'] for r in rows if r['cluster'] == gpu])}")


if __name__ == "__main__":
    main()
