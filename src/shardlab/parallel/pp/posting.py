"""When the engine hands each send and receive of a schedule to the backend: the posting plan.

A schedule says which messages a rank exchanges and in what order (schedule.py); the posting plan says
in which *launches* they go out. `plan(schedule, rank)[k]` is the tuple of batches the engine posts just
before instruction k, each batch a tuple of the indices of the SEND_* / RECV_* instructions it carries.
The engine runs this plan (engine.py) and the checker replays this same plan (`p2p_plans`, checked by
parallel/p2p_order.py under NCCL's rules), so what the tests prove is the order the engine really uses.

Under NCCL a pair's operations run one after the other on a stream and a send blocks until its receive
arrives, so the order of launches matters, not only the order of messages. `rounds` (the plan the
engine uses, on every backend) makes the exchange lock-step, as torch.distributed.pipelining does with
its time steps (p2p_order.lockstep, which has the proof): the schedule is simulated with fixed positive
durations (forward 1, backward 2, its halves 1 each), and a message's *round* is the time its producer
finishes. Each rank posts, per round it takes part in, one `batch_isend_irecv` with its sends and its
receives of that round, before its first compute that starts at or after the round: a send right after
the compute that made it, a receive before the compute that consumes it, often earlier (the early
receive gloo likes). The real durations do not enter the proof, only the plan; the checker confirms it
for every schedule in the test matrix.

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

from shardlab.parallel.p2p_order import Msg, Post, Task, Wait, lockstep
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


COST = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}  # the simulated durations the rounds come from


@lru_cache(maxsize=64)
def _rounds(schedule: Schedule) -> tuple:
    """`rounds` for every rank at once: the schedule's computes as p2p_order Tasks (a compute consumes
    the receives in front of it and makes the sends after it), batched by p2p_order.lockstep, each batch
    placed at the start of the run of sends and receives in front of its compute (or after the last)."""
    programs, index, runs = {}, {}, {}
    for r, instrs in enumerate(schedule.ranks):
        tasks, run_start, needs = [], [], []
        start = 0  # where the run of sends and receives in front of the next compute begins
        for k, ins in enumerate(instrs):
            if ins.op.startswith("RECV_"):
                needs.append((schedule.rank_of(ins.peer), label(ins)))
            elif ins.op.startswith("SEND_"):
                t = tasks[-1]  # the send leaves when the compute before it ends
                tasks[-1] = Task(t.needs, t.makes + ((schedule.rank_of(ins.peer), label(ins)),), t.cost)
            elif ins.op in COMPUTE:
                tasks.append(Task(tuple(needs), (), COST[ins.op]))
                run_start.append(start)
                needs = []
                start = k + 1
            if is_comm(ins):
                index[(r, label(ins))] = k
        run_start.append(start)  # after the last compute: its sends, before REDUCE waits for them
        programs[r], runs[r] = tasks, run_start
    out = []
    for r, batches in lockstep(programs).items():
        before: list[list[tuple[int, ...]]] = [[] for _ in schedule.ranks[r]]
        for i, at_task in enumerate(batches):
            for batch in at_task:
                before[runs[r][i]].append(tuple(index[(r, m.what)] for m in batch))
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
