"""Pipeline schedules as data: for every pipeline rank, the list of instructions it runs in one step.

A schedule is built in two passes. First the *compute order* of each rank: which stage's forward (F),
backward (B) — or, for zero-bubble, backward-input (I) and backward-weight (W) — of which microbatch,
in what order. That order is all that distinguishes GPipe, 1F1B, interleaved 1F1B and ZB-H1. Then the
communication is derived from it: before a stage's forward it receives the activation from the stage
before (RECV_F), after it sends its output on (SEND_F); before a backward it receives the output's
gradient from the stage after (RECV_B), after it sends the input's gradient back (SEND_B). Every rank
ends with REDUCE (gradient sync between stages that share a tied parameter, and the data-parallel
layer's last collectives) and STEP.

Stages are numbered 0..S-1 along the model. With V virtual stages per rank (interleaved), rank r holds
stages r, r + p, r + 2p, ... (Megatron's layout), so an activation travels round the ring V times.

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
    # layout of torch's ZB-V and DualPipeV, which shardlab runs through torch only).
    layout: str = "loop"

    @property
    def n_stages(self) -> int:
        return self.pp * self.virtual

    def rank_of(self, stage: int) -> int:
        if self.layout == "v":
            return stage if stage < self.pp else 2 * self.pp - 1 - stage
        return stage % self.pp

    def stages_of(self, rank: int) -> list[int]:
        if self.layout == "v":
            return [rank, 2 * self.pp - 1 - rank]
        return [c * self.pp + rank for c in range(self.virtual)]


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
def _gpipe(pp: int, m: int, r: int) -> list[tuple]:
    """All forwards, then all backwards: simple, but every microbatch's activations are held at once."""
    return [("F", r, i) for i in range(m)] + [("B", r, i) for i in range(m)]


def _one_f_one_b(pp: int, m: int, r: int) -> list[tuple]:
    """p - r - 1 warm-up forwards, then alternate one forward and one backward, then drain. A rank never
    holds more than p - r microbatches' activations (PipeDream-Flush / Megatron's 1F1B)."""
    warm = min(pp - r - 1, m)
    out = [("F", r, i) for i in range(warm)]
    for i in range(m - warm):
        out += [("F", r, warm + i), ("B", r, i)]
    return out + [("B", r, i) for i in range(m - warm, m)]


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
        c, i = f(k)
        out.append(("F", c * pp + r, i))
    for k in range(total - warm):
        c, i = f(warm + k)
        out.append(("F", c * pp + r, i))
        c, i = b(k)
        out.append(("B", c * pp + r, i))
    for k in range(total - warm, total):
        c, i = b(k)
        out.append(("B", c * pp + r, i))
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
    out = [("F", r, i) for i in range(warm)]
    w_next = 0
    for i in range(m - warm):
        out += [("F", r, warm + i), ("I", r, i)]
        if i >= lag:
            out.append(("W", r, w_next))
            w_next += 1
    for i in range(m - warm, m):
        out.append(("I", r, i))
        out.append(("W", r, w_next))
        w_next += 1
    return out + [("W", r, i) for i in range(w_next, m)]


# --- communication derived from the compute order ------------------------------------------------------
def _with_comm(order: list[tuple], n_stages: int) -> list[Instr]:
    out: list[Instr] = []
    for op, s, i in order:
        if op == "F":
            if s > 0:
                out.append(Instr("RECV_F", s, i, s - 1))
            out.append(Instr("F", s, i))
            if s < n_stages - 1:
                out.append(Instr("SEND_F", s, i, s + 1))
        elif op in ("B", "I"):
            if s < n_stages - 1:
                out.append(Instr("RECV_B", s, i, s + 1))
            out.append(Instr(op, s, i))
            if s > 0:
                out.append(Instr("SEND_B", s, i, s - 1))
        else:
            out.append(Instr(op, s, i))
    return out + [Instr("REDUCE"), Instr("STEP")]


# The compute order of each own schedule (registry.py lists it; communication is derived from the order):
# (pp, microbatches, rank, virtual) -> the rank's F/B/I/W instructions in order
_ORDERS = {
    "gpipe": lambda p, m, r, v: _gpipe(p, m, r),
    "1f1b": lambda p, m, r, v: _one_f_one_b(p, m, r),
    "interleaved": _interleaved,
    "zb": lambda p, m, r, v: _zero_bubble_h1(p, m, r),
}


def build(name: str, pp: int, microbatches: int, virtual: int = 1, layout: str | None = None) -> Schedule:
    """The own schedule `name` as data; `layout` (default: its row's) places its stages on the ranks."""
    check(name, pp, microbatches, virtual)
    v = virtual if registry.many_stages(name) else 1
    ranks = []
    for r in range(pp):
        order = _ORDERS[name](pp, microbatches, r, v)
        ranks.append(tuple(_with_comm(order, pp * v)))
    return Schedule(name, pp, microbatches, v, tuple(ranks), layout or registry.spec(name).layout)


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
