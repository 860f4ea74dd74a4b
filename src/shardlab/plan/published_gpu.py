"""Published GPU training runs the planner is held against, in two sets kept apart (docs/planner.md,
"Against published GPU runs"):

  GIVEN      torchtitan's Llama 3 rows: the rows the GPU terms were examined on (reproduced inputs: the
             layout, batch, recompute policy and reduce dtype are the run's own, from its docs and configs)
  HELD_OUT   runs not looked at while the first terms were chosen: MosaicML llm-foundry's MPT throughput tables
             (scripts/train/benchmarking/README.md), the H100 rows and the mixed-precision-mode rows of its A100
             80GB table at sequence 2048, recorded with the exact figures and evaluated once, after those terms
             were committed; the second round of terms was examined on them (so they are given inputs now)
  EXAMINED   the rest of the A100 80GB table at sequence 2048 (MPT-125M to 13B, amp_bf16), looked at while the
             second round of terms was chosen
  HELD_OUT_2 the A100 40GB table (bf16 PURE) at sequence 2048: not evaluated until the second round of terms
             was committed, then once
  COMPILED   torchtitan's two 8B H100 runs of GIVEN again, compiled (its end-2024 benchmark page): not evaluated
             until the compile term (plan/fusion.py) was written, then once

No row has a factor of its own: every prediction is the preset and the row's configuration.
"""
from __future__ import annotations

from dataclasses import replace

from .hardware import Cluster, load_cluster
from .layout import Layout
from .train_spec import CLIP_PASSES, TrainSpec
from .model import ModelSpec
from .presets import PRESETS
from .step import evaluate

TORCHTITAN = "https://github.com/pytorch/torchtitan/blob/main/docs/performance.md"
FOUNDRY = "https://github.com/mosaicml/llm-foundry/blob/main/scripts/train/benchmarking/README.md"


def _tt(case, model, cluster, gpus, tp, recompute, micro, tokens, mem=None):
    """A torchtitan row: FSDP2 over gpus/tp ranks (TP with its sequence-parallel norms), bf16 parameters,
    fp32 gradient reduction (its default training.mixed_precision_reduce) with FSDP2's own copies around the
    collectives (plan/fsdp2_kernels.py), SDPA, seq 8192, and its default
    norm_type "rmsnorm": Meta's reference RMSNorm, eager kernels in fp32 (plan/ops.py EAGER_NORM_BYTES); its
    activation checkpointing torch's non-reentrant checkpoint, whose early stop ends the recompute before the
    block's last GEMM (plan/recompute.py `early_stop_recomputed`); its llama module torchtitan's own (complex fp32
    rope, repeat_kv, the logits cast to fp32: `llama_impl`, plan/ops.py `titan_attention_kernels`)."""
    return {"case": case, "model": model, "cluster": cluster, "gpus": gpus, "seq": 8192, "micro_batch": micro,
            "layout": {"dp": gpus // tp, "tp": tp, "sp": tp > 1, "strategy": "zero3", "recompute": recompute,
                       "zero3_impl": "fsdp2", **({"tp_impl": "dtensor"} if tp > 1 else {})},  # torchtitan's TP: DTensor
            "comm_dtype": "fp32", "tokens_per_gpu": tokens, "mem_gib": mem, "eager_norm": True, "eager_adam": True,
            "dtensor_loss": tp > 1, "early_stop": True, "llama_impl": "torchtitan", "clip": True, "source": TORCHTITAN}


GIVEN = [
    _tt("tt 8B A100x64 sel-op", "llama3-8b", "A100-80G", 64, 1, "selective-op", 1, 2973),
    _tt("tt 70B A100x64 full", "llama3-70b", "A100-80G", 64, 1, "full", 1, 331),
    _tt("tt 8B H100x8 sel-op", "llama3-8b", "H100-SXM-500W", 8, 1, "selective-op", 2, 5762, 82.4),
    _tt("tt 8B H100x128 sel-op", "llama3-8b", "H100-SXM-500W", 128, 1, "selective-op", 2, 5605, 67.0),
    _tt("tt 405B H100x128 TP8 full", "llama3-405b", "H100-SXM-500W", 128, 8, "full", 2, 109),
]

