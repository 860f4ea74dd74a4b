"""The planner's GPU terms switched on one at a time over the published rows it is given (torchtitan's
Llama 3 runs): the error on tokens/s/GPU before and after each term (docs/planner.md, "The GPU terms").

    PYTHONPATH=src python scripts/planner_terms.py
"""
from __future__ import annotations

from dataclasses import replace

from shardlab.plan.hardware import load_cluster
from shardlab.plan.published_gpu import GIVEN, predict

OFF = dict(call_latency=0.0, busbw_eff_intra=1.0, busbw_eff_allreduce_intra=1.0, busbw_eff_inter=1.0,
           nccl_ctas=0, gemm_roofline=False, attention="")
# (label, what the step sets on the cluster, on the row's layout)
STEPS = [
    ("baseline (datasheet H100-SXM, bf16 reduce, ideal links and kernels)", {}, {}),
    ("+ power-capped HBM2e part (H100-SXM-500W)", {"profile": True}, {}),
    ("+ fp32 gradient reduction (torchtitan's reduce_dtype)", {}, {"comm_dtype": "fp32"}),
    ("+ achieved bus bandwidth (NCCL latency, ring efficiency)", {k: None for k in ("call_latency", "busbw_eff_intra",
                                                                              "busbw_eff_allreduce_intra",
                                                                              "busbw_eff_inter")}, {}),
    ("+ NCCL's SMs taken from overlapped compute", {"nccl_ctas": None}, {}),
    ("+ GEMM by shape (waves, HBM roofline)", {"gemm_roofline": None}, {}),
    ("+ attention kernel rate (FlashAttention-2)", {"attention": None}, {}),
    ("+ torchtitan's selective-op recompute", {}, {"recompute_op": True}),
]


def run() -> list[tuple[str, list[float]]]:
    out, on, lay_on = [], {}, {}
    for label, cl, lay in STEPS:
        on.update(cl)
        lay_on.update(lay)
        errs = []
        for row in GIVEN:
            name = row["cluster"] if (on.get("profile") or "H100" not in row["cluster"]) else "H100-SXM"
            c = load_cluster(name, row["gpus"])
            full = load_cluster(row["cluster"], row["gpus"])
            c = replace(c, **{k: (getattr(full, k) if k in on else v) for k, v in OFF.items()})
            got = predict(row, c, comm_dtype=lay_on.get("comm_dtype"),
                          recompute=None if lay_on.get("recompute_op") else row["layout"]["recompute"].replace(
                              "selective-op", "selective"))
            errs.append(got["tokens_per_gpu"] / row["tokens_per_gpu"] - 1)
        out.append((label, errs))
    return out


def table() -> list[str]:
    rows = run()
    head = "| term | " + " | ".join(r["case"] for r in GIVEN) + " | mean abs |"
    lines = [head, "|" + " --- |" * (len(GIVEN) + 2)]
    for label, errs in rows:
        lines.append(f"| {label} | " + " | ".join(f"{e:+.1%}" for e in errs)
                     + f" | {sum(abs(e) for e in errs) / len(errs):.3f} |")
    return lines


if __name__ == "__main__":
    print("\n".join(table()))
