"""`shardlab doctor hang RUN`: line up every rank's flight record and say who is stuck where.

Each rank numbers its collectives 1, 2, 3, ... in program order (comm's `seq`). In a healthy job every
rank issues the same collectives in the same order, so sequence id #57 is "the same" collective on
every rank. The analysis therefore compares the ranks' records at equal sequence ids:

* a MISMATCH is a sequence id where ranks issued different collectives (op, size, dtype or group):
  the program diverged (a rank-dependent branch, a skipped bucket, uneven data);
* a HANG is a collective that some ranks reached (and wait in) while others never did: those others
  are named with their last completed op, their phase and their Python stack.

Caveat: sequence ids count collectives on all groups together; with several process groups of
different membership (future TP/PP) the alignment must be per group.
"""
from __future__ import annotations

import json
from pathlib import Path


class FlightRecordError(ValueError):
    """A flight record that is not one (garbage, truncated, another tool's file): one line for the user."""


# What the analysis reads, with the type it needs (the recorder writes more).
_DUMP_KEYS = {"rank": int, "step": int, "phase": str, "now_perf": (int, float), "records": list}
_RECORD_KEYS = {"seq": int, "op": str, "bytes": int, "dtype": str, "state": str, "step": int, "phase": str,
                "t_launch": (int, float)}
_OPTIONAL_DUMP = {"world": int, "main_stack": list, "last_progress_age_s": (int, float), "reason": str}
_OPTIONAL_RECORD = {"shape": list, "stack": list, "tag": (str, type(None)), "group": (str, type(None))}


def _check_dump(path: Path, data) -> dict:
    def bad(what: str):
        return FlightRecordError(f"{path} is not a flight record ({what}); it is written by the hang watchdog "
                                 "(doctor.hang_timeout_s): remove it or re-run to get a fresh one")
    if not isinstance(data, dict):
        raise bad("not a JSON object")
    def wrong(obj: dict, required: dict, optional: dict) -> str | None:
        for key, kind in [*required.items(), *((k, t) for k, t in optional.items() if k in obj)]:
            if not isinstance(obj.get(key), kind) or isinstance(obj.get(key), bool):
                return f"{key!r} missing or of the wrong type"
        return None

    problem = wrong(data, _DUMP_KEYS, _OPTIONAL_DUMP)
    if problem is None and not (0 <= data["rank"] < data.get("world", data["rank"] + 1) <= 1 << 20):
        problem = "a rank or world size out of range"
    for rec in data["records"] if problem is None else []:
        problem = "a record is not a JSON object" if not isinstance(rec, dict) else \
            wrong(rec, _RECORD_KEYS, _OPTIONAL_RECORD)
        if problem:
            problem = f"in a record: {problem}"
            break
    if problem:
        raise bad(problem)
    return data


def load_dumps(run_dir: Path) -> dict[int, dict]:
    """Every rank's flight record; FlightRecordError names the first file that is not one."""
    dumps = {}
    for path in sorted((Path(run_dir) / "doctor").glob("flight_rank*.json")):
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            raise FlightRecordError(f"{path} is not a flight record (not readable JSON); it is written by the "
                                    "hang watchdog: remove it or re-run to get a fresh one") from None
        data = _check_dump(path, data)
        dumps[data["rank"]] = data
    return dumps


def mb(nbytes: int) -> str:
    if nbytes >= 1e6:
        return f"{nbytes / 1e6:.1f} MB"
    if nbytes >= 1e3:
        return f"{nbytes / 1e3:.1f} kB"
    return f"{nbytes} B"


def describe_op(rec: dict) -> str:
    """'all_reduce #57 (bucket 3, 4.2 MB)'"""
    bits = [b for b in (rec.get("tag"), mb(rec["bytes"]) if rec.get("bytes") else "") if b]
    return f"{rec['op']} #{rec['seq']}" + (f" ({', '.join(bits)})" if bits else "")


def _signature(rec: dict) -> tuple:
    return rec["op"], rec["bytes"], rec["dtype"], rec.get("group")


