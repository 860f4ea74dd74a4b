"""`shardlab bench context`: context parallelism, cp = 1 vs cp = 2 over a sequence-length sweep (world 2,
tiny model). `measure(quick)` runs the study and returns rows and figures; `run` writes the report and plot.

Method. One pool of 2 gloo ranks, the same model, initialisation and token batches for both rows.
- `cp1` is own ddp: each rank trains one whole sequence of length T. `cp2` is `parallel.cp=2`: the two
  ranks train one sequence together, each holding T/2 tokens (zigzag chunks). Per rank, cp2 holds half
  the tokens of cp1: the question is what that buys in activation memory and step time.
- Activation memory: exact bytes the blocks keep for backward (`ActivationBytes.held`, summed over
  blocks, max over ranks), and the peak resident set of a window around one step (`PeakMemory`).
- Step time: rotating rounds (cp1, cp2 back to back, the order alternating), a barrier before each timed
  step; the median ratio cp2 / cp1 of the pairs.
- Bytes: the ring's recorded sends of one cp2 step against the planner's `cp_ring` (the analytic count).
- The families: ring vs Ulysses (vs the hybrid) at cp = 2 and 4 over a length sweep, bytes against the
  formulas, activation bytes, paired step times and the crossover measured vs the planner's
  (bench/context_crossover.py, a pool of cp ranks each).
- Balance, zigzag vs a contiguous split, on random q, k, v: per-rank attention FLOPs counted by the live ring
  and its per-rank attention seconds; and, for the figure, each rank's attention compute replayed alone in
  one process, the ranks alternating (a paired ratio: on a shared machine two live ranks compete for cores).
"""
from __future__ import annotations

import os
import time

import torch

MODEL = dict(n_layer=2, n_head=4, d_model=64)  # the tiny preset
SIZES = {"quick": dict(seqs=[128, 256, 512], rounds=5, warm=1, attn_seq=1024, attn_reps=15,
                       cross_seqs=[256, 512, 1024, 2048], cross_rounds=5),
         "full": dict(seqs=[256, 512, 1024, 2048], rounds=12, warm=2, attn_seq=2048, attn_reps=25,
                      cross_seqs=[128, 256, 512, 1024, 2048, 4096], cross_rounds=9)}
ROWS = ("cp1", "cp2")
# the families (docs/context.md, "Two families") at each cp degree: the ring first (the paired reference),
# Ulysses, and at cp = 4 the hybrid with U = 2 inside a ring of 2 (at cp = 2 it would be one or the other)
FAMILIES = {2: ["own", "ulysses"], 4: ["own", "ulysses", "hybrid:2"]}
CLUSTER = "this"  # the planner's cluster for the crossover: this machine's calibrated profile


class _Run:
    """One configuration built by the composition the trainer uses; a step = forward, loss, backward,
    gradient sync, clip, AdamW on one sequence per cp group."""

    def __init__(self, row: str, seq: int, impl: str = "own"):
        from shardlab.config import Config
        from shardlab.model.gpt import GPTConfig, build_model
        from shardlab.parallel import build

        cfg = Config()
        cfg.train.seq_len, cfg.train.grad_clip, cfg.ckpt.final = seq, 1.0, False
        cfg.parallel.strategy = "ddp"
        cfg.parallel.cp = 2 if row == "cp2" else 1
        cfg.parallel.cp_impl = impl
        model = build_model(GPTConfig(vocab_size=256, max_seq_len=seq, **MODEL), seed=1337)
        self.par = build(cfg, torch.device("cpu"), model)
        self.seqs = 2 if row == "cp1" else 1  # sequences per step (global batch)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.par.step([(x, y)], max_norm=1.0, global_tokens=self.seqs * x.shape[1])

    def activation_bytes(self, x: torch.Tensor) -> int:
        from shardlab.bench.context_crossover import activation_bytes

        return activation_bytes(self.par, x)

    def checksum(self) -> float:
        return float(sum(p.detach().double().sum() for p in self.par.model.parameters()))


