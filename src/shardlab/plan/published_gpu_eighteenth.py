"""The eighteenth set: a matched memory and step-time study of Megatron-Bridge's Moonlight 16B recipe on 8 H100s, frozen
in a commit before the planner was run on it (docs/planner.md, "The eighteenth set"). Collected 2026-12-07 from a page
no earlier set used; the first set with published memory for an MoE run beside its step time.

Source: NVIDIA-NeMo/Megatron-Bridge skills/nemo-mbridge-perf-activation-recompute (SKILL.md "Matched H100 Evidence:
Moonlight 16B" and card.yaml `measured_results`, at 067f987df), a 2026-08-12 study: Bridge 600d069b8, Megatron-Core
24bad8e, "the Moonlight 16B BF16 pretraining recipe", 8 H100 80GB, sequence 4,096, MBS 1, GBS 4, TP 2, PP 1, CP 1,
EP 8, mock data, 20 steps; each row changes only `recompute_modules` (an empty list: no recompute). Figures: "Peak
allocated memory is the maximum post-optimizer value reported after iteration 2", in GB as Megatron-Bridge reports
it (training/utils/train_utils.py `report_memory` at 600d069b8: torch's allocated_bytes.all.peak / 1.0e9, five
significant digits: decimal gigabytes, converted here to GiB); step time the mean of iterations 11-20, tokens/s/GPU
= 4 x 4,096 / (step time x 8). Collection rule: every row whose recompute modules the planner has (the sixth,
`layernorm` + `moe_act`, left out: no `layernorm` module in the planner). Its TFLOP/s column is the run's own count
and not used.

The recipe (src/megatron/bridge/recipes/moonlight/h100/moonlight_16b.py `moonlight_16b_pretrain_8gpu_h100_bf16_config`
at 600d069b8, read before the first evaluation), mapped as the sixteenth set maps its Moonlight row
(published_gpu_sixteenth.py `planner_row`) with what the 8-GPU recipe sets: TP 2 with sequence parallelism, EP 8, the
all-to-all dispatcher (`moe_token_dispatcher_type="alltoall"`), no CUDA graphs, no EP overlap and no delayed weight
gradients, grouped GEMM and permute fusion (router fusion off: not a planner input), TE's fused cross-entropy, the
distributed optimizer with overlapped reduce-scatter and all-gather, gradients reduced in bf16, the precision-aware
optimizer with bf16 main gradients and moments, the model's 163,840-entry vocabulary (NullTokenizer at the model's
size), selective granularity with the row's modules. What the planner has no input for: the natural routing (sigmoid
router, expert bias, sequence auxiliary loss: planned balanced, as every set), the shared expert's overlap
(`moe_shared_expert_overlap=True`), manual GC every 5 steps.
"""
from __future__ import annotations

import copy

from .published_gpu_heldout import evaluate_rows  # noqa: F401  (evaluate_rows: the script's)
from .published_gpu_sixteenth import planner_row
from .published_gpu_sixteenth_rows import ROWS

SOURCE = ("NVIDIA-NeMo/Megatron-Bridge @067f987df skills/nemo-mbridge-perf-activation-recompute (the 2026-08-12 "
          "matched Moonlight 16B study: Bridge 600d069b8, Megatron-Core 24bad8e)")
GPUS, GBS, SEQ = 8, 4, 4096
GB = 1e9  # Megatron-Bridge's report_memory: bytes / 1.0e9
# (recompute_modules, peak allocated GB, step time ms): SKILL.md's table
STUDY = [([], 36.618, 457.18), (["core_attn"], 36.614, 474.80), (["mla_up_proj"], 35.902, 480.89),
         (["mla_up_proj", "mlp"], 35.917, 496.73), (["moe_act"], 35.941, 466.26)]
# what the 8-GPU recipe sets where the sixteenth set's Moonlight recipe (its 16-GPU performance recipe) differs
RECIPE = {"moe_token_dispatcher_type": "alltoall", "moe_flex_dispatcher_backend": "deepep", "moe_hybridep_num_sms": 16,
          "sequence_parallel": True, "cuda_graph_impl": "none", "overlap_moe_expert_parallel_comm": False,
          "delay_wgrad_compute": False, "moe_router_fusion": False, "moe_shared_expert_overlap": True,
          "recompute_granularity": "selective", "grad_reduce_in_fp32": False, "cross_entropy_loss_fusion": True,
          "use_precision_aware_optimizer": True, "bucket_size": 134217728, "pipeline_model_parallel_layout": None}


def _row(modules: list[str], peak_gb: float, step_ms: float) -> dict:
    base = next(r for r in ROWS if r["model"] == "moonlight-16b-a3b")
    rec = copy.deepcopy(base["recipe"]) | RECIPE | {"recompute_modules": modules}
    rec["extra"] = {**rec["extra"], "moe_flex_dispatcher_num_sms": None, "vocab_size_in_run": 163840,
                    "padded_vocab_size_in_run": 163840}
    case = f"MB Moonlight-16B H100x{GPUS} BF16 recompute {'+'.join(modules) or 'none'}"
    frozen = {**base, "case": case, "gpus": GPUS, "gbs": GBS, "mbs": 1, "seq": SEQ, "tp": 2, "pp": 1, "cp": 1, "vp": None,
              "ep": 8, "tokens_per_gpu": round(GBS * SEQ / (step_ms / 1e3 * GPUS), 1), "step_time_ms": step_ms,
              "recipe": rec, "notes": f"{step_ms} ms a step at GBS {GBS} (one micro batch a rank); peak allocated "
                                      f"{peak_gb} GB (decimal) after iteration 2"}
    row = planner_row(frozen)
    row.update(source=SOURCE, mem_gib=round(peak_gb * GB / 2**30, 3), published=f"{step_ms} ms/step, {peak_gb} GB")
    return row


EIGHTEENTH = [_row(*x) for x in STUDY]
