"""Pipeline schedules as data: for every pipeline rank, the list of instructions it runs in one step.

A schedule is built in two passes. First the *compute order* of each rank: which stage's forward (F),
backward (B) — or, for zero-bubble, backward-input (I) and backward-weight (W) — of which microbatch,
in what order. That order is all that distinguishes GPipe, 1F1B, interleaved 1F1B and ZB-H1. Then the
communication is derived from it: before a stage's forward it receives the activation from the stage
before (RECV_F), after it sends its output on (SEND_F); before a backward it receives the output's
gradient from the stage after (RECV_B), after it sends the input's gradient back (SEND_B). Every rank
ends with REDUCE (gradient sync between stages that share a tied parameter, and the data-parallel
layer's last collectives) and STEP.

Stages are numbered 0..S-1 along the model. A compute order names a rank's stages by *chunk* (its
first, second, ... stage); the layout of the schedule's row places the chunks: "loop" (Megatron's: with
V virtual stages per rank, rank r holds stages r, r + p, r + 2p, ..., so an activation travels round the
ring V times) or "v" (two stages per rank, down and back up: rank r holds r and 2p - 1 - r). A hand-off
between two stages on one rank (the tip of the V, p - 1 -> p) is no message: no SEND / RECV is derived
for it, and the engine passes the activation and its gradient over locally.

    >>> print(format_schedule(build("1f1b", pp=2, microbatches=3)))   # doctest: +SKIP

`simulate.py` checks a schedule (dependencies, no deadlock) and times it; `engine.py` runs it.
"""
from __future__ import annotations

from dataclasses import dataclass

from shardlab.parallel.pp import registry
from shardlab.parallel.pp.registry import OWN as SCHEDULES  # the own schedules (registry.py lists every one)

COMPUTE = ("F", "B", "I", "W")  # I = backward for the input only, W = backward for the weights only


@dataclass(frozen=True)
class Instr:
    op: str  # F B I W | SEND_F RECV_F SEND_B RECV_B | REDUCE STEP
    stage: int = -1  # the (virtual) stage this instruction belongs to
    mb: int = -1  # microbatch
    peer: int = -1  # the stage at the other end of a send / recv

    def __str__(self) -> str:
        if self.op in COMPUTE:
            return f"{self.op}{self.mb}@s{self.stage}"
        if self.op.startswith(("SEND", "RECV")):
            arrow = "->" if self.op.startswith("SEND") else "<-"
            return f"{self.op}{self.mb}@s{self.stage}{arrow}s{self.peer}"
        return self.op


@dataclass(frozen=True)
class Schedule:
    name: str
    pp: int  # pipeline ranks
    microbatches: int
    virtual: int  # stages per rank
    ranks: tuple[tuple[Instr, ...], ...]  # ranks[r] = the instructions of pipeline rank r, in order
    # Where stages live: "loop" (Megatron: rank r holds r, r + p, ...) or "v" (two stages per rank, down
    # and back up: rank r holds r and 2p - 1 - r, so rank 0 holds the first and the last stage; the
    # layout of ZB-V and DualPipeV).
    layout: str = "loop"

    @property
    def n_stages(self) -> int:
        return self.pp * self.virtual

    def rank_of(self, stage: int) -> int:
        if self.layout == "v":
            return stage if stage < self.pp else 2 * self.pp - 1 - stage
        return stage % self.pp

    def stages_of(self, rank: int) -> list[int]:
        return stages_on(self.layout, self.pp, self.virtual, rank)

    def local(self, a: int, b: int) -> bool:
        """Whether stages a and b live on one rank (a hand-off between them is no message)."""
        return self.rank_of(a) == self.rank_of(b)


def stages_on(layout: str, pp: int, virtual: int, rank: int) -> list[int]:
    """The stages `rank` holds, its chunks in order (see the module doc)."""
    if layout == "v":
        return [rank, 2 * pp - 1 - rank]
    return [c * pp + rank for c in range(virtual)]


class ScheduleError(ValueError):
    """An impossible schedule request; the message is one line meant for the user."""


def min_microbatches(name: str, pp: int) -> int:
    """The fewest microbatches a schedule accepts (its row's min_microbatches). GPipe runs with any; 1F1B
    and ZB-H1 with fewer than p microbatches degenerate into GPipe with a longer bubble, so they ask for at
    least p; interleaved needs a multiple of p (its forward order walks microbatches in groups of p)."""
    return registry.least_microbatches(name, pp)


