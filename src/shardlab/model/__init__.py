"""The single-device models (GPT-2, Llama, their mixture-of-experts MLP). Their configs are in configs.py,
which needs no torch; the modules load on first use, so config validation (and the launcher) stays light."""
from shardlab.lazy import lazy_names

__all__ = ["GPT", "GPTConfig", "Llama", "LlamaConfig", "MoE", "PRESETS", "build_model"]
__getattr__ = lazy_names(__name__, {"GPT": "gpt", "GPTConfig": "configs", "PRESETS": "configs",
                                    "build_model": "gpt", "Llama": "llama", "LlamaConfig": "configs", "MoE": "moe"})
