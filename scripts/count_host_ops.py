"""Count the aten ops transformers' Llama 3.2 1B issues in one step of ml-engineering's torch-compile-bench
(batch 1 x 512, bf16, SDPA; forward under no_grad, and forward + backward with gradient checkpointing), the
denominator of the planner's host seconds per kernel (plan/hardware.py HOST_KERNEL_S: the published eager step
time / these kernel-launching ops).

Runs on CPU at a narrow width with the 1B's structure (16 blocks, 32 heads over 8 key/value heads, tied
embeddings): the op count does not depend on the widths. Nothing is downloaded: the model is built from its config.
    .venv/bin/python scripts/count_host_ops.py
"""
from __future__ import annotations

import collections

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LlamaConfig, LlamaForCausalLM

# ops that launch no kernel on a GPU: views, aliases, detaches, allocations, size queries
NO_KERNEL = {"view", "_unsafe_view", "transpose", "t", "expand", "unsqueeze", "squeeze", "slice", "select", "permute",
             "reshape", "alias", "detach", "as_strided", "split", "split_with_sizes", "unbind", "_reshape_alias",
             "lift_fresh", "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "sym_size",
             "is_same_size", "_has_compatible_shallow_copy_type", "sym_stride", "sym_numel", "sym_storage_offset"}


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def llama_1b(width: int = 256) -> LlamaForCausalLM:
    """NousResearch/Llama-3.2-1B's configuration (16 blocks, 32 heads, 8 kv heads, tied, llama3 RoPE scaling),
    narrowed to `width`."""
    cfg = LlamaConfig(hidden_size=width, intermediate_size=4 * width, num_hidden_layers=16, num_attention_heads=32,
                      num_key_value_heads=8, head_dim=width // 32, vocab_size=32000, tie_word_embeddings=True,
                      max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
                      rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                    "original_max_position_embeddings": 8192, "rope_type": "llama3"},
                      attn_implementation="sdpa")
    return LlamaForCausalLM(cfg).to(torch.bfloat16)


def count(seq: int = 512) -> dict[str, tuple[int, int]]:
    """{workload: (all aten ops, kernel-launching ops)} for the bench's forward and forward + backward."""
    model, tokens, out = llama_1b(), torch.randint(0, 30000, (1, seq)), {}
    model.eval()
    with Count() as k, torch.no_grad():
        model(input_ids=tokens)
    out["forward"] = k.ops
    model.train()
    model.config.use_cache = False
    model.gradient_checkpointing_enable()
    with Count() as k:
        model.zero_grad(set_to_none=True)
        model(input_ids=tokens, labels=tokens).loss.backward()
    out["forward+backward"] = k.ops
    return {w: (sum(c.values()), sum(v for op, v in c.items() if op not in NO_KERNEL)) for w, c in out.items()}


if __name__ == "__main__":
    published_ms = {"forward": 8.1, "forward+backward": 48.8}  # eager, one B200 (ml-engineering's table)
    for workload, (ops, kernels) in count().items():
        print(f"{workload}: {ops} aten ops, {kernels} launch kernels: {published_ms[workload]} ms / {kernels} = "
              f"{published_ms[workload] / kernels * 1e3:.1f} us a kernel")