def check(name: str, pp: int, microbatches: int, virtual: int = 1, n_layer: int | None = None) -> None:
    if name not in SCHEDULES:
        raise ScheduleError(f"parallel.pp_schedule={name!r}: must be one of {', '.join(SCHEDULES)}")
    if pp < 1 or microbatches < 1 or virtual < 1:
        raise ScheduleError(f"pp={pp}, microbatches={microbatches}, virtual={virtual}: each must be at least 1")
    row = registry.spec(name)
    if virtual > 1 and not registry.many_stages(name):
        several = " or ".join(n for n in SCHEDULES if registry.many_stages(n))
        raise ScheduleError(f"parallel.pp_virtual={virtual} needs parallel.pp_schedule={several}")
    need = min_microbatches(name, pp)
    if microbatches < need:
        raise ScheduleError(f"parallel.pp_schedule={name} at pp={pp} needs at least {need} microbatches "
                            f"(parallel.pp_microbatches={microbatches}); use more, or pp_schedule="
                            f"{next(n for n in SCHEDULES if registry.least_microbatches(n, pp) == 1)}")
    if row.microbatch_multiple == "p" and microbatches % pp:
        raise ScheduleError(f"parallel.pp_schedule={name} needs parallel.pp_microbatches to be a multiple "
                            f"of pp={pp} (got {microbatches})")
    if n_layer is not None and pp * virtual > n_layer:
        raise ScheduleError(f"{pp * virtual} pipeline stages (pp={pp} x pp_virtual={virtual}) but the model has "
                            f"{n_layer} layers: use fewer stages or more layers")


# --- compute orders: (op, stage, mb) per rank ----------------------------------------------------------
# A compute order names the rank's stages by chunk (0: its first stage, 1: its second, ...); `build` places
# the chunks with the row's layout.
def _gpipe(pp: int, m: int, r: int, v: int = 1) -> list[tuple]:
    """All forwards, then all backwards: simple, but every microbatch's activations are held at once. On
    several chunks (the V layout) the forwards go down the chunks and the backwards back up."""
    return ([("F", c, i) for c in range(v) for i in range(m)]
            + [("B", c, i) for c in reversed(range(v)) for i in range(m)])


def _one_f_one_b(pp: int, m: int, r: int) -> list[tuple]:
    """p - r - 1 warm-up forwards, then alternate one forward and one backward, then drain. A rank never
    holds more than p - r microbatches' activations (PipeDream-Flush / Megatron's 1F1B)."""
    warm = min(pp - r - 1, m)
    out = [("F", 0, i) for i in range(warm)]
    for i in range(m - warm):
        out += [("F", 0, warm + i), ("B", 0, i)]
    return out + [("B", 0, i) for i in range(m - warm, m)]


def _interleaved(pp: int, m: int, r: int, v: int) -> list[tuple]:
    """Megatron's interleaved 1F1B: forwards walk microbatches in groups of p through the V chunks
    (chunk 0 of mb 0..p-1, chunk 1 of mb 0..p-1, ...); backwards walk the chunks in reverse. The bubble
    shrinks by V because each stage is 1/V of the work; the price is V times the point-to-point traffic."""
    total = m * v

    def f(k):  # k-th forward of this rank -> (chunk, microbatch)
        return (k % (pp * v)) // pp, (k // (pp * v)) * pp + k % pp

    def b(k):
        c, mb = f(k)
        return v - 1 - c, mb

    warm = min((pp - r - 1) * 2 + (v - 1) * pp, total)
    out = []
    for k in range(warm):
        out.append(("F", *f(k)))
    for k in range(total - warm):
        out += [("F", *f(warm + k)), ("B", *b(k))]
    for k in range(total - warm, total):
        out.append(("B", *b(k)))
    return out