# the same two 8B runs compiled: torchtitan's end-2024 benchmark (benchmarks/llama3_h100_202412_torchtitan.md, the
# page docs/performance.md became), Table 1 (8 GPUs) and Table 3 (128 GPUs), "FSDP + torch.compile": each
# TransformerBlock compiled (its apply_compile), the eager rows' configs otherwise. Its "+ Float8" rows are not here:
# the H100-SXM-500W preset has no FP8 peak and the page does not say whether the weights were gathered in float8
TORCHTITAN_2024 = "https://github.com/pytorch/torchtitan/blob/main/benchmarks/llama3_h100_202412_torchtitan.md"
COMPILED = [
    {**_tt("tt 8B H100x8 sel-op compiled", "llama3-8b", "H100-SXM-500W", 8, 1, "selective-op", 2, 6667, 77.0),
     "compile": True, "source": TORCHTITAN_2024},
    {**_tt("tt 8B H100x128 sel-op compiled", "llama3-8b", "H100-SXM-500W", 128, 1, "selective-op", 2, 6514, 62.0),
     "compile": True, "source": TORCHTITAN_2024},
]

# MPT shapes (llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml): (n_layers, d_model, n_heads); vocabulary
# 50,368, MLP expansion 4, tied embeddings
MPT = {"125m": (12, 768, 12), "350m": (24, 1024, 16), "760m": (24, 1536, 12), "1b": (24, 2048, 16),
       "3b": (32, 2560, 20), "7b": (32, 4096, 32), "13b": (40, 5120, 40), "30b": (48, 7168, 56),
       "70b": (80, 8192, 64)}
# llm-foundry's benchmark sweeps (scripts/train/benchmarking/submit_benchmarks.py) set attn_impl from
# `--attn_impl`, default "triton": FlashAttention in Triton (plan/attention.py)
FOUNDRY_ATTENTION = "triton"


def _mpt(size, gpus, gpu, micro, accum, tokens, ckpt, mp="DEFAULT"):
    """An llm-foundry row: FSDP FULL_SHARD, bf16 compute; Composer's DEFAULT mixed precision reduces in fp32,
    PURE in bf16; activation checkpointing is full recompute; the Triton FlashAttention kernel. The model as
    the benchmark yamls (scripts/train/yamls/pretrain/mpt-*.yaml, May and October 2023) build it with MPTConfig's
    defaults: learned positions and biases (GPT-2's parameter list), dropout 0 (attn_pdrop, resid_pdrop,
    emb_pdrop), and ComposerMPTCausalLM's default loss_fn "fused_crossentropy" (flash-attn's xentropy kernel)."""
    return {"case": f"MPT-{size} {gpu}x{gpus} mb{micro}", "mpt": size, "cluster": gpu, "gpus": gpus, "seq": 2048,
            "micro_batch": micro, "accum": accum,
            "layout": {"dp": gpus, "tp": 1, "sp": False, "strategy": "zero3", "recompute": "full" if ckpt else "none"},
            "comm_dtype": "fp32" if mp == "DEFAULT" else "bf16", "tokens_per_gpu": tokens, "mem_gib": None,
            "attention": FOUNDRY_ATTENTION, "dropout": False, "fused_loss": True, "eager_adam": True, "clip": True,
            "source": FOUNDRY}


# every BF16 row at sequence 2048 of the tables "H100 80GB BF16" and "A100 80GB with 1600 Gbps node-node
# interconnect (RoCE)": (model, GPUs, micro batch, grad accum, tokens/s/GPU, activation checkpointing)
HELD_OUT = [
    _mpt("70b", 64, "H100-SXM", 8, 4, 1039, True), _mpt("70b", 32, "H100-SXM", 2, 16, 882, True),
    _mpt("30b", 32, "H100-SXM", 14, 3, 2308, True), _mpt("30b", 16, "H100-SXM", 10, 3, 2263, True),
    _mpt("30b", 8, "H100-SXM", 3, 21, 2002, True),
    _mpt("13b", 64, "H100-SXM", 2, 1, 4800, False), _mpt("13b", 32, "H100-SXM", 2, 1, 4811, False),
    _mpt("13b", 16, "H100-SXM", 2, 1, 4767, False), _mpt("13b", 8, "H100-SXM", 2, 1, 4792, False),
    _mpt("7b", 8, "H100-SXM", 6, 1, 10643, False),
    _mpt("3b", 64, "H100-SXM", 6, 3, 22525, False), _mpt("3b", 32, "H100-SXM", 6, 3, 23021, False),
    _mpt("3b", 16, "H100-SXM", 10, 3, 24142, False),
    _mpt("1b", 64, "H100-SXM", 20, 1, 44402, False), _mpt("1b", 32, "H100-SXM", 20, 1, 45130, False),
    _mpt("1b", 16, "H100-SXM", 20, 1, 46037, False), _mpt("1b", 8, "H100-SXM", 14, 1, 45455, False),
    _mpt("760m", 32, "H100-SXM", 24, 1, 67971, False), _mpt("760m", 16, "H100-SXM", 24, 1, 68551, False),
    _mpt("760m", 8, "H100-SXM", 24, 2, 63147, False),
    _mpt("70b", 64, "A100-80G", 8, 4, 410, True, "PURE"), _mpt("70b", 32, "A100-80G", 2, 16, 373, True, "PURE"),
    _mpt("30b", 8, "A100-80G", 3, 21, 916, True),
]


