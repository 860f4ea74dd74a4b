"""Context parallelism: ring attention over zigzag chunks (ring.py) applied by layer.py. See docs/context_parallel.md."""
