"""Published GPU training runs from sources the project had never used: the sixth set, frozen in a commit before
the planner was run on it (docs/planner.md, "The sixth set: unseen rows"). Collected 2026-12-06; every figure is
the source's own, converted to tokens/s/GPU by the source's own definition (never through the planner): a
Megatron-DeepSpeed log's "elapsed time per iteration" t at global batch B of 2048-token sequences on G GPUs is
B x 2048 / (t x G) tokens/s/GPU. Row format: plan/published_gpu_heldout.py's (`_row`), planned by its
`evaluate_rows`.

All three sources are the BigScience workshop's records of BLOOM's training on Jean Zay (IDRIS), read in
bigscience-workshop/bigscience at commit 9e64edec2a: one team, one software stack (Megatron-DeepSpeed with
DeepSpeed's BF16_Optimizer), one GPU (A100 80GB, 8 per node). They are three documents with different runs:

  BENCH    train/tr11-176B-ml/chronicles-prequel.md, section "Rebalancing layers" (2022-02-28): the topology
           benchmarks run before BLOOM's launch on 48 nodes (384 GPUs), GBS 2048, sequence 2048, a 250k
           vocabulary, with the table's NLAYERS / NHIDDEN / NHEADS, DP, TP, PP, MBS, memory ("Mem", nvidia-smi
           on the first node, which holds the embedding) and "Sec/it". Collection rule: every row of that section
           with a published Sec/it (OOM rows have none). Only this section ran the final run's software: the
           section says so itself (BF16 optimizer accumulating gradients in fp32, `--pp-partition-method
           'type:transformer|embedding'`); the sections before it ran fp16 and are marked not comparable.
  RESHAPE  train/tr11-176B-ml/reshaping-log.md: the BLOOM-176B model itself (70 layers, 14336 wide, 112 heads)
           resumed from its universal checkpoint at iteration 94767 on 24 nodes (192 GPUs) and 36 nodes (288
           GPUs) with the TP / PP / MBS each section names, GBS 2048; DP = GPUs / (TP x PP). Collection rule:
           per configuration the last iteration the log shows (the first after a start can be slower: the log's
           TP2/PP24 shows 221.87 s, then 199.82 s).
  RUN      train/tr11-176B-ml/README.md, "Important checkpoints": iteration 85376 of the training (the end of the
           first epoch), 104.70 s at GBS 2048 on 48 nodes; the layout is the README's "Replica setup" and
           tr11-176B-ml.slurm (TP 4, PP 12, DP 8, MBS 2, --pad-vocab-size-to 250880).

The recipe every row shares, from those files and the code they ran:
- bf16 (`--bf16`), DeepSpeed ZeRO stage 0 in its config with the BF16_Optimizer, "which implements its own ZeRO
  stage 1" (tr11-176B-ml.slurm): fp32 master weights and Adam states sharded over DP; each micro batch's bf16
  gradients added into an fp32 buffer ("accumulates grads in fp32", README "Deepspeed config"; DeepSpeed's
  bf16_optimizer.py: `hp_grad.data.add_(lp.grad.data.to(hp_grad.dtype))`, hence `fp32_grad_accum` and
  `grad_copy`); after the pipeline's backward the fp32 gradients are all-reduced over DP (pipe/engine.py
  `_exec_reduce_grads` -> `_bf16_reduce_grads`: `buffered_allreduce_fallback` over `get_grads_for_reduction()`,
  the fp32 buffers, in buffers of MEMORY_OPT_ALLREDUCE_SIZE = 5e8 elements = 1907 MiB of fp32; a buffer closes
  once past that, so the first flat group is one alone: planned as 1907 MiB calls), an instruction
  of the schedule after the last backward, not overlapped with it; each rank steps its shard and the bf16 shards
  are all-gathered. The wire dtype is bf16, not the buffers' fp32 (read after the set was first evaluated):
  runtime/engine.py `allreduce_bucket` casts each bucket to `communication_data_type` before `dist.all_reduce`
  and copies the result back, and that property, with no `communication_data_type` in the ds_config (none in
  tr11-176B-ml.slurm's), returns fp16 under fp16 or a nonzero ZeRO stage, else bf16 under bf16 (DeepSpeed at
  15293139f, 2022-02-28, the benchmarks' day, and at 5ea1c60f8, the olruwase/bf16-updates head the run used from
  2022-04-04, chronicles.md; README "Packages": PyTorch 1.11 "for its NCCL version which supports BF16 comms").
  Planner inputs: zero1 with `zero1_impl=all_reduce`, comm_dtype bf16, `zero_bucket_mb=1907.3`,
  `overlap_grad_reduce=False`.
- Pipeline: DeepSpeed's TrainSchedule, synchronous 1F1B (pipe/schedule.py: 2(m + p - 1) steps, p - stage
  buffers), the planner's default schedule. `type:transformer|embedding` balances the embedding as a block's
  equal on the first and last stage (the planner's stage split counts the embedding and head too).
- Full activation recomputation (`--checkpoint-activations --deepspeed-activation-checkpointing`; README
  "Throughput": "we use activation check-pointing"); Megatron's fused kernels and scaled masked softmax, no
  FlashAttention (2022); dropout 0.1 (Megatron's defaults, README "Optimizer"); apex FusedAdam; vocabulary-parallel
  cross entropy on fp32 logits; tied embeddings.
- Model: Megatron's GPT blocks (LayerNorm, GELU MLP 4h, biases). BLOOM's ALiBi and embedding LayerNorm are not in
  the planner's gpt2 blocks (a learned 2048 x h position table and no embedding LayerNorm instead: well under
  0.1% of the parameters). The vocabulary is the run's padded 250880 (README, slurm); BENCH writes "250k", which
  its model sizes confirm (the 195B of 106 x 12288 needs ~250k), and the padded size is taken for it too.

What the planner has no input for, kept in each row's notes: the cluster. Jean Zay's A100 nodes have 8 A100
80GB on NVLink and "4 OmniPath links" per node (README "Hardware"; the link rate is not stated there: at
Omni-Path's 100 Gb/s a link, a product figure not read in these sources, 6.25 GB/s per GPU) where the A100-80G
preset is a DGX A100 (25 GB/s per GPU across nodes): the closest existing preset, not one tuned to these rows;
the runs also set CUDA_LAUNCH_BLOCKING=1 (to avoid hangs on 40+ nodes; "makes a tiny impact or no impact at all
to the throughput", README). BENCH's Mem is nvidia-smi's (the CUDA context, ~1.5 GB by the
document's own measurement, and the caching allocator's reserve included; written "GB", read here as GiB:
within 2.4%). BENCH's seconds are one iteration's (the document's benchmark method: "I take the snapshot of a
single iteration (always 2nd)").

Skipped (the planner cannot express the run, or the source leaves the layout open):
- chronicles-prequel.md before "Rebalancing layers": fp16 with DeepSpeed's fp16 ZeRO-1 path, the default stage
  partitioning and an older TFLOPs formula (the document: "Do not compare these numbers to the previous ones");
  some of its tables give the size but not the layer count of each row.
- reshaping-log.md TP1/PP72 on 36 nodes: 72 pipeline stages for 70 blocks (each embedding on a stage of its own);
  the planner refuses more stages than blocks.
- experiments/tr8-104B.md "A100s": a TFLOPs range only ("72.72-82 (was speeding up - so very inconclusive)").
- Megatron-Turing NLG 530B (Smith et al. 2022, section 2.4, read as quoted in cli99/llm-analysis
  examples/megatron-turing-nlg/README.md: 60.1 / 50.2 / 44.4 s per iteration at batch 1920 on 280 / 350 / 420
  DGX A100): the micro batch and the ZeRO stage are not stated in what was read, and the 2240-GPU layout (t 8,
  p 35) is plan/published.py's already.
- GPT-NeoX-20B (96 A100 40GB): its 117 TFLOP/s per GPU was read only in secondary summaries, without the FLOP
  formula that converts it.
- TinyLlama (jzhang38/TinyLlama README: 24k tokens/s per A100-40G, FSDP, no activation checkpointing): the GPU
  count of that measurement is not stated (README: 16 GPUs; pretrain/tinyllama.py: 8 devices, batch 512), nor the
  FSDP mixed-precision dtypes of the Lightning master it pinned.
- NVIDIA/NeMo docs/source/performance/performance_summary.md and the Megatron-Bridge performance summary: dense
  rows FP8 only (Transformer Engine recipes), BF16 only for MoE models. The PyTorch FSDP paper (Zhao et al.
  2023): its TFLOPS are in figures, no text of the figures was available to read. OPT-175B: layout (micro batch,
  recompute) not stated in what was read. Pythia: its README gives shapes, no throughput.

Examined since (docs/planner.md, "Memory: what the published figure measures"): the memory rows. After their
errors were seen, four row inputs were added from the sources (not fitted): what BENCH's Mem measures
(`mem_measure="device"`, nvidia-smi, with the CUDA context the prequel measured, `cuda_context_mib`), the bf16
gradients BF16_Optimizer keeps beside its fp32 buffer (`lp_grads_kept`) and the embedding LayerNorm
(`embed_norm`). That round changed no time term or time input.
After it, one time input from DeepSpeed's code (docs/planner.md, "The sixth set"): the gradient all-reduce's wire
dtype, bf16 where the recipe had first read fp32 (`COMM_DTYPE`, the recipe's first item); the activation-checkpointing
options the slurm could have set (partition, contiguous buffers, CPU copies, synchronize) were read and are all off.
In the eleventh round, one more from DeepSpeed's code: its PipelineEngine partitions the sends between stages under
TP (`pp_scatter_gather`, the row recipe's comment), where the rows had sent the whole activation.
In the twelfth round, two memory inputs from DeepSpeed's code (docs/planner.md, "Memory: the caching allocator's
segments"): the all-reduce's bf16 cast of the flat fp32 gradient buffer (`flat_grad_cast`) and update_hp_grads' fp32
cast of each 16-bit gradient (`hp_grad_cast`), each in a segment of its own in the nvidia-smi figure.
"""
from __future__ import annotations

