"""`shardlab trace RUN`: what each rank did per step, how much communication was hidden, who was late.

    shardlab trace runs/x                 # tables: by group, steps, buckets, skew, straggler verdict
    shardlab trace runs/x --json          # the same as JSON
    shardlab trace runs/x --merge         # (re)write RUN/trace/trace.json from the rank files
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from shardlab.observe import analysis
from shardlab.observe.merge import merge


def _f(x, fmt="{:.2f}"):
    return "-" if x is None else fmt.format(x)


def _table(headers: list[str], rows: list[list]) -> str:
    cells = [headers] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def build(run_dir: Path, max_rows: int) -> dict:
    traces = analysis.load(run_dir)
    steps = analysis.per_step(traces)
    buckets = []
    for rt in traces.values():
        for s, t0, t1 in analysis.steps_of(rt):
            buckets += analysis.bucket_table(rt, s, t0, t1)
    matched = analysis.match_collectives(traces)
    from shardlab.parallel.pp import trace as pipeline
    return {"summary": analysis.summarize_traces(traces), "steps": steps, "buckets": buckets,
            "collectives": matched, "max_rows": max_rows, "pipeline": pipeline.report(run_dir, traces)}


def render(rep: dict) -> str:
    n = rep["max_rows"]
    out = []
    s = rep["summary"]
    out.append(f"overlap {_f(s['overlap_pct'], '{:.1f}')} %   exposed comm {_f(s['exposed_comm_s'] and s['exposed_comm_s'] * 1e3)} ms"
               f"   comm {_f(s['comm_s'] and s['comm_s'] * 1e3)} ms   compute {_f(s['compute_s'] and s['compute_s'] * 1e3)} ms"
               f"   step {_f(s['step_s'] and s['step_s'] * 1e3)} ms   (medians over {s['trace_steps']} steps, "
               f"{s['warmup_steps_excluded']} warm-up excluded)")
    groups = s.get("comm_by_group") or {}
    if groups:
        out.append("\ncommunication by process group (per step: mean over ranks, median over steps)")
        out.append(_table(["group", "calls", "KiB", "comm ms", "exposed ms"],
                          [[g, _f(d["collectives"], "{:.0f}"), _f(d["comm_bytes"] / 1024, "{:.1f}"),
                            _f(d["comm_s"] * 1e3), _f(d["exposed_comm_s"] * 1e3)] for g, d in groups.items()]))
    out.append("\nper step and rank (ms)")
    out.append(_table(["step", "rank", "step", "compute", "comm", "overlap%", "exposed", "calls", "KiB"],
                      [[r["step"], r["rank"], _f(r["step_s"] * 1e3), _f(r["compute_s"] * 1e3), _f(r["comm_s"] * 1e3),
                        _f(r["overlap_pct"], "{:.1f}"), _f(r["exposed_comm_s"] * 1e3), r["collectives"],
                        _f(r["comm_bytes"] / 1024, "{:.1f}")] for r in rep["steps"][:n]]))
    if rep["buckets"]:
        out.append("\nbuckets (ms from step start): ready -> launch -> done")
        out.append(_table(["step", "rank", "bucket", "KiB", "ready", "launch", "done", "ready>launch", "comm"],
                          [[b["step"], b["rank"], b["bucket"], _f(b["bytes"] / 1024, "{:.1f}"), _f(b["ready_ms"]),
                            _f(b["launch_ms"]), _f(b["done_ms"]), _f(b["ready_to_launch_ms"]), _f(b["comm_ms"])]
                           for b in rep["buckets"][:n]]))
    if rep["collectives"]:
        out.append("\nskew per collective (ms): last = the rank everybody waited for; wait/transfer per rank "
                   "(- : not in that collective's group)")
        shown = rep["collectives"][:n]
        ranks = sorted({r for c in shown for r in c["wait_ms"]})  # subgroups (tp, dp) hold some ranks each
        out.append(_table(["step", "group", "op", "tag", "KiB", "last", "skew"] + [f"wait r{r}" for r in ranks]
                          + [f"xfer r{r}" for r in ranks],
                          [[c["step"], c["group"], c["op"], c["tag"] or "-", _f(c["bytes"] / 1024, "{:.1f}"),
                            c["last_rank"], _f(c["skew_ms"])] + [_f(c["wait_ms"].get(r)) for r in ranks]
                           + [_f(c["transfer_ms"].get(r)) for r in ranks] for c in shown]))
    st = s.get("straggler")
    if st:
        of_step = "" if st["late_pct_of_step"] is None else f" = {st['late_pct_of_step']:.0f}% of the step"
        verdict = (f"rank {st['rank']} is the straggler: last to arrive at {st['last_share']:.0%} of "
                   f"{st['collectives']} collectives, {st['median_late_by_ms']:.1f} ms late (median{of_step}; "
                   f"± {st['late_stderr_ms']:.1f} ms standard error)"
                   if st["significant"] else f"no straggler: rank {st['rank']}, the latest overall, was {st['reason']}")
        waits = ", ".join(f"r{r} wait {st['wait_ms_by_rank'][r]:.1f} / transfer {st['transfer_ms_by_rank'][r]:.1f}"
                          for r in sorted(st["wait_ms_by_rank"]))
        out.append(f"\n{verdict}\ntime inside collectives (ms, post warm-up): {waits}")
    pp = rep.get("pipeline")
    if pp:
        by_rank = ", ".join(f"r{r} {b:.1%}" for r, b in sorted(pp["bubble_by_rank"].items()))
        formula = "" if pp["bubble_analytic"] is None else f"; analytic {pp['bubble_analytic']:.1%} ({pp['schedule']})"
        out.append(f"\npipeline bubble (idle share of the forward/backward phase, median over {pp['steps']} steps): "
                   f"{by_rank}{formula}\ndiagram of the last step: {pp['diagram']}")
    if len(rep["steps"]) > n:
        out.append(f"\n(tables show the first {n} rows; --rows N for more, --json for all)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="shardlab trace", description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="run directory (trained with trace.enabled=true)")
    ap.add_argument("--json", action="store_true", help="print everything as JSON")
    ap.add_argument("--merge", action="store_true", help="rewrite RUN/trace/trace.json from the rank files")
    ap.add_argument("--rows", type=int, default=20, help="rows per table (default 20)")
    args = ap.parse_args(argv)
    if not (args.run / "trace").is_dir():
        print(f"shardlab trace: {args.run} has no trace/ directory; train with trace.enabled=true", file=sys.stderr)
        return 2
    try:
        rep = build(args.run, args.rows)
    except FileNotFoundError as e:
        print(f"shardlab trace: {e}", file=sys.stderr)
        return 2
    if args.merge:
        print(f"wrote {merge(args.run)}", file=sys.stderr)
    print(json.dumps(rep, indent=1, default=str) if args.json else render(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
