"""Bucket size sweep (seed 000 Q16): small buckets start communicating earlier but pay a latency per
call; big buckets use the link better but wait for more gradients and leave a longer exposed tail.

Setup: world 2, traced, fixed model, init, data, microbatch and global batch; `parallel.bucket_mb`
varies, alternated round by round. Reported per size: step time (median, min-max over the
post-warm-up steps), collectives per step, exposed communication and overlap % (`shardlab trace`).
"""
from __future__ import annotations

from pathlib import Path

from shardlab.bench import common


def run(out: Path, quick: bool) -> dict:
    sizes = (0.05, 0.25, 1.0, 25.0) if quick else (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 25.0)
    steps, rounds, mb = (8, 1, 8) if quick else (20, 2, 8)
    strategy = common.own_or_native_ddp()
    base = common.BASE + common.model_overrides(quick) + [f"train.steps={steps}", f"train.micro_batch={mb}",
                                                         f"parallel.strategy={strategy}", "trace.enabled=true"]
    jobs = [{"name": str(s), "out": out / "runs" / f"bucket{s}-r{r}", "overrides": base + [f"parallel.bucket_mb={s}", f"parallel.first_bucket_mb={s}", "parallel.last_bucket_mb=0"]}
            for r in range(rounds) for s in sizes]
    runs = common.run_jobs(jobs, 2, out / "runs")
    rows = []
    for s in sizes:
        rs = [x for x in runs if x["name"] == str(s)]
        calls = rs[0]["summary"]["comm"]["calls_per_step"]
        grad_calls = calls.get("all_reduce", 0) + calls.get("reduce_scatter", 0)
        rows.append({"bucket_mb": s, "step_time_s": common.stats([t for x in rs for t in common.step_times(x)]),
                     "collectives_per_step": grad_calls,
                     "exposed_comm_s": common.stats([x["summary"].get("exposed_comm_s") for x in rs]),
                     "overlap_pct": common.stats([x["summary"].get("overlap_pct") for x in rs]),
                     "comm_s": common.stats([x["summary"].get("comm_s") for x in rs])})
    best = min(rows, key=lambda r: r["step_time_s"]["median"])
    figures = {"best_bucket_mb": best["bucket_mb"],
               "step_time_ratio_smallest_vs_best": rows[0]["step_time_s"]["median"] / best["step_time_s"]["median"],
               "step_time_ratio_largest_vs_best": rows[-1]["step_time_s"]["median"] / best["step_time_s"]["median"],
               "ranks_consistent": common.consistent(runs)}
    doc = common.write_results(out, "buckets", figures, rows)
    _plot(out, rows)
    params = runs[0]["summary"]["params"]
    table = common.md_table(
        ["bucket MB", "step time ms, median (min–max)", "collectives/step", "exposed comm ms", "overlap %", "comm ms"],
        [[r["bucket_mb"], common.fmt_stats(r["step_time_s"], 1e3, 1), r["collectives_per_step"],
          common.fmt_stats(r["exposed_comm_s"], 1e3, 1), common.fmt_stats(r["overlap_pct"], 1, 1),
          common.fmt_stats(r["comm_s"], 1e3, 1)] for r in rows])
    common.write_report(out, "Bucket size sweep", [
        f"Strategy `{strategy}`, world 2, model with {params:,} parameters ({params * 4 / 2**20:.1f} MiB of fp32 "
        f"gradients), microbatch {mb}, seq 128, {steps} steps per run (warm-up excluded), {rounds} round(s) "
        f"alternating the sizes{' (--quick)' if quick else ''}. Exposed comm and overlap are medians over steps "
        "of the traced runs; min–max are over runs.",
        table, "![buckets](buckets.png)",
        f"Fastest: {best['bucket_mb']} MB. Read it with the trace: `shardlab trace {out}/runs/bucket{best['bucket_mb']}-r0` "
        "shows each bucket's ready → launch → done. If the summed all-reduce time stays put while the step gets "
        "faster, more of it was hidden behind backward (overlap); if the summed time falls but the step does not, "
        "the saved time was already hidden.",
        "Caveat: on 2 cores gloo's communication thread competes with the backward pass for a core, so overlap "
        "here costs compute; on GPUs communication runs on its own engine.",
        f"Replicas identical (`ranks_consistent`): {figures['ranks_consistent']}.",
    ])
    return doc


def _plot(out: Path, rows: list[dict]) -> None:
    plt = common.pyplot()
    x = [r["bucket_mb"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    med = [r["step_time_s"]["median"] * 1e3 for r in rows]
    lo = [m - r["step_time_s"]["min"] * 1e3 for m, r in zip(med, rows)]
    hi = [r["step_time_s"]["max"] * 1e3 - m for m, r in zip(med, rows)]
    a.errorbar(x, med, yerr=[lo, hi], fmt="o-", capsize=3, label="step time")
    a.plot(x, [(r["exposed_comm_s"]["median"] or 0) * 1e3 for r in rows], "s--", label="exposed comm")
    a.set(xscale="log", xlabel="bucket size (MB)", ylabel="ms", title="step time and exposed communication")
    a.legend(fontsize=8)
    b.plot(x, [r["overlap_pct"]["median"] or 0 for r in rows], "o-", color="tab:green")
    b.set(xscale="log", xlabel="bucket size (MB)", ylabel="overlap %", ylim=(0, 100), title="overlap")
    b2 = b.twinx()
    b2.plot(x, [r["collectives_per_step"] for r in rows], "x:", color="tab:red")
    b2.set_ylabel("collectives per step", color="tab:red")
    fig.tight_layout()
    fig.savefig(out / "buckets.png", dpi=110)
    plt.close(fig)
