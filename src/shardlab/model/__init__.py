from shardlab.model.gpt import GPT, GPTConfig, PRESETS, build_model
from shardlab.model.llama import Llama, LlamaConfig
from shardlab.model.moe import MoE

__all__ = ["GPT", "GPTConfig", "Llama", "LlamaConfig", "MoE", "PRESETS", "build_model"]
