from shardlab.model.gpt import GPT, GPTConfig, PRESETS, build_model

__all__ = ["GPT", "GPTConfig", "PRESETS", "build_model"]
