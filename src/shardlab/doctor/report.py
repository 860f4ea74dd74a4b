"""The words of an anomaly report: the one paragraph a user reads when a step goes non-finite (what was replayed,
where the first non-finite value appeared, what the run does next, where the details are). The Doctor
(core.py) builds the report's data; this module only phrases it."""
from __future__ import annotations

from pathlib import Path


def summarize(report: dict, run_dir: Path) -> str:
    """The one-paragraph human summary of an anomaly report."""
    step, ranks = report["step"], report["ranks"]
    parts = [f"ANOMALY at step {step}: {report['reason']}."]
    for r in ranks:
        e = report["per_rank"].get(str(r), {})
        loc = e.get("localisation")
        if not loc:
            continue
        samples = ", ".join(map(str, loc.get("sample_indices", [])[:8]))
        if loc["found"] and loc["module"]:
            parts.append(f"Replaying rank {r}'s microbatch {loc['micro']} (samples {samples}) on a single-device "
                         f"replica: the first non-finite value appears in the {loc['where']} of module "
                         f"{loc['module']}{where_in_pipeline(loc)} (its inputs were finite).")
        elif loc["found"]:
            parts.append(f"Replaying rank {r}'s microbatch {loc['micro']} (samples {samples}): the loss itself "
                         "is non-finite although every module output was finite.")
        elif loc.get("per_sample_loss"):
            worst = max(range(len(loc["per_sample_loss"])), key=lambda i: loc["per_sample_loss"][i])
            idx = loc["sample_indices"][worst] if loc.get("sample_indices") else worst
            parts.append(f"The replay on rank {r} is finite; its worst sample is {idx} "
                         f"(loss {loc['per_sample_loss'][worst]:.4g}).")
        else:
            parts.append(f"The replay on rank {r} did not reproduce it (a transient or distributed fault?).")
    if report.get("fp8_first_nonfinite_scale"):
        parts.append(f"The first float8 layer whose scale went non-finite: {report['fp8_first_nonfinite_scale']} "
                     "(its amax was inf or nan).")
    if report.get("loss_scale"):
        parts.append(f"Loss scale {report['loss_scale']:g}.")
    action = {"stop": "The run stops here (doctor.on_anomaly=stop).",
              "skip": "The step is dropped on every rank (doctor.on_anomaly=skip).",
              "rollback": "Every rank reloads the last checkpoint and skips this batch (doctor.on_anomaly=rollback)."}
    parts.append(action[report["policy"]])
    parts.append(f"Details: {run_dir}/anomalies/step_{step}.json. To tell numerics from a distributed or "
                 f"transient fault: shardlab doctor replay {run_dir} --step {step}.")
    return " ".join(parts)


def where_in_pipeline(loc: dict) -> str:
    """ " (pipeline stage S, on rank R)" for a localisation under a pipeline, else "". """
    return f" (pipeline stage {loc['stage']}, on rank {loc['stage_rank']})" if "stage" in loc else ""
