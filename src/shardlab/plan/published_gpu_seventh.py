"""The seventh set: llm-foundry's published rows the project had never evaluated, frozen in a commit before the
planner was run on them (docs/planner.md, "The seventh set"). Collected 2026-12-06.

Source: mosaicml/llm-foundry scripts/train/benchmarking/README.md, its tables unchanged from 5e85bd62d (2024-01-06)
to 8c8dd48f7 (the newest read). The MPT sets of plan/published_gpu.py hold every row at sequence 2048 of three of
its tables (H100 80GB BF16, A100 80GB, A100 40GB), and their errors were examined. This set holds the rest:
  _H100_LARGE  "H100 80GB BF16 (Large Scale, >= 128 GPUs)", every row: 128 to 512 GPUs at sequence 2048, added on
               2024-01-06 (#838), a later software release than the other tables; 1B and 3B ran SHARD_GRAD_OP.
  _H100        "H100 80GB BF16": every row at a sequence other than 2048 (512 to 65,536), 8 GPUs.
  _A100_80     "A100 80GB with 1600 Gbps node-node interconnect (RoCE)": the same, 8 GPUs.
  _A100_40     "A100 40GB with 1600 Gbps node-node interconnect (RoCE)": the same, 8 GPUs, bf16 PURE.
Skipped: the "H100 80GB FP8" table (`amp_fp8`: Transformer Engine's FP8 with delayed scaling, whose fused casts
the planner's float8 recipes, torchao's tensorwise and rowwise, do not describe).

Each row is (model, sequence, GPUs, micro batch, gradient accumulation, tokens/s/GPU, ZeRO stage, activation
checkpointing), read off the table's columns "Model", "SeqLen (T)", "# GPUs", "MicroBatchSize", "GradAccum",
"Throughput (T/s/GPU)", "Sharding Strategy" (FULL_SHARD 3, SHARD_GRAD_OP 2) and "Activation Checkpointing". The
recipe is plan/published_gpu.py's `_mpt`: FSDP with its table's mixed-precision mode (DEFAULT: fp32 reduce; PURE:
bf16), full recompute where checkpointed, the sweep script's default attention (`--attn_impl triton`, unchanged at
5e85bd62d), MPTConfig's defaults (learned positions: the table's NumParams grows with the sequence by exactly
(s - 2048) x d_model, e.g. MPT-3B at 32,768), dropout 0, the fused cross-entropy, gradient clipping. No column
gives CPU offload as True on these rows.
"""
from __future__ import annotations

from .published_gpu import _mpt, evaluate_rows  # noqa: F401  (evaluate_rows: re-exported for the script)

_H100_LARGE = [
    ("70b", 2048, 512, 8, 1, 1007, 3, True), ("70b", 2048, 256, 8, 1, 1035, 3, True),
    ("70b", 2048, 128, 8, 1, 1058, 3, True), ("30b", 2048, 512, 8, 1, 2115, 3, True),
    ("30b", 2048, 256, 8, 1, 2148, 3, True), ("30b", 2048, 128, 8, 1, 2199, 3, True),
    ("13b", 2048, 512, 16, 1, 4952, 3, True), ("13b", 2048, 256, 16, 1, 4989, 3, True),
    ("13b", 2048, 128, 16, 1, 5080, 3, True), ("7b", 2048, 512, 6, 1, 9670, 3, False),
    ("7b", 2048, 256, 6, 1, 10119, 3, False), ("7b", 2048, 128, 6, 1, 10475, 3, False),
    ("3b", 2048, 512, 8, 1, 21664, 2, False), ("3b", 2048, 256, 8, 1, 22772, 2, False),
    ("3b", 2048, 128, 8, 1, 23422, 2, False), ("1b", 2048, 512, 12, 1, 39837, 2, False),
    ("1b", 2048, 256, 12, 1, 42555, 2, False), ("1b", 2048, 128, 12, 1, 44123, 2, False)]

