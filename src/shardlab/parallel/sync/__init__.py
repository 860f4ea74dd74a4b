"""How the replicas agree on the weights (`parallel.sync`, docs/sync.md), beyond the per-step gradient average
of the data-parallel layer itself:

    periodic.py     local SGD and DiLoCo (+ streaming fragments): a synchronisation every H inner steps
    async_ps.py     the asynchronous parameter server (parallel.sync=async: train/async_trainer.py)

With `parallel.fault_tolerant`, the replicas may die and rejoin: shardlab.parallel.ft. `wrap` is the
composition's one call: the data-parallel layer with the view the run's sync puts in front of it.
Importing the package loads nothing; `wrap` imports what it picks.
"""
from __future__ import annotations

PERIODIC = ("local_sgd", "diloco")  # they replace the per-step gradient all-reduce


def wrap(dp, cfg, dims, optimizer):
    """`dp` (the replica's data-parallel layer, its optimizer made) as the run synchronises it: unchanged for
    every-step sync; local SGD / DiLoCo in front of it (over a quorum's group when fault tolerant); every-step
    fault tolerance across the replicas of each step's quorum."""
    p = cfg.parallel
    if p.sync in PERIODIC:
        from shardlab.parallel.dp.apply import data_parallel_group

        if p.fault_tolerant:  # replicas that may die: the outer step over each outer step's quorum
            from shardlab.parallel.ft.periodic import FaultTolerantSync as view
        else:
            from shardlab.parallel.sync.periodic import PeriodicSync as view
        # across whole replicas: the data-parallel group; across HSDP replicas: the replicate dimension
        group = dims.group("dp_replicate") if dp.shards_within_replica else data_parallel_group(dims)
        return view(dp, p, group, optimizer)
    if p.fault_tolerant:  # every step, averaged across the replicas of each step's quorum
        from shardlab.parallel.ft.every_step import EveryStepFaultTolerance
        return EveryStepFaultTolerance(dp, p, optimizer, absent=cfg.debug.ft_absent)
    return dp
