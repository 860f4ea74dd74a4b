"""The nineteenth set: torchao's float8 training benchmarks (Llama 3 8B on 8 H100s, bfloat16, tensorwise and rowwise
float8), frozen in a commit before the planner was run on them (docs/planner.md, "The nineteenth set"). Collected
2026-12-07 from a file no earlier set used; the first matched e2e figure of the rowwise recipe without tensor
parallelism.

Source: pytorch/ao torchao/float8/README.md, "Training benchmarks" (added in 8c81863ba, 2025-03-12, unchanged at
fdddb2cf, the commit plan/fp8_rowwise.py reads its table at): "Single-node training on 8xH100 GPUs, Batch size 1,
Sequence length 8192, Steps 100, torch.compile, FSDP2", pytorch 2.7.0a0+gitb98af95, torchao 0.10.0+git890e0ac8,
torchtitan "0.0.2"; per row the median tokens/second (torchtitan's per-device `tps` log line, every 10 steps, step
1 excluded: benchmarks/float8/training/parse_torchtitan_logs.py) and the peak memory (the same lines' `memory:`
GiB, torchtitan's DeviceMemoryMonitor: torch's reserved_bytes.all.peak). Collection rule: every row of the table.

The recipe (benchmarks/float8/training/float8_training_benchmark.sh at 8c81863ba: torchtitan's llama3_8b.toml with
`--training.steps=100 --training.batch_size=1 --training.compile`, and per recipe its "best settings"), read in
torchtitan at 54ef42221 (2025-03-12, the benchmark's day; torchtitan called itself 0.0.2 from 2024-04 to 2025-06):
- FSDP2 over the 8 GPUs (data_parallel_shard_degree -1), bf16 parameters, fp32 gradient reduction
  (mixed_precision_reduce's only choice), torch's non-reentrant selective "op" activation checkpointing
  (selective_ac_option 'op'), sequence 8,192, one sequence a rank a step, no gradient accumulation, the gradient
  norm clipped at 1.0 every step;
- AdamW as config_manager.py's default then: `optimizer.implementation` "fused" (not the 2024 foreach), so
  eager_adam off; the loss eager (components/loss.py: F.cross_entropy of pred.float(); its compiled variant
  commented out "causes CUDA errors"), so not fused_loss; torchtitan's llama module (llama_impl="torchtitan");
- tensorwise: `--model.converters=float8 --float8.enable_fsdp_float8_all_gather
  --float8.precompute_float8_dynamic_scale_for_fsdp --float8.force_recompute_fp8_weight_in_bwd`: every linear but
  the output head (components/float8.py `module_filter_fn`) in dynamic tensorwise float8, the FSDP2 all-gather in
  float8 (the planner's zero3 under fp8="tensorwise" gathers the converted weights in float8);
- rowwise: `--float8.recipe_name=rowwise`: torchao's rowwise recipe, all-gather in bfloat16 (float8.py refuses the
  float8 all-gather with a recipe name), every linear but the head converted (no size filter before pytorch/ao#2410),
  planned with torchao's measured rowwise speedup by shape (plan/fp8_rowwise.py).
Everything is `heldout._titan`'s torchtitan row but the two 2024-or-2025 defaults it keys on a date (AdamW's kernel,
the loss's compile), set here as the commit has them.

The cluster, chosen before the first evaluation: the README names "8xH100 GPUs" and nothing more. The benchmark is
Meta's PyTorch team's (the commit's author), whose torchtitan performance table (the fifth set's rows) names its
H100s: Grand Teton, 96 GB of HBM2e, the 500 W default limit. H100-SXM-500W, the fifth set's torchtitan preset
(`python scripts/planner_mb.py nineteenth` plans it); docs/planner.md gives the 700 W SXM preset's figures beside.

Near twins already in the project (so the rows are not wholly unseen): the fifth set's "tt 8B H100x8 compile" and
"compile+fp8" (torchtitan's 2024-12 table: the same model, GPUs and recipe at micro batch 2 and torch of 2024-12:
6,667 and 8,532 tokens/s), which earlier rounds examined.
"""
from __future__ import annotations

from .published_gpu_heldout import H5, _titan, evaluate_rows  # noqa: F401  (evaluate_rows: the script's)

SOURCE = ("pytorch/ao torchao/float8/README.md 'Training benchmarks' (8c81863ba, 2025-03-12; unchanged at fdddb2cf): "
          "Llama3-8b on 8 H100s, FSDP2, compile, batch 1, sequence 8192")
TWIN = "near twin of the fifth set's torchtitan 8B rows on 8 H100s (2024-12 table, micro batch 2)"
# (scaling, median tokens/s, peak memory GB as the README writes torchtitan's GiB): the README's table
TABLE = [("bf16", 6150, 47.65), ("tensorwise", 7689.5, 47.77), ("rowwise", 6768, 47.79)]
NOTES = {"bf16": "compiled; bf16", "tensorwise": "compiled; float8 tensorwise, float8 all-gather, scales "
                                                 "precomputed, fp8 weight recomputed in bwd",
         "rowwise": "compiled; float8 rowwise (torchao recipe), bf16 all-gather"}


def _row(scaling: str, tps: float, mem: float) -> dict:
    row = _titan(f"torchao 8B H100x8 {scaling}", "llama3-8b", H5, 8, 8, 1, "selective-op", 1, tps, SOURCE, mem,
                 fp8="none" if scaling == "bf16" else scaling, notes=NOTES[scaling])
    # torchtitan at 54ef42221: fused AdamW (config_manager.py's default), the loss eager on pred.float()
    row.update(eager_adam=False, fused_loss=False, seen=TWIN, published=f"{tps} median tokens/s, {mem} GiB")
    return row


NINETEENTH = [_row(*x) for x in TABLE]
