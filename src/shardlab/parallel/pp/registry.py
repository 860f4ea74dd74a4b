"""Every pipeline schedule shardlab runs, defined once, with every property the rest of shardlab asks of it.
Config validation, the composition, the engine, the torch runner, the trace view, the planner, the bench
and the CLI's help all derive their lists and rules from this table (nothing outside parallel/pp/ spells a
schedule's name), so a new schedule is one row here plus its compute order (own: schedule.py) or its torch
class.

Pure data (no torch import): `shardlab.config` reads it at start-up.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScheduleSpec:
    name: str  # the value of parallel.pp_schedule
    runner: str  # "own": built as data by schedule.py, run by engine.py; "torch": torch.distributed.pipelining;
    # "file": read from a table (table.py), run by engine.py
    order: str  # the own schedule whose compute order and checks it uses (itself for own schedules)
    layout: str = "loop"  # "loop" (rank r holds r, r + p, ...) or "v" (two stages per rank, down and back up)
    # stages per rank it accepts: (least, most); most None: no bound
    virtual: tuple[int, int | None] = (1, 1)
    torch_class: str = ""  # the torch.distributed.pipelining class (runner "torch")
    # the bubble's closed form (equal stage times, free communication): 1F1B's idle (p-1) stage-steps divided
    # by s against m microbatches, (p-1)/s / (m + (p-1)/s): "1" (GPipe, 1F1B), "v" (interleaved: stages
    # are v times shorter), "3" (ZB-H1 with F = I = W), "6" (ZB-V and DualPipeV without the overlap, F = I = W
    # per chunk: p - 1 chunk-forwards idle against 6m busy from m = (3p-1)/2 on; below, the V's warm-up is not
    # filled and 2(2p-1-m) are idle, simulate.py's figure at every m); "" = no closed form here
    bubble: str = ""
    planned_as: str = "1f1b"  # how the planner models it (a row whose planned_as is itself)
    zero_bubble: bool = False  # splits backward into input and weight gradients (I / W)
    min_microbatches: str = "p"  # the fewest microbatches it takes: "1", "p" or "2p" (one per stage of a V)
    microbatch_multiple: str = ""  # "p": the microbatches must be a multiple of pp
    # activations the first stage holds at peak, in microbatches through its layers (the planner's memory):
    # "m" (every one at once), "min(m,p)", or "p(1+(p-1)/(pv))" (interleaved; min(m,p) at v = 1)
    in_flight: str = "min(m,p)"
    refuses_dp: tuple[tuple[str, str], ...] = ()  # (dp layer, why it cannot run under this schedule)
    search: int = 0  # the planner's search tries it at this many stages per rank (0: it does not)
    note: str = ""  # said beside its name in parallel.pp_schedule's help


DEFAULT = "1f1b"  # parallel.pp_schedule's default, and the planner's without a pipeline
_FSDP2_SPLIT = ("torch-fsdp2", "FSDP2 reduces gradients in hooks of its modules' backward, which {name}'s "
                "weight-gradient halves run outside of; use ddp, zero1, zero2 or zero3, or another schedule")
_ROWS = (
    ScheduleSpec("gpipe", "own", "gpipe", bubble="1", planned_as="gpipe", min_microbatches="1", in_flight="m"),
    ScheduleSpec("1f1b", "own", "1f1b", bubble="1", search=1),
    ScheduleSpec("interleaved", "own", "interleaved", virtual=(1, None), bubble="v", planned_as="interleaved",
                 microbatch_multiple="p", in_flight="p(1+(p-1)/(pv))", search=2),
    ScheduleSpec("zb", "own", "zb", bubble="3", planned_as="zb", zero_bubble=True, refuses_dp=(_FSDP2_SPLIT,),
                 search=1, note="ZB-H1"),
    # the V placement (rank r holds stages r and 2p-1-r), split backward
    # planned as themselves: two stages per rank (v = 2) and their own bubble, (p-1)/(6m+p-1)
    ScheduleSpec("zbv", "own", "zbv", layout="v", virtual=(2, 2), bubble="6", planned_as="zbv", zero_bubble=True,
                 min_microbatches="1", refuses_dp=(_FSDP2_SPLIT,), note="ZB-V"),
    ScheduleSpec("dualpipev", "own", "dualpipev", layout="v", virtual=(2, 2), bubble="6", planned_as="dualpipev",
                 zero_bubble=True, min_microbatches="2p", refuses_dp=(_FSDP2_SPLIT,), note="DualPipeV"),
    # a schedule written as a table of actions per rank (parallel.pp_schedule=file:PATH, table.py), run by the
    # own engine on the placement the table gives (loop or V)
    ScheduleSpec("file:", "file", "file:", virtual=(1, None), min_microbatches="1",
                 note="file:PATH: a table of actions per rank, docs/pipeline.md"),
    ScheduleSpec("torch-gpipe", "torch", "gpipe", torch_class="ScheduleGPipe", bubble="1", planned_as="gpipe",
                 min_microbatches="1", in_flight="m"),
    ScheduleSpec("torch-1f1b", "torch", "1f1b", torch_class="Schedule1F1B", bubble="1"),
    ScheduleSpec("torch-interleaved", "torch", "interleaved", virtual=(1, None),
                 torch_class="ScheduleInterleaved1F1B", bubble="v", planned_as="interleaved",
                 microbatch_multiple="p", in_flight="p(1+(p-1)/(pv))"),
    ScheduleSpec("torch-zb", "torch", "interleaved", virtual=(2, None), torch_class="ScheduleInterleavedZeroBubble",
                 zero_bubble=True, microbatch_multiple="p"),
    # every forward of a stage, then the next stage's (breadth first)
    ScheduleSpec("torch-looped-bfs", "torch", "interleaved", virtual=(2, None), torch_class="ScheduleLoopedBFS",
                 microbatch_multiple="p"),
    # torch's ZB-V and DualPipeV on the own rows' V placement (torch's stage_index_to_group_rank, style "v"):
    # their programs are the own ones action for action (tested), so the own order checks them
    ScheduleSpec("torch-zbv", "torch", "zbv", layout="v", virtual=(2, 2), torch_class="ScheduleZBVZeroBubble",
                 zero_bubble=True, min_microbatches="1", refuses_dp=(_FSDP2_SPLIT,)),
    ScheduleSpec("torch-dualpipev", "torch", "dualpipev", layout="v", virtual=(2, 2),
                 torch_class="ScheduleDualPipeV", zero_bubble=True, min_microbatches="2p",
                 refuses_dp=(_FSDP2_SPLIT,)),
)
SPECS: dict[str, ScheduleSpec] = {s.name: s for s in _ROWS}
NAMES = tuple(SPECS)  # every value parallel.pp_schedule accepts
OWN = tuple(n for n, s in SPECS.items() if s.runner == "own")  # built and run by shardlab itself
TORCH = tuple(n for n, s in SPECS.items() if s.runner == "torch")
PLANNED = tuple(dict.fromkeys(s.planned_as for s in _ROWS))  # the schedules the planner models
# what the planner's search tries, (name, stages per rank), the fewest stages per rank first
SEARCHED = tuple(sorted(((s.name, s.search) for s in _ROWS if s.search), key=lambda nv: nv[1]))


FILE = "file:"  # parallel.pp_schedule=file:PATH picks the row "file:"


def row_name(value: str) -> str:
    """The row a value of parallel.pp_schedule picks: file:PATH is the row "file:"."""
    return FILE if str(value).startswith(FILE) else value


def spec(name: str) -> ScheduleSpec:
    return SPECS[row_name(name)]


def many_stages(name: str) -> bool:
    """Whether the schedule can hold several stages per rank."""
    return spec(name).virtual[1] != 1


def least_microbatches(name: str, pp: int) -> int:
    """The fewest microbatches the schedule takes at `pp` ranks."""
    return {"1": 1, "p": pp, "2p": 2 * pp}[spec(name).min_microbatches]


def bubble_divisor(name: str, virtual: int = 1) -> int | None:
    """What 1F1B's bubble is divided by under this schedule (see ScheduleSpec.bubble); None: no closed form."""
    s = spec(name).bubble
    return None if not s else (virtual if s == "v" else int(s))


