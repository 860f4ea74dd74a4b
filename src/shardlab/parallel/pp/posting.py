"""When the engine hands each send and receive of a schedule to the backend: the posting plan.

A schedule says which messages a rank exchanges and in what order (schedule.py); the posting plan says
in which *launches* they go out. `plan(schedule, rank)[k]` is the tuple of batches the engine posts just
before instruction k, each batch a tuple of the indices of the SEND_* / RECV_* instructions it carries.
The engine runs this plan (engine.py) and the checker replays this same plan (`p2p_plans`, checked by
parallel/p2p_order.py under NCCL's rules), so what the tests prove is the order the engine really uses.

Under NCCL a pair's operations run one after the other on a stream and a send blocks until its receive
arrives, so the order of launches matters, not only the order of messages. `rounds` (the plan the
engine uses, on every backend) makes the exchange lock-step, as torch.distributed.pipelining does with
its time steps: the schedule is simulated with fixed positive durations (simulate.py: forward 1,
backward 2), and a message's *round* is the time its producer finishes. Each rank posts, per round it
takes part in, one `batch_isend_irecv` with its sends and its receives of that round, placed before its
first compute that starts at or after the round (a send right after the compute that made it; a
receive before the compute that consumes it, often earlier: the early receive gloo likes).

Why it cannot hang (by induction on rounds): suppose every batch of the rounds before t has completed.
Before its round-t batch a rank only computes what starts before t, which consumes messages of rounds
before t (a consumer starts no earlier than its message was sent): all there. So every rank posts its
round-t batch; on every stream all earlier batches are done, so the round-t batches are all active at
once, and every message of round t has both ends among them: they all complete. The argument does not
depend on the real durations (only the plan does), nor on whether a rank's posts to different peers
share a stream; the checker confirms it for every schedule in the test matrix.

Two simpler orders it replaces, kept to show in the tests what fails:
`runs`: each maximal run of consecutive send/receive instructions as one batch (Megatron's
`send_forward_recv_backward`). Enough for GPipe, 1F1B and ZB-H1, but interleaved 1F1B hangs: at p = 2 a
rank posts a lone gradient send, then a forward of stage 0 (needs nothing), while its peer sits in a
batch whose send waits for a receive this rank has not posted yet.
`receive_ahead`: the engine's order before: lone sends, and receives posted up to LOOKAHEAD per peer
ahead of the instruction that consumes them, so that on gloo an early message finds its buffer. Under
NCCL the early receives sit at the head of the pair's stream in front of the sends the peer waits for:
at p = 2 rank 0 queues receive g0..g3 before send a0 while rank 1 queues receive a0..a3 before send g0.
The checker rejects it at every schedule of the matrix, so gloo keeps no separate fast path.
"""
from __future__ import annotations

from functools import lru_cache

from shardlab.parallel.p2p_order import Msg, Post, Wait
from shardlab.parallel.pp.schedule import COMPUTE, Instr, Schedule

POLICIES = ("rounds", "runs", "receive_ahead")
LOOKAHEAD = 4  # receive_ahead's window per peer


def is_comm(ins: Instr) -> bool:
    return ins.op.startswith(("SEND_", "RECV_"))


def label(ins: Instr) -> str:
    """What travels: the same words on the send and on the receive that meets it (the engine's tags)."""
    what = "act" if ins.op.endswith("_F") else "grad"
    src, dst = (ins.stage, ins.peer) if ins.op.startswith("SEND") else (ins.peer, ins.stage)
    return f"{what} {src}->{dst} mb{ins.mb}"


