"""Published GPU training runs kept back from the planner: a held-out set for estimating its error on runs it
was not given (docs/planner.md, "Against published GPU runs"). None of these rows is in plan/published_gpu.py;
when collected, none had been looked at while a GPU term was chosen; the rounds since (docs/planner.md, from
"The seventh round") examined them, so they are examined rows now, not unseen ones. Collected 2026-12-06 from the sources below; every figure is the
source's own, converted to tokens/s/GPU by the source's own definition (never through the planner).

  NARAYANAN   Narayanan et al. 2021 (SC21), "Efficient Large-Scale Language Model Training on GPU Clusters Using
              Megatron-LM", Table 1, as published in NVIDIA/Megatron-LM README.md at commit 50a4b5fa02
              (images/cases_april2021.png): teraFLOP/s per GPU on A100 80GB (Selene). The layouts are the
              paper's own scripts, examples/sc21/run_table_1.sh and CONFIG.sh at commit de7dc40f88: t, p, micro
              and global batch, `--checkpoint-activations` (full recompute) on every row, interleaving
              (`--num-layers-per-virtual-pipeline-stage`), `--fp16`, DDP impl (torch for p = 1, else local).
              The FLOPs are the paper's eq. (3), recomputation counted: 96 B s l h^2 (1 + s/6h + V/16lh).
  KORTHIKANTI Korthikanti et al. 2022 (MLSys 2023), "Reducing Activation Recomputation in Large Transformer
              Models", Table 3 (t, p, GPUs, global and micro batch; interleaving m = 3 for 175B and 530B) and
              Table 5 (iteration seconds, full recompute vs sequence parallel + selective recompute; data
              parallel size one), A100 80GB. tokens/s/GPU = global batch x 2048 / (seconds x GPUs); the MFU this
              gives matches the paper's (and the Megatron-LM README's at commit 2e90a342f5) to 0.5 points.
  NEMO        NVIDIA NeMo-Megatron-Launcher README.md at commit 3579cdb3 (section 7.1.2, "Training Performance
              Results"): tokens/s of GPT-3 5B (1-32 DGX A100 80GB nodes) and 175B (8-128 nodes); the layouts
              are conf/training/gpt3/5b.yaml and 175b.yaml at the same commit (bf16, megatron_amp_O2,
              distributed_fused_adam, no recompute / selective + sequence parallel).
  TITAN_2404  pytorch/torchtitan docs/performance.md at commit 395a52627 (2024-04): Llama 2 13B / 70B on 64
              A100 80GB with FSDP2; configs train_configs/llama_13b.toml (fused_rmsnorm), llama_70b.toml
              (rmsnorm) at that commit, seq 4096, fp32 gradient reduction (parallelize_llama.py).
  TITAN_2412  pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (Grand Teton H100, 96 GB HBM2e,
              500 W): Tables 1-4, the compiled and Float8 rows (the eager FSDP rows are given inputs).
  TITAN_2506  pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md: the vanilla-TP column
              (bf16, float8 tensorwise, float8 rowwise) of Llama 3 70B (FSDP 32 x TP 8) and 8B (FSDP 8 x TP 8).
  TRAINY      pytorch/torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md: Llama 3.1 8B on 32 and
              64 H200, compiled, float8 tensorwise with the float8 all-gather.

Skipped (the planner cannot express the run, or the source leaves the layout open): Narayanan's 1T row (in
plan/published.py already); the Megatron-Core r0.8.0 H100 weak-scaling table (README images/model_table.png:
micro batch, recompute and the block's MLP not published); NeMo / Megatron-Bridge H100 performance summaries
(FP8 with Transformer Engine recipes whose recompute and overlap settings live in recipe code, and MoE rows);
torchtitan's "selective layer" rows (every second block checkpointed: no such policy in the planner); every
async-TP column and the 405B 3D/4D rows (async TP: TP collectives overlapped inside the matmuls, not modelled).

What each row's source states and the planner has no input for is kept in the row's "notes" (e.g. Megatron
2021's "local" DDP all-reduces after the backward, unoverlapped; torch.compile's fusions beyond the norm).
"""
from __future__ import annotations

from dataclasses import replace

from shardlab.parallel.pp import registry

from .hardware import Cluster, load_cluster
from .layout import Layout
from .train_spec import CLIP_PASSES, TrainSpec
from .model import ModelSpec
from .presets import PRESETS
from .step import evaluate

