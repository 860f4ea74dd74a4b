"""Every pipeline schedule shardlab runs, defined once. Config validation, the composition, the engine, the
torch runner, the trace view, the planner, the bench and the CLI's help all derive their lists from this
table, so a new schedule is one row here plus its compute order (own: schedule.py) or its torch class.

Pure data (no torch import): `shardlab.config` reads it at start-up.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScheduleSpec:
    name: str  # the value of parallel.pp_schedule
    runner: str  # "own": built as data by schedule.py, run by engine.py; "torch": torch.distributed.pipelining
    order: str  # the own schedule whose stage placement it uses (itself for own schedules)
    layout: str = "loop"  # "loop" (rank r holds r, r + p, ...) or "v" (two stages per rank, down and back up)
    virtual: str = "any"  # stages per rank it needs: "any", "many" (>= 2) or "two"
    torch_class: str = ""  # the torch.distributed.pipelining class (runner "torch")
    bubble: str = ""  # the own schedule whose analytic bubble it has ("" = no closed form here)
    planned_as: str = "1f1b"  # how the planner models it (plan/layout.py SCHEDULES)
    zero_bubble: bool = False  # splits backward into input and weight gradients (I / W)


_ROWS = (
    ScheduleSpec("gpipe", "own", "gpipe", bubble="gpipe", planned_as="gpipe"),
    ScheduleSpec("1f1b", "own", "1f1b", bubble="1f1b"),
    ScheduleSpec("interleaved", "own", "interleaved", bubble="interleaved", planned_as="interleaved"),
    ScheduleSpec("zb", "own", "zb", bubble="zb", planned_as="zb", zero_bubble=True),  # ZB-H1
    ScheduleSpec("torch-gpipe", "torch", "gpipe", torch_class="ScheduleGPipe", bubble="gpipe", planned_as="gpipe"),
    ScheduleSpec("torch-1f1b", "torch", "1f1b", torch_class="Schedule1F1B", bubble="1f1b"),
    ScheduleSpec("torch-interleaved", "torch", "interleaved", virtual="many", torch_class="ScheduleInterleaved1F1B",
                 bubble="interleaved", planned_as="interleaved"),
    ScheduleSpec("torch-zb", "torch", "interleaved", virtual="many", torch_class="ScheduleInterleavedZeroBubble",
                 zero_bubble=True),
    # every forward of a stage, then the next stage's (breadth first)
    ScheduleSpec("torch-looped-bfs", "torch", "interleaved", virtual="many", torch_class="ScheduleLoopedBFS"),
    # zero bubble on the V layout: two stages per rank
    ScheduleSpec("torch-zbv", "torch", "interleaved", layout="v", virtual="two", torch_class="ScheduleZBVZeroBubble",
                 zero_bubble=True),
    # DeepSeek's DualPipe on the V layout
    ScheduleSpec("torch-dualpipev", "torch", "interleaved", layout="v", virtual="two",
                 torch_class="ScheduleDualPipeV", zero_bubble=True),
)
SPECS: dict[str, ScheduleSpec] = {s.name: s for s in _ROWS}
NAMES = tuple(SPECS)  # every value parallel.pp_schedule accepts
OWN = tuple(n for n, s in SPECS.items() if s.runner == "own")  # built and run by shardlab itself
TORCH = tuple(n for n, s in SPECS.items() if s.runner == "torch")
PLANNED = tuple(dict.fromkeys(s.planned_as for s in _ROWS))  # the schedules the planner models


def spec(name: str) -> ScheduleSpec:
    return SPECS[name]