_H100 = [
    ("30b", 8192, 8, 1, 21, 1384, 3, True), ("30b", 4096, 8, 1, 21, 1802, 3, True),
    ("30b", 1024, 8, 6, 21, 2084, 3, True), ("13b", 32768, 8, 1, 3, 1976, 3, True),
    ("13b", 16384, 8, 3, 3, 2985, 3, True), ("13b", 4096, 8, 10, 3, 4717, 3, True),
    ("13b", 1024, 8, 40, 3, 5502, 3, True), ("7b", 65536, 8, 1, 2, 1956, 3, True),
    ("7b", 32768, 8, 2, 2, 3318, 3, True), ("7b", 8192, 8, 8, 2, 6935, 3, True),
    ("7b", 4096, 8, 16, 2, 8611, 3, True), ("7b", 1024, 8, 64, 2, 10203, 3, True),
    ("3b", 65536, 8, 1, 2, 3262, 3, True), ("3b", 32768, 8, 3, 6, 5873, 3, True),
    ("3b", 16384, 8, 1, 6, 11152, 3, False), ("3b", 8192, 8, 3, 6, 16578, 3, False),
    ("3b", 4096, 8, 5, 6, 20964, 3, False), ("3b", 1024, 8, 20, 6, 27046, 3, False),
    ("3b", 512, 8, 40, 6, 27965, 3, False), ("1b", 65536, 8, 1, 2, 5506, 3, True),
    ("1b", 32768, 8, 1, 4, 12025, 3, False), ("1b", 16384, 8, 2, 4, 19649, 3, False),
    ("1b", 8192, 8, 3, 4, 29157, 3, False), ("1b", 4096, 8, 7, 4, 38535, 3, False),
    ("1b", 1024, 8, 18, 4, 48910, 3, False), ("1b", 512, 8, 56, 4, 52275, 3, False),
    ("760m", 32768, 8, 1, 2, 16291, 3, False), ("760m", 16384, 8, 3, 2, 27815, 3, False),
    ("760m", 8192, 8, 6, 2, 41825, 3, False), ("760m", 4096, 8, 12, 2, 55459, 3, False),
    ("760m", 1024, 8, 48, 2, 78581, 3, False), ("760m", 512, 8, 96, 2, 83749, 3, False)]

_A100_80 = [
    ("30b", 8192, 8, 1, 21, 574, 3, True), ("30b", 4096, 8, 1, 21, 814, 3, True),
    ("30b", 1024, 8, 6, 21, 946, 3, True), ("30b", 512, 8, 12, 21, 967, 3, True),
    ("13b", 32768, 8, 1, 3, 1016, 3, True), ("13b", 16384, 8, 3, 3, 1431, 3, True),
    ("13b", 8192, 8, 5, 3, 1795, 3, True), ("13b", 4096, 8, 10, 3, 2060, 3, True),
    ("13b", 1024, 8, 40, 3, 2330, 3, True), ("7b", 65536, 8, 1, 2, 1013, 3, True),
    ("7b", 32768, 8, 2, 2, 1672, 3, True), ("7b", 16384, 8, 4, 2, 2453, 3, True),
    ("7b", 8192, 8, 8, 2, 3206, 3, True), ("7b", 4096, 8, 16, 2, 3684, 3, True),
    ("7b", 1024, 8, 64, 2, 4357, 3, True), ("3b", 65536, 8, 1, 2, 1767, 3, True),
    ("3b", 32768, 8, 3, 6, 3029, 3, True), ("3b", 16384, 8, 1, 6, 5529, 3, False),
    ("3b", 8192, 8, 3, 6, 7695, 3, False), ("3b", 4096, 8, 5, 6, 9457, 3, False),
    ("3b", 1024, 8, 20, 6, 11580, 3, False), ("3b", 512, 8, 40, 6, 12127, 3, False),
    ("1b", 65536, 8, 1, 2, 3044, 3, True), ("1b", 32768, 8, 1, 4, 6275, 3, False),
    ("1b", 16384, 8, 2, 4, 9956, 3, False), ("1b", 8192, 8, 3, 4, 13814, 3, False),
    ("1b", 4096, 8, 7, 4, 17807, 3, False), ("1b", 1024, 8, 18, 4, 22112, 3, False),
    ("1b", 512, 8, 56, 4, 23148, 3, False), ("760m", 65536, 8, 1, 2, 4143, 3, True),
    ("760m", 32768, 8, 1, 2, 8802, 3, False), ("760m", 16384, 8, 3, 2, 14274, 3, False),
    ("760m", 8192, 8, 6, 2, 20933, 3, False), ("760m", 4096, 8, 12, 2, 27351, 3, False),
    ("760m", 1024, 8, 48, 2, 29765, 3, False), ("760m", 512, 8, 96, 2, 29446, 3, False),
    ("350m", 65536, 8, 1, 2, 7524, 3, False), ("350m", 32768, 8, 2, 2, 13652, 3, False),
    ("350m", 16384, 8, 4, 2, 23559, 3, False), ("350m", 8192, 8, 8, 2, 36569, 3, False),
    ("350m", 4096, 8, 16, 2, 49555, 3, False), ("350m", 1024, 8, 64, 2, 64813, 3, False),
    ("350m", 512, 8, 128, 2, 69330, 3, False), ("125m", 65536, 8, 1, 2, 20368, 3, False),
    ("125m", 32768, 8, 2, 2, 36407, 3, False), ("125m", 16384, 8, 4, 2, 60040, 3, False),
    ("125m", 8192, 8, 8, 2, 90392, 3, False), ("125m", 4096, 8, 16, 2, 118396, 3, False),
    ("125m", 1024, 8, 64, 2, 156468, 3, False), ("125m", 512, 8, 128, 2, 165681, 3, False)]

