"""`shardlab pp`: pipeline schedules as tables.

    shardlab pp show zbv --p 4 --m 8              # the table of actions (file:PATH's format) and the diagram
    shardlab pp show zbv --p 4 --m 8 --messages   # the table with its sends and receives
    shardlab pp show file:my.csv                  # a written table, checked, and its diagram
    shardlab pp show zbv --p 4 --m 8 --table-only > my.csv   # a starting point for parallel.pp_schedule=file:my.csv
"""
from __future__ import annotations

from shardlab.errors import OneLineParser, fail


def _schedule(name: str, p: int, m: int, v: int):
    from shardlab.parallel.pp import registry, table
    from shardlab.parallel.pp.schedule import ScheduleError, build

    if table.is_file(name):
        return table.load(name[len(table.PREFIX):])
    if name not in registry.SPECS or registry.spec(name).runner == "file":
        raise ScheduleError(f"schedule {name!r}: must be one of {', '.join(registry.OWN + registry.TORCH)} "
                            "or file:PATH")
    row = registry.spec(name)
    return build(row.order, p, m, v if registry.many_stages(name) else 1, layout=row.layout)


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="shardlab pp", description="pipeline schedules as tables of actions per rank")
    sub = ap.add_subparsers(dest="command", required=True)
    show = sub.add_parser("show", help="print a schedule's table of actions and its diagram")
    show.add_argument("schedule", help="a parallel.pp_schedule value: a schedule's name or file:PATH")
    show.add_argument("--p", type=int, default=4, help="pipeline ranks (default 4)")
    show.add_argument("--m", type=int, default=8, help="microbatches (default 8)")
    show.add_argument("--v", type=int, default=2, help="stages per rank for interleaved schedules (default 2; "
                      "the V schedules always 2)")
    show.add_argument("--messages", action="store_true", help="the table with its sends and receives")
    show.add_argument("--table-only", action="store_true", help="the table alone (a file for file:PATH)")
    args = ap.parse_args(argv)
    from shardlab.parallel.pp import table
    from shardlab.parallel.pp.draw import text_diagram
    from shardlab.parallel.pp.schedule import ScheduleError

    try:
        s = _schedule(args.schedule, args.p, args.m, args.v)
    except (ScheduleError, table.TableError) as e:
        return fail(str(e))
    csv = table.to_csv(s, messages=args.messages)
    if args.table_only:
        print(csv, end="")
        return 0
    placed = "; ".join(f"rank {r} holds {', '.join(f's{x}' for x in s.stages_of(r))}" for r in range(s.pp))
    print(f"# {args.schedule}: pp={s.pp}, microbatches={s.microbatches}, stages per rank={s.virtual}, "
          f"layout {s.layout} ({placed})")
    print(f"# one row per rank: {{stage}}{{op}}{{microbatch}}, op F, B, I (input grad), W (weight grad)"
          + (", SEND_F/RECV_F/SEND_B/RECV_B" if args.messages else ""))
    print(csv, end="")
    print("# diagram (F = 1, B = 2, I = W = 1 per stage; digit: forward of that microbatch, letter: its "
          "backward, a = 0; upper case: a weight-gradient half; '.': bubble)")
    print(text_diagram(s))
    return 0