# the held-out set's row constructor and evaluator: one row format and one way of planning a row for every set
from .published_gpu_heldout import _row, evaluate_rows  # noqa: F401  (evaluate_rows: re-exported for the script)

REPO = "bigscience-workshop/bigscience @9e64edec2a"
BENCH = (f"BigScience tr11 topology benchmarks ({REPO}, train/tr11-176B-ml/chronicles-prequel.md, "
         "'Rebalancing layers', 2022-02-28)")
RESHAPE = f"BigScience BLOOM-176B reshaping runs ({REPO}, train/tr11-176B-ml/reshaping-log.md)"
RUN = (f"BigScience BLOOM-176B training run ({REPO}, train/tr11-176B-ml/README.md 'Important checkpoints'; "
       "layout: 'Replica setup' and tr11-176B-ml.slurm)")

SEQ, GBS, VOCAB = 2048, 2048, 250880
# The gradient all-reduce's wire dtype: DeepSpeed's runtime/engine.py `communication_data_type` (15293139f and
# 5ea1c60f8, the olruwase/bf16-updates commits BLOOM ran): the ds_config's key if set (tr11-176B-ml.slurm's sets
# none), else fp16 under fp16 or ZeRO stage > 0, else bf16 under bf16; `allreduce_bucket` casts the fp32 buffer to
# it for `dist.all_reduce` and copies back. Was "fp32" until read after the set's first evaluation.
COMM_DTYPE = "bf16"
# DeepSpeed's MEMORY_OPT_ALLREDUCE_SIZE (runtime/engine.py, pipe/engine.py): 5e8 elements a buffer, fp32 here
ALLREDUCE_BUCKET_MIB = 500_000_000 * 4 / 2**20
NETWORK = ("Jean Zay: 8 A100 80GB per node, NVLink, 4 Omni-Path links per node (the A100-80G preset with its "
           "network at 4 x 100 Gb/s per node: cluster_fields); CUDA_LAUNCH_BLOCKING=1")