def _zero_bubble_h1(pp: int, m: int, r: int) -> list[tuple]:
    """ZB-H1 (Qi et al., 2023): 1F1B with each backward split into I (gradient of the stage's input, on
    the critical path: the previous stage waits for it) and W (gradient of the weights, which nobody
    waits for). Rank r runs its W's r microbatches late: the I's then reach the first stage sooner in
    the drain, and the postponed W's fill the time 1F1B spent waiting. Rank r holds at most
    (p - r) + r = p microbatches, 1F1B's peak; the bubble falls to a third of 1F1B's when F, I and W take
    equal time."""
    warm = min(pp - r - 1, m)
    lag = r
    out = [("F", 0, i) for i in range(warm)]
    w_next = 0
    for i in range(m - warm):
        out += [("F", 0, warm + i), ("I", 0, i)]
        if i >= lag:
            out.append(("W", 0, w_next))
            w_next += 1
    for i in range(m - warm, m):
        out.append(("I", 0, i))
        out.append(("W", 0, w_next))
        w_next += 1
    return out + [("W", 0, i) for i in range(w_next, m)]


def _zero_bubble_v(pp: int, m: int, r: int, v: int = 2) -> list[tuple]:
    """ZB-V (Qi et al., 2024, "Pipeline Parallelism with Controllable Memory", section 6), on the V
    placement: chunk 0 is stage r (down), chunk 1 stage 2p-1-r (back up). Warm-up: 2(p-r)-1 forwards of
    chunk 0, then r pairs of (chunk 1, chunk 0) forwards, then p-r rounds of chunk 1's F, I, W; the steady
    state alternates F, I, W on chunk 0 and on chunk 1; the cool-down runs the I's first (chunk 0 and 1
    interleaved, then chunk 0's with their W's) and the remaining W's last. With F = I = W the bubble is
    about zero once m >= 2p, at 1F1B's peak activation memory (2p chunks of half a stage on rank 0). The
    program written as torch.distributed.pipelining's ScheduleZBVZeroBubble writes it: planned for at
    least 2p - 1 microbatches, the ones beyond m dropped."""
    n = max(2 * pp - 1, m)
    out: list[tuple] = []
    cnt = {"F0": 0, "F1": 0, "B0": 0, "B1": 0}

    def f(c):
        out.append(("F", c, cnt[f"F{c}"]))
        cnt[f"F{c}"] += 1

    def iw(c, w=True):
        out.append(("I", c, cnt[f"B{c}"]))
        if w:
            out.append(("W", c, cnt[f"B{c}"]))
        cnt[f"B{c}"] += 1

    for _ in range(2 * (pp - r) - 1):
        f(0)
    for _ in range(r):
        f(1), f(0)
    for _ in range(pp - r):
        f(1), iw(1)
    while cnt["F1"] < cnt["F0"] or cnt["F0"] < n:
        if cnt["F0"] < n:
            f(0)
        iw(0)
        f(1), iw(1)
    w0, w1 = cnt["B0"], cnt["B1"]
    for _ in range(r):
        iw(0, w=False), iw(1, w=False)
    for _ in range(pp - r):
        iw(0, w=False)
        out.append(("W", 0, w0))
        w0 += 1
    out += [("W", 1, i) for i in range(w1, cnt["B1"])] + [("W", 0, i) for i in range(w0, cnt["B0"])]
    return [a for a in out if a[2] < m]


def _dualpipe_v(pp: int, m: int, r: int, v: int = 2) -> list[tuple]:
    """DualPipeV (DeepSeek-V3's DualPipe folded onto the V placement, as DeepSeek's DualPipe repository
    and torch.distributed.pipelining's ScheduleDualPipeV write it; needs m >= 2p). Chunk 0 is stage r,
    chunk 1 stage 2p-1-r. After a warm-up of forwards, the main phase pairs a forward of one chunk with a
    full backward of the other (F0 with B1, F1 with B0: in DualPipe the two run overlapped, so one's
    all-to-all hides under the other's compute; here they run one after the other, which keeps the order
    and the bubble's shape), then the drain splits the second half of the backwards into I and W and fills
    the tail with the W's. The pairs are the paper's; the overlap itself is not done here."""
    out: list[tuple] = []
    cnt: dict[tuple, int] = {}  # (chunk, F | I | W) -> next microbatch
    weights: list[tuple] = []  # (chunk, mb) whose W is pending, oldest first

    def act(c, op):
        key = (c, "I" if op in ("B", "I") else op)
        i = cnt.get(key, 0)
        out.append((op, c, i))
        cnt[key] = i + 1
        if op == "I":
            weights.append((c, i))

    def w_pending():
        if weights:
            c, i = weights.pop(0)
            out.append(("W", c, i))

    for _ in range((pp - r - 1) * 2):
        act(0, "F")
    for _ in range(r + 1):
        act(0, "F"), act(1, "F")
    for _ in range(pp - r - 1):
        act(1, "I"), w_pending(), act(1, "F")
    for _ in range(m - 2 * pp + r + 1):
        act(0, "F"), act(1, "B")
        act(1, "F"), act(0, "B")
    for _ in range(pp - r - 1):
        act(1, "B")
        act(1, "F"), act(0, "B")
    zb = False
    for i in range(r + 1):
        if i == (r + 1) // 2 and r % 2 == 1:
            zb = True
        act(1, "I" if zb else "B")
        if i == (r + 1) // 2 and r % 2 == 0:
            zb = True
        act(0, "I" if zb else "B")
    for _ in range(pp - r - 1):
        w_pending()
        act(0, "I" if zb else "B")
    for _ in range(r + 1):
        w_pending()
    return out


