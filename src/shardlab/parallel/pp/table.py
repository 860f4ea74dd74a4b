"""Schedules written as tables of actions (`parallel.pp_schedule=file:PATH`), and every schedule written out.

The format is torch.distributed.pipelining's CSV (`_dump_csv` / `_load_csv`): one row per pipeline rank,
one cell per action, `{stage}{op}{microbatch}` with op F (forward), B (full backward), I (input gradient),
W (weight gradient), and optionally the messages SEND_F, RECV_F, SEND_B, RECV_B (`1RECV_F0`: stage 1
receives microbatch 0's activation; `0SEND_B2`: stage 0 sends the gradient of its input for microbatch 2
back). An overlapped pair `(0F3;1B2)OVERLAP_F_B` is its two actions in order; an empty cell is nothing.
Lines starting with `#` are comments. Stages are placed by where their actions are: the table must put
them as the loop (rank r holds r, r + p, ...) or the V (rank r holds r and 2p - 1 - r) does.

Without messages in the table they are derived from the compute order as for the built-in schedules;
with them, they are taken as written. Either way the table is checked before the first step: every
cell is an action, each stage's actions are on one rank, every microbatch's forward comes before its
backward (and I before W) on its stage, every stage runs each microbatch's forward once and its backward
once, every send is received and every remote hand-off is sent, and the simulator plays it for
deadlocks and for NCCL's in-order point-to-point (the posting plan's order on every pair of ranks). The
first problem is one line naming the rank, the column and the action (`TableError`).
"""
from __future__ import annotations

import csv
import re
from pathlib import Path

from shardlab.parallel.pp.schedule import COMPUTE, Instr, Schedule, _with_comm, stages_on

_ACTION = re.compile(r"^(\d+)(SEND_F|RECV_F|SEND_B|RECV_B|F|B|I|W)(\d+)$")
_PAIR = re.compile(r"^\((.*)\)OVERLAP_F_B$")
PREFIX = "file:"


class TableError(ValueError):
    """A bad schedule table; the message is one line naming the first bad action."""


def is_file(value: str) -> bool:
    return str(value).startswith(PREFIX)


def load(path: str | Path, name: str = "") -> Schedule:
    """The schedule the table at `path` writes, checked (TableError on the first problem)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise TableError(f"schedule file {path}: cannot read it ({e.strerror or e})") from None
    return parse(text, name or f"{PREFIX}{path}")


def parse(text: str, name: str = "table") -> Schedule:
    rows = [r for r in csv.reader(ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#"))]
    if not rows:
        raise TableError(f"{name}: no rows (one row of actions per pipeline rank)")
    cells = [[(r, c, a) for c, cell in enumerate(row) for a in _actions(cell, name, r, c)] for r, row in enumerate(rows)]
    rank_of = _placement(cells, name)
    pp, n_stages = len(rows), len(rank_of)
    layout, virtual = _layout(rank_of, pp, n_stages, name)
    m = 1 + max(a[2] for row in cells for _, _, a in row)
    shape = Schedule(name, pp, m, virtual, (), layout)
    written = any(a[0] not in COMPUTE for row in cells for _, _, a in row)
    ranks = []
    for r, row in enumerate(cells):
        _check_order(row, name)
        if written:
            instrs = [_instr(a, n_stages, name, r, c) for _, c, a in row] + [Instr("REDUCE"), Instr("STEP")]
        else:
            instrs = _with_comm([a for _, _, a in row], n_stages, lambda x, y: not shape.local(x, y))
        ranks.append(tuple(instrs))
    sched = Schedule(name, pp, m, virtual, tuple(ranks), layout)
    _check_coverage(sched, name)
    if written:
        _check_messages(sched, cells, name)
    _play(sched, name)
    return sched


def _actions(cell: str, name: str, r: int, c: int) -> list[tuple]:
    """The (op, stage, mb) actions of one cell (none when empty; two for an overlapped pair)."""
    cell = cell.strip()
    if not cell:
        return []
    pair = _PAIR.match(cell)
    parts = [p.strip() for p in pair.group(1).split(";")] if pair else [cell]
    out = []
    for p in parts:
        got = _ACTION.match(p)
        if not got:
            raise TableError(f"{name}: rank {r}, column {c}: {cell!r} is not an action (e.g. 0F1, 1I0, 1W0, "
                             "0B2, 1RECV_F0)")
        out.append((got.group(2), int(got.group(1)), int(got.group(3))))
    return out


def _placement(cells, name: str) -> list[int]:
    """stage -> rank, from where each stage's actions are (every stage on one rank)."""
    where: dict[int, int] = {}
    for row in cells:
        for r, c, (op, s, mb) in row:
            if where.setdefault(s, r) != r:
                raise TableError(f"{name}: rank {r}, column {c}: {s}{op}{mb} is an action of stage {s}, which "
                                 f"rank {where[s]} runs")
    missing = [s for s in range(max(where) + 1) if s not in where]
    if missing:
        raise TableError(f"{name}: stage {missing[0]} has no action (stages are 0..{max(where)})")
    return [where[s] for s in range(len(where))]