# Megatron's interleaved 1F1B (the papers' v > 1 rows): the schedule the planner models with its bubble
# (p - 1) / (v·m), taken from the schedule registry by that property (no schedule is named outside its package)
MEGATRON_INTERLEAVED = next(s for s in registry.PLANNED if registry.spec(s).bubble == "v")

NARAYANAN = ("Narayanan et al. 2021, Table 1 (NVIDIA/Megatron-LM README @50a4b5fa02, images/cases_april2021.png); "
             "layout: examples/sc21/run_table_1.sh + CONFIG.sh @de7dc40f88")
KORTHIKANTI = "Korthikanti et al. 2022, Tables 3 and 5 (arXiv 2205.05198)"
NEMO = ("NVIDIA/NeMo-Megatron-Launcher README.md @3579cdb3, 7.1.2 Training Performance Results; "
        "conf/training/gpt3/{5b,175b}.yaml @3579cdb3")
TITAN_2404 = "pytorch/torchtitan docs/performance.md @395a52627 (train_configs/llama_{13b,70b}.toml)"
TITAN_2412 = "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md"
TITAN_2506 = "pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (vanilla TP column)"
TRAINY = "pytorch/torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md"

# Llama 2 shapes (Meta's params.json; torchtitan's llama2 flavors): SwiGLU width from multiple_of 256 (13B) and
# ffn_dim_multiplier 1.3 with multiple_of 4096 (70B)
LLAMA2 = {"13b": dict(n_layer=40, d_model=5120, n_head=40, vocab=32000, arch="llama", ffn=13824),
          "70b": dict(n_layer=80, d_model=8192, n_head=64, vocab=32000, arch="llama", n_kv_heads=8, ffn=28672)}


def _row(case, shape, cluster, gpus, seq, micro, gbs, layout, tokens, source, mem=None, **how) -> dict:
    """A row in plan/published_gpu.py's form, with the model's shape and the recipe's inputs spelled out."""
    row = {"case": case, "shape": shape, "cluster": cluster, "gpus": gpus, "seq": seq, "micro_batch": micro,
           "global_batch": gbs, "layout": {"sp": False, "strategy": "ddp", "recompute": "none", **layout},
           "comm_dtype": None, "tokens_per_gpu": tokens, "mem_gib": mem, "source": source,
           "precision": "bf16-mixed", "flash": True, "fp8": "none", "eager_norm": False, "dropout": True,
           "fused_loss": False, "fp32_grad_accum": False, "notes": "", "seen": ""}
    row.update(how)
    return row


# ---- Narayanan et al. 2021, Table 1: (name, layers, hidden, heads, t, p, micro, global, GPUs, TFLOP/s, v, ddp)
_NARAYANAN = [("1.7B", 24, 2304, 24, 1, 1, 16, 512, 32, 137, 1, "torch"),
              ("3.6B", 30, 3072, 32, 2, 1, 16, 512, 64, 138, 1, "torch"),
              ("7.5B", 36, 4096, 32, 4, 1, 16, 512, 128, 142, 1, "torch"),
              ("18B", 40, 6144, 48, 8, 1, 8, 1024, 256, 135, 1, "torch"),
              ("39B", 48, 8192, 64, 8, 2, 4, 1536, 512, 138, 1, "local"),
              ("76B", 60, 10240, 80, 8, 4, 2, 1792, 1024, 140, 3, "local"),
              ("145B", 80, 12288, 96, 8, 8, 2, 2304, 1536, 148, 2, "local"),
              ("310B", 96, 16384, 128, 8, 16, 1, 2160, 1920, 155, 2, "local"),
              ("530B", 105, 20480, 128, 8, 35, 1, 2520, 2520, 163, 3, "local")]
V_MEGATRON = 51200


def narayanan_tokens(tflops: float, L: int, h: int, s: int = 2048, V: int = V_MEGATRON) -> float:
    """tokens/s/GPU from the paper's teraFLOP/s per GPU: eq. (3) per token, 96 l h^2 (1 + s/6h + V/16lh)."""
    return tflops * 1e12 / (96 * L * h * h * (1 + s / (6 * h) + V / (16 * L * h)))


