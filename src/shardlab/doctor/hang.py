"""`shardlab doctor hang RUN`: line up every rank's flight record and say who is stuck where.

comm numbers collectives per process group: each record carries its group (a name such as "world",
"dp_shard" or "tp", and the members' global ranks) and `seq`, the n-th collective on that group. In a
healthy job every member issues a group's collectives in the same order, so (group, members, seq) is
"the same" collective on each of them. Point-to-point messages are numbered per channel (sender ->
receiver within a group): the n-th send from a to b meets the n-th recv on b from a. The analysis
lines records up per group:

* a MISMATCH is a (group, seq) where members issued different collectives (op, size or dtype; for a
  message, size or dtype): the program diverged (a rank-dependent branch, a skipped bucket, uneven data);
* a HANG is a collective that some members reached (and wait in) while others never did: those others
  are named with the group, their last completed op, their phase and their Python stack. When several
  groups are stuck at once (a rank misses a dp_shard all-reduce because it waits in a tp one), the
  groups whose absent rank is stuck outside any collective are the cause and come first.

`describe_op` is shared with the watchdog, so its message and this report give the same number.
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


def group_label(name: str, ranks) -> str:
    """'world', or 'dp_shard [1, 3]': a subgroup's name alone is not enough (every rank has a dp_shard)."""
    return name if name == "world" or not ranks else f"{name} {list(ranks)}"


def describe_op(rec: dict, rank: int | None = None) -> str:
    """'all_reduce #57 of world (bucket 3, 4.2 MB)'; a message seen by rank `rank`:
    'send #2 rank 1 -> 3 of pp [1, 3] (4.0 kB)'."""
    bits = [b for b in (rec.get("tag"), mb(rec["bytes"]) if rec.get("bytes") else "") if b]
    label = group_label(rec.get("group") or "world", rec.get("group_ranks"))
    peer = rec.get("peer")
    if peer is None:
        what = f"{rec['op']} #{rec['seq']} of {label}"
    else:
        src, dst = (rank, peer) if rec["op"] == "send" else (peer, rank)
        what = f"{rec['op']} #{rec['seq']} rank {'?' if src is None else src} -> {'?' if dst is None else dst} of {label}"
    return what + (f" ({', '.join(bits)})" if bits else "")


def _key(rec: dict, rank: int, world: int) -> tuple:
    """What a sequence number counts: (group, members, None, None) for a collective, (group, members,
    src, dst) for a message. Dumps written before records carried their members count as the world."""
    ranks = tuple(rec.get("group_ranks") or range(world))
    name = rec.get("group") or "world"
    peer = rec.get("peer")
    if peer is None:
        return name, ranks, None, None
    return (name, ranks, rank, peer) if rec["op"] == "send" else (name, ranks, peer, rank)


def _members(key: tuple) -> tuple:
    return key[1] if key[2] is None else (key[2], key[3])


def _signature(rec: dict, key: tuple) -> tuple:
    # a message's two sides have different ops (send/recv) by design: compare what travels
    return (rec["bytes"], rec["dtype"]) if key[2] is not None else (rec["op"], rec["bytes"], rec["dtype"])


def _wall(dump: dict, rec: dict) -> float:
    """A record's launch on the wall clock (perf_counter differs between processes)."""
    return dump.get("time", 0.0) - dump.get("now_perf", 0.0) + rec.get("t_launch", 0.0)


def _stack(rec: dict) -> str:
    return " < ".join(reversed(rec.get("stack") or [])) or "?"


def analyse(dumps: dict[int, dict]) -> dict:
    """The verdict as data: {"kind": "mismatch"|"hang"|"stuck"|"none", "lines": [...], ...}."""
    if not dumps:
        return {"kind": "none", "lines": ["no flight records found (RUN/doctor/flight_rank*.json): the watchdog "
                                          "did not fire; is doctor.hang_timeout_s larger than the run's wait?"]}
    world = max(int(d.get("world", 0)) for d in dumps.values()) or max(dumps) + 1
    recs, issued = _index(dumps, world)
    keys = sorted(set().union(*(set(issued[r]) for r in dumps)), key=str)
    missing = [r for r in range(world) if r not in dumps]
    mismatch = _first_mismatch(dumps, recs, keys)
    if mismatch is not None:
        return _mismatch_verdict(*mismatch, missing)
    stuck = _stuck_groups(dumps, recs, issued, keys)
    if not stuck:
        return _stopped_verdict(dumps, missing)
    return _hang_verdict(dumps, stuck, missing)


def _index(dumps: dict[int, dict], world: int) -> tuple[dict, dict]:
    """(rank -> key -> seq -> record, rank -> key -> how many collectives the rank issued)."""
    recs: dict[int, dict[tuple, dict[int, dict]]] = {}
    issued: dict[int, dict[tuple, int]] = {}
    for r, d in dumps.items():
        recs[r] = {}
        for rec in d["records"]:
            recs[r].setdefault(_key(rec, r, world), {})[rec["seq"]] = rec
        issued[r] = {k: max(seqs) for k, seqs in recs[r].items()}
        for g in d.get("groups", []):  # exact even when the ring no longer holds a group's last record
            issued[r][(g["group"], tuple(g["ranks"]), g.get("src"), g.get("dst"))] = g["issued"]
    return recs, issued


