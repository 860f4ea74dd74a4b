"""`shardlab doctor hang RUN` and `shardlab doctor replay RUN --step N`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="shardlab doctor", description="Diagnose hangs and anomalies of a run.")
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hang", help="line up every rank's flight record and say who is stuck where")
    h.add_argument("run", help="run directory (holds doctor/flight_rank*.json)")
    r = sub.add_parser("replay", help="re-run step N in one fp32 process from the checkpoint before it")
    r.add_argument("run", help="run directory (holds config.toml and checkpoints/)")
    r.add_argument("--step", type=int, required=True, help="the step to replay (as in anomalies/step_N.json)")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    run = Path(args.run)
    if not run.is_dir():
        print(f"shardlab: error: run directory {run} does not exist", file=sys.stderr)
        return 2
    if args.cmd == "hang":
        from shardlab.doctor.hang import FlightRecordError, report
        try:
            result = report(run)
        except FlightRecordError as e:
            from shardlab.errors import fail
            return fail(str(e))
        print("\n".join(result["lines"]))
        return 0 if result["kind"] != "none" else 1
    from shardlab.config import ConfigError
    from shardlab.train.replay import replay
    try:
        result = replay(run, args.step)
    except ConfigError as e:
        print(f"shardlab: error: {e}", file=sys.stderr)
        return 2
    print(result["summary"])
    return 0