def analytic_bubble(name: str, pp: int, microbatches: int, virtual: int = 1) -> float | None:
    """The bubble as a fraction of the step (idle ÷ total), equal stage times, free communication:
    GPipe and 1F1B (p-1)/(m+p-1); interleaved ((p-1)/v)/(m+(p-1)/v); ZB-H1 with F = I = W:
    (p-1)/(3m+p-1), a third of 1F1B's idle time; ZB-V and DualPipeV with F = I = W per chunk: I/(6m+I),
    I = max(p-1, 2(2p-1-m)) chunk-steps idle per rank ((p-1)/(6m+p-1) from m = (3p-1)/2). None: no closed form."""
    p, m, s = pp, microbatches, spec(name).bubble
    if not s:
        return None
    if s == "v":
        return ((p - 1) / virtual) / (m + (p - 1) / virtual)
    if s == "6":  # the V: a warm-up of 2p - 1 chunk forwards that few microbatches leave unfilled
        idle = max(p - 1, 2 * (2 * p - 1 - m))
        return idle / (6 * m + idle)
    return (p - 1) / (int(s) * m + p - 1)


def in_flight(name: str, pp: int, microbatches: int, virtual: int = 1) -> float:
    """Microbatches whose activations the first stage holds at peak, in units of one microbatch through
    its layers (see ScheduleSpec.in_flight)."""
    p, m, f = pp, microbatches, spec(name).in_flight
    if f == "m":
        return float(m)
    if f == "p(1+(p-1)/(pv))" and virtual > 1:
        return p * (1 + (p - 1) / (p * virtual))
    return float(min(m, p))