def _batch(seq: int, r: int, row: str, rank: int):
    """Round r's tokens: cp1 rank k trains sequence k; cp2 both ranks train sequence 0 (the step cuts it)."""
    gen = torch.Generator().manual_seed(1000 * seq + r)
    data = torch.randint(0, 256, (2, seq + 1), generator=gen)
    i = rank if row == "cp1" else 0
    return data[i:i + 1, :-1], data[i:i + 1, 1:]


def _sweep(size: dict) -> dict:
    """On every rank: per length, activation bytes, one peak-memory window, the ring's bytes of one
    step, then the rotating timed pairs; afterwards the attention-balance study."""
    from shardlab import comm
    from shardlab.observe.memory import PeakMemory, release

    rank = comm.rank()
    out = {"lengths": {}, "rank": rank}
    for row in ROWS:  # warm-up: one-time allocations must not land in a memory window
        _Run(row, size["seqs"][0]).step(*_batch(size["seqs"][0], -1, row, rank))
    release()
    for seq in size["seqs"]:
        res = {"acts": {}, "peaks": {}, "times": {row: [] for row in ROWS}, "sent": 0, "consistent": True}
        for row in ROWS:
            comm.barrier()
            with PeakMemory("cpu") as peak:
                run = _Run(row, seq)
                run.step(*_batch(seq, -1, row, rank))
            res["peaks"][row] = peak.bytes
            res["kind"] = peak.kind
            del run
            release()
        live = {row: _Run(row, seq) for row in ROWS}
        for row in ROWS:
            res["acts"][row] = live[row].activation_bytes(_batch(seq, -2, row, rank)[0])
        first = comm.RECORDER.order
        live["cp2"].step(*_batch(seq, -3, "cp2", rank))
        res["sent"] = sum(rec.bytes for rec in comm.RECORDER.ring
                          if rec.order > first and rec.op == "send" and rec.tag.startswith("cp."))
        for r in range(size["rounds"]):
            for row in (ROWS if r % 2 == 0 else ROWS[::-1]):
                x, y = _batch(seq, r, row, rank)
                comm.barrier()
                t0 = time.perf_counter()
                live[row].step(x, y)
                res["times"][row].append(time.perf_counter() - t0)
        sums = comm.all_gather_object(live["cp2"].checksum())  # cp ranks hold replicas: equal after the steps
        res["consistent"] = len(set(sums)) == 1
        out["lengths"][seq] = res
        del live
        release()
    out["balance"] = _balance(size["attn_seq"], size["attn_reps"])
    gathered = comm.all_gather_object(out)
    return gathered if rank == 0 else None


def _balance(seq: int, reps: int) -> dict:
    """The ring alone at length `seq` (the tiny model's heads: 4 x 16), zigzag vs contiguous chunks:
    this rank's attention FLOPs of one repeat and its attention seconds (forward + backward) per repeat,
    the ranks starting each repeat together (a barrier), after one warm-up repeat."""
    from shardlab import comm
    from shardlab.parallel.cp import layer as cp
    from shardlab.parallel.cp.ring import Ring

    size, rank = comm.world_size(), comm.rank()
    heads, head_dim = MODEL["n_head"], MODEL["d_model"] // MODEL["n_head"]
    gen = torch.Generator().manual_seed(5)
    full = [torch.randn(1, heads, seq, head_dim, generator=gen) for _ in range(4)]
    out = {}
    for layout in cp.LAYOUTS:
        ring = Ring(None, lambda r, layout=layout: cp.chunk_ids(r, size, layout), "bench", True)
        q, k, v, g = (cp.shard_sequence(t, rank, size, layout, dim=2) for t in full)
        times = []
        for rep in range(reps + 1):
            ring.stats.update(flops=0, fwd_s=0.0, bwd_s=0.0)
            comm.barrier()
            qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
            ring(qs, ks, vs).backward(g)
            times.append(ring.stats["fwd_s"] + ring.stats["bwd_s"])
        out[layout] = {"flops": ring.stats["flops"], "attn_s": times[1:]}
    return out