_A100_40 = [
    ("13b", 8192, 8, 1, 16, 1407, 3, True), ("13b", 4096, 8, 2, 16, 1603, 3, True),
    ("13b", 1024, 8, 8, 16, 1727, 3, True), ("13b", 512, 8, 16, 16, 1763, 3, True),
    ("7b", 16384, 8, 1, 4, 2249, 3, True), ("7b", 8192, 8, 3, 4, 2887, 3, True),
    ("7b", 4096, 8, 6, 4, 3366, 3, True), ("7b", 1024, 8, 24, 4, 3854, 3, True),
    ("7b", 512, 8, 48, 4, 3895, 3, True), ("3b", 32768, 8, 1, 4, 2955, 3, True),
    ("3b", 16384, 8, 2, 8, 4465, 3, True), ("3b", 8192, 8, 1, 8, 7149, 3, False),
    ("3b", 4096, 8, 2, 8, 8777, 3, False), ("3b", 1024, 8, 10, 8, 10731, 3, False),
    ("3b", 512, 8, 20, 8, 11324, 3, False), ("1b", 32768, 8, 1, 4, 5095, 3, True),
    ("1b", 16384, 8, 1, 8, 9715, 3, False), ("1b", 8192, 8, 2, 8, 13474, 3, False),
    ("1b", 4096, 8, 4, 8, 16856, 3, False), ("1b", 1024, 8, 16, 8, 20959, 3, False),
    ("1b", 512, 8, 32, 8, 21782, 3, False), ("760m", 32768, 8, 1, 4, 7183, 3, True),
    ("760m", 16384, 8, 1, 4, 13914, 3, False), ("760m", 8192, 8, 3, 4, 20106, 3, False),
    ("760m", 4096, 8, 6, 4, 25863, 3, False), ("760m", 1024, 8, 24, 4, 33422, 3, False),
    ("760m", 512, 8, 48, 4, 34938, 3, False), ("350m", 32768, 8, 1, 4, 13416, 3, False),
    ("350m", 16384, 8, 2, 4, 22896, 3, False), ("350m", 8192, 8, 4, 4, 34933, 3, False),
    ("350m", 4096, 8, 8, 4, 46833, 3, False), ("350m", 1024, 8, 32, 4, 62523, 3, False),
    ("350m", 512, 8, 64, 4, 66284, 3, False), ("125m", 32768, 8, 1, 4, 32651, 3, False),
    ("125m", 16384, 8, 2, 3, 55484, 3, False), ("125m", 8192, 8, 5, 3, 86858, 3, False),
    ("125m", 4096, 8, 13, 3, 115162, 3, False), ("125m", 1024, 8, 52, 3, 148289, 3, False),
    ("125m", 512, 8, 104, 3, 156735, 3, False)]


_TABLES = (("H100-SXM", "DEFAULT", _H100_LARGE), ("H100-SXM", "DEFAULT", _H100), ("A100-80G", "DEFAULT", _A100_80),
           ("A100-40G", "PURE", _A100_40))


def _row(gpu: str, mp: str, size: str, seq: int, gpus: int, micro: int, accum: int, tokens: int, zero: int,
         ckpt: bool) -> dict:
    row = _mpt(size, gpus, gpu, micro, accum, tokens, ckpt, mp)
    row["layout"] = {**row["layout"], "strategy": f"zero{zero}"}
    row.update(seq=seq, case=f"MPT-{size} {gpu}x{gpus} s{seq} mb{micro}" + ("" if zero == 3 else " zero2"))
    return row


SEVENTH = [_row(gpu, mp, *r) for gpu, mp, rows in _TABLES for r in rows]