def _narayanan_rows() -> list[dict]:
    out = []
    for name, L, h, a, t, p, mb, gbs, g, tf, v, ddp in _NARAYANAN:
        # Megatron-LM at 50a4b5fa02 (2021-04): scatter/gather between stages on by default (Sec. 4.1;
        # --no-scatter-gather-tensors-in-pipeline); "local" DDP all-reduces the gradient buffer after the backward
        lay = {"dp": g // (t * p), "tp": t, "pp": p, "v": v, "recompute": "full", "pp_scatter_gather": True,
               "overlap_grad_reduce": ddp != "local", **({"schedule": MEGATRON_INTERLEAVED} if v > 1 else {})}
        note = "DDP local: gradient all-reduce after the backward, not overlapped" if ddp == "local" else \
            "torch DDP (overlapped all-reduce)"
        out.append(_row(f"Megatron GPT-{name} A100x{g} t{t} p{p}" + (f" v{v}" if v > 1 else ""),
                        dict(n_layer=L, d_model=h, n_head=a, vocab=V_MEGATRON), "A100-80G", g, 2048, mb, gbs, lay,
                        round(narayanan_tokens(tf, L, h), 1), NARAYANAN, precision="fp16-mixed", flash=False,
                        published=f"{tf} TFLOP/s/GPU (eq. 3, with recompute)", notes=note,
                        # fp16 at 50a4b5fa02: no fp32 buffer unless asked (accumulate_allreduce_grads_in_fp32, off
                        # by default), so autograd accumulates each micro batch's fp16 gradient into param.grad
                        grad_accum_add=True))
    return out


# ---- Korthikanti et al. 2022: (name, layers, hidden, heads, p, GPUs, global, micro, v, full-recompute s, present s)
_KORTHIKANTI = [("22B", 48, 6144, 64, 1, 8, 4, 4, 1, 1.42, 1.10),
                ("175B", 96, 12288, 96, 8, 64, 64, 1, 3, 18.13, 13.75),
                ("530B", 105, 20480, 128, 35, 280, 280, 1, 3, 49.05, 37.83),
                ("1T", 128, 25600, 160, 64, 512, 512, 1, 1, 94.42, 71.49)]


def _korthikanti_rows() -> list[dict]:
    out = []
    for name, L, h, a, p, g, gbs, mb, v, t_full, t_sel in _KORTHIKANTI:
        for label, secs, rec, sp in (("full", t_full, "full", False), ("SP+sel", t_sel, "selective-attn", True)):
            # Megatron-LM's async TP backward (on by default since 2021-09: --no-async-tensor-model-parallel-allreduce;
            # under SP the re-gather and the reduce-scatter run async instead), as the paper's Sec. 6.2 says
            lay = {"dp": 1, "tp": 8, "pp": p, "v": v, "sp": sp, "recompute": rec, "tp_async_backward": True,
                   "pp_scatter_gather": True,  # Megatron's default, off under SP (p2p_communication.py)
                   **({"schedule": MEGATRON_INTERLEAVED} if v > 1 else {})}
            out.append(_row(f"Korthikanti {name} A100x{g} {label}", dict(n_layer=L, d_model=h, n_head=a,
                            vocab=V_MEGATRON), "A100-80G", g, 2048, mb, gbs, lay, round(gbs * 2048 / (secs * g), 1),
                            KORTHIKANTI, flash=False, fp32_grad_accum=True, published=f"{secs} s/iteration",
                            optimizer_passes=("zero_grads", "grad_divide", "grad_norm", "master_copy"),
                            notes="mixed precision (bf16 read; A100 fp16 and bf16 rates are equal); dp 1"))
    return out


# ---- NeMo Megatron GPT-3 on DGX A100 80GB: tokens/s (all GPUs) per node count
_NEMO = {"5b": (dict(n_layer=24, d_model=4096, n_head=32, vocab=50304), 1, 1, "none", False,
                {1: 40345, 2: 79815, 4: 161754, 8: 312774, 16: 659481, 32: 1159288}),
         "175b": (dict(n_layer=96, d_model=12288, n_head=96, vocab=51200), 8, 8, "selective-attn", True,
                  {8: 7500, 16: 14950, 32: 29537, 64: 58211, 128: 109684})}


