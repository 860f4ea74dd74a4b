"""The tenth set: Megatron-Bridge's dense Llama 3 rows in MXFP8 on B200, GB200 and GB300, frozen in a commit before
the planner was run on them (docs/planner.md, "The tenth set"). Collected 2026-12-06, after the ninth set's
evaluation; none of these rows had been planned: no row is seen.

Source: NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md and docs/performance-summary-archive.md, every version
of both (22 commits). Collection rule: every pre-training row of a dense Llama (LLAMA3_8B, LLAMA3_70B, LLAMA3.1_405B)
on DGX-B200, DGX-GB200 or DGX-GB300 in MXFP8 (the 25.11 tables' "FP8-MX", the figure in parentheses with its
layout in parentheses where it differs; the 26.x tables' "MXFP8"), one row per layout at its latest container's
figure: 13 layouts. The eighth and ninth sets skipped these rows; the planner plans `mxfp8` as the float8 layer's
recipe of that name (1 x 32 blocks, E8M0 scales: its casts and scales, plan/fp8.py; the GEMMs at the FP8 rate,
which Blackwell's block-scaled tensor cores run MXFP8 at).

The recipe is the ninth set's (published_gpu_ninth.py) with `bf16_with_mxfp8_mixed` (every block in MXFP8,
`fp8_param_gather`, `reuse_grad_buf_for_mxfp8_param_ag`) and no Megatron FSDP, no activation offload, no recompute
on any row; the 8B rows capture the whole iteration in CUDA graphs. Read at each row's publishing commit (a helper
listed every row and setting with path@commit). The table's columns are taken where the scripts differ; the rows'
notes say where:
- the 25.11 tables give one micro-batch column for both precisions; the FP8-MX gradient accumulation in parentheses
  implies micro batch 1 for the 70B rows (GBS 128 = 8 data-parallel ranks x 1 x 16), as the presets set;
- four published layouts have no preset at any commit (GB300: 405B VP 8 where the preset has 4, 70B TP 2 where it
  has 1, 70B micro batch 2 without interleaving, 8B micro batch 2 where it has 4);
- what the planner has no input for: the distributed optimizer's parameter all-gather is planned after the step,
  not overlapped (the 25.11 70B and 405B MXFP8 builders set `overlap_param_gather=False`; the 26.x ones overlap it),
  and gathered in 16 bits, not MXFP8.
"""
from __future__ import annotations

from .published_gpu_eighth import _mb, evaluate_rows  # noqa: F401  (evaluate_rows: the script's)


def _mx(row: dict) -> dict:
    """The row in MXFP8: the float8 layer's mxfp8 recipe, not the current-scaling (tensorwise) one."""
    return {**row, "fp8": "mxfp8", "notes": "MXFP8; " + row["notes"]}


_CG = "CUDA graphs over the whole iteration"
TENTH = [_mx(r) for r in (
    _mb("MB Llama3.1-405B B200x128 MXFP8", "405b", "B200", 128, 64, 1, 4, 8, 2, 8, 624, "25.11", "97ad8cc6f",
        notes="LLAMA31_405B_PRETRAIN_CONFIG_B200_FP8_MX: TP 4 userbuffers, CP 2, PP 8 VP 8 overlapped sends; "
              "parameter all-gather not overlapped (25.11)"),
    _mb("MB Llama3-8B B200x8 MXFP8", "8b", "B200", 8, 128, 2, 1, 1, 1, 1, 29521, "25.11", "97ad8cc6f",
        cuda_graphs="full", notes=_CG),
    _mb("MB Llama3.1-405B GB200x128 MXFP8", "405b", "GB200", 128, 64, 1, 4, 8, 2, 8, 563, "25.11", "97ad8cc6f",
        notes="the FP8-MX layout of the 25.11 table (FSDP 0, TP 4, PP 8, CP 2, VP 8); parameter all-gather not "
              "overlapped (25.11)"),
    _mb("MB Llama3.1-405B GB200x256 MXFP8", "405b", "GB200", 256, 1536, 1, 4, 16, 1, 8, 783, "26.06", "63b08b397",
        notes="the V2 preset: TP 4, PP 16 VP 8"),
    _mb("MB Llama3-70B GB200x64 MXFP8 gbs128", "70b", "GB200", 64, 128, 1, 2, 4, 1, 5, 3617, "25.11", "97ad8cc6f",
        notes="TP 2 userbuffers, PP 4 VP 5; micro batch 1 (the table's FP8-MX gradient accumulation 16, the "
              "preset's); parameter all-gather not overlapped (25.11)"),
    _mb("MB Llama3-70B GB200x64 MXFP8 gbs256", "70b", "GB200", 64, 256, 1, 2, 4, 1, 5, 3712, "26.04.01",
        "21d102f5e", notes="the V2 preset (3,840 at 17a381f95, re-published as 3,712)"),
    _mb("MB Llama3-8B GB200x8 MXFP8", "8b", "GB200", 8, 128, 2, 1, 1, 1, 1, 29789, "25.11", "97ad8cc6f",
        cuda_graphs="full", notes=_CG),
    _mb("MB Llama3.1-405B GB300x128 MXFP8", "405b", "GB300", 128, 64, 1, 4, 8, 2, 8, 638, "25.11", "97ad8cc6f",
        notes="the table's VP 8 (the preset at every commit has VP 4); parameter all-gather not overlapped"),
    _mb("MB Llama3.1-405B GB300x256 MXFP8", "405b", "GB300", 256, 1536, 1, 2, 8, 2, 4, 952, "26.06", "63b08b397",
        notes="the V2 preset: TP 2, CP 2, PP 8 VP 4"),
    _mb("MB Llama3-70B GB300x64 MXFP8 gbs128", "70b", "GB300", 64, 128, 1, 2, 4, 1, 5, 4346, "25.11", "97ad8cc6f",
        notes="the table's TP 2 (the preset at every commit has TP 1); micro batch 1 by the table's gradient "
              "accumulation; parameter all-gather not overlapped (25.11)"),
    _mb("MB Llama3-70B GB300x64 MXFP8 gbs256", "70b", "GB300", 64, 256, 1, 1, 4, 1, 5, 4864, "26.04.01",
        "21d102f5e", notes="the V2 preset: TP 1, PP 4 VP 5 (4,736 at 17a381f95, re-published as 4,864)"),
    _mb("MB Llama3-70B GB300x64 MXFP8 mbs2", "70b", "GB300", 64, 256, 2, 1, 4, 1, 1, 4798, "26.02.01", "cfeddcd94",
        notes="no preset at any commit: the V2 preset with micro batch 2 and no interleaving (1F1B, batched sends)"),
    _mb("MB Llama3-8B GB300x8 MXFP8", "8b", "GB300", 8, 128, 2, 1, 1, 1, 1, 36108, "25.11", "97ad8cc6f",
        cuda_graphs="full", notes=_CG + "; the table's micro batch 2 (the preset sets 4)"),
)]