def replay(seq: int, reps: int, size: int = 2) -> dict:
    """Each rank's attention compute of one ring pass (forward and backward, the same flash calls on the same
    chunk pairs the ring makes), replayed alone in this process on one thread, the ranks alternating A B,
    B A, ...: {layout: {rank: [seconds per round]}} after one warm-up round. Interleaved like this, the ranks'
    times share the machine's load instead of competing for it, which the live ring cannot do."""
    from shardlab.parallel.cp import layer as cp
    from shardlab.parallel.cp.ring import block_attention, block_attention_backward, pair_kind

    heads, head_dim = MODEL["n_head"], MODEL["d_model"] // MODEL["n_head"]
    gen = torch.Generator().manual_seed(5)
    q, k, v, g = (torch.randn(1, heads, seq, head_dim, generator=gen) for _ in range(4))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out = {}
    try:
        for layout in cp.LAYOUTS:
            c = seq // cp.n_chunks(size, layout)
            piece = {i: slice(i * c, (i + 1) * c) for i in range(cp.n_chunks(size, layout))}

            def work(r):
                for src in range(size):
                    for qc in cp.chunk_ids(r, size, layout):
                        for kc in cp.chunk_ids(src, size, layout):
                            kind = pair_kind(qc, kc, True)
                            if kind is None:
                                continue
                            args = (q[:, :, piece[qc]], k[:, :, piece[kc]], v[:, :, piece[kc]])
                            o, lse = block_attention(*args, kind == "diag")
                            block_attention_backward(g[:, :, piece[qc]], *args, o, lse, kind == "diag")

            times = {r: [] for r in range(size)}
            for rnd in range(reps + 1):
                for r in (range(size) if rnd % 2 == 0 else reversed(range(size))):
                    t0 = time.perf_counter()
                    work(r)
                    if rnd:
                        times[r].append(time.perf_counter() - t0)
            out[layout] = times
    finally:
        torch.set_num_threads(threads)
    return out


