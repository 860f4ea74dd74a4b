"""Simulated worlds: one step of any layout as any rank, in one process, on the meta device (docs/dry-run.md)."""
