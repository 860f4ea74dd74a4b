"""Dense vs mixture of experts at equal active parameters (`shardlab bench moe`), world 2 and 4.

The dense model and the MoE model share everything but the MLPs: the MoE has E = 4 experts on every block,
each a copy of the dense MLP, and top-1 routing, so a token meets the same parameters (plus the router's
E x h) and costs the same FLOPs; the MoE holds 4x the MLP parameters. Expert parallelism spreads the experts
over every rank (ep = world: one ep group, E / world experts each), dropless (moe_capacity = 0) so every
routed token-slot travels. Same seed, data order, steps and batch: the same tokens.

Per world: A B A B ... (dense, MoE; `ROUNDS` pairs back to back in one launch, so machine drift hits both),
then the MoE without the auxiliary loss (moe_aux_weight = 0). Figures (world 2; world 4 with a `_w4` suffix):
  moe_loss_gain        dense final val loss ÷ MoE's (> 1: the MoE learned more from the same tokens)
  moe_step_time_ratio  MoE step time ÷ dense, per step of a pair, median (bootstrap 90% interval in rows)
  moe_imbalance_aux    max ÷ mean tokens per expert with the aux loss, per step: each step's global batch,
                       the worst MoE layer, median over the steps after warm-up (summary.json's
                       moe.load_imbalance_step; the goal, <= 1.2, is judged on it: docs/moe.md says why)
  moe_imbalance_aux_run  the same over the run's totals, layers summed (summary.json's moe.load_imbalance),
                       and `_worst_layer`: the worst MoE layer's run totals
  moe_imbalance_noaux  the per-step figure without the aux loss (`moe_imbalance_noaux_run`: run totals)
  moe_imbalance_strong_aux  (full run, world 2) the per-step figure with a stated larger aux weight,
                       STRONG_AUX = 0.1 (10x Switch's default 0.01), a labelled row beside the default one
                       (`_run`: run totals): does a heavier aux loss balance a run this short?
  moe_imbalance_cure   (full run, world 2) the per-step figure with the stated load-balancing cure, CURE: the
                       routers' lr scaled (model.moe_router_lr_scale) and DeepSeek-V3's auxiliary-loss-free
                       bias (model.moe_bias_update), aux loss kept at its default; a labelled row (`_run`:
                       run totals). docs/moe.md has every cure's measured figure.
  ep_comm_exact        1 when, in every MoE run, rank 0's recorded all-to-all payload of the last step equals
                       plan/moe.py's payload from that step's routing counts, else 0
"""
from __future__ import annotations

from pathlib import Path

from shardlab.bench import common
from shardlab.bench.tensor_parallel import bootstrap_median
from shardlab.plan import moe as plan_moe

E, K = 4, 1
STRONG_AUX = 0.1  # the labelled larger aux weight (the default, Switch's, is 0.01)
# the labelled cure row: the best per-step figure measured at this setting (docs/moe.md, "Cures")
CURE = {"model.moe_router_lr_scale": 0.1, "model.moe_bias_update": 0.003}
CURE_LABEL = "moe-router-lr-x{}-bias-{}".format(*CURE.values())
MOE = [f"model.moe_experts={E}", f"model.moe_top_k={K}", "model.moe_capacity=0"]
SIZES = {"quick": {"model": ["model.preset=custom", "model.n_layer=2", "model.n_head=4", "model.d_model=64"],
                   "d": 64, "steps": 12, "seq": 64, "mb": 4, "rounds": 1, "worlds": (2,)},
         "full": {"model": ["model.preset=custom", "model.n_layer=2", "model.n_head=4", "model.d_model=128"],
                  "d": 128, "steps": 40, "seq": 128, "mb": 4, "rounds": 2, "worlds": (2, 4),
                  "strong_worlds": (2,)}}


def _jobs(out: Path, size: dict, world: int) -> list[dict]:
    base = common.BASE + size["model"] + [
        f"train.steps={size['steps']}", f"train.seq_len={size['seq']}", f"train.micro_batch={size['mb']}",
        "parallel.strategy=ddp", f"train.eval_every={size['steps']}", "train.eval_seqs=32"]
    moe = base + MOE + [f"parallel.ep={world}"]
    jobs = []
    for r in range(size["rounds"]):  # A B A B: dense, MoE back to back
        jobs += [{"name": f"dense-{r}", "out": out / f"w{world}" / f"dense-{r}", "overrides": base},
                 {"name": f"moe-{r}", "out": out / f"w{world}" / f"moe-{r}", "overrides": moe}]
    jobs.append({"name": "moe-noaux", "out": out / f"w{world}" / "moe-noaux",
                 "overrides": moe + ["model.moe_aux_weight=0"]})
    if world in size.get("strong_worlds", ()):
        jobs.append({"name": "moe-strong-aux", "out": out / f"w{world}" / "moe-strong-aux",
                     "overrides": moe + [f"model.moe_aux_weight={STRONG_AUX}"]})
        jobs.append({"name": "moe-cure", "out": out / f"w{world}" / "moe-cure",
                     "overrides": moe + [f"{k}={v}" for k, v in CURE.items()]})
    return jobs


