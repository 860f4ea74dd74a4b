"""Check and time a schedule without running a model.

`simulate` plays every rank's instruction list against the others: a compute instruction takes its
duration, a send never blocks (the engine sends asynchronously), a receive waits for its send. It
checks that every stage runs each microbatch's forward once and its backward once (B, or I and W), that
each receive has exactly one send, that the ranks cannot deadlock and that every pair of ranks posts its
messages in one order on both sides (the posting plan's); it returns when each
instruction ran, the bubble of every rank and the activations each rank holds at its peak.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from shardlab.parallel.pp.schedule import COMPUTE, Schedule


class ScheduleDeadlock(RuntimeError):
    pass


@dataclass
class Timing:
    spans: list[list[tuple]] = field(default_factory=list)  # spans[r] = [(Instr, start, end)] compute only
    makespan: float = 0.0
    busy: list[float] = field(default_factory=list)
    peak_activations: list[int] = field(default_factory=list)

    @property
    def bubble(self) -> list[float]:
        """Idle ÷ step time, per rank."""
        return [1.0 - b / self.makespan for b in self.busy]

    @property
    def mean_bubble(self) -> float:
        return sum(self.bubble) / len(self.bubble)


def _check_coverage(s: Schedule) -> None:
    seen = Counter()
    for r, instrs in enumerate(s.ranks):
        for i in instrs:
            if i.op in COMPUTE:
                if s.rank_of(i.stage) != r:
                    raise ValueError(f"{s.name}: {i} runs on rank {r}, but stage {i.stage} lives on rank "
                                     f"{s.rank_of(i.stage)}")
                seen[(i.op, i.stage, i.mb)] += 1
    for stage in range(s.n_stages):
        for mb in range(s.microbatches):
            split = seen[("I", stage, mb)] or seen[("W", stage, mb)]
            need = ("F", "I", "W") if split else ("F", "B")
            for op in need:
                if seen[(op, stage, mb)] != 1:
                    raise ValueError(f"{s.name}: {op}{mb}@s{stage} runs {seen[(op, stage, mb)]} times, not once")


def _check_channels(s: Schedule) -> None:
    """Point-to-point messages between two ranks are matched in the order they are posted (NCCL has no
    tags), so on every directed pair of ranks the sender's order of sends must be the receiver's order of
    receives; otherwise an activation would land in a gradient's buffer. The order is the posting plan's
    (posting.py: what the engine posts, by exchange round), not the instruction lists': on the V placement
    a rank's receives from one neighbour interleave two streams (activations down, gradients back up), which
    the rounds order alike on both sides."""
    from shardlab.parallel.pp.posting import plan

    sends: dict[tuple, list] = {}
    recvs: dict[tuple, list] = {}
    for r, instrs in enumerate(s.ranks):
        for j in [j for batches in plan(s, r) for batch in batches for j in batch]:
            i = instrs[j]
            if i.op.startswith("SEND"):
                sends.setdefault((r, s.rank_of(i.peer)), []).append((i.op[-1], i.stage, i.peer, i.mb))
            else:
                recvs.setdefault((s.rank_of(i.peer), r), []).append((i.op[-1], i.peer, i.stage, i.mb))
    for pair in set(sends) | set(recvs):
        if sends.get(pair, []) != recvs.get(pair, []):
            raise ValueError(f"{s.name}: messages from rank {pair[0]} to rank {pair[1]} are received in another "
                             "order than they are sent")


def _check_local_handoff(s: Schedule, r: int, ins, done: set) -> None:
    """A hand-off between two stages of one rank is no message (the V's tip): the producer must simply
    have run before on this rank — the forward of the stage before, the backward of the stage after."""
    if ins.op == "F" and ins.stage > 0 and s.local(ins.stage, ins.stage - 1):
        before = [("F", ins.stage - 1, ins.mb)]
    elif ins.op in ("B", "I") and ins.stage < s.n_stages - 1 and s.local(ins.stage, ins.stage + 1):
        before = [(op, ins.stage + 1, ins.mb) for op in ("B", "I")]
    else:
        return
    if not any(b in done for b in before):
        op, st, mb = before[0]
        raise ValueError(f"{s.name}: rank {r} runs {ins} before {op}{mb}@s{st}, which hands it over on the rank")


def peak_activations(s: Schedule) -> list[int]:
    """Per rank, the most microbatches whose forward has run and whose backward has not finished (B, or
    W for a split backward): what a rank must keep in memory, in units of one stage's activations."""
    out = []
    for instrs in s.ranks:
        live = peak = 0
        for i in instrs:
            if i.op == "F":
                live += 1
                peak = max(peak, live)
            elif i.op in ("B", "W"):
                live -= 1
        out.append(peak)
    return out


def simulate(s: Schedule, f: float = 1.0, b: float = 2.0, i: float | None = None, w: float | None = None,
             latency: float = 0.0, durations: list[list[float]] | None = None,
             latencies: dict | None = None) -> Timing:
    """Durations: f (forward), b (full backward), i and w (its two halves; default b/2 each); or, to
    replay a measured run, `durations[r]`: rank r's compute instructions' own durations, in its order.
    `latency`: every message's; `latencies`: a message's own, by (kind F|B, from stage, to stage, mb)."""
    _check_coverage(s)
    i = b / 2 if i is None else i
    w = b / 2 if w is None else w
    dur = {"F": f, "B": b, "I": i, "W": w}
    latencies = latencies or {}
    n_done = [0] * s.pp  # compute instructions played per rank (the index into durations[r])
    pos = [0] * s.pp
    clock = [0.0] * s.pp
    sent: dict[tuple, float] = {}  # (kind, from_stage, to_stage, mb) -> time sent
    done_local: set[tuple] = set()
    timing = Timing(spans=[[] for _ in range(s.pp)], busy=[0.0] * s.pp)
    remaining = sum(len(x) for x in s.ranks)
    while remaining:
        progressed = False
        for r in range(s.pp):
            while pos[r] < len(s.ranks[r]):
                ins = s.ranks[r][pos[r]]
                if ins.op.startswith("RECV"):
                    key = (ins.op[-1], ins.peer, ins.stage, ins.mb)
                    if key not in sent:
                        break  # blocked until the peer sends
                    clock[r] = max(clock[r], sent.pop(key) + latencies.get(key, latency))
                elif ins.op.startswith("SEND"):
                    key = (ins.op[-1], ins.stage, ins.peer, ins.mb)
                    if key in sent:
                        raise ValueError(f"{s.name}: {ins} sent twice")
                    sent[key] = clock[r]
                elif ins.op in COMPUTE:
                    needs = {"B": "F", "I": "F", "W": "I"}.get(ins.op)
                    if needs and (needs, ins.stage, ins.mb) not in done_local:
                        raise ValueError(f"{s.name}: rank {r} runs {ins} before {needs}{ins.mb}@s{ins.stage}")
                    _check_local_handoff(s, r, ins, done_local)
                    start, took = clock[r], dur[ins.op] if durations is None else durations[r][n_done[r]]
                    n_done[r] += 1
                    clock[r] += took
                    timing.spans[r].append((ins, start, clock[r]))
                    timing.busy[r] += took
                    done_local.add((ins.op, ins.stage, ins.mb))
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = [f"rank {r} at {s.ranks[r][pos[r]]}" for r in range(s.pp) if pos[r] < len(s.ranks[r])]
            raise ScheduleDeadlock(f"{s.name}: deadlock: " + "; ".join(stuck))
    if sent:
        raise ValueError(f"{s.name}: sends nobody receives: {sorted(sent)[:3]}")
    _check_channels(s)  # after the play: a schedule that deadlocks has no posting plan
    timing.makespan = max(clock)
    timing.peak_activations = peak_activations(s)
    return timing
