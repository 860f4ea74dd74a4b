"""`shardlab compare RUN [RUN ...] [--out DIR] [--strict]`: runs side by side (docs/training.md).

    shardlab compare runs/ddp runs/zero3             # the table, the config diff, plots in runs/ddp/compare/
    shardlab compare runs/a runs/b --out cmp --strict # exit 2 when the runs are not comparable

Prints one table (loss at equal tokens, validation loss at the last point every run evaluated at, tokens/s,
MFU, peak memory per rank, communication bytes per step, exposed communication), a warning when the runs' tokens per step, data or
seeds differ (their losses then say nothing about the layouts: exit 0, or 2 with --strict), and every
resolved config key that differs. Writes loss_vs_tokens.png, loss_vs_time.png, throughput.png and
memory.png to --out (default: compare/ inside the first run's directory). The reading and the plots are
observe/compare.py; this is only the command.
"""
from __future__ import annotations

import sys
from pathlib import Path

from shardlab.errors import OneLineParser, fail
from shardlab.train.metrics import describe_layout


def _fmt(v, kind: str = "") -> str:
    if v is None:
        return "-"
    if kind == "pct":
        return f"{v:.2%}"
    if kind == "mib":
        return "/".join(f"{m / 2**20:.0f}" for m in v)
    if kind == "bytes":
        return f"{v / 2**20:.2f} MiB"
    if kind == "s":
        return f"{v * 1e3:.1f} ms"
    if isinstance(v, float):
        return f"{v:,.4g}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def render(rows: list[dict]) -> str:
    cols = [("run", "run", ""), ("layout", "layout", ""), ("loss", "loss", ""), ("val_loss", "val loss", ""),
            ("tokens_per_s", "tokens/s", ""), ("mfu", "MFU", "pct"),
            ("peak_mem_bytes_per_rank", "peak MiB/rank", "mib"), ("comm_bytes_per_step", "comm/step", "bytes"),
            ("exposed_comm_s", "exposed comm", "s")]
    cells = [[h for _, h, _ in cols]]
    for r in rows:
        lay = describe_layout(r["layout"]) if isinstance(r["layout"], dict) else _fmt(r["layout"])
        cells.append([lay if c == "layout" else _val(r) if c == "val_loss" else _fmt(r[c], kind)
                      for c, _, kind in cols])
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    head = f"at {rows[0]['tokens']:,} tokens (the shortest run's last logged step)"
    if rows[0].get("val_shared"):
        head += f"; val loss at {rows[0]['val_tokens']:,} tokens (the last point every run evaluated at)"
    elif any(r.get("val_loss") is not None for r in rows):
        head += "; val loss: no point every run evaluated at, each run's last marked @ the tokens it was taken at"
    return head + ":\n" + "\n".join(lines)


def _val(row: dict) -> str:
    """The validation loss cell: marked with its tokens unless every row's is at the same point."""
    if row.get("val_loss") is None or row.get("val_shared"):
        return _fmt(row.get("val_loss"))
    return f"{_fmt(row['val_loss'])} @{row['val_tokens']:,}"


def main(argv: list[str] | None = None) -> int:
    from shardlab.observe import compare

    ap = OneLineParser(prog="shardlab compare", description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories")
    ap.add_argument("--out", type=Path, default=None, help="where the plots go (default: FIRST_RUN/compare)")
    ap.add_argument("--strict", action="store_true", help="exit 2 when the runs are not comparable")
    args = ap.parse_args(argv)
    try:
        runs = [compare.load(p) for p in args.runs]
    except compare.NotARun as e:
        return fail(f"shardlab compare: {e}")
    names = [r.name for r in runs]
    for r in runs:  # two runs of one name (a/run, b/run): told apart by their parents
        if names.count(r.name) > 1:
            r.name = f"{r.path.parent.name}/{r.name}"
    if not any(r.curves["loss"] for r in runs):
        return fail("shardlab compare: no run has a logged training loss yet")
    print(render(compare.table(runs)))
    why = compare.problems(runs)
    if why:
        print(f"shardlab compare: warning: these runs are not comparable ({'; '.join(why)}): their losses differ "
              "for that reason, not only by layout", file=sys.stderr)
    diff = compare.config_diff(runs)
    print("\nconfig differences:" if diff else "\nconfig: the same resolved config")
    for key, values in diff:
        print(f"  {key}: " + " | ".join(f"{r.name}={v!r}" for r, v in zip(runs, values)))
    out = args.out or runs[0].path / "compare"
    written = compare.plot(runs, out)
    print(f"\nplots: {', '.join(str(p) for p in written)}" if written
          else "\nplots skipped: matplotlib is not installed")
    return 2 if why and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
