"""The planner's named models: shardlab's own presets (they must match shardlab.model), the GPT-3, Megatron and Llama 3
shapes the papers and published runs use, DeepSeek-V3; older names kept as aliases; and the CLI's way to name a
model (a preset, optionally with dimensions overridden, or every dimension given)."""
from __future__ import annotations

from dataclasses import replace

from .model import ModelSpec


PRESETS: dict[str, ModelSpec] = {
    # shardlab's own presets (must match shardlab.model)
    "tiny": ModelSpec("tiny", n_layer=2, d_model=64, n_head=4, vocab=256, seq=64),
    "small": ModelSpec("small", n_layer=4, d_model=256, n_head=4, vocab=256, seq=128),
    "gpt2": ModelSpec("gpt2", n_layer=12, d_model=768, n_head=12, vocab=50257, seq=1024),
    # GPT-3 family dimensions (Brown et al. 2020, Table 2.1), GPT-2 style blocks, seq 2048
    "gpt3-1.3b": ModelSpec("gpt3-1.3b", n_layer=24, d_model=2048, n_head=16, vocab=50257, seq=2048),
    "gpt3-6.7b": ModelSpec("gpt3-6.7b", n_layer=32, d_model=4096, n_head=32, vocab=50257, seq=2048),
    "gpt3-13b": ModelSpec("gpt3-13b", n_layer=40, d_model=5120, n_head=40, vocab=50257, seq=2048),
    "gpt3-175b": ModelSpec("gpt3-175b", n_layer=96, d_model=12288, n_head=96, vocab=50257, seq=2048),
    # Korthikanti et al. 2022, Table 3 (vocab 51200 as in Megatron-LM)
    "mt-22b": ModelSpec("mt-22b", n_layer=48, d_model=6144, n_head=64, vocab=51200, seq=2048),
    "mt-530b": ModelSpec("mt-530b", n_layer=105, d_model=20480, n_head=128, vocab=51200, seq=2048),
    "mt-1t": ModelSpec("mt-1t", n_layer=128, d_model=25600, n_head=160, vocab=51200, seq=2048),
    # shardlab's llama presets (must match shardlab.model.llama) and Meta's Llama 3 / 3.1 shapes
    "llama-tiny": ModelSpec("llama-tiny", n_layer=2, d_model=64, n_head=4, vocab=256, seq=64, arch="llama",
                            n_kv_heads=2, ffn=192),
    "llama-small": ModelSpec("llama-small", n_layer=4, d_model=256, n_head=8, vocab=256, seq=128, arch="llama",
                             n_kv_heads=2, ffn=704),
    "llama3-8b": ModelSpec("llama3-8b", n_layer=32, d_model=4096, n_head=32, vocab=128256, seq=8192,
                           arch="llama", n_kv_heads=8, ffn=14336),
    "llama3-70b": ModelSpec("llama3-70b", n_layer=80, d_model=8192, n_head=64, vocab=128256, seq=8192,
                            arch="llama", n_kv_heads=8, ffn=28672),
    "llama3-405b": ModelSpec("llama3-405b", n_layer=126, d_model=16384, n_head=128, vocab=128256, seq=8192,
                             arch="llama", n_kv_heads=8, ffn=53248),
    # DeepSeek-V3 (DeepSeek-AI 2024, Table/Appendix config; the HF config.json): 61 blocks of latent attention, the
    # first 3 dense (SwiGLU 18,432), then 256 routed experts of 2,048, top-8, and one shared; one MTP depth;
    # 4,096-token pre-training sequences. 671 B parameters (+ 11.6 B of MTP), 37.6 B active a token
    "deepseek-v3": ModelSpec("deepseek-v3", n_layer=61, d_model=7168, n_head=128, vocab=129280, seq=4096,
                             arch="llama", ffn=18432, head_dim=128, moe_experts=256, moe_top_k=8, moe_ffn=2048,
                             moe_shared_ffn=2048, moe_first_dense=3, mla_kv_rank=512, mla_q_rank=1536,
                             mla_rope_dim=64, mla_v_dim=128, mtp_layers=1, moe_groups=8, moe_group_topk=4),
}
# Older or looser names, kept working: each reads as the preset it names. "7b" was the planner's
# first name for GPT-3 6.7B, but "7B" usually means LLaMA-7B (another architecture), so the
# preset is named by what it is and "7b" only resolves to it, with a note (see resolve_preset).
ALIASES: dict[str, str] = {"7b": "gpt3-6.7b", "gpt3-6.7B": "gpt3-6.7b", "gpt2-124m": "gpt2",
                           "gpt3-1.3B": "gpt3-1.3b", "gpt3-13B": "gpt3-13b", "gpt3-175B": "gpt3-175b"}


def resolve_preset(name: str) -> tuple[str, str | None]:
    """(preset name, note for the user or None). Unknown names raise with the known ones listed."""
    if name in PRESETS:
        return name, None
    if name in ALIASES:
        real = ALIASES[name]
        note = None if name.lower() == real.lower() else (
            f"model={name} is read as {real} (GPT-3 family, Brown et al. 2020, Table 2.1); "
            f"name it model={real}")
        return real, note
    raise ValueError(f"unknown model preset {name!r} (known: {', '.join(PRESETS)})")


def model_from_args(preset: str | None = None, **dims) -> ModelSpec:
    """A preset, optionally with dimensions overridden (n_layer=..., d_model=..., ...)."""
    dims = {k: v for k, v in dims.items() if v is not None}
    if preset:
        preset, _ = resolve_preset(preset)
        return replace(PRESETS[preset], **dims) if dims else PRESETS[preset]
    missing = [k for k in ("n_layer", "d_model", "n_head", "vocab", "seq") if k not in dims]
    if missing:
        raise ValueError(f"model needs a preset or all of n_layer, d_model, n_head, vocab, seq "
                         f"(missing: {', '.join(missing)})")
    return ModelSpec(name=dims.pop("name", "custom"), **dims)
