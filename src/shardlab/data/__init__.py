"""Data: byte tokenizer, corpora, fixed-length samples, train/val split and the global sampler.

    tokens = load_tokens("stdlib")
    train, val = split_train_val(tokens)
    ds = TokenDataset(train, seq_len=128)
    sampler = GlobalSampler(len(ds), global_batch=32, seed=0, world_size=W, rank=r)
    x, y = get_batch(ds, sampler.next_batch())

Nothing here knows about torch.distributed: rank and world size are plain ints.
"""
from .corpus import check_vocab, load_tokens
from .dataset import TokenDataset, get_batch, split_train_val
from .errors import DataError
from .sampler import GlobalSampler, epoch_permutation, val_indices_for_rank
from .tokenizer import VOCAB_SIZE, decode, encode

__all__ = ["DataError", "VOCAB_SIZE", "encode", "decode", "load_tokens", "check_vocab", "TokenDataset",
           "split_train_val", "get_batch", "GlobalSampler", "epoch_permutation", "val_indices_for_rank"]
