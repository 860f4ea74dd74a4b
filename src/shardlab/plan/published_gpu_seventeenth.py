"""The seventeenth set: OLMo-core's official training scripts on 8 H100s, frozen in a commit before the planner was
run on them (docs/planner.md, "The seventeenth set"). Collected 2026-12-07 from a source the project had never
used; every figure is the source's own tokens per second per device. Row format: plan/published_gpu_heldout.py's
(`_row`), planned by its `evaluate_rows`.

Source: allenai/OLMo-core README.md, "Official training scripts" ("Throughput numbers from a cluster with NVIDIA
H100 GPUs are reported below", footnote: "Throughput reported in tokens per second per device"), every version of
the file on the main line (the table from 80b143929, 2024-09-03, to its removal at 41f8ddc9f, 2025-03-12).
Collection rule (the earlier sets'): one row per layout at its latest figure, the layout read at the commit that
published the figure. The table's versions:
  80b143929, c2be557a1  ranges ("9.7-10K TPS", MFU "47-48%"; 1B "45-46K", 13B "4.4-4.6K") for the scripts before
                        7e3ddd4cb (13B batch raised) and 2f253f817 (precision settings): other layouts, in notes
  8c03ca8a2 (2024-09-26, "Add support for float8 training via torchao")  1B BF16 44,000 and FP8 51,000; 7B BF16
                        10,000 and FP8 13,000; 13B BF16 4,600: the five rows
  310866e45 13B FP8 5,500; 41400c46f Llama 8B 9,500 and FP8 12,500; e27ba7455 1B 55,000 and 65,000 (OLMo-1B.py's
                        micro batch and a compiled loss): skipped, see below
Every row's launch command is the script's `launch` with no node count: src/olmo_core/internal/experiment.py's
BeakerLaunchConfig(num_nodes=1, num_gpus=8), so 8 GPUs (one node) and FSDP over them.

The recipe at 8c03ca8a2 (read in the code; paths at that commit):
- Model (nn/transformer/model.py olmo_1B / 7B / 13B over llama2_1B / 7B / 13B): 18 x 2048 with 16 heads, 32 x 4096
  with 32, 40 x 5120 with 40; full multi-head attention (head dim 128), SwiGLU of int(8h/3) rounded up to 256 (5632,
  11008, 13824), no biases, untied embedding and output, the dolma2 tokenizer's 100,278 entries padded to 128:
  100,352. OLMo 2's "reordered norm" block (the RMSNorms on the attention's and MLP's outputs before each residual
  add, a final norm before the head: as many norms and passes as the pre-norm block) and q/k norms over the full
  projected widths (`qk_norm`; the planner's per-head passes move the same bytes); rope theta 500,000.
- torch.compile of each block (fullgraph=False; model.py apply_compile), nothing else compiled; no activation
  checkpointing; no dropout.
- FSDP2 (`fully_shard` per block, reshard after forward; MixedPrecisionPolicy bf16 params, fp32 reduce: comm_dtype
  fp32), no gradient-sync skipping under accumulation (trainer.py: only DDP's no_sync), so every micro batch
  gathers and reduce-scatters (the planner's zero3 with fsdp2's kernels).
- Attention: F.scaled_dot_product_attention(is_causal=True) (use_flash off under compile), on the pinned nightly
  torch 2.5.0.dev20240826 (Makefile NIGHTLY_VERSION; the launch's OLMoCoreBeakerImage.nightly). Torch 2.5 ran
  cuDNN's attention first on H100 (its release blog: "a new CuDNN backend for SDPA, enabling speedups by default for
  users of SDPA on H100s"; pytorch#138522, 2024-10-21, made it opt-in afterwards, describing main's order as cuDNN
  first on H100): `attention=cudnn`, the cluster field below.
- The head: `self.w_out(h).float()` (the logits cast to fp32 by their own kernel: llama_impl="torchtitan", whose
  head does the same), then 1B: F.cross_entropy and the z-loss `logits.logsumexp(-1).pow(2)` eagerly (z_loss,
  multiplier 1e-5); 7B, 13B (`fused_loss=True` in OLMo's sense): flash-attn's Triton cross-entropy on the fp32 logits
  with the z-loss inside its one pass, planned as F.cross_entropy's fp32 log-softmax (no z_loss pass).
- torch.optim.AdamW(fused=True) on the fp32 shards; the gradient norm clipped at 1.0 every step (GradClipperCallback:
  clip_grad_norm_ on the DTensor gradients).
- float8 (`--model.float8_config.enabled=true`): torchao's convert_to_float8_training over every block linear (the
  output head left out), dynamic (tensorwise) scaling, `enable_fsdp_float8_all_gather=True` and the scales
  precomputed after each step: fp8="tensorwise", whose zero3 all-gather the planner already sends in float8.
- Batches: 1B GBS 1,024 x 4,096, micro batch 4; 7B 1,024, micro batch 2; 13B 2,048, micro batch 1; fixed-length
  4,096-token instances (NumpyDatasetConfig, no variable-length curriculum at this commit).
- "TPS" (callbacks/speed_monitor.py): the rank's input_ids per step over the wall time between steps (data wait,
  every micro batch, the optimizer and callbacks), the first step excluded.

What the planner has no input for, in each row's notes: the cluster's power limit and network (a DGX-like H100 SXM
node is assumed: the H100-SXM preset); the figures are rounded to two or three digits by the table (44,000, 10,000,
4,600: up to ±2.5% from rounding alone).

Skipped (the planner cannot express the run, or the source leaves it open):
- From 310866e45 the scripts' dataset is a variable-sequence-length curriculum (experiment.py: VSLCurriculumConfig
  grow_p2, 8 cycles, lengths 256 to 8,192): the 13B FP8 5,500 (310866e45), the Llama 8B rows (41400c46f) and the 1B
  rows of e27ba7455 ran batches of changing length, whose mix at the measured steps is not stated.
- 80b143929 / c2be557a1 ranges: earlier layouts (above) given as ranges; in the rows' notes where the layout is one.
"""
from __future__ import annotations

