"""Point-to-point posting orders replayed under NCCL's rules: does every message get through?

gloo forgives orders NCCL does not: a gloo receive posted early waits in its own buffer while later
sends to the same peer go ahead, and an `isend` never holds anything else up. Under NCCL a rank's
point-to-point operations are kernels queued on a CUDA stream, each one blocking that stream until its
partner arrives. A posting order that runs on gloo can therefore hang on the first GPU (as the
pipeline's receives posted ahead of its sends). This module replays posting orders, all ranks together,
under a model of those rules, and raises `P2PDeadlock` naming where each stuck rank waits.

A plan is, per rank, the list of what the rank does in program order:

    Post(msgs, fused)   hand the backend one or more messages: `fused` = one `batch_isend_irecv` (a
                        single coalesced NCCL launch: ncclGroupStart ... ncclGroupEnd), otherwise a
                        lone `isend` / `irecv` (then exactly one message)
    Wait(post)          block until that post's messages are done (the index of the Post in this
                        rank's list)

The model (conservative: an order it accepts cannot hang under any of the readings it covers):

1. **Program order.** A rank issues its entries in order; a Wait holds back every later entry until the
   waited post has completed. (ProcessGroupNCCL's `wait()` only makes the compute stream wait, but every
   later NCCL launch first waits for the compute stream, so a later post cannot start earlier: the
   same constraint as a blocking wait.) Computation between entries is free and always finishes.
2. **Streams.** Each post is one *unit* on one stream of its rank; a stream runs one unit at a time, in
   issue order, and the next starts only when the current one has completed. Which stream:
   - `streams="pair"` (ProcessGroupNCCL's default): a lone isend/irecv toward peer P runs on the
     stream of the pair's own two-rank communicator; a fused batch on the group's communicator.
     Messages meet only inside one communicator, so a lone send never meets a batched receive.
   - `streams="shared"`: every post of the rank, to any peer, on one stream and one communicator (a
     group whose point-to-point reuses the group's communicator, e.g. after eager initialisation).
   "shared" orders strictly more than "pair", so an order is safe under both if it passes both (the
   test suite checks both).
3. **Rendezvous.** The i-th send from A to B on a communicator meets the i-th receive on B from A on
   that communicator. Neither completes before both are *active*: at the head of their streams. No
   eager buffering is assumed: NCCL documents ncclSend/ncclRecv as blocking for the GPU until the
   partner is there. The two must carry the same label (what the message is): otherwise the data would
   land in the wrong buffer, which no tag catches on NCCL (it has none).
4. **Fused batches.** All messages of an active batch progress together (that is what the group launch
   is for); the batch completes, and its stream moves on, when all of them have met their partners.
   Waiting on any handle of a batch waits for the whole batch (NCCL returns one work for it).

Progress is computed as a fixpoint: issue what can be issued, meet the active pairs, retire completed
units, until nothing changes. Every entry issued and every message delivered = no deadlock.

`lockstep` builds orders that pass by construction, for any program of tasks that exchange messages
(the pipeline engine's schedules, the generation lanes): simulate the tasks with fixed positive costs;
a message's *round* is the time its producer finishes; each rank posts, per round it takes part in,
one fused batch with its sends and receives of that round, before its first task that starts at or
after the round (torch.distributed.pipelining's time steps, in effect). Why it cannot hang, by
induction on rounds: when every batch of the rounds before t has completed, each rank can post its
round-t batch (the tasks before it start before t, so they consume only messages of earlier rounds: a
consumer starts no earlier than its message is sent); on every stream the earlier batches are done, so
all round-t batches are active together and every round-t message has both ends among them. Neither
the real durations nor the stream model enter the argument; `check` confirms it on every plan tested.
"""
from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field

STREAM_MODELS = ("pair", "shared")


@dataclass(frozen=True)
class Msg:
    kind: str  # "send" | "recv"
    peer: int  # the other end's rank
    what: str  # the label a send and the receive it meets must share: "act 0->1 mb2"


@dataclass(frozen=True)
class Post:
    msgs: tuple[Msg, ...]
    fused: bool = True

    def __post_init__(self):
        if not self.fused and len(self.msgs) != 1:
            raise ValueError("a lone isend/irecv posts exactly one message; several go in a fused batch")


@dataclass(frozen=True)
class Wait:
    post: int  # index of the Post (in the same rank's plan) waited for


class P2PDeadlock(RuntimeError):
    """The plan cannot complete under NCCL's rules (the message says where each stuck rank waits)."""


class P2PMismatch(RuntimeError):
    """A send met a receive that expected another message: the data would land in the wrong buffer."""


