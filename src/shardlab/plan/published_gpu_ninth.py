"""The ninth set: Megatron-Bridge's dense Llama 3 rows on GB200 and GB300 (the NVL72 racks' GPUs), frozen in a commit
before the planner was run on them (docs/planner.md, "The ninth set"). Collected 2026-12-06, after the GB200 and
GB300 presets were written from the parts' published figures (commit 57d7234) and before any of these rows was
planned: no row is seen.

Source: NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md and docs/performance-summary-archive.md, every
version of both (22 commits). Collection rule, the eighth set's on the two parts it skipped: every pre-training row of
a dense Llama (LLAMA3_8B, LLAMA3_70B, LLAMA3.1_405B) on DGX-GB200 or DGX-GB300 in FP8 with current scaling ("FP8-CS";
the 26.x tables' plain "FP8", the scripts' only plain FP8 recipe, `fp8_cs`), one row per layout at its latest
container's figure: 11 layouts. Skipped: the MXFP8 and NVFP4 rows (block-scaled formats the planner's float8 recipes
do not describe) and the 25.09 rows (an earlier container of layouts given here, with no precision column).

The recipe is the eighth set's (published_gpu_eighth.py's docstring: FP8 current scaling with `fp8_param_gather`,
gradients reduced in bf16, Megatron-Core's distributed optimizer with 128 MiB buckets, Transformer Engine's layers
and cuDNN fused attention, TE's fused cross entropy, sequence parallel and userbuffers TP overlap where TP > 1,
interleaved 1F1B with `overlap_p2p_comm`, the 405B split counting the embedding and the loss as blocks), with
`llama_impl="te"`, read in the performance scripts and recipes at each row's publishing commit (path@commit in the
rows' notes). What differs on these parts:
- `first_last_layers_bf16=False` (scripts/performance/utils/precision.py@97ad8cc6f): every block in FP8.
- The 70B and the 128-GPU 405B rows run Megatron FSDP (`use_megatron_fsdp`, `optim_grads_params`: ZeRO-3) with
  activations of N blocks offloaded to the Grace CPU (`cpu_offloading_num_layers`; weights not offloaded). At the
  first evaluation the planner had no input for it and planned every activation on the GPU (six of eleven runs "did
  not fit"); after it, those rows take the recipe's N as `offload_activations` (plan/offload.py: TE's schedule).
- The 405B GB200 FSDP row keeps two distributed-optimizer instances (`num_distributed_optimizer_instances=2`): each
  shards over half the data-parallel ranks, HSDP's dp_shard 32 of 64.
- The 8B rows capture the whole iteration in CUDA graphs (`cuda_graph_impl="local"`, scope `full_iteration`): no
  launch gaps (cuda_graphs full), as the eighth set's 8B B200 row.
Placement: the scripts place GB200 and GB300 jobs 4 GPUs to a node in Slurm segments of 16 nodes (64 GPUs, one NVLink
domain: scripts/performance/utils/executors.py@97ad8cc6f), the presets' node of 64.
"""
from __future__ import annotations

from .published_gpu_eighth import _mb, evaluate_rows  # noqa: F401  (evaluate_rows: the script's)

_R8 = "scripts/performance/configs/llama/llama3_workload_base_configs.py"
_R405 = "scripts/performance/configs/llama/llama31_workload_base_configs.py"


def _hsdp(row: dict, shard: int) -> dict:
    """Megatron FSDP with several distributed-optimizer instances: each shards over `shard` ranks."""
    row["layout"]["dp_shard"] = shard
    return row


def _offload(row: dict, blocks: int) -> dict:
    """The recipe's `cpu_offloading_num_layers`, a row input since the planner gained it after the first evaluation
    (0.102 mean, max 0.232, two rows over 0.15; six of eleven runs planned not to fit)."""
    row["layout"]["offload_activations"] = blocks
    return row


