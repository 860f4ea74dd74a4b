"""The eighth set: Megatron-Bridge's dense Llama 3 rows on DGX H100 and DGX B200, frozen in a commit before the
planner was run on them (docs/planner.md, "The eighth set"). Collected 2026-12-06. A stack no earlier set holds:
Megatron-Core with Transformer Engine (2025-26), FP8 with current scaling, and the first B200 rows.

Source: NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md and docs/performance-summary-archive.md, every
version of both (21 commits, af6bc366d to 4ab94dfad). Collection rule: every pre-training row of a dense Llama
(LLAMA3_8B, LLAMA3_70B, LLAMA3.1_405B) on DGX-H100 or DGX-B200 (17 rows, 7 layouts); where a layout was published
in several containers, the latest container's figure (the same recipe, re-measured on newer software). Skipped:
GB200, GB300, B300 (no preset), MoE models, SFT and LoRA, and the parenthesised FP8-MX figures (MXFP8's 1x32 block
scaling: the planner's float8 recipes are tensorwise and rowwise). The tables' "FP8" without a suffix (26.02 on) is
current scaling: the scripts accept only `fp8_cs` among the FP8 recipes for these H100 workloads.

The recipe, read in the performance scripts and recipes at each row's publishing commit (path@commit in the rows'
notes; the same reading for all unless a row says otherwise):
- FP8 current scaling (`bf16_with_fp8_current_scaling_mixed`: TE's Float8CurrentScaling, per-tensor scales from the
  tensor's own amax, which is torchao's tensorwise dynamic scaling: fp8="tensorwise"), `fp8_param_gather=True`,
  `first_last_layers_bf16=True` (the first and last block in bf16: not a planner input, 2 of 32-126 blocks).
- Gradients reduced in bf16 (`grad_reduce_in_fp32=False` in the perf scripts from 25.11), into a bf16 gradient buffer
  with gradient-accumulation fusion (no separate copy, no fp32 accumulation).
- Megatron-Core's distributed optimizer (ZeRO-1: gradients reduce-scattered, parameters all-gathered), both
  overlapped (`overlap_grad_reduce`, `overlap_param_gather`), buckets of 128 Mi elements (256 MiB of bf16),
  `average_in_collective` (no divide pass); Adam, clip 1.0 (Megatron scales only when the norm exceeds it): the
  optimizer passes zero_grads, grad_norm, master_copy.
- Transformer Engine's layers: fused RMSNorm, fused rope, cuDNN fused attention (TE prefers FusedAttention from Hopper
  on: "Disabling FlashAttention to give FusedAttention preference on Hopper+"), TE's fused cross entropy
  (`cross_entropy_fusion_impl="te"`), no dropout.
- TP > 1: sequence parallel and Transformer Engine's userbuffers overlap (`tp_comm_overlap=True`, the
  `userbuffers_fp8_*` configs), interleaved 1F1B with the table's VP; the 405B recipes count the embedding and the
  loss as a layer each in the pipeline split (`account_for_embedding_in_pipeline_split`,
  `account_for_loss_in_pipeline_split`: pp_split=ends-as-blocks); CP 2 by TE's p2p ring (`cp_comm_type` unset).
- The tables' vocabulary is 128,256 padded to a multiple of 128 x TP (`should_pad_vocab`).
What the planner has no input for, in the rows' notes: the overlapped pipeline sends (`overlap_p2p_comm`), FP8
parameter all-gathers under the distributed optimizer (the planner's float8 gather is FSDP's), the bf16 first and
last blocks, TE's CP ring kernels (planned as the own ring), `overlap_param_gather_with_optimizer_step`.

After the first evaluation, two inputs the planner gained then, each read in the code the runs used, not fitted:
`llama_impl="te"` on every row (what Transformer Engine's modules save for backward: the first evaluation planned
shardlab's own block and put five of the seven runs over the GPU's memory; no time moved), and `overlap_p2p_comm`
on the interleaved rows (Megatron-Core's pipeline transfers beside the chunks' compute, the recipes' setting).

Seen before freezing (`seen`): two rows were planned, by hand and with their recipe guessed, while the B200 preset
and the Hopper attention rates were written (docs/planner.md, "Cluster presets"): the 8B rows on 8 B200 and on 8 H100.
"""
from __future__ import annotations

from dataclasses import asdict

from .presets import PRESETS
from .published_gpu_heldout import MEGATRON_INTERLEAVED, _row, evaluate_rows  # noqa: F401  (evaluate_rows: the script's)

SOURCE = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary{,-archive}.md"
PASSES = ("zero_grads", "grad_norm", "master_copy")


