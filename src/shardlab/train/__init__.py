"""The strategy-agnostic training loop."""