def plan(schedule: Schedule, rank: int, policy: str = "rounds") -> tuple[tuple[tuple[int, ...], ...], ...]:
    """before[k] = the batches posted just before instruction k of `rank` (see the module doc)."""
    if policy == "rounds":
        return _rounds(schedule)[rank]
    instrs = schedule.ranks[rank]
    before: list[list[tuple[int, ...]]] = [[] for _ in instrs]
    if policy == "runs":
        k = 0
        while k < len(instrs):
            if not is_comm(instrs[k]):
                k += 1
                continue
            run = k
            while k < len(instrs) and is_comm(instrs[k]):
                k += 1
            before[run].append(tuple(range(run, k)))
    elif policy == "receive_ahead":
        queues: dict[int, list[int]] = {}  # peer rank -> its receives' instruction indices, in order
        for k, ins in enumerate(instrs):
            if ins.op.startswith("RECV_"):
                queues.setdefault(schedule.rank_of(ins.peer), []).append(k)
        nxt = {p: 0 for p in queues}
        in_flight = {p: 0 for p in queues}
        for k, ins in enumerate(instrs):
            for p, queue in queues.items():
                i = nxt[p]
                while i < len(queue) and (in_flight[p] < LOOKAHEAD or queue[i] <= k):
                    before[k].append((queue[i],))
                    in_flight[p] += 1
                    i += 1
                nxt[p] = i
            if ins.op.startswith("RECV_"):
                in_flight[schedule.rank_of(ins.peer)] -= 1  # consumed here
            elif ins.op.startswith("SEND_"):
                before[k].append((k,))
    else:
        raise ValueError(f"posting policy must be one of {POLICIES}, not {policy!r}")
    return tuple(tuple(b) for b in before)


@lru_cache(maxsize=64)
def _rounds(schedule: Schedule) -> tuple:
    """`rounds` for every rank at once (a message's round is known on its sender's side)."""
    from shardlab.parallel.pp.simulate import simulate

    timing = simulate(schedule)  # durations F 1, B 2, I = W = 1: positive, exact in binary
    sent: dict[str, float] = {}  # message label -> its round
    starts, after = [], []  # per rank: compute start times in program order; index after each compute
    for r, instrs in enumerate(schedule.ranks):
        spans = iter(timing.spans[r])
        clock, st, af = 0.0, [], []
        for k, ins in enumerate(instrs):
            if ins.op in COMPUTE:
                _, start, clock = next(spans)
                st.append(start)
                af.append(k + 1)
            elif ins.op.startswith("SEND_"):
                sent[label(ins)] = clock  # the producer's end: the compute just before the send
        starts.append(st)
        after.append(af)
    out = []
    for r, instrs in enumerate(schedule.ranks):
        by_round: dict[float, list[int]] = {}
        for k, ins in enumerate(instrs):
            if is_comm(ins):
                by_round.setdefault(sent[label(ins)], []).append(k)
        before: list[list[tuple[int, ...]]] = [[] for _ in instrs]
        for t in sorted(by_round):
            # before the first compute starting at or after t: at the start of the run of sends and
            # receives in front of it (just after the compute before it), or before REDUCE
            first = next((c for c, s in enumerate(starts[r]) if s >= t), len(starts[r]))
            at = after[r][first - 1] if first else 0
            before[at].append(tuple(by_round[t]))
        out.append(tuple(tuple(b) for b in before))
    return tuple(out)


def p2p_plans(schedule: Schedule, policy: str = "rounds") -> dict[int, list]:
    """Every rank's posting plan as the checker's entries: the posts in the engine's order, a Wait at each
    receive instruction (the engine blocks there) and, at REDUCE, a Wait for every send not yet waited.
    `rounds` and `runs` post through batch_isend_irecv even a batch of one message, so all of a
    pipeline's messages share one communicator; `receive_ahead` posted lone isend/irecv."""
    out = {}
    for r, instrs in enumerate(schedule.ranks):
        before = plan(schedule, r, policy)
        entries: list = []
        post_of: dict[int, int] = {}  # instruction index -> index of the entry that posted it
        sends: list[int] = []
        for k, ins in enumerate(instrs):
            for batch in before[k]:
                msgs = tuple(Msg("send" if instrs[j].op.startswith("SEND") else "recv",
                                 schedule.rank_of(instrs[j].peer), label(instrs[j])) for j in batch)
                for j in batch:
                    post_of[j] = len(entries)
                    if instrs[j].op.startswith("SEND"):
                        sends.append(len(entries))
                entries.append(Post(msgs, fused=policy != "receive_ahead"))
            if ins.op.startswith("RECV_"):
                entries.append(Wait(post_of[k]))
            elif ins.op == "REDUCE":
                entries += [Wait(p) for p in dict.fromkeys(sends)]
                sends.clear()
        out[r] = entries
    return out
