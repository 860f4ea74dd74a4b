"""How the DTensor layers' pieces are read from placements (optim/dtensor_pieces.py): the order the cuts
were applied (FSDP2 over TP's _StridedShard after TP's Shard), torch.chunk's piece lengths, and a one-line
refusal of cuts the optimizer cannot undo outermost layer first. (The layers themselves: the Muon parity and
bytes tests under torch-fsdp2, DTensor TP and both.)"""
import pytest
from torch.distributed.tensor.placement_types import Replicate, Shard, _StridedShard

from shardlab.errors import ConfigError
from shardlab.optim.dtensor_pieces import _chunk, order


class _Mesh:
    def __init__(self, *sizes):
        self.sizes = sizes

    def size(self, k):
        return self.sizes[k]


class _P:
    def __init__(self, placements, *sizes):
        self.placements, self.device_mesh = placements, _Mesh(*sizes)


def test_cut_order():
    assert order(_P((Shard(0),), 2)) == [0]
    assert order(_P((Replicate(), Shard(0)), 2, 2)) == [1]  # HSDP: the replicas hold the same shard
    assert order(_P((Shard(0), Shard(1)), 2, 2)) == [0, 1]  # FSDP2 x TP, a row-parallel weight
    assert order(_P((_StridedShard(0, split_factor=2), Shard(0)), 2, 2)) == [1, 0]  # a column-parallel one
    for odd in ((Shard(0), Shard(0)), (_StridedShard(0, split_factor=3), Shard(0))):
        with pytest.raises(ConfigError, match="cannot undo outermost layer first"):
            order(_P(odd, 2, 2))


def test_torch_chunk_lengths():
    assert [_chunk(10, 4, c) for c in range(4)] == [3, 3, 3, 1]
    assert [_chunk(5, 4, c) for c in range(4)] == [2, 2, 1, 0]
    assert [_chunk(64, 2, c) for c in range(2)] == [32, 32]
