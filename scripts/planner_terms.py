"""The planner's GPU terms switched on one at a time over the published rows: the error on tokens/s/GPU before
and after each term (docs/planner.md, "The GPU terms"), per row for the rows the terms were examined on
(torchtitan's), and as mean / max |error| for every set (plan/published_gpu.py).

    PYTHONPATH=src python scripts/planner_terms.py
"""
from __future__ import annotations

from dataclasses import replace

from shardlab.plan.hardware import load_cluster
from shardlab.plan.published_gpu import COMPILED, EXAMINED, GIVEN, HELD_OUT, HELD_OUT_2, predict, row_cluster

OFF = dict(call_latency=0.0, busbw_eff_intra=1.0, busbw_eff_allreduce_intra=1.0, busbw_eff_alltoall_intra=0.0,
           busbw_eff_inter=1.0, busbw_eff_alltoall_inter=0.0,
           nccl_ctas=0, gemm_roofline=False, attention="", gemm_efficiency=0.75, kernel_gap_s=0.0,
           unit_pipeline=False, pipelined_phases=False, hbm_efficiency=(), attention_by_seq=False,
           attention_sustained=1.0, ring_latency_steps=False)
LINKS = ("call_latency", "busbw_eff_intra", "busbw_eff_allreduce_intra", "busbw_eff_alltoall_intra", "busbw_eff_inter",
         "busbw_eff_alltoall_inter")
# (label, what the step switches on: cluster fields, or row inputs)
STEPS = [
    ("baseline (datasheet H100-SXM, bf16 reduce, ideal links and kernels)", ()),
    ("+ power-capped HBM2e part (H100-SXM-500W)", ("profile",)),
    ("+ fp32 gradient reduction (the row's reduce dtype)", ("comm_dtype",)),
    ("+ achieved bus bandwidth (NCCL latency, ring efficiency)", LINKS),
    ("+ NCCL's SMs taken from overlapped compute", ("nccl_ctas",)),
    ("+ GEMM by shape (waves, HBM roofline)", ("gemm_roofline",)),
    ("+ attention kernel rate (FlashAttention-2)", ("attention",)),
    ("+ torchtitan's selective-op recompute", ("recompute_op",)),
    ("+ Hopper GEMMs at the sustained rate (MSMF 0.706)", ("gemm_efficiency",)),
    ("+ the row's attention kernel (llm-foundry: Triton FlashAttention)", ("row_attention",)),
    ("+ kernel launch gaps (1 us per kernel)", ("kernel_gap_s",)),
    ("+ the row's norm kernels (torchtitan: eager fp32 RMSNorm)", ("eager_norm",)),
    ("+ the row's torch.compile (Inductor fusion per block)", ("compile",)),
    ("+ per-unit overlap (FSDP: one unit prefetched ahead, one NCCL stream)", ("unit_pipeline",)),
    ("+ the row's optimizer kernels (eager AdamW: 84 B per parameter, not a fused 28)", ("eager_adam",)),
    ("+ one ring through every rank (NVLink and network hops at once: the slower link's time)", ("pipelined_phases",)),
    ("+ achieved HBM bandwidth by kernel size (Calculon's curve: 90% from 100 MB, 75% from 10 MB, 60% from 1 MB)",
     ("hbm_efficiency",)),
    ("+ FlashAttention-2 on Hopper by sequence length and direction (the FlashAttention-3 paper's figures)",
     ("attention_by_seq",)),
    ("+ attention kernels at the sustained clock (the papers' short benchmarks x MSMF / MAMF = 0.844)",
     ("attention_sustained",)),
    ("+ NCCL's ring latency: n - 1 steps through every rank, nodes - 1 of them on the network (tuning.cc)",
     ("ring_latency_steps",)),
    ("+ FSDP2's own kernels (torchtitan: copy-in, copy-out, chunk_cat, in place of the flat-buffer copies)",
     ("fsdp2",)),
    ("+ torch's checkpoint early stop (torchtitan: the recompute ends before the block's last GEMM)",
     ("early_stop",)),
    ("+ torchtitan's llama kernels (eager: rope in complex fp32, repeat_kv's copies, no head-merge copy; "
     "the logits' .float())", ("titan_model",)),
    ("+ gradient clipping's passes (torch's clip_grad_norm_: the norm's read, the unconditional scale)", ("clip",)),
]
SETS = [("given: torchtitan", GIVEN), ("held out, then examined: llm-foundry H100 + A100 80GB modes", HELD_OUT),
        ("examined: llm-foundry A100 80GB 125M-13B", EXAMINED), ("held out: llm-foundry A100 40GB", HELD_OUT_2),
        ("torchtitan compiled (2024-12 Tables 1, 3)", COMPILED)]