# the rest of the A100 80GB table at sequence 2048 (amp_bf16, DEFAULT, no activation checkpointing)
EXAMINED = [
    _mpt("13b", 8, "A100-80G", 2, 3, 2262, False), _mpt("7b", 8, "A100-80G", 6, 2, 4641, False),
    _mpt("3b", 8, "A100-80G", 10, 2, 10811, False), _mpt("1b", 8, "A100-80G", 14, 4, 20513, False),
    _mpt("760m", 8, "A100-80G", 24, 2, 32434, False), _mpt("350m", 8, "A100-80G", 32, 2, 58782, False),
    _mpt("125m", 8, "A100-80G", 40, 2, 142830, False), _mpt("125m", 8, "A100-80G", 32, 2, 141737, False),
]

# "A100 40GB with 1600 Gbps node-node interconnect (RoCE)", every row at sequence 2048 (bf16, PURE):
# (model, GPUs, micro batch, grad accum, tokens/s/GPU, activation checkpointing)
_A40 = [("70b", 128, 4, 1, 376, True), ("70b", 64, 2, 1, 276, True), ("30b", 128, 6, 1, 865, True),
        ("30b", 32, 4, 1, 857, True), ("13b", 128, 16, 1, 1972, True), ("13b", 64, 16, 1, 1976, True),
        ("13b", 32, 14, 1, 1998, True), ("13b", 16, 10, 1, 1993, True), ("13b", 8, 4, 16, 1668, True),
        ("7b", 128, 18, 1, 3623, True), ("7b", 64, 18, 1, 3665, True), ("7b", 32, 18, 1, 3725, True),
        ("7b", 16, 16, 1, 3645, True), ("7b", 8, 12, 4, 3679, True), ("3b", 128, 6, 1, 9538, False),
        ("3b", 64, 6, 1, 9736, False), ("3b", 32, 6, 1, 9914, False), ("3b", 16, 5, 1, 9750, False),
        ("3b", 8, 5, 8, 10065, False), ("1b", 128, 10, 1, 18647, False), ("1b", 64, 10, 1, 19001, False),
        ("1b", 32, 10, 1, 15555, False), ("1b", 16, 8, 1, 19085, False), ("1b", 8, 8, 8, 19271, False),
        ("760m", 128, 12, 1, 28940, False), ("760m", 64, 12, 1, 29344, False), ("760m", 32, 12, 1, 29648, False),
        ("760m", 16, 12, 1, 29607, False), ("760m", 8, 12, 4, 30173, False), ("350m", 128, 18, 1, 51934, False),
        ("350m", 64, 18, 1, 52689, False), ("350m", 32, 18, 1, 53811, False), ("350m", 16, 18, 1, 55413, False),
        ("350m", 8, 16, 4, 55995, False), ("125m", 128, 26, 1, 123936, False),
        ("125m", 64, 26, 1, 125234, False), ("125m", 32, 26, 1, 127122, False),
        ("125m", 16, 26, 1, 130535, False), ("125m", 8, 26, 3, 136334, False)]
HELD_OUT_2 = [_mpt(size, g, "A100-40G", mb, acc, tok, ck, "PURE") for size, g, mb, acc, tok, ck in _A40]
def row_cluster(row) -> Cluster:
    """The row's GPU: its preset (the A100 40GB part's among them)."""
    return load_cluster(row["cluster"], row["gpus"])


def _model(row) -> ModelSpec:
    if "mpt" in row:
        L, h, a = MPT[row["mpt"]]
        return ModelSpec(f"mpt-{row['mpt']}", L, h, a, 50368, row["seq"], 4, True)
    return PRESETS[row["model"]]


