"""The planner against frozen sets of published tables (Megatron-Bridge's performance tables, Megatron-Core with
Transformer Engine, and from the nineteenth set others' tables too), each committed before the planner was first run
on it; evaluate once per committed change of the planner:
  eighth  dense Llama 3 rows on DGX H100 and DGX B200, FP8 current scaling (plan/published_gpu_eighth.py)
  ninth   the same on GB200 and GB300, the NVL72 racks' GPUs (plan/published_gpu_ninth.py)
  tenth   dense Llama 3 rows in MXFP8 on B200, GB200 and GB300 (plan/published_gpu_tenth.py)
  eleventh  Llama 3 70B fine-tuning (SFT) rows on GB300, GB200 and H100 (plan/published_gpu_eleventh.py)
  twelfth   Qwen3 MoE pre-training rows (30B-A3B, 235B-A22B) on H100, B200, B300, GB200, GB300
            (plan/published_gpu_twelfth.py): mixture of experts and expert parallelism
  thirteenth  DeepSeek-V3 pre-training rows on H100, B200, B300, GB200, GB300 (plan/published_gpu_thirteenth.py):
            latent attention, leading dense blocks, a shared expert, multi-token prediction
  fourteenth  Kimi-K2 pre-training on GB300 (plan/published_gpu_fourteenth.py): 384 experts, trained with Muon
  fifteenth   GPT-OSS 120B pre-training on H100, B200, B300, GB200, GB300 (plan/published_gpu_fifteenth.py):
            sliding-window attention, 128 experts top-4, eager and graphed rows
  sixteenth   Megatron-Bridge's model verification cards: GPT-OSS 20B/120B, Qwen3 30B/235B/8B, DeepSeek-V3 and
            Moonlight pre-training on H100, GB200, GB300 (plan/published_gpu_sixteenth.py)
  nineteenth  torchao's float8 training benchmarks (not Megatron-Bridge's: torchtitan, FSDP2, compile): Llama 3 8B
            on 8 H100s in bfloat16, tensorwise and rowwise float8 (plan/published_gpu_nineteenth.py)
  twentieth   FlagPerf's Megatron-Core Llama 3 rows (BAAI, core_v0.6.0): 8B on A800 and H100, 70B on 64 H100s
            (plan/published_gpu_twentieth.py)

    PYTHONPATH=src python scripts/planner_mb.py eighth            # the whole table
    PYTHONPATH=src python scripts/planner_mb.py ninth --summary   # the means only
"""
from __future__ import annotations

import argparse
import importlib

from shardlab.plan.published_gpu import print_set

SETS = {"eighth": "EIGHTH", "ninth": "NINTH", "tenth": "TENTH", "eleventh": "ELEVENTH", "twelfth": "TWELFTH",
        "thirteenth": "THIRTEENTH", "fourteenth": "FOURTEENTH", "fifteenth": "FIFTEENTH",
        "sixteenth": "SIXTEENTH", "nineteenth": "NINETEENTH", "twentieth": "TWENTIETH"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("set", choices=SETS, help="which frozen set")
    ap.add_argument("--summary", action="store_true", help="the means only")
    args = ap.parse_args()
    mod = importlib.import_module(f"shardlab.plan.published_gpu_{args.set}")
    print_set(mod.evaluate_rows(getattr(mod, SETS[args.set])), args.summary)


if __name__ == "__main__":
    main()