NINTH = [
    _mb("MB Llama3-8B GB200x8 FP8-CS", "8b", "GB200", 8, 128, 2, 1, 1, 1, 1, 31508, "25.11", "97ad8cc6f",
        cuda_graphs="full", notes=f"CUDA graphs over the whole iteration; LLAMA3_8B_PRETRAIN_CONFIG_GB200_FP8_CS "
                                f"@97ad8cc6f ({_R8})"),
    _mb("MB Llama3-70B GB200x64 FP8-CS gbs128", "70b", "GB200", 64, 128, 2, 1, 1, 1, 1, 4312, "25.11", "97ad8cc6f",
        fsdp=True, notes="Megatron FSDP, activations of 40 of 80 blocks offloaded (no planner input); "
                         "LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS @97ad8cc6f"),
    _mb("MB Llama3-70B GB200x64 FP8 gbs256", "70b", "GB200", 64, 256, 2, 1, 1, 1, 1, 4224, "26.04.01",
        "21d102f5e", fsdp=True, notes="Megatron FSDP, 40 blocks' activations offloaded; the V2 preset @21d102f5e "
                                      "(4,352 at 17a381f95, re-published as 4,224)"),
    _hsdp(_mb("MB Llama3.1-405B GB200x128 FP8-CS", "405b", "GB200", 128, 64, 1, 2, 1, 1, 1, 706, "25.11",
              "97ad8cc6f", fsdp=True, notes="Megatron FSDP in two optimizer instances (dp_shard 32), TP 2 with "
                                            "userbuffers, 92 of 126 blocks' activations offloaded; @97ad8cc6f"), 32),
    _mb("MB Llama3.1-405B GB200x256 FP8 gbs1536", "405b", "GB200", 256, 1536, 1, 4, 16, 1, 4, 843, "26.06",
        "63b08b397", notes="distributed optimizer, TP 4 userbuffers, PP 16 VP 4 overlapped sends; the V2 preset "
                           f"@63b08b397 ({_R405})"),
    _mb("MB Llama3-8B GB300x8 FP8-CS", "8b", "GB300", 8, 128, 2, 1, 1, 1, 1, 37556, "25.11", "97ad8cc6f",
        cuda_graphs="full", notes="CUDA graphs over the whole iteration; the table's micro batch 2 (the preset at "
                                "97ad8cc6f sets 4: the table's columns are taken)"),
    _mb("MB Llama3-70B GB300x64 FP8-CS gbs128", "70b", "GB300", 64, 128, 2, 1, 1, 1, 1, 4440, "25.11", "97ad8cc6f",
        fsdp=True, notes="Megatron FSDP, 20 of 80 blocks' activations offloaded; @97ad8cc6f"),
    _mb("MB Llama3-70B GB300x64 FP8 gbs256", "70b", "GB300", 64, 256, 2, 1, 1, 1, 1, 5248, "26.04.01",
        "21d102f5e", fsdp=True, notes="Megatron FSDP, 20 blocks' activations offloaded; the V2 preset @21d102f5e "
                                      "(5,376 at 17a381f95, re-published as 5,248)"),
    _mb("MB Llama3.1-405B GB300x128 FP8-CS", "405b", "GB300", 128, 64, 1, 2, 1, 1, 1, 850, "25.11", "97ad8cc6f",
        fsdp=True, notes="Megatron FSDP, TP 2 with userbuffers, 10 of 126 blocks' activations offloaded; "
                         "@97ad8cc6f"),
    _mb("MB Llama3.1-405B GB300x256 FP8 tp2cp2", "405b", "GB300", 256, 1536, 1, 2, 8, 2, 4, 1024, "26.02.01",
        "cfeddcd94", notes="no preset at the publishing commits has this layout; the one that does (the GB300 "
                           "FP8_CS V2, e940d997d to 18c66e3cc): distributed optimizer, TP 2 userbuffers, CP 2, "
                           "PP 8 VP 4 overlapped sends"),
    _mb("MB Llama3.1-405B GB300x256 FP8 tp4", "405b", "GB300", 256, 1536, 1, 4, 8, 1, 4, 1048, "26.06",
        "63b08b397", notes="distributed optimizer, TP 4 userbuffers, PP 8 VP 4 overlapped sends; the V2 preset "
                           "@63b08b397"),
]
# after the first evaluation: each FSDP recipe's cpu_offloading_num_layers (the rows' notes)
_OFFLOADED = {"MB Llama3-70B GB200x64 FP8-CS gbs128": 40, "MB Llama3-70B GB200x64 FP8 gbs256": 40,
              "MB Llama3.1-405B GB200x128 FP8-CS": 92, "MB Llama3-70B GB300x64 FP8-CS gbs128": 20,
              "MB Llama3-70B GB300x64 FP8 gbs256": 20, "MB Llama3.1-405B GB300x128 FP8-CS": 10}
NINTH = [_offload(r, _OFFLOADED[r["case"]]) if r["case"] in _OFFLOADED else r for r in NINTH]
