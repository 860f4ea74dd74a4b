"""The global sampler: which samples each rank trains on at each step.

The order is defined for the WHOLE job, not per rank: for (seed, epoch) there is one permutation of
all sample indices; optimizer step k consumes the next `global_batch` indices of it, and rank r of W
takes the contiguous slice [r*gb/W, (r+1)*gb/W) of that global batch. So the set of samples in step k
(and their order, read rank by rank) does not depend on the world size, and the whole state is two
integers, epoch and cursor, which a run at any other world size can resume from.

Uneven shares (`data.shares`, docs/balance.md) change only where the global batch is cut: rank r takes
the slice [n_0 + ... + n_{r-1}, n_0 + ... + n_r) for per-rank sample counts n_r summing to gb. The
samples of step k stay the same, so the trajectory does not depend on the shares.
"""
import numpy as np

from .errors import DataError


def epoch_permutation(num_samples: int, seed: int, epoch: int) -> np.ndarray:
    """The sample order of one epoch. Seeded by the pair (seed, epoch): identical on every rank, and
    unlike seed + epoch, (seed=1, epoch=0) and (seed=0, epoch=1) do not collide."""
    return np.random.default_rng([seed, epoch]).permutation(num_samples)


class GlobalSampler:
    """Yields this rank's sample indices step by step; see the module docstring for the scheme.

    At an epoch's end, when fewer than global_batch indices are left, they are dropped and the next
    epoch's permutation starts: every step has exactly global_batch samples.
    """

    def __init__(self, num_samples: int, global_batch: int, seed: int = 0, world_size: int = 1, rank: int = 0):
        if global_batch < 1 or global_batch % world_size:
            raise DataError(f"global batch {global_batch} must be a positive multiple of the world size "
                            f"{world_size}; change train.micro_batch / train.grad_accum or the number of ranks")
        if not 0 <= rank < world_size:
            raise DataError(f"rank {rank} is outside 0..{world_size - 1}")
        if num_samples < global_batch:
            raise DataError(f"the dataset has {num_samples} samples, fewer than one global batch of "
                            f"{global_batch}; use a larger corpus, a smaller seq_len or a smaller batch")
        self.num_samples, self.global_batch, self.seed = num_samples, global_batch, seed
        self.world_size, self.rank = world_size, rank
        self.epoch, self.cursor = 0, 0  # the whole state: position in the current epoch's permutation
        self._perm_epoch, self._perm = None, None
        self.counts = [global_batch // world_size] * world_size  # samples per rank in each global batch

    def set_shares(self, counts: list[int]) -> None:
        """Cut each global batch into these per-rank sample counts (whole samples, summing to the global
        batch, at least one each) instead of equal slices. Not part of the state: the counts belong to a
        world size, the state does not (a checkpoint records them beside it, docs/balance.md)."""
        counts = [int(c) for c in counts]
        if len(counts) != self.world_size or sum(counts) != self.global_batch or min(counts) < 1:
            raise DataError(f"shares {counts} must give each of the {self.world_size} ranks at least one sample "
                            f"and sum to the global batch {self.global_batch}")
        self.counts = counts

    @property
    def steps_per_epoch(self) -> int:
        return self.num_samples // self.global_batch

    @property
    def samples_seen(self) -> int:
        """Samples consumed by the whole job so far (all ranks; dropped remainders not counted)."""
        return self.epoch * self.steps_per_epoch * self.global_batch + self.cursor

    @property
    def step(self) -> int:
        """Optimizer steps consumed so far."""
        return self.samples_seen // self.global_batch

    def _permutation(self, epoch: int) -> np.ndarray:
        if self._perm_epoch != epoch:  # computed once per epoch, not per step
            self._perm, self._perm_epoch = epoch_permutation(self.num_samples, self.seed, epoch), epoch
        return self._perm

    def global_batch_at(self, step: int) -> list[int]:
        """All global_batch indices of optimizer step `step` (ranks' shares in rank order). Pure: does
        not move the cursor; useful to ask which samples a given step used."""
        epoch, k = divmod(step, self.steps_per_epoch)
        start = k * self.global_batch
        return self._permutation(epoch)[start:start + self.global_batch].tolist()

    def rank_share(self, global_indices: list[int]) -> list[int]:
        """This rank's contiguous slice of a global batch (`counts[rank]` samples after the lower ranks')."""
        start = sum(self.counts[:self.rank])
        return global_indices[start:start + self.counts[self.rank]]

    def next_global_batch(self) -> list[int]:
        """Consume the next step's global batch and return all of it."""
        indices = self.global_batch_at(self.step)
        self.cursor += self.global_batch
        if self.cursor + self.global_batch > self.num_samples:  # the remainder is dropped
            self.epoch, self.cursor = self.epoch + 1, 0
        return indices

    def next_batch(self) -> list[int]:
        """Consume the next step and return this rank's indices for it, in order."""
        return self.rank_share(self.next_global_batch())

    def state_dict(self) -> dict:
        """Global state (no rank, no world size): loadable at any world size."""
        return {"seed": self.seed, "epoch": self.epoch, "cursor": self.cursor,
                "global_batch": self.global_batch, "num_samples": self.num_samples}

    def load_state_dict(self, sd: dict) -> None:
        for key in ("num_samples", "global_batch"):
            if sd[key] != getattr(self, key):
                raise DataError(f"cannot resume the sampler: the checkpoint has {key}={sd[key]} but this run has "
                                f"{getattr(self, key)}; resume with the same data, seq_len and global batch")
        if sd["cursor"] % self.global_batch or sd["cursor"] + self.global_batch > self.num_samples:
            raise DataError(f"sampler state has an invalid cursor {sd['cursor']} for global batch "
                            f"{self.global_batch} and {self.num_samples} samples; the checkpoint is damaged")
        self.seed, self.epoch, self.cursor = sd["seed"], sd["epoch"], sd["cursor"]


def val_indices_for_rank(num_samples: int, world_size: int, rank: int, limit: int | None = None) -> list[int]:
    """This rank's share of the validation samples: across ranks every index exactly once, so
    evaluation can all-reduce (loss sum, token count). Ranks get contiguous slices whose sizes
    differ by at most one. `limit` evaluates on `limit` evenly spaced samples instead of all; the
    chosen set is the same at any world size."""
    if not 0 <= rank < world_size:
        raise DataError(f"rank {rank} is outside 0..{world_size - 1}")
    if limit is None or limit >= num_samples:
        chosen = range(num_samples)
    else:
        chosen = [i * num_samples // limit for i in range(limit)]
    n = len(chosen)
    return list(chosen[rank * n // world_size:(rank + 1) * n // world_size])