def predict(row: dict, cluster: Cluster | None = None, comm_dtype: str | None = "row",
            recompute: str | None = None, row_attention: bool = True, eager_norm: bool = True,
            row_dropout: bool = True, row_loss: bool = True, row_adam: bool = True, row_compile: bool = True,
            row_fsdp2: bool = True, row_early_stop: bool = True, row_model: bool = True,
            row_clip: bool = True) -> dict:
    """The planner's tokens/s/GPU and memory for a row (its own configuration; `comm_dtype`/`recompute`
    override it, and `row_attention=False` leaves the cluster's attention kernel, `row_dropout=False` the
    papers' dropout masks, `row_loss=False` F.cross_entropy's fp32 loss, `row_adam=False` a fused AdamW,
    `row_compile=False` eager kernels where the run compiled, `row_fsdp2=False` shardlab's flat-buffer copies
    where the run used FSDP2, `row_early_stop=False` the whole block recomputed where torch's checkpoint
    stopped early, `row_model=False` shardlab's llama kernels where the run built torchtitan's, `row_clip=False`
    no gradient clipping's passes where the run clipped, for the per-term tables)."""
    c = cluster or row_cluster(row)
    if row_attention and row.get("attention") and c.attention:
        c = replace(c, attention=row["attention"])
    lay = Layout(**{**row["layout"], **({"recompute": recompute} if recompute else {}),
                    **({} if row_fsdp2 else {"zero3_impl": "own"})},
                 comm_dtype=row["comm_dtype"] if comm_dtype == "row" else comm_dtype)
    mb = row["micro_batch"]
    train = TrainSpec(global_batch=mb * row.get("accum", 1) * lay.dp, micro_batch=mb, seq=row["seq"],
                      precision="bf16-mixed", flash_attention=True,
                      eager_norm=row.get("eager_norm", False) and eager_norm,
                      dropout=row.get("dropout", True) or not row_dropout,
                      fused_loss=row.get("fused_loss", False) and row_loss,
                      dtensor_loss=row.get("dtensor_loss", False) and row_loss,
                      eager_adam=row.get("eager_adam", False) and row_adam,
                      compile=row.get("compile", False) and row_compile,
                      recompute_early_stop=row.get("early_stop", False) and row_early_stop,
                      llama_impl=row.get("llama_impl", "own") if row_model else "own",
                      optimizer_passes=CLIP_PASSES if row.get("clip") and row_clip else ())
    p = evaluate(_model(row), train, lay, replace(c, num_gpus=row["gpus"]))
    return {"tokens_per_gpu": p.tokens_per_s / row["gpus"], "mem_gib": p.mem_total / 2**30, "plan": p}


def evaluate_rows(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        got = predict(r)
        out.append({**r, "planner": got["tokens_per_gpu"], "err": got["tokens_per_gpu"] / r["tokens_per_gpu"] - 1,
                    "planner_mem_gib": got["mem_gib"],
                    "mem_err": (got["mem_gib"] / r["mem_gib"] - 1) if r.get("mem_gib") else None})
    return out


def error_stats(errs: list[float], limit: float = 0.15) -> str:
    """A set's errors as the issue judges them: mean and max |error|, the rows over `limit`, the signed mean."""
    if not errs:
        return "no rows"
    a = [abs(e) for e in errs]
    return (f"mean {sum(a) / len(a):.3f} / max {max(a):.3f} / over {limit:.2f}: {sum(x > limit for x in a)} "
            f"({len(a)} rows); signed mean {sum(errs) / len(errs):+.3f}")


def print_set(rows: list[dict], summary: bool = False) -> None:
    """A frozen set's evaluated rows (evaluate_rows) as the set scripts print them: the table, then error_stats of all
    rows, of those not seen before freezing, and of each cluster."""
    if not summary:
        print("| case | published tok/s/GPU | planner | error | fits | seen |")
        print("| --- | --- | --- | --- | --- | --- |")
        for r in rows:
            print(f"| {r['case']} | {r['tokens_per_gpu']:,.0f} | {r['planner']:,.0f} | {r['err']:+.1%} | "
                  f"{'yes' if r['fits'] else 'no'} | {'yes' if r['seen'] else ''} |")
        print()
    print(f"tokens/s/GPU, all: {error_stats([r['err'] for r in rows])}")
    print(f"  not seen before freezing: {error_stats([r['err'] for r in rows if not r['seen']])}")
    for gpu in dict.fromkeys(r["cluster"] for r in rows):
        print(f"  {gpu}: {error_stats([r['err'] for r in rows if r['cluster'] == gpu])}")
    mem = [r for r in rows if r.get("mem_err") is not None]
    if mem:  # the rows with a published memory figure
        print(f"memory, rows with a published figure: {error_stats([r['mem_err'] for r in mem], 0.10)}; "
              + ", ".join(f"{r['case']} {r['planner_mem_gib']:.1f} GiB against {r['mem_gib']:.1f} ({r['mem_err']:+.1%})"
                          for r in mem))