def _llama(size: str, tp: int) -> dict:
    """The preset's Llama 3 shape with the vocabulary padded as Megatron pads it: to a multiple of 128 x TP."""
    shape = {k: v for k, v in asdict(PRESETS[f"llama3-{size}"]).items()
             if k in ("n_layer", "d_model", "n_head", "vocab", "arch", "n_kv_heads", "ffn", "tied")}
    step = 128 * tp
    return {**shape, "vocab": -(-shape["vocab"] // step) * step}


def _mb(case, size, cluster, gpus, gbs, micro, tp, pp, cp, vp, tokens, container, commit, fsdp=False, seen="",
        notes="", seq=8192, cuda_graphs="none", **cluster_fields) -> dict:
    dp = gpus // (tp * pp * cp)
    lay = {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "sp": tp > 1, "tp_comm_overlap": tp > 1,
           "strategy": "zero3" if fsdp else "zero1", "overlap_grad_reduce": True,
           **({} if fsdp else {"zero_bucket_mb": 256.0}),
           **({"cp_impl": "own"} if cp > 1 else {}),
           # overlap_p2p_comm: the recipe's (`overlap_p2p_comm=True`, `batch_p2p_comm=False`), a row input since
           # the planner gained it after the first evaluation
           **({"schedule": MEGATRON_INTERLEAVED, "v": vp, "overlap_p2p_comm": True} if vp > 1 else {}),
           **({"pp_split": "ends-as-blocks"} if size == "405b" else {})}
    return _row(case, _llama(size, tp), cluster, gpus, seq, micro, gbs, lay, tokens,
                f"{SOURCE}, {container} container (first published in {commit})", None, comm_dtype="bf16",
                fp8="tensorwise", dropout=False, fused_loss=True, optimizer_passes=PASSES, seen=seen,
                # after the first evaluation (which planned shardlab's own block's saved tensors: five of seven
                # did not fit): Transformer Engine's modules, memory only (TrainSpec.llama_impl)
                llama_impl="te",
                # whole-iteration CUDA graphs: no launch gaps, no host time (plan/host.py; planned as the cluster's
                # kernel_gap_s 0 until the twelfth and thirteenth sets)
                cuda_graphs=cuda_graphs,
                cluster_fields={"attention": "cudnn", **cluster_fields},
                notes=notes or "TE userbuffers, distributed optimizer, FP8 current scaling")


EIGHTH = [
    _mb("MB Llama3-8B B200x8 FP8-CS", "8b", "B200", 8, 128, 2, 1, 1, 1, 1, 30624, "25.11", "97ad8cc6f",
        cuda_graphs="full", seen="planned by hand while the B200 preset was written",
        notes="CUDA graphs over the whole iteration (cuda_graph_scope full_iteration): no launch gaps "
              "(cuda_graphs full); LLAMA3_8B_PRETRAIN_CONFIG_B200_FP8_CS_BASE_CONFIG @97ad8cc6f"),
    _mb("MB Llama3.1-405B B200x128 FP8-CS", "405b", "B200", 128, 64, 1, 4, 8, 2, 8, 661, "25.11", "97ad8cc6f",
        notes="userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192; no recompute, no CUDA graphs"),
    _mb("MB Llama3-8B H100x8 FP8-CS", "8b", "H100-SXM", 8, 128, 1, 1, 1, 1, 1, 14451, "25.11", "97ad8cc6f",
        fsdp=True, seen="planned by hand while the Hopper cuDNN attention rates were written",
        notes="the table's FSDP column (Megatron FSDP, optim_grads_params over 8, FP8 parameter gather); the "
              "recipe at 97ad8cc6f had replaced it by DDP with 5 blocks recomputed (cb62f8620, 2025-11-21): the "
              "table's own column is taken"),
    _mb("MB Llama3-70B H100x64 FP8-CS gbs128", "70b", "H100-SXM", 64, 128, 1, 4, 8, 1, 5, 1602, "25.11",
        "97ad8cc6f", notes="userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192; no recompute, no CUDA graphs"),
    _mb("MB Llama3.1-405B H100x1024 FP8-CS gbs512", "405b", "H100-SXM", 1024, 512, 1, 8, 8, 2, 8, 292, "25.11",
        "97ad8cc6f", notes="userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192; no recompute, no CUDA graphs"),
    _mb("MB Llama3-70B H100x64 FP8 gbs256", "70b", "H100-SXM", 64, 256, 1, 4, 8, 1, 5, 1664, "26.04.01",
        "17a381f95", notes="26.x recipe (llama3_70b_pretrain_config_h100): as 25.11's, GBS 256"),
    _mb("MB Llama3.1-405B H100x1024 FP8 gbs1536", "405b", "H100-SXM", 1024, 1536, 1, 8, 8, 2, 8, 326, "26.06",
        "63b08b397", notes="26.x recipe (llama31_405b_pretrain_config_h100): as 25.11's, GBS 1536"),
]
