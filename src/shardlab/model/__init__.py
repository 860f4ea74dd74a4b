"""The single-device models (GPT-2, Llama, their mixture-of-experts MLP). Their configs are in configs.py,
which needs no torch; the modules load on first use, so config validation (and the launcher) stays light."""
_WHERE = {"GPT": "gpt", "GPTConfig": "configs", "PRESETS": "configs", "build_model": "gpt",
          "Llama": "llama", "LlamaConfig": "configs", "MoE": "moe"}

__all__ = ["GPT", "GPTConfig", "Llama", "LlamaConfig", "MoE", "PRESETS", "build_model"]


def __getattr__(name):
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
