"""The twentieth set: FlagPerf's Megatron-Core Llama 3 rows (BAAI's vendor benchmark: 8B on one A800 node and on one and
two H100 nodes, 70B on eight H100 nodes), frozen in a commit before the planner was run on them (docs/planner.md,
"The twentieth set"). Collected 2026-12-08 from a repository no earlier set used: Megatron-Core of April 2024, none
of the later overlap options, run by a third party.

Source: FlagOpen/FlagPerf training/nvidia/llama3_8B-megatron/README.md (the H100 rows added in 8b14694b, 2024-05-08)
and training/nvidia/llama3_70B-megatron/README.md (142e02b3, 2024-05-14), "性能指标": per row the configuration
(nodes x GPUs), precision, "parallel" (PPxDPyTPz) and token/p/s, the tokens a GPU processes a second: run_pretraining.py
divides 512 x 8192 tokens by the last logged "elapsed time per iteration" (log interval 1, iteration 300 of 300)
and by the GPUs. Collection rule: every row of both tables with a token/p/s figure (the Mixtral README's one H100 row
has none). Memory ("mem", GiB of 80, measure not stated) is kept in the notes, not evaluated.

The recipe, read in the scripts at those commits (training/benchmarks/llama3_{8B,70B}/megatron/pretrain_llama3.sh,
the vendor's config_*.py and training_adapter*.sh) and in Megatron-LM at core_v0.6.0 (the READMEs' "megatron-core
tag:core_v0.6.0") for every default the scripts leave:
- The model: 32 x 4096 (FFN 14,336) or 80 x 8192 (28,672), 32 or 64 heads, 8 query groups, sequence 8,192, SwiGLU,
  RMSNorm. What the script does not pass takes Megatron's default: the embedding and output weights tied (no
  --untie-embeddings-and-output-weights), learned absolute positions (no rope flag: 8,192 x h parameters, not a
  planner input), biases on the linears (no --disable-bias-linear: fused into TE's GEMMs, not a planner input), and
  dropout 0.1 in attention and hidden (dropout=True). Llama3Tokenizer's 128,256 entries padded to 128 x TP.
- Micro batch 1 (the vendor's localbs), global batch 512, TP and PP from the row, sequence parallelism under TP > 1
  (--sequence-parallel; Megatron turns it off at TP 1), no recompute (the scripts pass none: the READMEs' list of
  "recompute-activations" is not in any command), no virtual pipeline (1F1B).
- Transformer Engine's layers (llama_impl="te") with its attention: TE 1.4-1.6 select FusedAttention (cuDNN) on sm90
  and FlashAttention-2 elsewhere (attention.py "Select FusedAttention on sm90 and FlashAttention on others"), so
  attention=cudnn on the H100s and the A100 preset's flash2 on the A800.
- The distributed optimizer (zero1); bf16 forces fp32 gradient accumulation and reduction
  (arguments.py: accumulate_allreduce_grads_in_fp32 = True under bf16: comm_dtype fp32, fp32_grad_accum), with
  gradient-accumulation fusion (the default: no copy); no --overlap-grad-reduce or --overlap-param-gather (both off
  by default), so the reduce-scatter follows the backward and the all-gather the step; Adam, clip 1.0.
- The loss: vocab_parallel_cross_entropy(logits.float()) (language_module.py): fp32 logits, not fused.
- FP8 rows (training_adapter_H100_fp8.sh): --fp8-format hybrid, amax max over a 1,024 history: TE's delayed scaling,
  per-tensor scales (fp8="tensorwise"); Megatron passes is_first_microbatch, so weights are cast once a step.
- The clusters: the 8B README's A100 row ran on "NVIDIA_A800-SXM4-80GB" (the A100's silicon, NVLink cut to 400 GB/s
  both ways: the A100-80G preset with 200 GB/s a direction, cluster_fields); the H100 rows on "H100-SXM" parts with
  400 Gb/s InfiniBand (the H100-SXM preset; no power limit is stated).
What the planner has no input for, in the notes: learned positions and the linears' biases; the container (TE and
cuDNN versions; core_v0.6.0 pairs with NGC 24.03-24.04); CUDA_DEVICE_MAX_CONNECTIONS=1 (the scripts' export).
"""
from __future__ import annotations

from .published_gpu_eighth import _llama
from .published_gpu_heldout import _row, evaluate_rows  # noqa: F401  (evaluate_rows: the script's)

REPO = "FlagOpen/FlagPerf"
SOURCE_8B = f"{REPO} training/nvidia/llama3_8B-megatron/README.md (8b14694b, 2024-05-08)"
SOURCE_70B = f"{REPO} training/nvidia/llama3_70B-megatron/README.md (142e02b3, 2024-05-14)"
SEQ, GBS = 8192, 512
# Megatron's optimizer passes outside the fused Adam (the eighth set's): zeroing, the norm, the master copy
PASSES = ("zero_grads", "grad_norm", "master_copy")
A800 = {"intra_bw": 200e9}  # NVLink 400 GB/s both ways (NVIDIA A800 datasheet)
# (case, size, cluster, GPUs, pp, dp, tp, precision, token/p/s, mem "x/80", source, cluster_fields)
TABLE = [
    ("FlagPerf Llama3-8B A800x8 bf16 PP2DP4TP1", "8b", "A100-80G", 8, 2, 4, 1, "bf16", 3698.7, "76/80", SOURCE_8B, A800),
    ("FlagPerf Llama3-8B H100x8 bf16 PP1DP4TP2", "8b", "H100-SXM", 8, 1, 4, 2, "bf16", 8103, "71/80", SOURCE_8B, {}),
    ("FlagPerf Llama3-8B H100x8 fp8 PP1DP4TP2", "8b", "H100-SXM", 8, 1, 4, 2, "fp8", 10486, "74/80", SOURCE_8B, {}),
    ("FlagPerf Llama3-8B H100x16 bf16 PP1DP8TP2", "8b", "H100-SXM", 16, 1, 8, 2, "bf16", 7914, "62/80", SOURCE_8B, {}),
    ("FlagPerf Llama3-8B H100x16 fp8 PP1DP8TP2", "8b", "H100-SXM", 16, 1, 8, 2, "fp8", 10280, "64/80", SOURCE_8B, {}),
    ("FlagPerf Llama3-70B H100x64 bf16 PP4DP2TP8", "70b", "H100-SXM", 64, 4, 2, 8, "bf16", 851, "55/80", SOURCE_70B,
     {}),
]


def _flagperf(case, size, cluster, gpus, pp, dp, tp, precision, tps, mem, source, fields) -> dict:
    assert pp * dp * tp == gpus, case
    lay = {"dp": dp, "tp": tp, "pp": pp, "sp": tp > 1, "strategy": "zero1", "overlap_grad_reduce": False}
    attention = {"attention": "cudnn"} if cluster.startswith("H100") else {}
    return _row(case, {**_llama(size, tp), "tied": True}, cluster, gpus, SEQ, 1, GBS, lay, tps, source, None,
                comm_dtype="fp32", fp32_grad_accum=True, fp8="tensorwise" if precision == "fp8" else "none",
                dropout=True, fused_loss=False, optimizer_passes=PASSES, llama_impl="te",
                cluster_fields={**attention, **fields},
                published=f"{tps} token/p/s ({GBS} x {SEQ} tokens over the last iteration's time)",
                notes=f"mem {mem} (measure not stated); learned positions and biased linears (Megatron's defaults) "
                      "planned as rope and none; container not stated (core_v0.6.0)")


TWENTIETH = [_flagperf(*x) for x in TABLE]