def _nemo_rows() -> list[dict]:
    out = []
    for size, (shape, tp, pp, rec, sp, by_nodes) in _NEMO.items():
        for nodes, tps in by_nodes.items():
            g = 8 * nodes
            # distributed_fused_adam as NeMo 1.11 built it (the 22.08 container's; megatron_gpt_model.py) on apex's
            # DistributedFusedAdam (apex 6f7d8ac3, 2022-08-25): gradients accumulate in a contiguous fp32 buffer
            # (contiguous_grad_buffer, no_sync on every micro batch but the last), are reduce-scattered once a step
            # in fp32 (grad_sync_dtype must equal the fp32 state dtype) in 100 MB buckets (bucket_cap_mb's default;
            # the yaml sets none), and the bf16 parameters (param_sync_dtype = autocast dtype) are all-gathered
            # after the step in the same buckets: ZeRO-1's traffic. overlap_grad_sync is switched off under
            # pipeline or sequence parallelism (configure_optimizers): 175B reduces after its backward
            # apex's ColumnParallelLinear (6f7d8ac3, LinearWithGradAccumulationAndAsyncCommunication): under SP the
            # backward's re-gather and reduce-scatter run async beside the GEMMs (tp_async_backward)
            lay = {"dp": g // (tp * pp), "tp": tp, "pp": pp, "sp": sp, "recompute": rec, "strategy": "zero1",
                   "zero_bucket_mb": 100.0, "overlap_grad_reduce": not (pp > 1 or sp), "tp_async_backward": tp > 1}
            out.append(_row(f"NeMo GPT-3 {size} A100x{g}", shape, "A100-80G", g, 2048, 2, 2048, lay,
                            round(tps / g, 1), NEMO, flash=False, published=f"{tps} tokens/s on {nodes} nodes",
                            comm_dtype="fp32", fp32_grad_accum=True, grad_copy=pp == 1,
                            notes="apex DistributedFusedAdam (NeMo 1.11): fp32 grads reduce-scattered once a step "
                                  "in 100 MB buckets, bf16 params all-gathered; vocab 50257 padded to 128 x tp"))
    return out


def _titan(case, model, cluster, gpus, dp, tp, recompute, micro, tokens, source, mem=None, cp=1, seq=8192,
           fp8="none", eager_norm=False, notes="compiled (torch.compile)", y2025=False) -> dict:
    """A torchtitan row: FSDP2 over dp (x cp) ranks (its own copies around the collectives,
    plan/fsdp2_kernels.py), TP with sequence-parallel norms, fp32 gradient reduction
    (training.mixed_precision_reduce's default), SDPA; `eager_norm` only where the run used eager rmsnorm.
    `y2025`: a run at a 2025-06 commit (820504e, e7c0cae), whose defaults differ from the 2024 ones: AdamW
    `optimizer.implementation = "fused"` (config_manager.py; 2024's `foreach = not fused`, fused off), and with
    `training.compile` the loss compiled too (components/loss.py `build_cross_entropy_loss`: torch.compile of
    F.cross_entropy(pred.float()); at 9dec370 that line is commented out), which fuses the upcast into the
    log-softmax and keeps the 16-bit logits and gradient (4sbv, `fused_loss`), not F.cross_entropy's fp32 12sbv.
    Under TP torchtitan's loss is torch's loss_parallel (`training.disable_loss_parallel` false by default; the
    output layer Shard(-1), parallelize_llama.py): `dtensor_loss`, 16sbv/t at its backward where it runs eager.
    Activation checkpointing is torch's non-reentrant checkpoint at every commit (`ptd_checkpoint_wrapper`:
    CheckpointImpl.NO_REENTRANT at 395a52627, the wrapper's default from 9dec370 on), whose early stop ends the
    recompute before the block's last GEMM (`early_stop`, plan/recompute.py `early_stop_recomputed`). The llama
    module is torchtitan's (`llama_impl`): its eager rope in complex fp32, repeat_kv's copies, no head-merge copy
    (plan/ops.py `titan_attention_kernels`; compiled blocks keep fusion.py's count) and `self.output(h).float()`
    before an eager loss (395a52627, 9dec370; not the 2025 rows, whose compiled loss fuses the upcast)."""
    shape = LLAMA2[model] if model in LLAMA2 else model
    lay = {"dp": dp, "tp": tp, "sp": tp > 1, "cp": cp, "cp_impl": "torch", "strategy": "zero3",
           "zero3_impl": "fsdp2", "recompute": recompute, **({"tp_impl": "dtensor"} if tp > 1 else {})}
    # The row inputs the planner gained after the set was recorded, as the sources state them: torch.compile where
    # the run compiled (every row but the 2024-04 eager ones), and torchtitan's default foreach AdamW (eager kernels).
    return _row(case, shape, cluster, gpus, seq, micro, micro * dp, lay, tokens, source, mem, comm_dtype="fp32",
                fp8=fp8, eager_norm=eager_norm, notes=notes, compile=not notes.startswith("eager"),
                eager_adam=not y2025, fused_loss=y2025 and not notes.startswith("eager"), dtensor_loss=tp > 1,
                early_stop=True, llama_impl="torchtitan",
                optimizer_passes=CLIP_PASSES,  # training.max_norm 1.0, every step (layout.OPTIMIZER_PASSES)
                # torchtitan logs torch.cuda.memory_stats' "reserved_bytes.all.peak" (torchtitan/metrics.py
                # DeviceMemoryMonitor at 9dec370): the allocator's segments, no CUDA context, no NCCL buffers
                mem_measure="reserved")


