"""`trace.profile=A-B`: torch.profiler over training steps A..B (0-based, inclusive), as torchtitan's
`profiling.enable_profiling` does, to see where a step's time goes kernel by kernel.

Each rank writes RUN/profile/rank{R}_top.txt (the operators and kernels with the most self time on the
device, or on the CPU without one, over the profiled steps, per step) and RUN/profile/rank{R}.json (a
Chrome trace for chrome://tracing or Perfetto). The profiled steps are slower than the others (the
profiler records every launch), so the trainer leaves them out of the step times it reports.
"""
from __future__ import annotations

from pathlib import Path

from shardlab.errors import ConfigError  # no torch at import: config validation parses trace.profile

TOP = 25  # rows of the top table


def parse_steps(spec: str) -> tuple[int, int] | None:
    """'A-B' or 'A' -> (A, B); '' -> None. ConfigError on anything else."""
    if not spec:
        return None
    try:
        a, _, b = spec.partition("-")
        first, last = int(a), int(b or a)
    except ValueError:
        raise ConfigError(f"trace.profile={spec!r}: give the steps to profile as A-B (e.g. 10-12)") from None
    if first < 0 or last < first:
        raise ConfigError(f"trace.profile={spec!r}: needs 0 <= A <= B (steps A..B are profiled)")
    return first, last


class StepProfiler:
    """Starts torch.profiler before step A, stops after step B and writes the tables; idle otherwise."""

    def __init__(self, spec: str, run_dir: Path, rank: int, device):
        self.steps = parse_steps(spec)
        self.dir, self.rank, self.device = Path(run_dir) / "profile", rank, device
        self.prof = None

    def active(self, step: int) -> bool:
        return self.steps is not None and self.steps[0] <= step <= self.steps[1]

    def before_step(self, step: int) -> bool:
        """Start at the first profiled step; True while `step` is profiled."""
        if not self.active(step):
            return False
        if self.prof is None:
            import torch

            acts = [torch.profiler.ProfilerActivity.CPU]
            if self.device.type == "cuda":
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            self.prof = torch.profiler.profile(activities=acts)
            self.prof.__enter__()
        return True

    def after_step(self, step: int) -> None:
        if self.prof is not None and (step >= self.steps[1]):
            self._write(step - self.steps[0] + 1)

    def close(self) -> None:
        """The run ended inside the window (fewer steps than B): write what was recorded."""
        if self.prof is not None:
            self._write(None)

    def _write(self, n_steps: int | None) -> None:
        prof, self.prof = self.prof, None
        prof.__exit__(None, None, None)
        self.dir.mkdir(parents=True, exist_ok=True)
        on_device = self.device.type == "cuda"
        key = "self_device_time_total" if on_device else "self_cpu_time_total"
        table = prof.key_averages().table(sort_by=key, row_limit=TOP, max_name_column_width=90)
        head = (f"rank {self.rank}: steps {self.steps[0]}-{self.steps[1]}"
                f"{'' if n_steps is None else f' ({n_steps} steps)'}, sorted by self "
                f"{'device' if on_device else 'CPU'} time (totals over the profiled steps)\n")
        (self.dir / f"rank{self.rank}_top.txt").write_text(head + table + "\n")
        prof.export_chrome_trace(str(self.dir / f"rank{self.rank}.json"))