# the held-out set's row constructor and evaluator: one row format and one way of planning a row for every set
from .published_gpu_heldout import _row, evaluate_rows  # noqa: F401  (evaluate_rows: re-exported for the script)
from .train_spec import CLIP_PASSES

COMMIT = "8c03ca8a2"
SOURCE = f"allenai/OLMo-core @{COMMIT} README.md 'Official training scripts' (2024-09-26)"
SEQ, VOCAB, GPUS = 4096, 100352, 8
# (layers, width, heads, SwiGLU width, micro batch, global batch in sequences)
SHAPES = {"1B": (18, 2048, 16, 5632, 4, 1024), "7B": (32, 4096, 32, 11008, 2, 1024),
          "13B": (40, 5120, 40, 13824, 1, 2048)}
NOTES = ("OLMo-core at 8c03ca8a2 on 8 H100s (the launch's default node); the cluster's power limit and network "
         "not stated (H100-SXM preset); the table's figure rounded")


def _olmo(size: str, fp8: bool, tps: float, notes: str = "") -> dict:
    """One script's run as the module docstring reads it."""
    L, h, a, f, micro, gbs = SHAPES[size]
    case = f"OLMo-core {size} H100x{GPUS} {'FP8' if fp8 else 'BF16'}"
    lay = {"dp": GPUS, "strategy": "zero3", "zero3_impl": "fsdp2", "recompute": "none"}
    return _row(case, dict(n_layer=L, d_model=h, n_head=a, vocab=VOCAB, arch="llama", ffn=f, tied=False,
                           qk_norm=True), "H100-SXM", GPUS, SEQ, micro, gbs, lay, tps, SOURCE,
                comm_dtype="fp32", fp8="tensorwise" if fp8 else "none", compile=True, dropout=False,
                llama_impl="torchtitan", fused_loss=False, z_loss=size == "1B", optimizer_passes=CLIP_PASSES,
                published=f"{tps:,.0f} TPS (tokens per second per device)",
                notes="; ".join(x for x in (notes, NOTES) if x), cluster_fields={"attention": "cudnn"})


SEVENTEENTH = [
    _olmo("1B", False, 44000, notes="c2be557a1 gave 45-46K TPS for the earlier layout"),
    _olmo("1B", True, 51000),
    _olmo("7B", False, 10000, notes="80b143929 gave 9.7-10K TPS, MFU 47-48%, for the earlier layout"),
    _olmo("7B", True, 13000),
    _olmo("13B", False, 4600, notes="c2be557a1 gave 4.4-4.6K TPS before the 13B batch was raised (7e3ddd4cb)"),
]