@dataclass
class _Unit:
    rank: int
    index: int  # position of its Post in the rank's plan
    post: Post
    open: set = field(default_factory=set)  # positions in post.msgs not yet delivered


def check(plans: dict[int, list], streams: str = "shared") -> int:
    """Replay `plans` ({rank: [Post | Wait, ...]}) under the model above; returns the number of messages
    delivered, raises P2PDeadlock or P2PMismatch."""
    if streams not in STREAM_MODELS:
        raise ValueError(f"streams must be one of {STREAM_MODELS}, not {streams!r}")
    replay = _Replay(plans, streams)
    changed = True
    while changed:  # until nothing moves: issue, meet the pairs, retire what completed
        changed = replay.issue() | replay.meet() | replay.retire()
    stuck = [r for r, plan in plans.items() if replay.pc[r] < len(plan)]
    left = [u for q in replay.queues.values() for u in q]
    if stuck or left:
        raise P2PDeadlock(_describe(plans, replay.pc, replay.queues, streams))
    return replay.delivered


class _Replay:
    """The state of one replay: each rank's program counter, the posted units queued per stream, the
    messages per channel in posting order."""

    def __init__(self, plans: dict[int, list], streams: str):
        self.plans, self.streams = plans, streams
        self.pc = {r: 0 for r in plans}
        self.queues: dict[tuple, deque] = {}  # (rank, stream) -> its units, head first
        self.channels: dict[tuple, list] = {}  # (src, dst, comm, kind) -> [(unit, msg position)] in posting order
        self.where: dict[tuple[int, int, int], tuple] = {}  # (rank, post index, msg pos) -> (channel key, n-th)
        self.done: set[tuple[int, int]] = set()
        self.delivered = 0

    def stream_of(self, r: int, p: Post):
        if self.streams == "shared":
            return (r, "p2p")
        return (r, "group") if p.fused else (r, "pair", p.msgs[0].peer)

    def comm_of(self, p: Post):
        return "one" if self.streams == "shared" else ("group" if p.fused else "pair")

    def active(self, u: _Unit) -> bool:
        q = self.queues[self.stream_of(u.rank, u.post)]
        return bool(q) and q[0] is u

    def issue(self) -> bool:
        """1. Every rank issues in program order up to its first unmet wait."""
        changed = False
        for r, plan in self.plans.items():
            while self.pc[r] < len(plan):
                entry = plan[self.pc[r]]
                if isinstance(entry, Wait):
                    if (r, entry.post) not in self.done:
                        break
                else:
                    self._post(r, entry)
                self.pc[r] += 1
                changed = True
        return changed

    def _post(self, r: int, entry: Post) -> None:
        u = _Unit(r, self.pc[r], entry, set(range(len(entry.msgs))))
        self.queues.setdefault(self.stream_of(r, entry), deque()).append(u)
        for j, m in enumerate(entry.msgs):
            src, dst = (r, m.peer) if m.kind == "send" else (m.peer, r)
            key = (src, dst, self.comm_of(entry), m.kind)
            lst = self.channels.setdefault(key, [])
            self.where[(r, self.pc[r], j)] = (key, len(lst))
            lst.append((u, j))

    def meet(self) -> bool:
        """2. Deliver the messages whose both ends are at the head of their streams."""
        changed = False
        for q in list(self.queues.values()):
            if not q:
                continue
            u = q[0]
            for j in sorted(u.open):
                (src, dst, cm, kind), n = self.where[(u.rank, u.index, j)]
                other = self.channels.get((src, dst, cm, "recv" if kind == "send" else "send"), [])
                if n >= len(other):
                    continue
                v, i = other[n]
                if not self.active(v):
                    continue
                a, b = u.post.msgs[j], v.post.msgs[i]
                if a.what != b.what:
                    s, t = (a, b) if kind == "send" else (b, a)
                    raise P2PMismatch(f"message #{n + 1} from rank {src} to rank {dst}: the send is "
                                      f"{s.what!r} but the receive expects {t.what!r}")
                u.open.discard(j)
                v.open.discard(i)
                self.delivered += 1
                changed = True
        return changed

    def retire(self) -> bool:
        """3. Retire completed units; the next on each stream becomes active."""
        changed = False
        for q in self.queues.values():
            while q and not q[0].open:
                u = q.popleft()
                self.done.add((u.rank, u.index))
                changed = True
        return changed