def imbalance(counts: list) -> float:
    mean = sum(counts) / len(counts)
    return max(counts) / mean if mean else float("nan")


def worst_layer(run: dict) -> float:
    """Max ÷ mean over the run's totals of the worst MoE layer (the summary's run figure sums the layers
    first)."""
    rows = [r["moe_tokens_per_layer_expert"] for r in run["metrics"] if r.get("moe_tokens_per_layer_expert")]
    layers = [[sum(col) for col in zip(*(r[i] for r in rows))] for i in range(len(rows[0]))]
    return max(imbalance(layer) for layer in layers)


def comm_exact(run: dict, world: int, size: dict) -> bool:
    """Rank 0's all-to-all payload in the last step (summary: comm.bytes_per_step) against plan/moe.py's
    formula with that step's counts: rank 0 dispatches all its token-slots (dropless, one microbatch) and
    receives every slot routed to its experts (0 .. E/ep - 1), from every rank of its (one) ep group."""
    last = [r for r in run["metrics"] if r.get("moe_tokens_per_layer_expert")][-1]
    sent = size["mb"] * size["seq"] * K
    want = sum(plan_moe.payload_bytes(sent, sum(layer[:E // world]), E, size["d"])
               for layer in last["moe_tokens_per_layer_expert"])
    return run["summary"]["comm"]["bytes_per_step"].get("all_to_all") == want


def _world(out: Path, size: dict, world: int) -> tuple[dict, list[dict], dict]:
    runs = common.run_jobs(_jobs(out / "runs", size, world), world, out / "runs")
    by = {r["name"]: r for r in runs}
    dense, moe, noaux = by["dense-0"], by["moe-0"], by["moe-noaux"]
    ratios = []
    for r in range(size["rounds"]):
        ratios += [b / a for a, b in zip(common.step_times(by[f"dense-{r}"]), common.step_times(by[f"moe-{r}"]))
                   if a]
    stats = common.stats(ratios)
    stats["ci90"] = list(bootstrap_median(ratios))
    exact = all(comm_exact(r, world, size) for r in runs if r["name"].startswith("moe"))
    rows = []
    named = [("dense", dense), ("moe", moe), ("moe-noaux", noaux)]
    if "moe-strong-aux" in by:
        named.append((f"moe-aux-{STRONG_AUX}", by["moe-strong-aux"]))
    if "moe-cure" in by:
        named.append((CURE_LABEL, by["moe-cure"]))
    for name, run in named:
        s = run["summary"]
        mean = s["comm"]["bytes_per_step_mean"]
        rows.append({"world": world, "model": name, "params": s["params"], "tokens": s["steps"] * s["tokens_per_step"],
                     "final_val_loss": s["final_val_loss"], "final_train_loss": s["final_train_loss"],
                     "step_time_s": common.stats(common.step_times(run))["median"],
                     "bytes_per_step": sum(mean.values()), "all_to_all_bytes_per_step": mean.get("all_to_all", 0),
                     "load_imbalance_step": s.get("moe", {}).get("load_imbalance_step"),
                     "load_imbalance": s.get("moe", {}).get("load_imbalance"),
                     "load_imbalance_worst_layer": worst_layer(run) if name != "dense" else None,
                     "ranks_consistent": s["ranks_consistent"]})
    sfx = "" if world == 2 else f"_w{world}"
    figures = {f"moe_loss_gain{sfx}": dense["summary"]["final_val_loss"] / moe["summary"]["final_val_loss"],
               f"moe_step_time_ratio{sfx}": stats["median"],
               f"moe_imbalance_aux{sfx}": moe["summary"]["moe"]["load_imbalance_step"],
               f"moe_imbalance_aux_run{sfx}": moe["summary"]["moe"]["load_imbalance"],
               f"moe_imbalance_aux_run_worst_layer{sfx}": worst_layer(moe),
               f"moe_imbalance_noaux{sfx}": noaux["summary"]["moe"]["load_imbalance_step"],
               f"moe_imbalance_noaux_run{sfx}": noaux["summary"]["moe"]["load_imbalance"],
               f"ep_comm_exact{sfx}": exact}
    if "moe-strong-aux" in by:
        strong = by["moe-strong-aux"]["summary"]["moe"]
        figures[f"moe_imbalance_strong_aux{sfx}"] = strong["load_imbalance_step"]
        figures[f"moe_imbalance_strong_aux_run{sfx}"] = strong["load_imbalance"]
    if "moe-cure" in by:
        cure = by["moe-cure"]["summary"]["moe"]
        figures[f"moe_imbalance_cure{sfx}"] = cure["load_imbalance_step"]
        figures[f"moe_imbalance_cure_run{sfx}"] = cure["load_imbalance"]
    rows.append({"world": world, "model": "moe ÷ dense step time (paired)", **stats})
    return figures, rows, {"runs": runs, "dense": dense, "moe": moe, "noaux": noaux}


def run(out: Path, quick: bool) -> dict:
    size = SIZES["quick" if quick else "full"]
    figures, rows, per_world = {}, [], {}
    for world in size["worlds"]:
        f, r, w = _world(out, size, world)
        figures.update(f)
        rows += r
        per_world[world] = w
    exact = all(v for k, v in figures.items() if k.startswith("ep_comm_exact"))
    for k in [k for k in figures if k.startswith("ep_comm_exact")]:
        figures.pop(k)
    figures["ep_comm_exact"] = 1 if exact else 0
    figures["ranks_consistent"] = common.consistent([r for w in per_world.values() for r in w["runs"]])
    doc = common.write_results(out, "moe", figures, rows)
    _plot(out, per_world)
    _report(out, size, quick, figures, rows)
    return doc


def _report(out: Path, size: dict, quick: bool, figures: dict, rows: list[dict]) -> None:
    runs = [r for r in rows if "params" in r]
    table = common.md_table(
        ["world", "model", "params", "tokens", "final val loss", "step (s)", "bytes/step (rank 0)", "all-to-all",
         "imbalance per step", "run total", "run, worst layer"],
        [[r["world"], r["model"], f"{r['params']:,}", f"{r['tokens']:,}", f"{r['final_val_loss']:.4f}",
          f"{r['step_time_s']:.4f}" if r["step_time_s"] else "-", f"{r['bytes_per_step']:,.0f}",
          f"{r['all_to_all_bytes_per_step']:,.0f}",
          *("-" if r[k] is None else common.fmt_figure(r[k])  # dense: no experts
            for k in ("load_imbalance_step", "load_imbalance", "load_imbalance_worst_layer"))] for r in runs])
    ratios = [f"world {r['world']}: {common.fmt_figure(r['median'])} (90% CI {common.fmt_figure(r['ci90'][0])}–"
              f"{common.fmt_figure(r['ci90'][1])}, {r['n']} step pairs)" for r in rows if "ci90" in r]
    common.write_report(out, "Dense vs mixture of experts at equal active parameters", [
        f"MoE: E = {E} experts on every block, top-{K}, dropless, ep = world; dense: the same model with one MLP. "
        f"{size['steps']} steps of {size['mb']} x {size['seq']} tokens per rank, same seed and data (equal tokens)"
        f"{' (--quick)' if quick else ''}; {size['rounds']} dense/MoE pair(s) back to back per world, then the MoE "
        "without the aux loss" + (f" (full run, world 2: and once with a larger aux weight, {STRONG_AUX}, "
        "labelled; and once with the load-balancing cure " + ", ".join(f"{k}={v}" for k, v in CURE.items()) +
        ", labelled)" if size.get("strong_worlds") else "") + ". `params` counts every expert (active per token: the dense count + the router). "
        "Imbalance = max ÷ mean tokens per expert: per step = the step's global batch, worst layer, median "
        "after warm-up (the goal's measure); run total = the run's counts, layers summed.",
        table, "![loss and imbalance](moe.png)",
        "MoE ÷ dense step time, median per step pair: " + "; ".join(ratios) + ".",
        "Figures: " + ", ".join(f"{k} = {common.fmt_figure(v)}" for k, v in figures.items()) + "."])


def _plot(out: Path, per_world: dict) -> None:
    plt = common.pyplot()
    fig, (ax_l, ax_i) = plt.subplots(1, 2, figsize=(11, 4))
    for world, w in per_world.items():
        for name, style in (("dense", "-"), ("moe", "--"), ("noaux", ":")):
            run = w[name]
            tps = run["summary"]["tokens_per_step"]
            ms = [x for x in run["metrics"] if "loss" in x]
            ax_l.plot([x["step"] * tps for x in ms], [x["loss"] for x in ms], style,
                      label=f"w{world} {name if name != 'noaux' else 'moe no aux'}")
            if name != "dense":
                ms = [x for x in run["metrics"] if x.get("moe_load_imbalance")]
                ax_i.plot([x["step"] for x in ms], [x["moe_load_imbalance"] for x in ms], style,
                          label=f"w{world} {'aux' if name == 'moe' else 'no aux'}")
    ax_l.set(xlabel="tokens", ylabel="train loss", title="loss vs tokens (equal active params)")
    ax_i.axhline(1.2, color="grey", lw=0.8)
    ax_i.set(xlabel="step", ylabel="max ÷ mean tokens per expert", title="load imbalance per step (worst layer)")
    ax_l.legend(fontsize=8)
    ax_i.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "moe.png", dpi=110)
    plt.close(fig)
