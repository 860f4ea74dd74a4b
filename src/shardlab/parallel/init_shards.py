"""Initial values for a rank's shards: the per-parameter seeded draw (model/init.py) read like a checkpoint.

After the composition has allocated what this rank holds (parallel/materialize.py), its values are loaded
the way a resume loads a checkpoint, through the state dict the layers already describe for DCP (every
parameter under the single-device model's name, with its global shape and this rank's pieces of it: plain
tensors, DTensor shards, own TP's blocks at explicit offsets). The "checkpoint" here is `Generated`, a
storage reader whose every tensor is one whole chunk produced on demand: the parameter's draw, made on the
host one parameter at a time, sliced to the pieces DCP's planner asks for, then dropped. So the host holds
at most one whole parameter beside the rank's shards, the device only the shards, and each shard holds that
slice of the single-device model's initialisation for the same seed, at any layout.
"""
from __future__ import annotations

import warnings

import torch
from torch.distributed.checkpoint.storage import StorageReader

from shardlab.model import anatomy
from shardlab.model.init import draw


def initialise(layer, rules: dict, buffers: dict, seed: int, model=None) -> None:
    """Draw every parameter this rank holds of `layer` (a data-parallel layer as the composition returns it,
    seen through the inner layers' views) by `rules` (the single-device model's `init_rules`); buffers take
    `buffers`' values (fqn -> whole tensor, made when the model was built)."""
    import torch.distributed.checkpoint as dcp

    sd = layer.model_state_dict()
    anat = anatomy.of(model) if model is not None else None
    with warnings.catch_warnings():  # no_dist: every rank plans its own reads (the draw needs no one else)
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(sd, storage_reader=Generated(sd, rules, buffers, seed, anat), no_dist=True)
    layer.load_model_state_dict(sd)


class Generated(StorageReader):
    """A DCP storage reader over generated tensors (see the module docstring)."""

    def __init__(self, sd, rules, buffers, seed, anat):
        super().__init__()
        self.rules, self.buffers, self.seed, self.anat = rules, buffers, seed, anat
        self.md = _metadata(sd)

    def value(self, fqn: str, shape, dtype) -> torch.Tensor:
        # a tied head is registered once, under the embedding's name; an untied head has its own rule
        known = fqn in self.rules or fqn in self.buffers
        key = fqn if known or self.anat is None else self.anat.tied_key(fqn)
        if key in self.buffers:
            return self.buffers[key].to(dtype).reshape(shape)
        if key not in self.rules:
            raise KeyError(f"{fqn}: no init rule for this parameter (the model's init_rules do not name it)")
        return draw(self.rules[key], shape, dtype, self.seed, key)

    # --- StorageReader --------------------------------------------------------------------------------
    def reset(self, checkpoint_id=None) -> None:
        pass

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return True

    def read_metadata(self, *args, **kwargs):
        return self.md

    def set_up_storage_reader(self, metadata, is_coordinator: bool, *args, **kwargs) -> None:
        pass

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        by_fqn: dict[str, list] = {}
        for req in plan.items:
            by_fqn.setdefault(req.storage_index.fqn, []).append(req)
        for fqn, reqs in by_fqn.items():  # one whole parameter on the host at a time
            tmd = self.md.state_dict_metadata[fqn]
            whole = self.value(fqn, tuple(tmd.size), tmd.properties.dtype)
            for req in reqs:
                src = whole
                for dim, (off, n) in enumerate(zip(req.storage_offsets, req.lengths)):
                    src = src.narrow(dim, off, n)
                target = planner.resolve_tensor(req).detach()
                target.copy_(src)
                planner.commit_tensor(req, target)
            del whole
        fut = torch.futures.Future()
        fut.set_result(None)
        return fut


def _metadata(sd: dict):
    """DCP metadata of a "checkpoint" holding every tensor of `sd` whole, as one chunk."""
    from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, Metadata, MetadataIndex,
                                                       TensorProperties, TensorStorageMetadata)

    md, storage = {}, {}
    for fqn, v in sd.items():
        size = torch.Size(v.shape)
        zeros = torch.Size([0] * len(size))
        md[fqn] = TensorStorageMetadata(TensorProperties(dtype=v.dtype), size,
                                        [ChunkStorageMetadata(offsets=zeros, sizes=size)])
        storage[MetadataIndex(fqn, zeros)] = fqn
    return Metadata(state_dict_metadata=md, storage_data=storage)