# --- communication derived from the compute order ------------------------------------------------------
def _with_comm(order: list[tuple], n_stages: int, remote) -> list[Instr]:
    """The compute order (stages placed) with its messages; `remote(a, b)`: stages a and b are on two
    ranks (a hand-off on one rank is local: no message, see the module doc)."""
    out: list[Instr] = []
    for op, s, i in order:
        if op == "F":
            if s > 0 and remote(s, s - 1):
                out.append(Instr("RECV_F", s, i, s - 1))
            out.append(Instr("F", s, i))
            if s < n_stages - 1 and remote(s, s + 1):
                out.append(Instr("SEND_F", s, i, s + 1))
        elif op in ("B", "I"):
            if s < n_stages - 1 and remote(s, s + 1):
                out.append(Instr("RECV_B", s, i, s + 1))
            out.append(Instr(op, s, i))
            if s > 0 and remote(s, s - 1):
                out.append(Instr("SEND_B", s, i, s - 1))
        else:
            out.append(Instr(op, s, i))
    return out + [Instr("REDUCE"), Instr("STEP")]


# The compute order of each own schedule (registry.py lists it; communication is derived from the order):
# (pp, microbatches, rank, chunks) -> the rank's (op F/B/I/W, chunk, microbatch) in order
_ORDERS = {
    "gpipe": _gpipe,
    "1f1b": lambda p, m, r, v: _one_f_one_b(p, m, r),
    "interleaved": _interleaved,
    "zb": lambda p, m, r, v: _zero_bubble_h1(p, m, r),
    "zbv": _zero_bubble_v,
    "dualpipev": _dualpipe_v,
}


def build(name: str, pp: int, microbatches: int, virtual: int = 1, layout: str | None = None) -> Schedule:
    """The own schedule `name` as data; `layout` (default: its row's) places its chunks on the ranks: a
    V holds two per rank whatever `virtual` says."""
    if layout is None:
        layout = registry.spec(name).layout if name in registry.SPECS else "loop"
    check(name, pp, microbatches, 1 if layout == "v" else virtual)
    v = 2 if layout == "v" else virtual if registry.many_stages(name) else 1
    shape = Schedule(name, pp, microbatches, v, (), layout)  # the placement, before the instructions
    ranks = []
    for r in range(pp):
        mine = shape.stages_of(r)
        order = [(op, mine[c], i) for op, c, i in _ORDERS[name](pp, microbatches, r, v)]
        ranks.append(tuple(_with_comm(order, pp * v, lambda a, b: not shape.local(a, b))))
    return Schedule(name, pp, microbatches, v, tuple(ranks), layout)


def analytic_bubble(name: str, pp: int, microbatches: int, virtual: int = 1) -> float:
    """The bubble as a fraction of the step (idle ÷ total), equal stage times, free communication: the
    closed form of the schedule's row (registry.analytic_bubble); an error where it has none."""
    got = registry.analytic_bubble(name, pp, microbatches, virtual) if name in registry.SPECS else None
    if got is None:
        raise ScheduleError(f"no analytic bubble for schedule {name!r}")
    return got


def format_schedule(schedule: Schedule) -> str:
    """The instruction lists, one line per rank (what the engine will run)."""
    lines = [f"{schedule.name}: pp={schedule.pp}, microbatches={schedule.microbatches}, "
             f"virtual={schedule.virtual}"]
    for r, instrs in enumerate(schedule.ranks):
        lines.append(f"rank {r}: " + " ".join(str(i) for i in instrs))
    return "\n".join(lines)