H5 = "H100-SXM-500W"
TITAN = [
    # 2024-04, 64 A100 80GB, FSDP2, eager (13B: Triton fused_rmsnorm; 70B: Meta's eager rmsnorm)
    _titan("tt L2-13B A100x64 no-AC", "13b", "A100-80G", 64, 64, 1, "none", 2, 2162, TITAN_2404, seq=4096,
           notes="eager, fused_rmsnorm"),
    _titan("tt L2-13B A100x64 sel-op", "13b", "A100-80G", 64, 64, 1, "selective-op", 2, 1904, TITAN_2404,
           seq=4096, notes="eager, fused_rmsnorm"),
    _titan("tt L2-70B A100x64 sel-op mb1", "70b", "A100-80G", 64, 64, 1, "selective-op", 1, 355, TITAN_2404,
           seq=4096, eager_norm=True, notes="eager, rmsnorm"),
    _titan("tt L2-70B A100x64 full mb2", "70b", "A100-80G", 64, 64, 1, "full", 2, 353, TITAN_2404, seq=4096,
           eager_norm=True, notes="eager, rmsnorm"),
    # 2024-12, Grand Teton H100 (500 W, HBM2e), Llama 3.1
    _titan("tt 8B H100x8 compile", "llama3-8b", H5, 8, 8, 1, "selective-op", 2, 6667, TITAN_2412, 77.0),
    _titan("tt 8B H100x8 compile+fp8", "llama3-8b", H5, 8, 8, 1, "selective-op", 2, 8532, TITAN_2412, 76.8,
           fp8="tensorwise", notes="compiled; float8 tensorwise (all-gather in float8 not stated)"),
    _titan("tt 8B H100x128 compile", "llama3-8b", H5, 128, 128, 1, "selective-op", 2, 6514, TITAN_2412, 62.0),
    _titan("tt 8B H100x128 compile+fp8", "llama3-8b", H5, 128, 128, 1, "selective-op", 2, 8380, TITAN_2412, 61.8,
           fp8="tensorwise", notes="compiled; float8 tensorwise (all-gather in float8 not stated)"),
    *[_titan(f"tt 8B H100x8 CP{cp} seq{seq // 1024}K", "llama3-8b", H5, 8, 8 // cp, 1, "full", 1, tps, TITAN_2412,
             mem, cp=cp, seq=seq, fp8="tensorwise", notes="compiled; float8; CP rotate method allgather")
      for cp, seq, tps, mem in ((1, 32768, 3890, 83.9), (2, 65536, 2540, 84.2), (4, 131072, 1071, 84.0),
                                (8, 262144, 548, 84.5))],
    _titan("tt 70B H100x256 FSDP32xTP8 compile+fp8", "llama3-70b", H5, 256, 32, 8, "full", 16, 829, TITAN_2412,
           71.9, fp8="tensorwise", notes="compiled; float8 tensorwise; vanilla TP"),
    # 2025-06, Grand Teton H100, vanilla TP column
    *[_titan(f"tt 70B H100x256 TP8 {q}", "llama3-70b", H5, 256, 32, 8, "full", 16, tps, TITAN_2506,
             fp8=q if q != "bf16" else "none", notes="compiled; vanilla TP", y2025=True)
      for q, tps in (("bf16", 597.3), ("tensorwise", 809.8), ("rowwise", 599.6))],
    *[_titan(f"tt 8B H100x64 TP8 {q}", "llama3-8b", H5, 64, 8, 8, "selective-op", 12, tps, TITAN_2506,
             fp8=q if q != "bf16" else "none", notes="compiled; vanilla TP", y2025=True)
      for q, tps in (("bf16", 4378), ("tensorwise", 5078.1), ("rowwise", 3708.5))],
    # 2025-06, H200 (Trainy on WhiteFiber), llama3_8b.toml's selective op AC, float8 all-gather on
    *[_titan(f"tt 8B H200x{g} compile+fp8", "llama3-8b", "H200", g, g, 1, "selective-op", 2, tps, TRAINY, mem,
             fp8="tensorwise", notes="compiled; float8 tensorwise, float8 all-gather, fp8 weight recomputed in bwd",
             y2025=True)
      for g, tps, mem in ((32, 10938, 47.96), (64, 10753, 46.97))],
]