# Jean Zay's network, per GPU one way: README "Hardware" names 4 Omni-Path links per 8-GPU node and no rate; every
# Omni-Path link of 2022 is Intel's OPA 100 series (100 Gb/s a port, its only generation shipped before Cornelis's
# 400G parts of 2025), so 4 x 100 Gb/s / 8 GPUs = 6.25 GB/s, the DGX A100 preset's 8 x 200 Gb/s HDR a quarter of it.
# The preset's achieved share (busbw_eff_inter) applies to it as to any NIC. Added after the set was first
# evaluated (docs/planner.md, "The sixth set"): the rows are examined rows since.
JEAN_ZAY_INTER_BW = 4 * 100e9 / 8 / 8


def tokens_per_gpu(seconds: float, gpus: int, gbs: int = GBS, seq: int = SEQ) -> float:
    """The log's elapsed time per iteration as tokens/s/GPU: gbs x seq tokens per iteration over all GPUs."""
    return gbs * seq / (seconds * gpus)


def _bloom(case, L, h, a, gpus, dp, tp, pp, mb, secs, source, mem=None, notes="") -> dict:
    """A Megatron-DeepSpeed row as BLOOM's stack ran it (the module docstring's recipe)."""
    assert dp * tp * pp == gpus, case
    lay = {"dp": dp, "tp": tp, "pp": pp, "strategy": "zero1", "zero1_impl": "all_reduce", "recompute": "full",
           "zero_bucket_mb": round(ALLREDUCE_BUCKET_MIB, 1), "overlap_grad_reduce": False,
           "pp_split": "ends-as-blocks",  # --pp-partition-method 'type:transformer|embedding' (the docstring)
           # DeepSpeed's PipelineEngine with TP partitions what it sends between stages, activations and gradients
           # (runtime/pipe/engine.py at 15293139f and 5ea1c60f8: is_pipe_partitioned = is_grad_partitioned =
           # is_model_parallel; PartitionedTensor over the slice-parallel group, .full() gathers it on arrival):
           # Megatron's scatter/gather (docs/planner.md, "The eleventh round")
           "pp_scatter_gather": True}
    return _row(case, dict(n_layer=L, d_model=h, n_head=a, vocab=VOCAB), "A100-80G", gpus, SEQ, mb, GBS, lay,
                round(tokens_per_gpu(secs, gpus), 1), source, mem, comm_dtype=COMM_DTYPE, flash=False,
                fp32_grad_accum=True, grad_copy=True, lp_grads_kept=True, embed_norm=True,
                hp_grad_cast=True, flat_grad_cast=True,  # BF16_Optimizer's two casts (docs/planner.md, twelfth round)
                published=f"{secs} s/iteration at GBS {GBS}",
                notes="; ".join(x for x in (notes, NETWORK) if x), cluster_fields={"inter_bw": JEAN_ZAY_INTER_BW})