def measure(quick: bool = True) -> dict:
    """Run the study on 2 ranks; returns {"rows": [...], "figures": {...}} in results.json's shape:
    `cp_act_mem_ratio` (activation bytes per rank cp=2 / cp=1 at the longest length), `cp_balance` (max /
    min over ranks of their attention compute time with zigzag chunks, paired replay: `replay`), `cp_comm_exact` (1.0 when the ring's recorded bytes
    equal the planner's at every length)."""
    from shardlab.bench import common
    from shardlab.plan.comm import cp_ring
    from shardlab.plan.layout import Layout
    from shardlab.plan.train_spec import TrainSpec
    from shardlab.plan.presets import model_from_args

    size = SIZES["quick" if quick else "full"]
    ranks = common.run_on_ranks(_sweep, size, world=2)
    warm = size["warm"]
    rows, exact, consistent = [], [], []
    for seq in size["seqs"]:
        per = [r["lengths"][seq] for r in ranks]
        model = model_from_args("tiny", seq=seq)
        analytic = cp_ring(model, TrainSpec(global_batch=1, micro_batch=1, seq=seq, precision="fp32"),
                           Layout(dp=1, cp=2), 1).payload
        exact.append(all(p["sent"] == analytic for p in per))
        consistent.append(all(p["consistent"] for p in per))
        pairs = [b / a for a, b in zip(per[0]["times"]["cp1"][warm:], per[0]["times"]["cp2"][warm:])]
        for row in ROWS:
            t = common.stats(per[0]["times"][row][warm:])
            rows.append({"seq_len": seq, "config": row, "tokens_per_rank": seq // (2 if row == "cp2" else 1),
                         "act_bytes": max(p["acts"][row] for p in per),
                         "peak_mem_bytes": max(p["peaks"][row] for p in per), "peak_mem_kind": per[0]["kind"],
                         "step_s": t, "step_ratio_cp2_cp1": common.median_ci(pairs) if row == "cp2" else None,
                         "kv_bytes_per_step": per[0]["sent"] if row == "cp2" else 0,
                         "analytic_kv_bytes_per_step": analytic if row == "cp2" else 0})
    longest = size["seqs"][-1]
    by = {(r["seq_len"], r["config"]): r for r in rows}
    bal = [r["balance"] for r in ranks]

    def live(layout):  # the live ring: max / min over ranks of each rank's median repeat
        med = [common.stats(b[layout]["attn_s"])["median"] for b in bal]
        return max(med) / min(med)

    def balance(times):
        """Paired: each round's times divided by that round's mean (the load it ran under), the median of
        that per rank, max / min over ranks; with the range of the per-round max / min."""
        rounds = list(zip(*times.values()))
        rel = [[t / (sum(ts) / len(ts)) for t in ts] for ts in rounds]
        med = [common.stats(list(r))["median"] for r in zip(*rel)]
        spread = common.stats([max(ts) / min(ts) for ts in rounds])
        return {"median": max(med) / min(med), "min": spread["min"], "max": spread["max"]}

    fams = families(size)
    replayed = replay(size["attn_seq"], size["attn_reps"])
    zig, con = balance(replayed["zigzag"]), balance(replayed["contiguous"])
    step = by[(longest, "cp2")]["step_ratio_cp2_cp1"]
    figures = {
        "cp_act_mem_ratio": by[(longest, "cp2")]["act_bytes"] / by[(longest, "cp1")]["act_bytes"],
        "cp_peak_mem_ratio": by[(longest, "cp2")]["peak_mem_bytes"] / by[(longest, "cp1")]["peak_mem_bytes"],
        "cp_balance": zig["median"], "cp_balance_round_min": zig["min"], "cp_balance_round_max": zig["max"],
        "cp_balance_contiguous": con["median"],
        "cp_balance_live": live("zigzag"), "cp_balance_live_contiguous": live("contiguous"),
        "cp_flops_balance": max(b["zigzag"]["flops"] for b in bal) / min(b["zigzag"]["flops"] for b in bal),
        "cp_flops_balance_contiguous": (max(b["contiguous"]["flops"] for b in bal)
                                        / min(b["contiguous"]["flops"] for b in bal)),
        "cp_comm_exact": 1.0 if all(exact) else 0.0,
        "cp_step_ratio": step["median"], "cp_step_ratio_min": step["min"], "cp_step_ratio_max": step["max"],
        "cp_step_ratio_ci90": step["ci90"], "cp_step_ratio_load_avg": step["load_avg"],
        "ranks_consistent": all(consistent),
        **family_figures(fams),
    }
    balance = [{"rank": i, **{f"{lay}_flops": d["flops"] for lay, d in b.items()},
                **{f"{lay}_attn_s": common.stats(d["attn_s"]) for lay, d in b.items()}} for i, b in enumerate(bal)]
    return {"suite": "context", "figures": figures, "rows": rows, "balance": balance, "size": size,
            "families": fams}


def families(size: dict) -> dict:
    """{cp: the crossover study (bench/context_crossover.measure)} at cp = 2 and 4."""
    from shardlab.bench import context_crossover

    return {cp: context_crossover.measure(size["cross_seqs"], cp, impls, size["cross_rounds"], CLUSTER)
            for cp, impls in FAMILIES.items()}


def family_figures(fams: dict) -> dict:
    """`cp_a2a_exact` (1.0 when every implementation's recorded cp bytes equal parallel/cp/cost.py's at every
    length and degree), `cp_ulysses_step_ratio` (Ulysses ÷ ring, paired, cp = 2 at the longest length) and per
    degree and family the crossover length measured and predicted (null: not ahead at the longest length)."""
    out = {"cp_a2a_exact": 1.0 if all(f["bytes_exact"] for f in fams.values()) else 0.0,
           "cp_ulysses_step_ratio": fams[2]["rows"][-1]["ulysses"]["paired_vs_ring"]["median"]}
    for cp, f in fams.items():
        out[f"cp{cp}_ulysses_step_ratio"] = f["rows"][-1]["ulysses"]["paired_vs_ring"]["median"]
        for spec, c in f["crossover"].items():
            name = spec.split(":")[0]
            out[f"cp{cp}_{name}_crossover_measured"] = c["measured"]
            out[f"cp{cp}_{name}_crossover_predicted"] = c["predicted"]
    return out