def _layout(rank_of: list[int], pp: int, n: int, name: str) -> tuple[str, int]:
    if n % pp:
        raise TableError(f"{name}: {n} stages on {pp} ranks: every rank must hold as many")
    v = n // pp
    for layout in ("loop", "v"):
        if (layout == "loop" or v == 2) and all(
                s in stages_on(layout, pp, v, r) for s, r in enumerate(rank_of)):
            return layout, v
    bad = next(s for s, r in enumerate(rank_of) if s not in stages_on("loop", pp, v, r))
    raise TableError(f"{name}: stage {bad} on rank {rank_of[bad]}: stages must be placed as the loop (rank r holds "
                     f"r, r + {pp}, ...) or the V (rank r holds r and {2 * pp - 1} - r)")


def _check_order(row, name: str) -> None:
    """On the rank: each compute action once, a microbatch's forward before its backward, I before W."""
    done: set[tuple] = set()
    for r, c, (op, s, mb) in row:
        if op not in COMPUTE:
            continue
        if (op, s, mb) in done:
            raise TableError(f"{name}: rank {r}, column {c}: {s}{op}{mb} runs a second time")
        need = {"B": "F", "I": "F", "W": "I"}.get(op)
        if need and (need, s, mb) not in done:
            raise TableError(f"{name}: rank {r}, column {c}: {s}{op}{mb} comes before {s}{need}{mb}")
        if op == "B" and ("I", s, mb) in done or op == "I" and ("B", s, mb) in done:
            raise TableError(f"{name}: rank {r}, column {c}: {s}{op}{mb}: microbatch {mb}'s backward on stage "
                             f"{s} runs twice (B and I)")
        done.add((op, s, mb))


def _instr(a: tuple, n: int, name: str, r: int, c: int) -> Instr:
    op, s, mb = a
    if op in COMPUTE:
        return Instr(op, s, mb)
    peer = s + 1 if op in ("SEND_F", "RECV_B") else s - 1
    if not 0 <= peer < n:
        raise TableError(f"{name}: rank {r}, column {c}: {s}{op}{mb}: stage {s} has no stage {peer} to "
                         f"{'send to' if op.startswith('SEND') else 'receive from'}")
    return Instr(op, s, mb, peer)


def _check_coverage(s: Schedule, name: str) -> None:
    """Every stage runs each microbatch's forward once and its backward once (B, or I and W)."""
    seen = {(i.op, i.stage, i.mb) for instrs in s.ranks for i in instrs if i.op in COMPUTE}
    for stage in range(s.n_stages):
        for mb in range(s.microbatches):
            split = ("I", stage, mb) in seen
            for op in (("F", "I", "W") if split else ("F", "B")):
                if (op, stage, mb) not in seen:
                    raise TableError(f"{name}: rank {s.rank_of(stage)}: {stage}{op}{mb} is missing (every stage "
                                     f"runs microbatches 0..{s.microbatches - 1}: F, then B or I and W)")


