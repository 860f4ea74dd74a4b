from shardlab.model.gpt import GPT, GPTConfig, PRESETS, build_model
from shardlab.model.llama import Llama, LlamaConfig

__all__ = ["GPT", "GPTConfig", "Llama", "LlamaConfig", "PRESETS", "build_model"]