def family_tables(fams: dict) -> list[str]:
    """The report's section on the families: one table per cp degree."""
    from shardlab.bench import common

    mib, out = 2 ** 20, []
    for cp, f in fams.items():
        rows = []
        for r in f["rows"]:
            for spec in f["impls"]:
                x = r[spec]
                rows.append([r["seq_len"], spec.replace(":", " U="),
                             f"{x['bytes'][0]:,} ({x['formula_bytes']:,}{'' if x['bytes_exact'] else ' NOT EQUAL'})",
                             f"{x['act_bytes'] / mib:.2f}", common.fmt_stats(x["step_s"], 1e3, 1),
                             f"{x['predicted_s'] * 1e3:.1f}",
                             "" if spec == f["impls"][0] else common.fmt_stats(x["paired_vs_ring"], 1, 3)])
        cross = "; ".join(f"{s}: measured {c['measured']}, predicted {c['predicted']}"
                          for s, c in f["crossover"].items())
        loads = [r["load_avg"][-1][0] for r in f["rows"]]
        out += [f"**cp = {cp}** ({cp} ranks; 1-minute load average {min(loads):.1f}–{max(loads):.1f} on "
                f"{os.cpu_count()} cores while measuring; planner: {f['cluster']}). Crossover (the shortest length "
                f"from which on the family stays ahead of the ring; None: behind at the longest): {cross}.",
                common.md_table(["seq len", "impl", "cp bytes/rank/step (formula)", "activation MiB (exact)",
                                 "step ms (min–max)", "planned ms", "÷ ring, paired"], rows)]
    return out


