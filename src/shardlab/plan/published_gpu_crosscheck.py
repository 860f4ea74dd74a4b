"""Published figures that cross-check the held-out NeMo GPT-3 175B rows (plan/published_gpu_heldout.py), kept
apart from every set: they were collected *after* the planner's error on those rows was known (docs/planner.md,
"The eighth round"), so they estimate nothing; they say which of the source's figures the rows' inputs describe.

  NEMO_2206   NVIDIA/NeMo-Megatron-Launcher README.md at commit d4317ddd (2022-07-14, unchanged until 1f1e6be5
              replaced it on 2022-09-07): tokens/s of GPT-3 175B on 16, 32 and 128 DGX A100 80GB nodes, the
              NeMo Megatron 22.06 table. Layout: conf/training/gpt3/175b.yaml at d4317ddd: the held-out rows' t 8,
              p 8, micro batch 2, selective recompute, sequence parallel, bf16 O2, gradient-accumulation fusion,
              but global batch 1536 and `fused_adam` (not distributed): NeMo's MainParamsOptimizerWrapper, whose
              fp32 main gradients are all-reduced after the pipeline in `grad_allreduce_chunk_size_mb` = 125 MB
              chunks (megatron_base_model.configure_optimizers: async_grad_allreduce is off under p > 1 or
              sequence parallelism; megatron_gpt_model.training_step calls allreduce_main_grads()).
  NEMO_DAYS   The same README at 3579cdb3 (the held-out rows' commit), section 5.6 "GPT-3 175B": "It can be trained
              in about 27 days using 128 nodes ... see the 175b.yaml config file", and that yaml's 75,000 steps of
              2048 x 2048 tokens: 314.6e9 tokens / 27 days / 1024 GPUs. The held-out 1024-GPU row's run, with the
              README's other figure for it ("about", so +-2% for +-half a day).
"""
from __future__ import annotations

from copy import deepcopy

from .published_gpu_heldout import HELD_OUT, evaluate_rows

NEMO_2206_SRC = ("NVIDIA/NeMo-Megatron-Launcher README.md @d4317ddd, 7.1.2 (the 22.06 table); "
                 "conf/training/gpt3/175b.yaml @d4317ddd")
NEMO_DAYS_SRC = "NVIDIA/NeMo-Megatron-Launcher README.md @3579cdb3, 5.6 GPT-3 175B: about 27 days on 128 nodes"


def _nemo_175b(gpus: int) -> dict:
    """The held-out NeMo 175B row on `gpus` GPUs: its model, recipe and the yaml's layout at 3579cdb3."""
    base = next(r for r in HELD_OUT if r["case"].startswith("NeMo GPT-3 175b"))
    row = deepcopy(base)
    row.update(gpus=gpus, seen="", notes="")
    row["layout"]["dp"] = gpus // (row["layout"]["tp"] * row["layout"]["pp"])
    return row


def nemo_2206_rows() -> list[dict]:
    out = []
    for nodes, tps in ((16, 20642), (32, 38025), (128, 141306)):
        row = _nemo_175b(8 * nodes)
        # fused_adam under O2: fp32 main grads, all-reduced after the backward (not overlapped) in 125 MB chunks
        row["layout"].update(strategy="ddp", bucket_mb=125.0, first_bucket_mb=125.0, last_bucket_mb=0.0,
                             zero_bucket_mb=0.0, overlap_grad_reduce=False)
        row.update(case=f"NeMo 22.06 GPT-3 175b A100x{8 * nodes}", global_batch=1536,
                   tokens_per_gpu=round(tps / (8 * nodes), 1), source=NEMO_2206_SRC,
                   published=f"{tps} tokens/s on {nodes} nodes")
        out.append(row)
    return out


def nemo_days_row() -> dict:
    row = _nemo_175b(1024)
    tokens = 75000 * 2048 * 2048
    row.update(case="NeMo 22.08 GPT-3 175b A100x1024 (27 days)", source=NEMO_DAYS_SRC,
               tokens_per_gpu=round(tokens / (27 * 86400) / 1024, 1), published="about 27 days, 128 nodes")
    return row


CROSSCHECK = nemo_2206_rows() + [nemo_days_row()]


def evaluate() -> list[dict]:
    return evaluate_rows(CROSSCHECK)
