"""The eleventh set: Megatron-Bridge's Llama 3 70B fine-tuning (SFT) rows, frozen in a commit before the planner was
run on them (docs/planner.md, "The eleventh set"). Collected 2026-12-07; none of these rows had been planned: no row
is seen.

Source: NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md and docs/performance-summary-archive.md, every version
of both (22 commits). Collection rule: every SFT row of a dense Llama, one row per layout at its latest container's
figure. The tables have SFT rows in one container only, 26.06 (first published in 63b08b397, archived since): Llama 3
70B on 32 GPUs, GBS 32, micro batch 1, 4,096 tokens, on DGX-GB300, DGX-GB200 (FP8 and MXFP8) and DGX-H100 (FP8): 5
rows. The eighth to tenth sets skipped SFT; the LoRA rows are skipped here (the planner has no adapter: frozen
weights skip their weight-gradient GEMMs).

The recipe, read at 63b08b397 (scripts/performance/configs/llama/llama3_llm_finetune.py `llama3_70b_sft_config_*`,
llama3_workload_base_configs.py `_LLAMA3_70B_SFT_CONFIG_*`, src/megatron/bridge/recipes/llama/llama3.py
`llama3_70b_sft_config`, training/comm_overlap.py, training/mixed_precision.py) is the eighth set's pre-training
recipe (published_gpu_eighth.py) except:
- 4,096 tokens a sequence, packed from a fine-tuning dataset (`packed_sequence_specs.packed_sequence_size`): attention
  runs per packed document (cu_seqlens), which the planner has no input for: it plans causal attention over the
  whole 4,096 (an upper bound on attention's cost; a fifth of the 8B's step, less at 70B);
- the GB300 and GB200 layouts have no tensor parallelism (TP 1: no sequence parallelism, no userbuffers); the H100's
  TP 4 has both (`tp_comm_overlap=True` where TP > 1);
- Transformer Engine's CUDA graphs around each block's MLP (`cuda_graph_impl="transformer_engine"`,
  `cuda_graph_scope="mlp"`) on every row but nothing else: launch gaps kept (the preset's), not a planner input;
- `disable_parameter_transpose_cache=True`: under FP8 parameters (`fp8_param_gather`, set by both precision
  recipes) no weight is cast per micro batch either way; on Hopper the FP8 weights' transposes are redone each micro
  batch, not a planner input;
- the distributed optimizer overlaps its reduce-scatter and all-gather wherever DP > 1 (`CommOverlapConfig`'s
  `_get_optimizer_overlap_cfgs`: every row here), buckets of 128 Mi elements, gradients reduced in bf16;
- MXFP8 rows: `bf16_with_mxfp8_mixed` (published_gpu_tenth.py's).
"""
from __future__ import annotations

from .published_gpu_eighth import _mb, evaluate_rows  # noqa: F401  (evaluate_rows: the script's)
from .published_gpu_tenth import _mx

SEQ = 4096


def _sft(case, cluster, tp, pp, vp, tokens, notes) -> dict:
    """A 26.06 SFT row: Llama 3 70B on 32 GPUs, GBS 32, micro batch 1, 4,096 tokens."""
    return _mb(case, "70b", cluster, 32, 32, 1, tp, pp, 1, vp, tokens, "26.06", "63b08b397",
               notes=f"SFT, packed sequences of {SEQ}; {notes}", seq=SEQ)


_GB300 = "_LLAMA3_70B_SFT_CONFIG_GB300: TP 1, PP 2 VP 20 (DP 16: 2 micro batches a step); TE graphs of the MLPs"
_GB200 = "_LLAMA3_70B_SFT_CONFIG_GB200: TP 1, PP 8 VP 10 (DP 4); TE graphs of the MLPs"
ELEVENTH = [
    _sft("MB Llama3-70B SFT GB300x32 FP8-CS", "GB300", 1, 2, 20, 4819, _GB300),
    _mx(_sft("MB Llama3-70B SFT GB300x32 MXFP8", "GB300", 1, 2, 20, 4312, _GB300)),
    _sft("MB Llama3-70B SFT GB200x32 FP8-CS", "GB200", 1, 8, 10, 3864, _GB200),
    _mx(_sft("MB Llama3-70B SFT GB200x32 MXFP8", "GB200", 1, 8, 10, 3593, _GB200)),
    _sft("MB Llama3-70B SFT H100x32 FP8-CS", "H100-SXM", 4, 4, 5, 1638,
         "_LLAMA3_70B_SFT_CONFIG_H100_FP8_CS_V1: TP 4 userbuffers, PP 4 VP 5 (DP 2); TE graphs of the MLPs"),
]