def _check_messages(s: Schedule, cells, name: str) -> None:
    """Messages as written: each remote hand-off sent after its producer and received before its consumer,
    on the right ranks; none between two stages of one rank; every send received."""
    for r, (instrs, row) in enumerate(zip(s.ranks, cells)):
        done: set[tuple] = set()
        for ins, (_, c, a) in zip(instrs, row):
            where = f"{name}: rank {r}, column {c}: {a[1]}{a[0]}{a[2]}"
            if ins.op in COMPUTE:
                remote_in = (ins.op == "F" and ins.stage > 0 and not s.local(ins.stage, ins.stage - 1),
                             ins.op in ("B", "I") and ins.stage < s.n_stages - 1
                             and not s.local(ins.stage, ins.stage + 1))
                kind = "RECV_F" if remote_in[0] else "RECV_B" if remote_in[1] else None
                if kind and (kind, ins.stage, ins.mb) not in done:
                    raise TableError(f"{where} comes before {ins.stage}{kind}{ins.mb}, which brings its input")
            elif s.local(ins.stage, ins.peer):
                raise TableError(f"{where}: stages {ins.stage} and {ins.peer} are both on rank {r}: no message")
            elif ins.op.startswith("SEND"):
                made = ("F",) if ins.op == "SEND_F" else ("B", "I")
                if not any((op, ins.stage, ins.mb) in done for op in made):
                    raise TableError(f"{where} comes before the action that computes what it sends")
            done.add((ins.op, ins.stage, ins.mb))
    sends = {(i.op[-1], i.stage, i.peer, i.mb) for instrs in s.ranks for i in instrs if i.op.startswith("SEND")}
    recvs = {(i.op[-1], i.peer, i.stage, i.mb) for instrs in s.ranks for i in instrs if i.op.startswith("RECV")}
    for k, frm, to, mb in sorted(sends ^ recvs):  # (kind, sending stage, receiving stage, microbatch)
        if (k, frm, to, mb) in sends:
            raise TableError(f"{name}: rank {s.rank_of(to)}: {to}RECV_{k}{mb} is missing (stage {frm} sends it)")
        raise TableError(f"{name}: rank {s.rank_of(frm)}: {frm}SEND_{k}{mb} is missing (stage {to} receives it)")
    for instrs in s.ranks:  # every remote hand-off has its messages
        for i in instrs:
            if i.op == "F" and i.stage > 0 and not s.local(i.stage, i.stage - 1) and (
                    "F", i.stage - 1, i.stage, i.mb) not in sends:
                raise TableError(f"{name}: rank {s.rank_of(i.stage - 1)}: {i.stage - 1}SEND_F{i.mb} is missing")


def _play(s: Schedule, name: str) -> None:
    """The simulator: deadlocks, and the order of messages on every pair of ranks (NCCL matches them by
    order only)."""
    from shardlab.parallel.pp.simulate import ScheduleDeadlock, simulate

    try:
        simulate(s)
    except (ScheduleDeadlock, ValueError) as e:
        raise TableError(str(e).replace(f"{s.name}: ", f"{name}: ", 1)) from None


# --- writing a schedule out ----------------------------------------------------------------------------
def _cell(ins: Instr) -> str:
    return f"{ins.stage}{ins.op}{ins.mb}"


def to_csv(s: Schedule, messages: bool = False) -> str:
    """The schedule as the table `file:PATH` reads (torch's CSV): compute actions only, or with messages."""
    keep = (lambda i: i.op in COMPUTE or i.op.startswith(("SEND", "RECV"))) if messages else (lambda i: i.op in COMPUTE)
    return "".join(",".join(_cell(i) for i in instrs if keep(i)) + "\n" for instrs in s.ranks)
