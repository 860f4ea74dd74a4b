"""The NeMo GPT-3 175B held-out rows against the source's other figures (plan/published_gpu_crosscheck.py): the
README's 22.06 table of the same layout, its time-to-train for the held-out 1024-GPU run, and the held-out rows
themselves; then, labelled as such, the held-out rows planned with full recomputation, an input no source states
for them (docs/planner.md, "The eighth round").

    PYTHONPATH=src python scripts/planner_crosscheck.py
"""
from __future__ import annotations

from copy import deepcopy

from shardlab.plan.published_gpu_crosscheck import evaluate
from shardlab.plan.published_gpu_heldout import HELD_OUT, evaluate_rows


def _line(e: dict) -> str:
    return (f"| {e['case']} | {e['published']} | {e['tokens_per_gpu']:.1f} | {e['planner']:.1f} | {e['err']:+.1%} | "
            f"{e['layout']['recompute']}, gbs {e['global_batch']} |")


def main() -> None:
    held = [r for r in HELD_OUT if r["case"].startswith("NeMo GPT-3 175b")]
    what_if = deepcopy(held)
    for r in what_if:
        r["layout"]["recompute"] = "full"
        r["case"] += " (what-if: full recompute, no source)"
    print("| case | published | tokens/s/GPU | planner | error | inputs |")
    print("| --- | --- | --- | --- | --- | --- |")
    for e in evaluate() + evaluate_rows(held) + evaluate_rows(what_if):
        print(_line(e))


if __name__ == "__main__":
    main()
