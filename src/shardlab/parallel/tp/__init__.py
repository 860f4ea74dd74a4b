"""Tensor parallelism: the own Megatron-style layer (own.py: column/row layers, f/g in ops.py, the
vocab-parallel loss in loss.py) and DTensor TP (dtensor.py); the dp layer seen through TP (dp_view.py) and
the checkpoint shaping of TP x ZeRO (state.py). See docs/tensor_parallel.md."""