HELD_OUT = _narayanan_rows() + _korthikanti_rows() + _nemo_rows() + TITAN
# where a row's figure, or a near twin of its run, already shows in the project (so it is not wholly unseen)
SEEN = {"tt 8B H100x8 compile": "its 6,667 tokens/s/GPU is quoted in plan/anchors.py (the Hopper MFU ceiling)",
        "Korthikanti 530B A100x280 full": "plan/published.py holds this layout with 8 replicas (2240 GPUs, MFU)",
        "Korthikanti 530B A100x280 SP+sel": "plan/published.py holds this layout with 8 replicas (2240 GPUs, MFU)"}
for _r in HELD_OUT:
    _r["seen"] = SEEN.get(_r["case"], "")


def row_cluster(row) -> Cluster:
    """The row's preset, with the fields where the row's machine is known to differ from it (`cluster_fields`:
    e.g. its network), each stated with its source in the row's module."""
    return replace(load_cluster(row["cluster"], row["gpus"]), **row.get("cluster_fields", {}))


def row_model(row) -> ModelSpec:
    shape = row["shape"]
    if isinstance(shape, str):
        return replace(PRESETS[shape], seq=row["seq"])
    return ModelSpec(row["case"], seq=row["seq"], **shape)


def plan_row(row: dict, cluster: Cluster | None = None):
    """The planner's plan for a row: its model, recipe and layout as published, the cluster preset."""
    c = cluster or row_cluster(row)
    lay = Layout(**row["layout"], comm_dtype=row["comm_dtype"])
    train = TrainSpec(global_batch=row["global_batch"], micro_batch=row["micro_batch"], seq=row["seq"],
                      precision=row["precision"], flash_attention=row["flash"], fp8=row["fp8"],
                      fp8_attention=row.get("fp8_attention", False), eager_norm=row["eager_norm"], dropout=row["dropout"], fused_loss=row["fused_loss"],
                      z_loss=row.get("z_loss", False),
                      fp32_grad_accum=row["fp32_grad_accum"], eager_adam=row.get("eager_adam", False),
                      dtensor_loss=row.get("dtensor_loss", False),
                      compile=row.get("compile", False), grad_copy=row.get("grad_copy", False),
                      recompute_early_stop=row.get("early_stop", False),
                      llama_impl=row.get("llama_impl", "own"),
                      lp_grads_kept=row.get("lp_grads_kept", False), hp_grad_cast=row.get("hp_grad_cast", False),
                      flat_grad_cast=row.get("flat_grad_cast", False),
                      mem_measure=row.get("mem_measure", "allocated"),
                      cuda_context_mib=row.get("cuda_context_mib", 0.0), embed_norm=row.get("embed_norm", False),
                      optimizer_passes=row.get("optimizer_passes", ()), grad_accum_add=row.get("grad_accum_add", False),
                      optim_dtype=row.get("optim_dtype", "fp32"), optimizer=row.get("optimizer", "adam"),
                      cuda_graphs=row.get("cuda_graphs", "none"))
    return evaluate(row_model(row), train, lay, replace(c, num_gpus=row["gpus"]))


def evaluate_rows(rows: list[dict] | None = None) -> list[dict]:
    """Each row with the planner's tokens/s/GPU and memory beside the published ones, and their errors."""
    out = []
    for r in HELD_OUT if rows is None else rows:
        p = plan_row(r)
        got, mem = p.tokens_per_s / r["gpus"], p.mem_total / 2**30
        out.append({**r, "planner": got, "err": got / r["tokens_per_gpu"] - 1, "planner_mem_gib": mem,
                    "mem_err": (mem / r["mem_gib"] - 1) if r.get("mem_gib") else None, "fits": p.fits})
    return out