def _describe(plans, pc, queues, streams) -> str:
    lines = [f"point-to-point deadlock under NCCL's rules (streams={streams}):"]
    for r, plan in plans.items():
        if pc[r] < len(plan):
            w = plan[pc[r]]
            lines.append(f"  rank {r} waits for its post #{w.post} ({_show(plan[w.post])})")
    for (r, *_), q in queues.items():
        if q:
            lines.append(f"  rank {r}: stream head is post #{q[0].index} ({_show(q[0].post)}), "
                         f"{len(q) - 1} queued behind it")
    return "\n".join(lines[:24])


def _show(p: Post) -> str:
    msgs = ", ".join(f"{m.kind} {m.what} {'to' if m.kind == 'send' else 'from'} rank {m.peer}" for m in p.msgs)
    return ("batch: " if p.fused else "") + msgs


@dataclass(frozen=True)
class Task:
    """One unit of work of a rank's program: the messages it consumes, (source rank, label) each, must
    be there before it starts; those it makes, (destination rank, label), leave when it ends."""
    needs: tuple[tuple[int, str], ...] = ()
    makes: tuple[tuple[int, str], ...] = ()
    cost: float = 1.0


def lockstep(programs: dict[int, list[Task]]) -> dict[int, list[list[tuple[Msg, ...]]]]:
    """The batches each rank posts: `before[r][i]` before its task i, `before[r][len]` after its last
    (see the module doc). Raises ValueError if the programs themselves cannot run (a task waits for a
    message nobody sends before it)."""
    pos = {r: 0 for r in programs}
    clock = {r: 0.0 for r in programs}
    start = {r: [] for r in programs}
    sent: dict[str, float] = {}  # label -> its round (the producer's end)
    remaining = sum(len(p) for p in programs.values())
    while remaining:
        moved = False
        for r, prog in programs.items():
            while pos[r] < len(prog):
                task = prog[pos[r]]
                if any(label not in sent for _, label in task.needs):
                    break
                if task.cost <= 0:
                    raise ValueError("lockstep needs positive task costs (a send must leave after its task starts)")
                begin = max([clock[r]] + [sent[label] for _, label in task.needs])
                start[r].append(begin)
                clock[r] = begin + task.cost
                for _, label in task.makes:
                    sent[label] = clock[r]
                pos[r] += 1
                remaining -= 1
                moved = True
        if not moved:
            stuck = [f"rank {r} task {pos[r]} needs {[l for _, l in programs[r][pos[r]].needs if l not in sent]}"
                     for r in programs if pos[r] < len(programs[r])]
            raise ValueError("these programs cannot run on any backend: " + "; ".join(stuck))
    out = {}
    for r, prog in programs.items():
        by_round: dict[float, list[Msg]] = {}
        for task in prog:
            for src, label in task.needs:
                by_round.setdefault(sent[label], []).append(Msg("recv", src, label))
            for dst, label in task.makes:
                by_round.setdefault(sent[label], []).append(Msg("send", dst, label))
        before: list[list[tuple[Msg, ...]]] = [[] for _ in range(len(prog) + 1)]
        for t in sorted(by_round):
            first = bisect.bisect_left(start[r], t)  # a rank's tasks start in order: the first at or after t
            before[first].append(tuple(by_round[t]))
        out[r] = before
    return out


def lockstep_plans(programs: dict[int, list[Task]]) -> dict[int, list]:
    """`lockstep`'s batches as the checker's entries: each rank posts its batches and waits for what a
    task consumes before the task, and for all its sends at the end."""
    before = lockstep(programs)
    plans = {}
    for r, prog in programs.items():
        entries, post_of, sends = [], {}, []
        for i in range(len(prog) + 1):
            for batch in before[r][i]:
                for m in batch:
                    if m.kind == "recv":
                        post_of[m.what] = len(entries)
                if any(m.kind == "send" for m in batch):
                    sends.append(len(entries))
                entries.append(Post(batch))
            if i < len(prog):
                entries += [Wait(p) for p in dict.fromkeys(post_of[label] for _, label in prog[i].needs)]
        plans[r] = entries + [Wait(p) for p in sends]
    return plans


def from_logs(logs: dict[int, list]) -> dict[int, list]:
    """Plans from the ranks' posting logs (`comm.log_p2p`: what real code posted and waited for, in
    order; the tag is the label a send and its receive share)."""
    plans = {}
    for r, log in logs.items():
        plans[r] = [Post(tuple(Msg(k, peer, tag) for k, peer, tag in e[2]), e[1]) if e[0] == "post" else Wait(e[1])
                    for e in log]
    return plans


def check_all(plans: dict[int, list]) -> int:
    """`check` under every stream model (the result: messages delivered)."""
    n = [check(plans, s) for s in STREAM_MODELS]
    return n[0]