PER_ROW = GIVEN + COMPILED  # the first table's columns: torchtitan's rows


def errors(rows: list[dict], on: set) -> list[float]:
    out = []
    for row in rows:
        full = row_cluster(row)
        c = full if ("profile" in on or "H100" not in row["cluster"]) else load_cluster("H100-SXM", row["gpus"])
        c = replace(c, **{k: (getattr(full, k) if k in on else v) for k, v in OFF.items()})
        recompute = None if "recompute_op" in on else row["layout"]["recompute"].replace("selective-op", "selective")
        got = predict(row, c, comm_dtype="row" if "comm_dtype" in on else None, recompute=recompute,
                      row_attention="row_attention" in on, eager_norm="eager_norm" in on,
                      row_adam="eager_adam" in on, row_compile="compile" in on, row_fsdp2="fsdp2" in on,
                      row_early_stop="early_stop" in on, row_model="titan_model" in on, row_clip="clip" in on)
        out.append(got["tokens_per_gpu"] / row["tokens_per_gpu"] - 1)
    return out


def run() -> list[tuple[str, list[list[float]]]]:
    on: set = set()
    out = []
    for label, terms in STEPS:
        on |= set(terms)
        out.append((label, [errors(rows, on) for _, rows in SETS]))
    return out


def _mean(errs: list[float]) -> float:
    return sum(abs(e) for e in errs) / len(errs)


def table() -> list[str]:
    rows = run()
    head = "| term | " + " | ".join(r["case"] for r in PER_ROW) + " | mean abs (given) |"
    lines = [head, "|" + " --- |" * (len(PER_ROW) + 2)]
    for label, per_set in rows:
        errs = per_set[0] + per_set[-1]  # given, then the compiled runs
        lines.append(f"| {label} | " + " | ".join(f"{e:+.1%}" for e in errs) + f" | {_mean(per_set[0]):.3f} |")
    lines += ["", "| term | " + " | ".join(f"{name} ({len(r)} rows): mean / max" for name, r in SETS) + " |",
              "|" + " --- |" * (len(SETS) + 1)]
    for label, per_set in rows:
        lines.append(f"| {label} | " + " | ".join(f"{_mean(e):.3f} / {max(abs(x) for x in e):.3f}"
                                                  for e in per_set) + " |")
    return lines


# the memory terms, switched on in turn (docs/planner.md, "Memory against the published runs")
MEM_STEPS = [("before: the papers' GPT-2 block (dropout masks), F.cross_entropy's fp32 loss (12sbv)", set()),
             ("+ full recompute's working layer", {"working_set"}),
             ("+ the row's dropout (llm-foundry: 0, no masks: 34sbh -> 32sbh)", {"row_dropout"}),
             ("+ the row's loss (llm-foundry: fused cross-entropy on bf16 logits, 12sbv -> 4sbv)", {"row_loss"})]


def memory(row: dict, on: set) -> tuple[float, bool]:
    """(planned GiB per GPU, fits) for a row with the memory terms in `on`."""
    p = predict(row, row_dropout="row_dropout" in on, row_loss="row_loss" in on)["plan"]
    total = sum(ln.bytes for ln in p.memory if ln.name != "recompute working set" or "working_set" in on)
    return total / 2**30, total <= p.capacity


def memory_table() -> list[str]:
    lines = ["| term | " + " | ".join(f"{name} ({len(r)} rows)" for name, r in SETS) + " |",
             "|" + " --- |" * (len(SETS) + 1)]
    on: set = set()
    for label, terms in MEM_STEPS:
        on = on | terms
        cells = []
        for _, rows in SETS:
            got = [(memory(r, on), r) for r in rows]
            fit = sum(f for (_, f), _ in got)
            worst = max(g / (row_cluster(r).hbm_bytes * row_cluster(r).mem_usable_fraction / 2**30)
                        for (g, _), r in got)
            pub = [f"{g / r['mem_gib'] - 1:+.1%}" for (g, _), r in got if r.get("mem_gib")]
            cells.append(f"{fit}/{len(rows)} fit, largest {worst:.0%} of usable"
                         + (f"; published: {', '.join(pub)}" if pub else ""))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


if __name__ == "__main__":
    print("\n".join(table()))
    print()
    print("\n".join(memory_table()))
