"""Replica sets: which ranks must hold bitwise-equal copies of which tensors — declared by the layers.

The doctor's divergence check (checksum.py) compares copies that should be identical. Which copies those are
is the layers' knowledge, not the doctor's: the data-parallel layer replicates what it does not shard over
the data-parallel ranks; tensor parallelism keeps LayerNorms, row biases and positions whole on every rank of
a TP group; expert parallelism's experts are copied over the dp ranks holding the same experts (edp); local
SGD and DiLoCo make replicas equal only right after an outer step, fragment by fragment. Each layer declares
its sets through the dp layer it sees (`replica_sets()` on the data-parallel layer and its views; the
composition's `Parallel.replica_sets()`), and the doctor compares each set the same way.

The first set is the primary one (the data-parallel replicas): a checksum result is its result, with every
other set's result nested under the set's name ("tp", "experts").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


def _always_synced() -> list[int]:
    return [0]


@dataclass
class ReplicaSet:
    name: str  # "dp", "tp", "experts": the key of its part in a checksum result
    ranks: list[int]  # the global ranks holding the same copy as this rank (this one included), in group order
    group: Any = None  # their process group (None: the world)
    # (fragments) -> [(name, tensor)] this rank holds equal to the other members now; `fragments` is None for
    # a set synchronised every step, else the fragments to compare (local SGD / DiLoCo)
    parameters: Callable[[list[int] | None], list] = lambda fragments=None: []
    # replicas equal only after an outer step: how many fragments, and which are equal right now (after the
    # step just taken); None for a set that is synchronised every step
    fragments: int | None = None
    synced: Callable[[], list[int]] = _always_synced
    # what `debug.corrupt_rank` perturbs to make this rank diverge, and how the message names it; default the
    # parameters themselves (DiLoCo: the outer state, which the parameters return to at each outer step)
    held: Callable[[], list] | None = None
    held_label: str = ""
    note: str = "no replica to compare"  # why nothing is compared when this rank is the set's only member

    @property
    def periodic(self) -> bool:
        return self.fragments is not None

    def corruptible(self) -> list:
        return self.held() if self.held is not None else self.parameters(None)
