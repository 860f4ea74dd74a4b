"""Gradient compression (seed 000 Q22): casts (fp32, fp16, bf16) and PowerSGD, time, bytes, loss deviation.

Casts change only the collective's dtype (`parallel.comm_dtype`): the model, its parameters and its
compute stay fp32. PowerSGD (`parallel.compress=powersgd`, rank 1 and 4) sends low-rank factors of
each gradient matrix, own (`ddp`, parallel/dp/powersgd.py) and torch's `powerSGD_hook` (`torch-ddp`).
The loss deviation is the largest |loss - fp32 loss| over the logged steps of the same round (same
seed, same data order, so any difference comes from the compression). Own and torch PowerSGD run back
to back in each round (order swapped every other round): `step_ratio_powersgd_own_vs_torch_rR` is the
median over rounds of own / torch median step time.
"""
from __future__ import annotations

from pathlib import Path

from shardlab.bench import common

DTYPES = ("fp32", "fp16", "bf16")
RANKS = (1, 4)
IMPLS = {"own": "ddp", "torch": "torch-ddp"}


def _variants(strategy: str, r: int) -> list[tuple[str, list[str]]]:
    """(name, overrides) of one round; own and torch PowerSGD alternate first and second by round."""
    out = [(d, [f"parallel.strategy={strategy}", f"parallel.comm_dtype={d}"]) for d in DTYPES]
    for rank in RANKS:
        pair = [(f"powersgd-{impl}-r{rank}", [f"parallel.strategy={s}", "parallel.compress=powersgd",
                                             f"parallel.powersgd_rank={rank}"]) for impl, s in IMPLS.items()]
        out += pair if r % 2 == 0 else pair[::-1]
    return out


def _grad_bytes(summary: dict) -> int:
    """Recorded gradient traffic per step and rank: the bucket or PowerSGD all-reduces (not the doctor's
    small consistency check, which every variant pays alike)."""
    tags = summary["comm"].get("bytes_by_tag", {})
    return sum(v for k, v in tags.items() if k.startswith(("bucket", "powersgd_")))


def _analytic_bytes(run: dict, rank: int) -> int:
    """What PowerSGD puts on the wire per step for this run's model: r*(rows+cols) per matrix plus the
    vectors, fp32. For torch's hook, whose collectives comm.py does not see, this is the figure."""
    from shardlab import config
    from shardlab.model.gpt import build_model, resolve_model_config
    from shardlab.parallel.dp.powersgd import PowerSGD

    cfg = config.load(Path(run["dir"]) / "config.toml")
    model = build_model(resolve_model_config(cfg.model, cfg.train.seq_len), seed=0)
    return 4 * PowerSGD([p for p in model.parameters() if p.requires_grad], rank).wire_numel()


