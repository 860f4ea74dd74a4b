"""The planner against the seventh set (plan/published_gpu_seventh.py): llm-foundry's published rows the project
had never evaluated (128-512 H100s; sequences 512 to 65,536 on 8 GPUs), frozen in a commit before the planner was
first run on them. Evaluate once per committed change of the planner.

    PYTHONPATH=src python scripts/planner_seventh.py            # the whole table
    PYTHONPATH=src python scripts/planner_seventh.py --summary  # the means only
"""
from __future__ import annotations

import argparse

from shardlab.plan.published_gpu import error_stats as _stats
from shardlab.plan.published_gpu_seventh import SEVENTH, evaluate_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summary", action="store_true", help="the means only")
    args = ap.parse_args()
    rows = evaluate_rows(SEVENTH)
    if not args.summary:
        print("| case | published tok/s/GPU | planner | error |")
        print("| --- | --- | --- | --- |")
        for r in rows:
            print(f"| {r['case']} | {r['tokens_per_gpu']:,.0f} | {r['planner']:,.0f} | {r['err']:+.1%} |")
        print()
    print(f"tokens/s/GPU, all: {_stats([r['err'] for r in rows])}")
    large = [r for r in rows if r["gpus"] > 8]
    print(f"  H100 at 128-512 GPUs, sequence 2048: {_stats([r['err'] for r in large])}")
    for gpu in dict.fromkeys(r["cluster"] for r in rows):
        errs = [r["err"] for r in rows if r["cluster"] == gpu and r["gpus"] == 8]
        print(f"  {gpu} on 8 GPUs, other sequences: {_stats(errs)}")
    for seq in sorted({r["seq"] for r in rows if r["gpus"] == 8}):
        print(f"  sequence {seq:,} (8 GPUs): {_stats([r['err'] for r in rows if r['seq'] == seq and r['gpus'] == 8])}")


if __name__ == "__main__":
    main()