def analyse(dumps: dict[int, dict]) -> dict:
    """The verdict as data: {"kind": "mismatch"|"hang"|"stuck"|"none", "lines": [...], ...}."""
    if not dumps:
        return {"kind": "none", "lines": ["no flight records found (RUN/doctor/flight_rank*.json): the watchdog "
                                          "did not fire; is doctor.hang_timeout_s larger than the run's wait?"]}
    world = max(int(d.get("world", 0)) for d in dumps.values()) or max(dumps) + 1
    by_rank = {r: {rec["seq"]: rec for rec in d["records"]} for r, d in dumps.items()}
    lines: list[str] = []
    missing = [r for r in range(world) if r not in dumps]

    # 1. Mismatch: the first sequence id where two ranks disagree on what the collective is.
    common = sorted(set.union(*(set(s) for s in by_rank.values())))
    for seq in common:
        present = {r: recs[seq] for r, recs in by_rank.items() if seq in recs}
        if len({_signature(rec) for rec in present.values()}) > 1:
            lines.append(f"COLLECTIVE MISMATCH at sequence #{seq}: the ranks issued different collectives:")
            for r, rec in sorted(present.items()):
                lines.append(f"  rank {r}: {rec['op']} {mb(rec['bytes'])} {rec['dtype']} shape {rec['shape']} "
                             f"tag {rec.get('tag')!r} at step {rec['step']} in {rec['phase']}, "
                             f"from {' < '.join(reversed(rec.get('stack') or [])) or '?'}")
            lines.append("  The ranks' programs diverged: look for a rank-dependent branch or a different bucket "
                         "layout before this point. Matching collectives must have the same op and size everywhere.")
            return {"kind": "mismatch", "seq": seq, "ranks": sorted(present), "lines": lines + _missing(missing)}

    # 2. Hang: who reached the furthest collective, who never joined it.
    last_seen = {r: max(recs) if recs else 0 for r, recs in by_rank.items()}
    last_done = {r: max((s for s, rec in recs.items() if rec["state"] == "completed"), default=0)
                 for r, recs in by_rank.items()}
    frontier = max(last_seen.values())
    # The collective the job is stuck in: the lowest sequence id that some rank has not completed, or has
    # not even reached while others went past it. (On NCCL a synchronous collective counts as completed
    # once it is enqueued on the GPU stream: the ranks then block later, in a host sync, and only the
    # lagging rank's missing sequence ids show where the job stopped.)
    pending = {s for r in by_rank for s, rec in by_rank[r].items() if rec["state"] != "completed"}
    lagging = {last_seen[r] + 1 for r in by_rank if last_seen[r] < frontier}
    stuck_seq = min(pending | lagging, default=None)
    if stuck_seq is None:
        lines.append(f"every recorded collective completed on every rank that wrote a record (last #{frontier}); "
                     "the ranks stopped outside collectives, or failed:")
        for r, d in sorted(dumps.items()):
            lines.append(f"  rank {r}: step {d['step']}, in: {d['phase']}; {d.get('reason', '')[:300]}")
            lines.append(f"    stack: {' > '.join(d.get('main_stack', [])[-4:])}")
        return {"kind": "stuck", "lines": lines + _missing(missing)}

    waiting = {r: by_rank[r][stuck_seq] for r in by_rank if stuck_seq in by_rank[r]}
    absent = [r for r in by_rank if stuck_seq not in by_rank[r] and last_seen[r] < stuck_seq]
    if not waiting:  # only possible with truncated rings: say what we know
        return {"kind": "hang", "seq": stuck_seq, "absent": absent, "waiting": [], "op": f"#{stuck_seq}",
                "lines": [f"ranks {absent} never reached collective #{stuck_seq}; no record of it survives in the "
                          "other ranks' ring buffers"] + _missing(missing)}
    op = describe_op(next(iter(waiting.values())))
    for r in absent:
        d = dumps[r]
        prev = by_rank[r].get(last_done[r])
        lines.append(f"rank {r} never joined {op}; its last completed op was "
                     f"{describe_op(prev) if prev else '#' + str(last_done[r])}; it was in: {d['phase']} "
                     f"(step {d['step']}, no progress for {d.get('last_progress_age_s', 0):.1f} s)")
        if d.get("main_stack"):
            lines.append(f"  rank {r} main thread: {' > '.join(d['main_stack'][-4:])}")
    for r, rec in sorted(waiting.items()):
        age = dumps[r]["now_perf"] - rec["t_launch"]
        lines.append(f"rank {r} is waiting in {describe_op(rec)} ({rec['state']}) for {age:.1f} s, "
                     f"step {rec['step']}, issued from {' < '.join(reversed(rec.get('stack') or [])) or '?'}")
        if dumps[r].get("main_stack"):
            lines.append(f"  rank {r} main thread: {' > '.join(dumps[r]['main_stack'][-4:])}")
    if not absent:
        lines.insert(0, f"every rank that wrote a record reached {op} and none completed it: the collective itself "
                        "is stuck (network, a dead peer outside these records, or a backend problem)")
    lines.append("What to do: find why the absent rank(s) did not reach this collective (their phase and stack "
                 "above), e.g. slow or exhausted data, an exception swallowed on that rank, or a rank-dependent branch.")
    return {"kind": "hang", "seq": stuck_seq, "absent": absent, "waiting": sorted(waiting), "op": op,
            "lines": lines + _missing(missing)}


def _missing(missing: list[int]) -> list[str]:
    return [f"no flight record from rank {r}: it crashed or was killed before writing one; check its log (on gloo "
            "a collective size mismatch aborts a rank with \"Received data size doesn't match expected size\": "
            "re-run with doctor.verify_collectives=true to have it reported as a mismatch)" for r in missing]


def report(run_dir: Path) -> dict:
    result = analyse(load_dumps(run_dir))
    out = Path(run_dir) / "doctor" / "hang_report.txt"
    if out.parent.is_dir():
        out.write_text("\n".join(result["lines"]) + "\n")
    return result
