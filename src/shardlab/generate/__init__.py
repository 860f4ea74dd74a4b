"""`shardlab generate`: text generation with a KV cache under data, tensor and pipeline parallelism."""