# ---- BENCH, "Rebalancing layers" (2022-02-28), 48 nodes: (NLAYERS, NHIDDEN, NHEADS, DP, TP, PP, MBS, Mem GB, Sec/it)
_BENCH = [(106, 12288, 64, 8, 4, 12, 2, 67, 116.54),
          (106, 12288, 96, 8, 4, 12, 2, 65, 118.79),
          (106, 12288, 128, 8, 4, 12, 2, 67, 121.42),
          (106, 12288, 96, 8, 4, 12, 4, 79, 120.34),
          (100, 12288, 64, 8, 8, 6, 2, 61, 139.72),
          (100, 12288, 64, 8, 8, 6, 4, 72, 120.96),
          (82, 13312, 64, 4, 8, 12, 4, 52, 111.79),
          (82, 13312, 64, 8, 4, 12, 2, 63, 104.45),
          (82, 13312, 104, 8, 4, 12, 2, 62, 123.71),
          (82, 13312, 128, 8, 4, 12, 2, 60, 108.78),
          (82, 13312, 64, 8, 4, 12, 4, 74, 104.82),
          (94, 13312, 128, 8, 4, 12, 2, 67, 124.10),
          (70, 14336, 64, 4, 8, 12, 2, 40, 121.63),
          (70, 14336, 64, 8, 4, 12, 2, 59, 102.03),
          (70, 14336, 112, 8, 4, 12, 2, 59, 104.50),
          (70, 14336, 128, 8, 4, 12, 2, 60, 105.89),
          (70, 14336, 64, 8, 4, 12, 4, 73, 102.27)]


# The CUDA context nvidia-smi shows for a torch process on an A100 (chronicles-prequel.md, "Possible topologies for
# 200B": "40GB A100 takes 1573MiB for cuda kernels", measured with `torch.ones(1).cuda()` and nvidia-smi; the
# document's own figure, from the team and the software era of these rows)
CUDA_CONTEXT_MIB = 1573


def _bench_rows() -> list[dict]:
    # Mem is nvidia-smi's (the section: `pdsh -w jean-zay-iam01 "...; nvidia-smi"`): the whole process's device memory
    rows = [_bloom(f"BLOOM bench {L}L h{h} a{a} A100x384 t{tp} p{pp} mb{mb}", L, h, a, 384, dp, tp, pp, mb, secs,
                   BENCH, mem=float(mem), notes="one iteration's time (the benchmark's 2nd); Mem by nvidia-smi")
            for L, h, a, dp, tp, pp, mb, mem, secs in _BENCH]
    for r in rows:
        r.update(mem_measure="device", cuda_context_mib=CUDA_CONTEXT_MIB)
    return rows


# ---- RESHAPE: BLOOM-176B resumed at iteration 94767: (nodes, TP, PP, MBS, last logged s/iteration, iteration)
_RESHAPE = [(24, 4, 12, 2, 215.99, 94769),
            (24, 4, 12, 1, 234.72, 94768),
            (24, 4, 24, 1, 220.30, 94770),
            (24, 2, 24, 1, 199.82, 94769),
            (36, 4, 36, 1, 155.71, 94769),
            (36, 2, 36, 1, 141.22, 94770)]


def _reshape_rows() -> list[dict]:
    out = []
    for nodes, tp, pp, mb, secs, it in _RESHAPE:
        g = 8 * nodes
        note = f"iteration {it}" + (" (the only one logged: the first after the resume)" if it == 94768 else "")
        out.append(_bloom(f"BLOOM-176B reshape A100x{g} t{tp} p{pp} mb{mb}", 70, 14336, 112, g, g // (tp * pp),
                          tp, pp, mb, secs, RESHAPE, notes=note))
    return out


UNSEEN = _bench_rows() + _reshape_rows() + [
    _bloom("BLOOM-176B run A100x384 t4 p12 mb2", 70, 14336, 112, 384, 8, 4, 12, 2, 104.70, RUN,
           notes="iteration 85376 (end of the first epoch)")]
