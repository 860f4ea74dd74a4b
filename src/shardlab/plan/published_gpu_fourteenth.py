"""The fourteenth set: Megatron-Bridge's Kimi-K2 pre-training row (published_gpu_fourteenth_rows.py, frozen before the
planner ran on it) as the planner's row: a model no earlier set had (DeepSeek-V3's architecture at 384 experts, 64
heads, one leading dense block, no multi-token prediction) trained with Muon, which no earlier set used.

Its model is Kimi-K2 as the bridge builds it (KIMI_K2_SHAPES, read through the thirteenth set's `shape_of`), its
layout the table's, and its recipe the inputs the planner has, as the thirteenth set takes them, with these
differences the recipe states (written before the row was planned):
- the optimizer: Muon (`optimizer=muon`, the planner's Newton-Schulz FLOPs and state bytes, optim/muon/cost.py) in
  Megatron-Core's LayerWiseDistributedOptimizer: whole parameters dealt over the data-parallel ranks
  (`zero_partition=params` on zero1; the experts over their own group, edp = 1 here), each rank's gradients
  all-reduced in bf16 by DDP (`zero1_impl=all_reduce`, 64e6-element buckets: Megatron's default max(40e6, 1e6 x
  DP)), the updated parameters all-gathered after the step; every optimizer state in fp32 (no precision-aware
  optimizer);
- no EP overlap (so HybridEP's SMs cost nothing apart: `ep_sms` 0), no CUDA graphs (the presets' launch gaps);
- the recipe's pipeline layout ("Et*4|(t*4|)*14tL") and recompute modules (mla_up_proj), as the thirteenth set's
  inputs after its first evaluation.
What the planner has no input for: Muon on the router's weight (the recipe's Muon steps it; the planner's steps the
block linears only, the router with Adam), Megatron's snake deal of whole parameters by size (planned as torch's
greedy one), the manual garbage collection every 5 steps.
"""
from __future__ import annotations

from .published_gpu_eighth import PASSES, SOURCE
from .published_gpu_heldout import MEGATRON_INTERLEAVED, _row, evaluate_rows  # noqa: F401  (evaluate_rows: the script's)
from .published_gpu_fourteenth_rows import KIMI_K2_SHAPES, ROWS
from .published_gpu_thirteenth import PRECISION, _layout, _modules, shape_of
from .published_gpu_twelfth import cuda_graphs, dispatcher

BUCKET_MIB = 64e6 * 2 / 2**20  # Megatron DDP's default bucket, max(40e6, 1e6 x DP) elements at DP 64, of bf16


def planner_row(r: dict) -> dict:
    """The frozen row as the planner's row (plan/published_gpu_heldout.py's form)."""
    rec, tp, pp, cp, vp = r["recipe"], r["tp"], r["pp"], r["cp"], r["vp"] or 1
    lay = {"dp": r["gpus"] // (tp * pp * cp), "tp": tp, "pp": pp, "cp": cp, "ep": r["ep"], "sp": tp > 1,
           "strategy": "zero1", "zero_partition": "params", "zero1_impl": "all_reduce", "overlap_grad_reduce": True,
           "zero_bucket_mb": BUCKET_MIB, "pp_layout": _layout(rec, pp, vp), "recompute_modules": _modules(rec),
           "ep_dispatcher": dispatcher(rec),
           **({"schedule": MEGATRON_INTERLEAVED, "v": vp, "overlap_p2p_comm": rec.get("overlap_p2p_comm") is True}
              if vp > 1 else {})}
    shape = shape_of(KIMI_K2_SHAPES[r["model"]], rec["mtp_num_layers"])
    return _row(r["case"], shape, r["system"].removeprefix("DGX-"), r["gpus"], r["seq"], r["mbs"], r["gbs"], lay,
                r["tokens_per_gpu"], f"{SOURCE}, {r['container']} container (first published in {r['commit']})",
                None, comm_dtype="bf16", precision="bf16-mixed", fp8=PRECISION[r["precision"]], dropout=False,
                fused_loss=True, optimizer_passes=PASSES, llama_impl="te", optimizer="muon", optim_dtype="fp32",
                cuda_graphs=cuda_graphs(rec), cluster_fields={"attention": "cudnn"}, notes=r["notes"], seen="")


FOURTEENTH = [planner_row(r) for r in ROWS]