def _first_mismatch(dumps: dict[int, dict], recs: dict, keys: list) -> tuple | None:
    """(key, seq, rank -> record) of the earliest (wall clock) disagreement, or None. Per group only the
    first sequence number where members disagree on what it is counts: later ones follow from it."""
    found = []
    for key in keys:
        per_seq: dict[int, dict[int, dict]] = {}
        for r in dumps:
            for seq, rec in recs[r].get(key, {}).items():
                per_seq.setdefault(seq, {})[r] = rec
        for seq in sorted(per_seq):
            present = per_seq[seq]
            if len({_signature(rec, key) for rec in present.values()}) > 1:
                found.append((min(_wall(dumps[r], rec) for r, rec in present.items()), key, seq, present))
                break
    if not found:
        return None
    _, key, seq, present = min(found, key=lambda f: f[0])
    return key, seq, present


def _mismatch_verdict(key: tuple, seq: int, present: dict[int, dict], missing: list[int]) -> dict:
    label = group_label(key[0], key[1])
    lines = [f"COLLECTIVE MISMATCH at sequence #{seq} of {label}: the ranks issued different collectives:"]
    for r, rec in sorted(present.items()):
        lines.append(f"  rank {r}: {rec['op']} {mb(rec['bytes'])} {rec['dtype']} shape {rec['shape']} "
                     f"tag {rec.get('tag')!r} at step {rec['step']} in {rec['phase']}, from {_stack(rec)}")
    lines.append("  The ranks' programs diverged: look for a rank-dependent branch or a different bucket "
                 "layout before this point. Matching collectives must have the same op and size everywhere.")
    return {"kind": "mismatch", "seq": seq, "group": key[0], "group_ranks": list(key[1]), "ranks": sorted(present),
            "lines": lines + _missing(missing)}


def _stuck_groups(dumps: dict[int, dict], recs: dict, issued: dict, keys: list) -> list[dict]:
    """Per group, the collective it is stuck in: the lowest sequence number that some member has not
    completed, or has not even reached while others went past it. (On NCCL a synchronous collective
    counts as completed once it is enqueued on the GPU stream: the ranks then block later, in a host
    sync, and only the lagging rank's missing sequence numbers show where the job stopped.)"""
    stuck = []
    for key in keys:
        members = [r for r in _members(key) if r in dumps]
        if not members:
            continue
        n = {r: issued[r].get(key, 0) for r in members}
        frontier = max(n.values())
        pending = {s for r in members for s, rec in recs[r].get(key, {}).items() if rec["state"] != "completed"}
        lagging = {n[r] + 1 for r in members if n[r] < frontier}
        seq = min(pending | lagging, default=None)
        if seq is None:
            continue
        waiting = {r: recs[r][key][seq] for r in members if seq in recs[r].get(key, {})}
        absent = [r for r in members if n[r] < seq]
        stuck.append({"key": key, "seq": seq, "waiting": waiting, "absent": absent,
                      "t": min((_wall(dumps[r], rec) for r, rec in waiting.items()), default=0.0)})
    return stuck


def _stopped_verdict(dumps: dict[int, dict], missing: list[int]) -> dict:
    """No collective is stuck: say where each rank stopped instead."""
    lines = ["every recorded collective completed on every rank that wrote a record; the ranks stopped "
             "outside collectives, or failed:"]
    for r, d in sorted(dumps.items()):
        lines.append(f"  rank {r}: step {d['step']}, in: {d['phase']}; {d.get('reason', '')[:300]}")
        lines.append(f"    stack: {' > '.join(d.get('main_stack', [])[-4:])}")
    return {"kind": "stuck", "lines": lines + _missing(missing)}


def _cause_first(stuck: list[dict], blocked: dict[int, dict | None]) -> list[dict]:
    """The stuck groups, the cause first. A rank absent while itself waiting in another collective is a
    consequence; one absent while outside any collective is a cause. So: groups by how many of their
    absent ranks are blocked elsewhere (fewest first), then by how many are absent (the most specific
    first), then by when the wait began. Groups nobody is absent from only when no group has absent ranks."""
    ordered = sorted((s for s in stuck if s["absent"]),
                     key=lambda s: (sum(blocked[r] is not None for r in s["absent"]), len(s["absent"]), s["t"]))
    return ordered or sorted(stuck, key=lambda s: s["t"])


