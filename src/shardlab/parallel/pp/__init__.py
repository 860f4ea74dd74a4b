"""Pipeline parallelism: stages (stage.py), schedules as data (schedule.py), their checker and timer
(simulate.py), the posting plan of their sends and receives (posting.py), the engine that runs them
(engine.py) and the split backward of zero-bubble schedules (zero_bubble.py). See docs/pipeline.md."""
from shardlab.parallel.pp.schedule import SCHEDULES, Instr, Schedule, ScheduleError, analytic_bubble, build, check

__all__ = ["SCHEDULES", "Instr", "Schedule", "ScheduleError", "analytic_bubble", "build", "check"]