def run(out, quick: bool) -> dict:
    from shardlab.bench import common

    doc = measure(quick)
    fam_rows = [{"family": spec, "cp": cp, "seq_len": r["seq_len"], "load_avg": r["load_avg"], **r[spec]}
                for cp, f in doc["families"].items() for r in f["rows"] for spec in f["impls"]]
    common.write_results(out, "context", doc["figures"], doc["rows"] + doc["balance"] + fam_rows)
    plot = _plot(out, doc["rows"])
    mib = 2 ** 20
    table = common.md_table(
        ["seq len", "config", "tokens/rank", "activation MiB (exact)", "peak MiB", "step ms (min–max)",
         "cp2 ÷ cp1 step, paired", "K/V bytes/step (= planner?)"],
        [[r["seq_len"], r["config"], r["tokens_per_rank"], f"{r['act_bytes'] / mib:.2f}",
          f"{r['peak_mem_bytes'] / mib:.1f}", common.fmt_stats(r["step_s"], 1e3, 1),
          common.fmt_stats(r["step_ratio_cp2_cp1"], 1, 3) if r["step_ratio_cp2_cp1"] else "",
          (f"{r['kv_bytes_per_step']:,} ({'yes' if r['kv_bytes_per_step'] == r['analytic_kv_bytes_per_step'] else 'NO'})"
           if r["config"] == "cp2" else "")] for r in doc["rows"]])
    bal = common.md_table(
        ["rank", "zigzag GFLOP", "zigzag attention ms (min–max)", "contiguous GFLOP", "contiguous attention ms (min–max)"],
        [[b["rank"], f"{b['zigzag_flops'] / 1e9:.3f}", common.fmt_stats(b["zigzag_attn_s"], 1e3, 1),
          f"{b['contiguous_flops'] / 1e9:.3f}", common.fmt_stats(b["contiguous_attn_s"], 1e3, 1)]
         for b in doc["balance"]])
    f = doc["figures"]
    common.write_report(out, "Context parallelism: cp = 1 vs cp = 2 (world 2, tiny model)", [
        "cp1: own ddp, each rank one whole sequence of length T. cp2: `parallel.cp=2`, the two ranks share one "
        "sequence (zigzag chunks, ring attention). Activation bytes are exact (what the blocks keep for "
        "backward, max over ranks); peak is the resident set of one step's window. Step times from rounds "
        "alternating cp1 and cp2; the ratio is the median of the back-to-back pairs (min–max).",
        table,
        f"![memory and time]({plot.name})",
        f"Attention balance at T = {doc['size']['attn_seq']}, the tiny model's heads, forward + backward. "
        "**cp_balance**: each rank's attention compute of one ring pass (the same flash calls on the same chunk "
        "pairs) replayed alone on one thread, the ranks alternating A B / B A over "
        f"{doc['size']['attn_reps']} rounds; each round's times divided by the round's mean, the median of that per "
        "rank, max ÷ min over ranks (a round's own max ÷ min is ≥ 1 by construction, so its range is shown only as "
        "the spread). The table: the live ring on 2 ranks "
        "(per-rank FLOPs as counted by the ring; attention compute time per repeat, transfers excluded), where "
        "the two ranks compete for the cores with each other and any other load (cp_balance_live: max ÷ min of "
        "the per-rank medians).",
        bal,
        "Two families at cp = 2 and 4: the ring (K/V blocks travel, p2p sends), Ulysses (all-to-alls turn the "
        "sequence shard into a head shard; comm's all-to-all payload, this rank's own piece included) and at cp = 4 "
        "the hybrid (U = 2 inside a ring of 2): the bytes each rank recorded in one step against "
        "parallel/cp/cost.py (rank 0's shown, every rank's compared), activation bytes (max over ranks), step times "
        "in rotating rounds with the paired ratio against the ring, and the planner's step on the same layout.",
        *family_tables(doc["families"]),
        f"cp_a2a_exact = {f['cp_a2a_exact']:.0f}, cp_ulysses_step_ratio = {f['cp_ulysses_step_ratio']:.3f} "
        "(at the longest length).",
        f"**Figures**: cp_act_mem_ratio = {f['cp_act_mem_ratio']:.3f} (goal ≤ 0.55), cp_balance = "
        f"{f['cp_balance']:.3f} (per round {f['cp_balance_round_min']:.3f}–{f['cp_balance_round_max']:.3f}; goal ≤ 1.05; contiguous "
        f"chunks: {f['cp_balance_contiguous']:.3f}; live ring {f['cp_balance_live']:.3f} vs "
        f"{f['cp_balance_live_contiguous']:.3f}; FLOPs "
        f"{f['cp_flops_balance']:.3f} vs {f['cp_flops_balance_contiguous']:.3f}), cp_comm_exact = "
        f"{f['cp_comm_exact']:.0f}, cp_step_ratio = {f['cp_step_ratio']:.3f} "
        f"[90% CI {f['cp_step_ratio_ci90'][0]:.3f}–{f['cp_step_ratio_ci90'][1]:.3f}] "
        f"({f['cp_step_ratio_min']:.3f}–{f['cp_step_ratio_max']:.3f}), peak memory ratio "
        f"{f['cp_peak_mem_ratio']:.3f}."])
    return doc


def _plot(out, rows: list[dict]):
    from shardlab.bench import common

    plt = common.pyplot()
    from matplotlib.ticker import ScalarFormatter
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for row in ROWS:
        rs = [r for r in rows if r["config"] == row]
        xs = [r["seq_len"] for r in rs]
        a.plot(xs, [r["act_bytes"] / 2 ** 20 for r in rs], "o-", label=row)
        b.plot(xs, [r["step_s"]["median"] * 1e3 for r in rs], "o-", label=row)
    a.set(xscale="log", yscale="log", xlabel="sequence length", ylabel="activation MiB per rank (exact)",
          title="Activation memory")
    b.set(xscale="log", yscale="log", xlabel="sequence length", ylabel="step ms (median)", title="Step time")
    for ax in (a, b):
        ax.legend()
        ax.set_xticks([r["seq_len"] for r in rows if r["config"] == "cp1"])
        ax.get_xaxis().set_major_formatter(ScalarFormatter())
    fig.tight_layout()
    path = out / "context.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


if __name__ == "__main__":  # python -m shardlab.bench.context [--full]
    import json
    import sys

    print(json.dumps(measure(quick="--full" not in sys.argv), indent=1, default=str))
