"""Expert parallelism: experts split over data-parallel ranks, all-to-all dispatch (layer.py). See docs/moe.md."""