def _hang_verdict(dumps: dict[int, dict], stuck: list[dict], missing: list[int]) -> dict:
    blocked = {r: _blocked_in(d) for r, d in dumps.items()}
    ordered = _cause_first(stuck, blocked)
    first = ordered[0]
    key, seq, waiting, absent = first["key"], first["seq"], first["waiting"], first["absent"]
    label = group_label(key[0], key[1])
    if not waiting:  # only possible with truncated rings: say what we know
        return {"kind": "hang", "seq": seq, "group": key[0], "group_ranks": list(key[1]), "absent": absent,
                "waiting": [], "op": f"#{seq} of {label}", "stuck": _summary(ordered),
                "lines": [f"ranks {absent} never reached collective #{seq} of {label}; no record of it survives "
                          "in the other ranks' ring buffers"] + _missing(missing)}
    wr, wrec = next(iter(sorted(waiting.items())))
    op = describe_op(wrec, wr)
    lines = _absent_lines(dumps, absent, blocked, wrec, op) + _waiting_lines(dumps, waiting)
    if not absent:
        lines.insert(0, f"every rank that wrote a record reached {op} and none completed it: the collective itself "
                        "is stuck (network, a dead peer outside these records, or a backend problem)")
    lines += _also_stuck_lines(ordered[1:], blocked)
    lines.append("What to do: find why the absent rank(s) did not reach this collective (their phase and stack "
                 "above), e.g. slow or exhausted data, an exception swallowed on that rank, or a rank-dependent branch.")
    return {"kind": "hang", "seq": seq, "group": key[0], "group_ranks": list(key[1]), "absent": absent,
            "waiting": sorted(waiting), "op": op, "stuck": _summary(ordered), "lines": lines + _missing(missing)}


def _absent_lines(dumps: dict[int, dict], absent: list[int], blocked: dict, waited: dict, op: str) -> list[str]:
    """For each rank that never reached the collective: its last op, phase, and where it is instead."""
    lines = []
    for r in absent:
        lines.append(f"{_never(r, waited, op)}; its last completed op was {_last_done(dumps[r], r)}; it was in: "
                     f"{dumps[r]['phase']} (step {dumps[r]['step']}, no progress for "
                     f"{dumps[r].get('last_progress_age_s', 0):.1f} s)")
        if blocked[r] is not None:
            lines.append(f"  rank {r} is itself blocked in {describe_op(blocked[r], r)}")
        if dumps[r].get("main_stack"):
            lines.append(f"  rank {r} main thread: {' > '.join(dumps[r]['main_stack'][-4:])}")
    return lines


def _waiting_lines(dumps: dict[int, dict], waiting: dict[int, dict]) -> list[str]:
    """For each rank waiting in the collective: for how long, and from where it issued it."""
    lines = []
    for r, rec in sorted(waiting.items()):
        age = dumps[r]["now_perf"] - rec["t_launch"]
        lines.append(f"rank {r} is waiting in {describe_op(rec, r)} ({rec['state']}) for {age:.1f} s, "
                     f"step {rec['step']}, issued from {_stack(rec)}")
        if dumps[r].get("main_stack"):
            lines.append(f"  rank {r} main thread: {' > '.join(dumps[r]['main_stack'][-4:])}")
    return lines


def _also_stuck_lines(others: list[dict], blocked: dict) -> list[str]:
    """One line per further stuck group (most of them consequences of the first)."""
    lines = []
    for other in others:
        k = other["key"]
        some = next(iter(sorted(other["waiting"].items())), None)
        what = describe_op(some[1], some[0]) if some else f"#{other['seq']} of {group_label(k[0], k[1])}"
        why = "; ".join(f"rank {r} is blocked in {describe_op(blocked[r], r)}" for r in other["absent"]
                        if blocked[r] is not None)
        lines.append(f"also stuck: {what}: rank(s) {other['absent'] or 'none'} never joined"
                     f"{f' ({why})' if why else ''}, rank(s) {sorted(other['waiting'])} waiting")
    return lines


def _never(r: int, waited: dict, op: str) -> str:
    if waited.get("peer") is None:
        return f"rank {r} never joined {op}"
    other = "recv" if waited["op"] == "send" else "send"
    return f"rank {r} never posted the {other} matching {op}"


def _blocked_in(dump: dict) -> dict | None:
    """The record a rank is blocked in (a synchronous call, or wait() on an async one), if any."""
    rec = dump.get("blocked_in")
    if rec is not None:
        return rec if rec.get("state") == "started" else None
    started = [r for r in dump["records"] if r["state"] == "started"]  # dumps without the field
    return min(started, key=lambda r: r.get("order", r["seq"]), default=None)


def _last_done(dump: dict, rank: int) -> str:
    done = [r for r in dump["records"] if r["state"] == "completed"]
    if not done:
        return "none recorded"
    return describe_op(max(done, key=lambda r: r.get("order", r["seq"])), rank)


def _summary(ordered: list[dict]) -> list[dict]:
    return [{"group": s["key"][0], "group_ranks": list(s["key"][1]), "src": s["key"][2], "dst": s["key"][3],
             "seq": s["seq"], "absent": s["absent"], "waiting": sorted(s["waiting"])} for s in ordered]


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
