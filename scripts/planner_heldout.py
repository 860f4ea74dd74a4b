"""The planner against published GPU runs it was not given (plan/published_gpu_heldout.py): the error of
tokens/s/GPU per row, and of memory where the run published it, with mean / max |error| per source and over all.

    PYTHONPATH=src python scripts/planner_heldout.py            # the whole table
    PYTHONPATH=src python scripts/planner_heldout.py --summary  # the means only

Evaluate it once per change of the planner, after the change is committed: the rows are for estimating the
error on unseen runs, and a term chosen by looking at them makes them given inputs (they have been, since the
seventh round: docs/planner.md).
"""
from __future__ import annotations

import argparse

from shardlab.plan.published_gpu_heldout import HELD_OUT, evaluate_rows
from shardlab.plan.published_gpu_layer import SOURCE, evaluate_layers


def _stats(errs: list[float], limit: float = 0.15) -> str:
    if not errs:
        return "-"
    a = [abs(e) for e in errs]
    return f"mean {sum(a) / len(a):.3f} / max {max(a):.3f} / over {limit:.2f}: {sum(x > limit for x in a)} ({len(a)} rows)"


def _source(row: dict) -> str:
    return row["source"].split(" (")[0].split(",")[0].split(" @")[0]


def table(rows: list[dict]) -> list[str]:
    lines = ["| case | GPU | published tok/s/GPU | planner | error | published GiB | planner GiB | mem error |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        mem = f"{r['mem_gib']:.1f} | {r['planner_mem_gib']:.1f} | {r['mem_err']:+.1%}" if r["mem_gib"] else \
            f"- | {r['planner_mem_gib']:.1f} | -"
        lines.append(f"| {r['case']} | {r['cluster']} | {r['tokens_per_gpu']:.1f} | {r['planner']:.1f} | "
                     f"{r['err']:+.1%} | {mem} |")
    return lines


def summary(rows: list[dict]) -> list[str]:
    unseen = [r["err"] for r in rows if not r["seen"]]
    out = [f"tokens/s/GPU, all: {_stats([r['err'] for r in rows])}",
           f"  rows whose figure or twin run no other file of the project holds: {_stats(unseen)}"]
    for src in dict.fromkeys(_source(r) for r in rows):
        out.append(f"  {src}: {_stats([r['err'] for r in rows if _source(r) == src])}")
    for gpu in dict.fromkeys(r["cluster"] for r in rows):
        out.append(f"  {gpu}: {_stats([r['err'] for r in rows if r['cluster'] == gpu])}")
    # memory is judged "within 10%" (issue text), tokens/s at 0.15 a row
    out.append(f"memory (published rows): {_stats([r['mem_err'] for r in rows if r['mem_err'] is not None], 0.10)}")
    return out


def layer_table(summary_only: bool = False) -> list[str]:
    """Korthikanti et al.'s one layer (plan/published_gpu_layer.py) against the planner's, ms."""
    rows = evaluate_layers()
    out = [] if summary_only else [
        f"{SOURCE}:", "| recipe | forward | planner | error | backward | planner | error |", "| --- " * 7 + "|",
        *(f"| {r['recipe']} | {r['forward_ms']} | {r['plan_forward_ms']:.2f} | {r['forward_err']:+.1%} | "
          f"{r['backward_ms']} | {r['plan_backward_ms']:.2f} | {r['backward_err']:+.1%} |" for r in rows)]
    errs = [abs(r[k]) for r in rows for k in ("forward_err", "backward_err")]
    return out + [f"one layer (Korthikanti Table 4, {len(rows)} recipes x forward, backward): mean "
                  f"{sum(errs) / len(errs):.3f} / max {max(errs):.3f}"]


def main(rows: list[dict] | None = None, doc: str = __doc__) -> None:
    """Print the table (unless --summary) and the summary of `rows` (the fifth set by default, and then the
    published layer it holds the 22B rows' twin of)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--summary", action="store_true", help="the means only")
    args = ap.parse_args()
    fifth = rows is None
    rows = evaluate_rows(HELD_OUT if rows is None else rows)
    if not args.summary:
        print("\n".join(table(rows)))
        print()
    print("\n".join(summary(rows)))
    if fifth:
        print()
        print("\n".join(layer_table(args.summary)))


if __name__ == "__main__":
    main()