def run(out: Path, quick: bool) -> dict:
    steps, rounds = (10, 1) if quick else (40, 2)
    strategy = common.own_or_native_ddp()
    base = common.BASE + common.model_overrides(quick) + [f"train.steps={steps}", "train.micro_batch=8"]
    jobs = [{"name": f"{name}/{r}", "out": out / "runs" / f"{name}-r{r}", "overrides": base + extra}
            for r in range(rounds) for name, extra in _variants(strategy, r)]
    runs = {r["name"]: r for r in common.run_jobs(jobs, 2, out / "runs")}
    rows = []
    for name, _ in _variants(strategy, 0):
        mine = [runs[f"{name}/{r}"] for r in range(rounds)]
        dev = []
        for r in range(rounds):
            ref = {m["step"]: m["loss"] for m in runs[f"fp32/{r}"]["metrics"] if "loss" in m}
            dev += [abs(m["loss"] - ref[m["step"]]) for m in runs[f"{name}/{r}"]["metrics"] if m["step"] in ref]
        s = mine[0]["summary"]
        row = {"variant": name, "comm_dtype": name if name in DTYPES else "fp32",
               "step_time_s": common.stats([t for x in mine for t in common.step_times(x)]),
               "round_medians_s": [common.stats(common.step_times(x))["median"] for x in mine],
               "grad_bytes_per_step": _grad_bytes(s), "bytes_source": "recorded",
               "max_loss_deviation": max(dev) if dev else None,
               "final_loss": common.stats([x["summary"]["final_train_loss"] for x in mine])}
        if name.startswith("powersgd"):
            rank = int(name.rsplit("-r", 1)[1])
            row.update(compress="powersgd", powersgd_rank=rank, impl=name.split("-")[1])
            analytic = _analytic_bytes(mine[0], rank)
            if row["impl"] == "torch":
                row.update(grad_bytes_per_step=analytic, bytes_source="analytic (torch's hook is not recorded)")
            else:
                row["analytic_bytes_per_step"] = analytic
        rows.append(row)
    by = {r["variant"]: r for r in rows}
    ref_t, ref_b = by["fp32"]["step_time_s"]["median"], by["fp32"]["grad_bytes_per_step"]
    figures = {f"step_time_ratio_{d}_vs_fp32": by[d]["step_time_s"]["median"] / ref_t for d in DTYPES[1:]}
    figures.update({f"bytes_ratio_{d}_vs_fp32": by[d]["grad_bytes_per_step"] / ref_b for d in DTYPES[1:] if ref_b})
    figures.update({f"max_loss_deviation_{d}": by[d]["max_loss_deviation"] for d in DTYPES[1:]})
    for rank in RANKS:
        own, torch_ = by[f"powersgd-own-r{rank}"], by[f"powersgd-torch-r{rank}"]
        if ref_b:
            figures[f"bytes_ratio_powersgd_r{rank}_vs_fp32"] = own["grad_bytes_per_step"] / ref_b
        figures[f"bytes_powersgd_r{rank}_recorded_equals_analytic"] = (
            own["grad_bytes_per_step"] == own["analytic_bytes_per_step"])
        for impl, row in (("own", own), ("torch", torch_)):
            figures[f"max_loss_deviation_powersgd_{impl}_r{rank}"] = row["max_loss_deviation"]
            figures[f"step_time_ratio_powersgd_{impl}_r{rank}_vs_fp32"] = row["step_time_s"]["median"] / ref_t
        paired = common.paired_ratios(torch_["round_medians_s"], own["round_medians_s"])
        figures[f"step_ratio_powersgd_own_vs_torch_r{rank}"] = paired["median"]
        figures[f"step_ratio_powersgd_own_vs_torch_r{rank}_ci90"] = paired["ci90"]
        own["step_ratio_vs_torch"] = paired
    figures["ranks_consistent"] = common.consistent(list(runs.values()))
    doc = common.write_results(out, "compression", figures, rows)
    _plot(out, runs)
    table = common.md_table(
        ["variant", "step time ms, median (min–max)", "bytes per step (per rank)", "max |Δloss| vs fp32",
         "final loss, median (min–max)"],
        [[r["variant"], common.fmt_stats(r["step_time_s"], 1e3, 1),
          f"{r['grad_bytes_per_step']:,}" + (" (analytic)" if r["bytes_source"] != "recorded" else ""),
          "-" if r["max_loss_deviation"] is None else f"{r['max_loss_deviation']:.2e}",
          common.fmt_stats(r["final_loss"], 1, 4)] for r in rows])
    ratios = ", ".join(f"r={k}: {common.fmt_stats(by[f'powersgd-own-r{k}']['step_ratio_vs_torch'], 1, 2)}"
                       for k in RANKS)
    common.write_report(out, "Gradient compression: fp32, fp16, bf16 and PowerSGD", [
        f"World 2, microbatch 8, seq 128, {steps} steps per run, warm-up excluded, {rounds} round(s) alternating "
        f"the variants{' (--quick)' if quick else ''}. Casts use `{strategy}`; PowerSGD runs own (`ddp`) and "
        "torch's `powerSGD_hook` (`torch-ddp`). Parameters, activations and optimizer stay fp32.",
        table, "![compression](compression.png)",
        "Bytes halve with 16-bit communication; whether time does depends on how bandwidth-bound the all-reduce "
        "is (on loopback gloo with small buckets it is mostly latency). fp16 keeps 10 mantissa bits but a narrow "
        "range (gradients are pre-divided by the world size to avoid overflow); bf16 keeps fp32's range with 7 "
        "mantissa bits, hence a larger deviation per step.",
        "PowerSGD sends r*(rows+cols) numbers per gradient matrix and the vectors whole; its loss deviation is "
        "that of a rank-r gradient with error feedback, far larger than a cast's rounding. torch's hook runs "
        "plain all-reduces for its first two steps (it requires start_powerSGD_iter >= 2 with error feedback), "
        "so its deviation starts later. The own version compresses after backward (no overlap), torch's per "
        f"bucket during backward. Own / torch step time (paired by round, median (min–max)): {ratios}.",
        f"Replicas identical (`ranks_consistent`): {figures['ranks_consistent']}.",
    ])
    return doc


def _plot(out: Path, runs: dict) -> None:
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ref = {m["step"]: m["loss"] for m in runs["fp32/0"]["metrics"] if "loss" in m}
    for name in [n[:-2] for n in runs if n.endswith("/0") and n != "fp32/0"]:
        ms = [m for m in runs[f"{name}/0"]["metrics"] if "loss" in m and m["step"] in ref]
        ax.plot([m["step"] for m in ms], [abs(m["loss"] - ref[m["step"]]) + 1e-12 for m in ms], "o-", label=name,
                markersize=3)
    ax.set(yscale="log", xlabel="step", ylabel="|loss - fp32 loss|", title="loss deviation from fp32 communication")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "compression.png", dpi=110)
    plt.close(fig)
